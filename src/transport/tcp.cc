#include "transport/tcp.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/partition.h"
#include "base/socket.h"

namespace baton {

TcpChannel::TcpChannel(std::vector<Fd> sockets, size_t staging_bytes, int peer_rank)
    : sockets_(std::move(sockets)), peer_rank_(peer_rank) {
  const size_t k = sockets_.size();
  send_parts_.resize(k);
  recv_parts_.resize(k);
  staging_.resize(k);
  staged_.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    SetNoDelay(sockets_[i].get());
    staging_[i].resize(std::max<size_t>(staging_bytes / k, 4096));
  }
}

std::vector<int> TcpChannel::fds() const {
  std::vector<int> out;
  for (const Fd& fd : sockets_) out.push_back(fd.get());
  return out;
}

void TcpChannel::Plan(size_t bytes, std::vector<Part>* parts) const {
  const size_t k = sockets_.size();
  for (Part& p : *parts) p = Part{};
  if (k == 1 || bytes < kStripeMinBytes) {
    (*parts)[0].length = bytes;
    return;
  }
  // 64-byte units keep every part's start aligned to any element size.
  const size_t units = (bytes + 63) / 64;
  for (size_t i = 0; i < k; ++i) {
    size_t b, e;
    Partition(units, k, i, &b, &e);
    (*parts)[i].offset = std::min(b * 64, bytes);
    (*parts)[i].length = std::min(e * 64, bytes) - (*parts)[i].offset;
  }
}

Status TcpChannel::SocketError(const char* what, int err) const {
  if (err == 0 || err == EPIPE || err == ECONNRESET)
    return RemoteError("rank " + std::to_string(peer_rank_) +
                       " closed its connection (process died or aborted)");
  return ErrnoError(std::string(what) + " to/from rank " + std::to_string(peer_rank_), err);
}

Status TcpChannel::ProgressSend(const uint8_t* src, size_t bytes, size_t* done) {
  if (!send_active_) {
    Plan(bytes, &send_parts_);
    send_active_ = true;
  }
  size_t total = 0;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    Part& part = send_parts_[i];
    while (part.moved < part.length) {
      ssize_t n = ::send(sockets_[i].get(), src + part.offset + part.moved,
                         part.length - part.moved, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        part.moved += n;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return SocketError("send", errno);
    }
    total += part.moved;
  }
  *done = total;
  if (total == bytes) send_active_ = false;
  return Status::Ok();
}

Status TcpChannel::ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) {
  if (!recv_active_) {
    Plan(bytes, &recv_parts_);
    recv_active_ = true;
  }
  size_t total = 0;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    Part& part = recv_parts_[i];
    const int fd = sockets_[i].get();
    bool got_any = false;
    while (part.moved < part.length) {
      ssize_t n;
      if (target.reduce_with == nullptr) {
        n = ::recv(fd, target.dst + part.offset + part.moved, part.length - part.moved,
                   MSG_DONTWAIT);
        if (n > 0) part.moved += n;
      } else {
        std::vector<uint8_t>& staging = staging_[i];
        size_t& staged = staged_[i];
        size_t want = std::min(staging.size() - staged, part.length - part.moved - staged);
        n = ::recv(fd, staging.data() + staged, want, MSG_DONTWAIT);
        if (n > 0) {
          staged += n;
          size_t whole = staged / target.elem_size * target.elem_size;
          if (whole > 0) {
            Deliver(target, part.offset + part.moved, staging.data(), whole);
            part.moved += whole;
            staged -= whole;
            if (staged > 0) memmove(staging.data(), staging.data() + whole, staged);
          }
        }
      }
      if (n > 0) {
        got_any = true;
        continue;
      }
      if (n == 0) return SocketError("recv", 0);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return SocketError("recv", errno);
    }
    if (got_any) {
      // Delayed ACKs stall request-response traffic on loopback by tens of
      // milliseconds; quick-ack is not sticky, so it is re-armed per read.
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    }
    total += part.moved;
  }
  *done = total;
  if (total == bytes) recv_active_ = false;
  return Status::Ok();
}

void TcpChannel::AddWaitFds(bool sending, int peer, WaitSet* ws) const {
  const auto& parts = sending ? send_parts_ : recv_parts_;
  const bool active = sending ? send_active_ : recv_active_;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    // Before a message starts, only the first socket matters (small
    // messages use it alone, and striped ones use it too).
    bool pending = active ? parts[i].moved < parts[i].length : i == 0;
    if (!pending) continue;
    ws->tcp.push_back({sockets_[i].get(), static_cast<short>(sending ? POLLOUT : POLLIN), 0});
    ws->tcp_keys.push_back(WatchKey(peer, static_cast<int>(i)));
  }
}

}  // namespace baton
