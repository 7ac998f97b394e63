#include "transport/tcp.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace baton {

TcpChannel::TcpChannel(Fd socket, size_t staging_bytes, int peer_rank)
    : socket_(std::move(socket)),
      staging_(std::max<size_t>(staging_bytes, 4096)),
      peer_rank_(peer_rank) {
  SetNonBlocking(socket_.get(), true).ok();
  SetNoDelay(socket_.get());
}

Status TcpChannel::socketError(const char* what, int err) const {
  if (err == 0 || err == EPIPE || err == ECONNRESET)
    return RemoteError("rank " + std::to_string(peer_rank_) +
                       " closed its connection (process died or aborted)");
  return ErrnoError(std::string(what) + " to/from rank " + std::to_string(peer_rank_), err);
}

Status TcpChannel::progressSend(const uint8_t* src, size_t bytes, size_t* done) {
  while (*done < bytes) {
    ssize_t n = ::send(socket_.get(), src + *done, bytes - *done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      *done += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return socketError("send", errno);
  }
  return Status::Ok();
}

Status TcpChannel::progressRecv(const RecvTarget& target, size_t bytes, size_t* done) {
  bool got_any = false;
  while (*done < bytes) {
    ssize_t n;
    if (target.reduce_with == nullptr) {
      n = ::recv(socket_.get(), target.dst + *done, bytes - *done, MSG_DONTWAIT);
      if (n > 0) *done += n;
    } else {
      size_t want = std::min(staging_.size() - staged_, bytes - *done - staged_);
      n = ::recv(socket_.get(), staging_.data() + staged_, want, MSG_DONTWAIT);
      if (n > 0) {
        staged_ += n;
        size_t whole = staged_ / target.elem_size * target.elem_size;
        if (whole > 0) {
          Deliver(target, *done, staging_.data(), whole);
          *done += whole;
          staged_ -= whole;
          if (staged_ > 0) memmove(staging_.data(), staging_.data() + whole, staged_);
        }
      }
    }
    if (n > 0) {
      got_any = true;
      continue;
    }
    if (n == 0) return socketError("recv", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return socketError("recv", errno);
  }
  if (got_any) {
    // Delayed ACKs stall request-response traffic on loopback by tens of
    // milliseconds; quick-ack is not sticky, so it is re-armed per read.
    int one = 1;
    setsockopt(socket_.get(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
  }
  return Status::Ok();
}

}  // namespace baton
