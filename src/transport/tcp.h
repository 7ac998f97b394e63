// TCP transport between hosts (or between any ranks with BATON_TRANSPORT=tcp).
#pragma once

#include <vector>

#include "bootstrap/socket.h"
#include "transport/transport.h"

namespace baton {

// A channel over one non-blocking TCP socket. Sends go straight from the
// user's buffer; plain receives land straight in the destination; reducing
// receives go through a bounded staging buffer (BATON_BUFFSIZE) and are
// reduced element by element as they arrive, keeping a partial trailing
// element for the next call.
class TcpChannel : public Channel {
 public:
  TcpChannel(Fd socket, size_t staging_bytes, int peer_rank);
  Kind kind() const override { return Kind::kTcp; }
  Status progressSend(const uint8_t* src, size_t bytes, size_t* done) override;
  Status progressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;
  int pollFd() const override { return socket_.get(); }

 private:
  Status socketError(const char* what, int err) const;

  Fd socket_;
  std::vector<uint8_t> staging_;
  size_t staged_ = 0;  // bytes of a partial element carried over
  int peer_rank_;
};

}  // namespace baton
