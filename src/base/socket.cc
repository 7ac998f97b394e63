#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/log.h"

namespace baton {

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SockAddr::ToString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host,
              sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host,
              sizeof(host));
    std::string text = "[";  // appended, not concatenated: GCC 12 -Wrestrict false positive
    text += host;
    text += "]:";
    text += std::to_string(port());
    return text;
  }
  return "<none>";
}

WireAddr ToWire(const SockAddr& a) {
  WireAddr w{};
  w.family = static_cast<uint16_t>(a.family());
  w.port = a.port();
  if (a.family() == AF_INET) {
    memcpy(w.addr, &reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr, 4);
  } else if (a.family() == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    memcpy(w.addr, &s6->sin6_addr, 16);
    w.scope = s6->sin6_scope_id;
  }
  return w;
}

SockAddr FromWire(const WireAddr& w) {
  SockAddr a;
  if (w.family == AF_INET) {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(w.port);
    memcpy(&s4->sin_addr, w.addr, 4);
    a.len = sizeof(sockaddr_in);
  } else if (w.family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(w.port);
    memcpy(&s6->sin6_addr, w.addr, 16);
    s6->sin6_scope_id = w.scope;
    a.len = sizeof(sockaddr_in6);
  }
  return a;
}

Status ParseHostPort(const std::string& text, SockAddr* out) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return InvalidArgument("malformed address '" + text + "' (expected [v6addr]:port)");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size())
      return InvalidArgument("malformed address '" + text + "' (expected host:port)");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    return InvalidArgument("cannot resolve '" + text + "': " + gai_strerror(rc));
  memcpy(&out->storage, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::Ok();
}

namespace {

// One BATON_SOCKET_IFNAME filter, NCCL-style.
struct IfFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  explicit IfFilter(std::string spec) {
    if (!spec.empty() && spec[0] == '^') exclude = true, spec.erase(0, 1);
    if (!spec.empty() && spec[0] == '=') exact = true, spec.erase(0, 1);
    size_t pos = 0;
    while (pos <= spec.size()) {
      size_t comma = spec.find(',', pos);
      if (comma == std::string::npos) comma = spec.size();
      if (comma > pos) names.push_back(spec.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  bool Matches(const char* ifname) const {
    bool hit = false;
    for (const auto& n : names)
      hit |= exact ? n == ifname : strncmp(ifname, n.c_str(), n.size()) == 0;
    return exclude ? !hit : hit;
  }
};

}  // namespace

Status SelectInterfaceAddress(const std::string& ifname_spec, SockAddr* out, std::string* ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return ErrnoError("getifaddrs", errno);
  const bool user = !ifname_spec.empty();
  // Default: like NCCL, skip docker bridges and loopback unless nothing else.
  IfFilter filter(user ? ifname_spec : "^docker,lo");
  auto pick = [&](const IfFilter& f, int family) -> bool {
    for (ifaddrs* it = list; it; it = it->ifa_next) {
      if (!it->ifa_addr || it->ifa_addr->sa_family != family) continue;
      if (!(it->ifa_flags & IFF_UP) || !f.Matches(it->ifa_name)) continue;
      if (family == AF_INET6) {
        auto* s6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
        if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;
      }
      size_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      memset(&out->storage, 0, sizeof(out->storage));
      memcpy(&out->storage, it->ifa_addr, len);
      out->len = len;
      out->set_port(0);
      *ifname = it->ifa_name;
      return true;
    }
    return false;
  };
  bool found = pick(filter, AF_INET) || pick(filter, AF_INET6);
  if (!found && !user) {
    IfFilter lo("lo");
    found = pick(lo, AF_INET) || pick(lo, AF_INET6);
  }
  freeifaddrs(list);
  if (!found)
    return InvalidArgument("no network interface matches BATON_SOCKET_IFNAME=" +
                           (user ? ifname_spec : std::string("<default>")));
  BATON_INFO(kLogInit, "using interface %s address %s", ifname->c_str(), out->ToString().c_str());
  return Status::Ok();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status SetNonBlocking(int fd, bool nonblocking) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoError("fcntl(F_GETFL)", errno);
  flags = nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return ErrnoError("fcntl(F_SETFL)", errno);
  return Status::Ok();
}

Status ListenOn(const SockAddr& bind_addr, Fd* out, SockAddr* bound) {
  Fd fd(socket(bind_addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), bind_addr.sa(), bind_addr.len) != 0)
    return ErrnoError("bind " + bind_addr.ToString(), errno);
  if (listen(fd.get(), 4096) != 0) return ErrnoError("listen", errno);
  bound->len = sizeof(bound->storage);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->storage), &bound->len) != 0)
    return ErrnoError("getsockname", errno);
  *out = std::move(fd);
  return Status::Ok();
}

namespace {

thread_local const std::atomic<bool>* tls_cancel = nullptr;

constexpr int kPollCancelled = -1000;

// poll() on one descriptor until it is ready or `deadline` passes, in
// slices when this thread's waits can be cancelled: what poll returns, or
// kPollCancelled.
int PollOne(pollfd* p, Deadline deadline) {
  for (;;) {
    int ms = MillisLeft(deadline);
    const std::atomic<bool>* cancel = tls_cancel;
    if (cancel != nullptr) {
      if (cancel->load(std::memory_order_relaxed)) return kPollCancelled;
      ms = std::min(ms, kCancelSliceMs);
    }
    const int n = poll(p, 1, ms);
    if (n != 0 || cancel == nullptr || MillisLeft(deadline) == 0) return n;
  }
}

}  // namespace

bool WaitsCancelled() {
  return tls_cancel != nullptr && tls_cancel->load(std::memory_order_relaxed);
}

int PollSliceMs(Deadline deadline) {
  const int ms = MillisLeft(deadline);
  return tls_cancel != nullptr ? std::min(ms, kCancelSliceMs) : ms;
}

namespace {

Status Cancelled() {
  return InvalidUsage("the communicator was aborted while it was being created");
}

}  // namespace

CancelScope::CancelScope(const std::atomic<bool>* flag) : previous_(tls_cancel) {
  tls_cancel = flag;
}
CancelScope::~CancelScope() {
  tls_cancel = previous_;
}

Status ConnectWithRetry(const SockAddr& addr, Deadline deadline, Fd* out) {
  int delay_ms = 1;
  for (;;) {
    Fd fd(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return ErrnoError("socket", errno);
    int rc = connect(fd.get(), addr.sa(), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n = PollOne(&p, deadline);
      if (n == kPollCancelled) return Cancelled();
      if (n == 0) return TimeoutError("timed out connecting to " + addr.ToString());
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      BATON_RETURN_IF_ERROR(SetNonBlocking(fd.get(), false));
      SetNoDelay(fd.get());
      *out = std::move(fd);
      return Status::Ok();
    }
    // Refused or unreachable: the peer may simply not be listening yet.
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH &&
        err != EAGAIN && err != ECONNRESET)
      return ErrnoError("connect " + addr.ToString(), err);
    if (Clock::now() + std::chrono::milliseconds(delay_ms) >= deadline)
      return TimeoutError("timed out connecting to " + addr.ToString() +
                          " (last error: " + strerror(err) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (tls_cancel != nullptr && tls_cancel->load()) return Cancelled();
    delay_ms = std::min(delay_ms * 2, 100);
  }
}

Status AcceptWithDeadline(int listen_fd, Deadline deadline, Fd* out) {
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    int n = PollOne(&p, deadline);
    if (n == kPollCancelled) return Cancelled();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("poll", errno);
    if (n == 0) return TimeoutError("timed out waiting for a connection");
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return ErrnoError("accept", errno);
    }
    SetNoDelay(fd);
    out->reset(fd);
    return Status::Ok();
  }
}

Status SendAll(int fd, const void* buf, size_t len, Deadline deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoError("send", errno);
    pollfd pfd{fd, POLLOUT, 0};
    int rc = PollOne(&pfd, deadline);
    if (rc == kPollCancelled) return Cancelled();
    if (rc == 0) return TimeoutError("timed out sending");
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* buf, size_t len, Deadline deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= n;
      continue;
    }
    if (n == 0) return RemoteError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoError("recv", errno);
    pollfd pfd{fd, POLLIN, 0};
    int rc = PollOne(&pfd, deadline);
    if (rc == kPollCancelled) return Cancelled();
    if (rc == 0) return TimeoutError("timed out receiving");
  }
  return Status::Ok();
}

bool SecretsEqual(const void* a, const void* b, size_t len) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  unsigned char diff = 0;
  for (size_t i = 0; i < len; ++i) diff |= x[i] ^ y[i];
  return diff == 0;
}

int InterfaceSpeedMbps(const std::string& ifname) {
  if (ifname.empty() || ifname.find('/') != std::string::npos) return 0;
  FILE* f = fopen(("/sys/class/net/" + ifname + "/speed").c_str(), "r");
  if (f == nullptr) return 0;
  int mbps = 0;
  if (fscanf(f, "%d", &mbps) != 1 || mbps < 0) mbps = 0;
  fclose(f);
  return mbps;
}

}  // namespace baton
