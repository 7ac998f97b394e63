// TCP transport between hosts (or between any ranks with BATON_TRANSPORT=tcp).
#pragma once

#include <vector>

#include "base/fd.h"
#include "transport/channel.h"

namespace baton {

// A channel over one or more non-blocking TCP sockets to one peer. A large
// message is striped over the sockets in 64-byte-aligned parts (one flow
// often cannot fill a fast NIC); a small one goes whole on the first socket.
// Sends go straight from the user's buffer; plain receives land straight in
// the destination; reducing receives go through a bounded staging buffer
// per socket (BATON_BUFFSIZE in all) and are reduced as they arrive, a
// partial trailing element waiting for the next read. Every send and recv
// passes MSG_DONTWAIT, so the sockets' own blocking mode does not matter.
class TcpChannel : public Channel {
 public:
  // Messages of at least this many bytes are striped over all sockets.
  static constexpr size_t kStripeMinBytes = 256 << 10;

  TcpChannel(std::vector<Fd> sockets, size_t staging_bytes, int peer_rank);
  Kind kind() const override { return Kind::kTcp; }
  Status ProgressSend(const uint8_t* src, size_t bytes, size_t* done) override;
  Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;
  void AddWaitFds(bool sending, int peer, WaitSet* ws) const override;
  std::vector<int> fds() const;

 private:
  // One socket's share of the current message in one direction.
  struct Part {
    size_t offset = 0, length = 0, moved = 0;
  };
  void Plan(size_t bytes, std::vector<Part>* parts) const;
  Status SocketError(const char* what, int err) const;

  std::vector<Fd> sockets_;
  std::vector<Part> send_parts_, recv_parts_;
  bool send_active_ = false, recv_active_ = false;
  std::vector<std::vector<uint8_t>> staging_;  // per socket
  std::vector<size_t> staged_;                 // bytes of a partial element, per socket
  int peer_rank_;
};

}  // namespace baton
