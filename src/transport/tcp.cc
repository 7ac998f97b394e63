#include "transport/tcp.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "base/log.h"
#include "base/partition.h"
#include "base/socket.h"

namespace baton {

TcpChannel::TcpChannel(Key, std::vector<Fd> sockets, int peer_rank)
    : sockets_(std::move(sockets)), peer_rank_(peer_rank) {
  const size_t k = sockets_.size();
  send_parts_.resize(k);
  recv_parts_.resize(k);
  staging_.resize(k);
  staged_.assign(k, 0);
  read_.assign(k, 0);
  for (size_t i = 0; i < k; ++i) SetNoDelay(sockets_[i].get());
}

Status TcpChannel::Create(std::vector<Fd> sockets, size_t staging_bytes, int peer_rank,
                          std::unique_ptr<TcpChannel>* out) {
  if (sockets.empty()) return InternalError("a TCP channel needs at least one socket");
  auto ch = std::make_unique<TcpChannel>(Key(), std::move(sockets), peer_rank);
  const size_t k = ch->sockets_.size();
  for (size_t i = 0; i < k; ++i) {
    BATON_RETURN_IF_ERROR(ch->staging_[i]
                              .Allocate(std::max<size_t>(staging_bytes / k, 4096))
                              .WithContext("the TCP channel to rank " + std::to_string(peer_rank)));
  }
  *out = std::move(ch);
  return Status::Ok();
}

TcpChannel::Staging::Staging(Staging&& other) noexcept
    : bytes(std::exchange(other.bytes, nullptr)), length(std::exchange(other.length, 0)) {}

TcpChannel::Staging::~Staging() {
  if (bytes != nullptr) munmap(bytes, length);
}

Status TcpChannel::Staging::Allocate(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return ErrnoError("mapping a " + std::to_string(n) + "-byte staging buffer", errno);
  bytes = static_cast<uint8_t*>(p);
  length = n;
  return Status::Ok();
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

Status TcpChannel::SendHeader(const uint8_t* src, Part* part0, bool* blocked) {
  *blocked = false;
  while (send_header_done_ < sizeof(send_header_)) {
    iovec iov[2] = {
        {reinterpret_cast<uint8_t*>(&send_header_) + send_header_done_,
         sizeof(send_header_) - send_header_done_},
        {const_cast<uint8_t*>(src) + part0->offset + part0->moved, part0->length - part0->moved}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iov[1].iov_len > 0 ? 2 : 1;
    const ssize_t n = ::sendmsg(sockets_[0].get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      *blocked = true;
      return Status::Ok();
    }
    if (n < 0) return SocketError("send", errno);
    unanswered_ = 0;  // it carries our ACK of what came before
    const size_t header = std::min<size_t>(n, iov[0].iov_len);
    send_header_done_ += header;
    part0->moved += n - header;
  }
  return Status::Ok();
}

Status TcpChannel::ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                                size_t* done) {
  if (bytes == 0) return Status::Ok();  // nothing on the wire, not even a header
  if (!send_active_) {
    Plan(bytes, &send_parts_);
    send_active_ = true;
    send_header_ = TcpMessageHeader{};
    send_header_.magic = kTcpHeaderMagic;
    send_header_.bytes = bytes;
    if (tag != nullptr) {
      send_header_.flags = kTcpHeaderTagged;
      send_header_.tag = *tag;
    }
    send_header_done_ = 0;
  }
  bool blocked = false;
  BATON_RETURN_IF_ERROR(SendHeader(src, &send_parts_[0], &blocked));
  size_t total = 0;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    Part& part = send_parts_[i];
    while (!(i == 0 && blocked) && part.moved < part.length) {
      ssize_t n = ::send(sockets_[i].get(), src + part.offset + part.moved,
                         part.length - part.moved, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        part.moved += n;
        unanswered_ = 0;
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

Status TcpChannel::RecvHeader(const RecvTarget& target, bool* complete) {
  *complete = false;
  Part& part0 = recv_parts_[0];
  const bool reduce = target.reduce_with != nullptr;
  while (recv_header_done_ < sizeof(recv_header_)) {
    // The header and, behind it, what of part 0 is there: one read for a
    // small message, as before headers.
    uint8_t* land;
    size_t room;
    if (reduce) {
      land = staging_[0].data() + staged_[0];
      room = std::min(staging_[0].size() - staged_[0], part0.length - part0.moved - staged_[0]);
    } else {
      land = target.dst + part0.offset + part0.moved;
      room = part0.length - part0.moved;
    }
    iovec iov[2] = {{reinterpret_cast<uint8_t*>(&recv_header_) + recv_header_done_,
                     sizeof(recv_header_) - recv_header_done_},
                    {land, room}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = room > 0 ? 2 : 1;
    const ssize_t n = ::recvmsg(sockets_[0].get(), &msg, MSG_DONTWAIT);
    if (n > 0) {
      const size_t header = std::min<size_t>(n, iov[0].iov_len);
      recv_header_done_ += header;
      (reduce ? staged_[0] : part0.moved) += n - header;
      read_[0] = 1;
      continue;
    }
    if (n == 0) return SocketError("recv", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return SocketError("recv", errno);
  }
  *complete = true;
  return Status::Ok();
}

void TcpChannel::DeliverStaged(const RecvTarget& target, size_t socket) {
  Part& part = recv_parts_[socket];
  Staging& staging = staging_[socket];
  size_t& staged = staged_[socket];
  const size_t whole = staged / target.elem_size * target.elem_size;
  if (whole == 0) return;
  Deliver(target, part.offset + part.moved, staging.data(), whole);
  part.moved += whole;
  staged -= whole;
  if (staged > 0) memmove(staging.data(), staging.data() + whole, staged);
}

Status TcpChannel::CheckHeader(const RecvTarget& target, size_t bytes) {
  const TcpMessageHeader& h = recv_header_;
  if (h.magic != kTcpHeaderMagic)
    return InvalidUsage("rank " + std::to_string(peer_rank_) +
                        " sent a message without Baton's header (another version of Baton, "
                        "or its stream is out of step with this rank's)");
  BATON_RETURN_IF_ERROR(CheckOpening(target, h.flags & kTcpHeaderTagged ? &h.tag : nullptr));
  if (h.bytes != bytes) return Mismatch(CallMismatch::Kind::kSize, nullptr, h.bytes);
  return Status::Ok();
}

Status TcpChannel::ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) {
  if (bytes == 0) return Status::Ok();
  std::fill(read_.begin(), read_.end(), 0);
  if (!recv_active_) {
    if (!recv_planned_) {
      Plan(bytes, &recv_parts_);
      recv_planned_ = true;
      recv_header_done_ = 0;
    }
    bool complete = false;
    Status st = RecvHeader(target, &complete);
    if (!st.ok() || !complete) {
      AckReads(false);
      return st;
    }
    recv_planned_ = false;
    recv_header_done_ = 0;
    BATON_RETURN_IF_ERROR(CheckHeader(target, bytes));
    if (target.reduce_with != nullptr) DeliverStaged(target, 0);
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
        Staging& staging = staging_[i];
        size_t& staged = staged_[i];
        size_t want = std::min(staging.size() - staged, part.length - part.moved - staged);
        n = ::recv(fd, staging.data() + staged, want, MSG_DONTWAIT);
        if (n > 0) {
          staged += n;
          DeliverStaged(target, i);
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
    if (got_any) read_[i] = 1;
    total += part.moved;
  }
  *done = total;
  const bool complete = total == bytes;
  AckReads(complete);
  if (complete) {
    recv_active_ = false;
    ++unanswered_;
  }
  return Status::Ok();
}

Status TcpChannel::PeekOpening(bool* ready, bool* tagged, CallDescriptor* tag) {
  *ready = false;
  *tagged = false;
  if (recv_active_ || recv_header_done_ > 0)
    return InternalError("an any-source receive looked ahead inside a message from rank " +
                         std::to_string(peer_rank_));
  // Every message starts with its header on the first socket: peek at it,
  // leaving it for the receive that takes the message.
  TcpMessageHeader h;
  ssize_t n;
  do {
    n = ::recv(sockets_[0].get(), &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return SocketError("recv", 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return SocketError("recv", errno);
  }
  if (static_cast<size_t>(n) < sizeof(h)) return Status::Ok();  // the rest is on its way
  if (h.magic != kTcpHeaderMagic)
    return InvalidUsage("rank " + std::to_string(peer_rank_) +
                        " sent a message without Baton's header (another version of Baton, "
                        "or its stream is out of step with this rank's)");
  *ready = true;
  *tagged = (h.flags & kTcpHeaderTagged) != 0;
  if (*tagged) *tag = h.tag;
  return Status::Ok();
}

void TcpChannel::AckReads(bool message_complete) {
  // A message that is still arriving: its sender may be waiting for our ACK
  // (congestion window, send buffer), so ACK at once. A complete one: the
  // sender waits for nothing, and the ACK rides on our next message to it
  // (a delayed ACK, no packet of its own), unless the flow is one-way (a
  // second message in a row without one from us), where it would ride on
  // nothing and a stream of small messages could fill the sender's window.
  // Quick-ack is not sticky, so it is re-armed per read.
  if (message_complete && unanswered_ == 0) return;
  for (size_t i = 0; i < sockets_.size(); ++i) {
    if (!read_[i]) continue;
    int one = 1;
    setsockopt(sockets_[i].get(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    ++quick_acks_;
  }
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
