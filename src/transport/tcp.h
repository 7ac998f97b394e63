// TCP transport between hosts (or between any ranks with BATON_TRANSPORT=tcp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
//
// Every non-empty message starts, on the first socket, with a header: a
// magic number with the format's version, its size, and the descriptor of
// the call it opens, if it does. A receiver checks both before taking any
// of the message, so a peer in another call is an error naming both calls,
// never bytes landing where they do not belong.
struct TcpMessageHeader {
  uint32_t magic = 0;
  uint32_t flags = 0;  // kTcpHeaderTagged: `tag` is set
  uint64_t bytes = 0;
  CallDescriptor tag;
};
static_assert(sizeof(TcpMessageHeader) == 40, "the wire format is 40 bytes");
inline constexpr uint32_t kTcpHeaderMagic = 0x42544e01;  // "BTN", version 1
inline constexpr uint32_t kTcpHeaderTagged = 1;

class TcpChannel : public Channel {
 public:
  // Messages of at least this many bytes are striped over all sockets.
  static constexpr size_t kStripeMinBytes = 256 << 10;

  // Makes the channel and its staging buffers (staging_bytes split over the
  // sockets); a failure to map them is an error, not an exception.
  static Status Create(std::vector<Fd> sockets, size_t staging_bytes, int peer_rank,
                       std::unique_ptr<TcpChannel>* out);
  // Only Create can make one (it must map the staging buffers).
  class Key {
    Key() = default;
    friend class TcpChannel;
  };
  TcpChannel(Key, std::vector<Fd> sockets, int peer_rank);
  Kind kind() const override { return Kind::kTcp; }
  Status ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                      size_t* done) override;
  Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;
  Status PeekOpening(bool* ready, bool* tagged, CallDescriptor* tag) override;
  void AddWaitFds(bool sending, int peer, WaitSet* ws) const override;
  std::vector<int> fds() const;
  // TCP_QUICKACK re-arms so far (AckReads's policy, for tests).
  uint64_t quick_acks() const { return quick_acks_; }

 private:
  // One socket's share of the current message in one direction.
  struct Part {
    size_t offset = 0, length = 0, moved = 0;
  };
  void Plan(size_t bytes, std::vector<Part>* parts) const;
  Status SocketError(const char* what, int err) const;
  // Sends the rest of the header and what of part 0 fits behind it.
  Status SendHeader(const uint8_t* src, Part* part0, bool* blocked);
  // Reads the rest of the header (and what follows of part 0 of the
  // message planned for the size this rank expects); *complete once all of
  // the header is in.
  Status RecvHeader(const RecvTarget& target, bool* complete);
  // Delivers the whole elements staged for `socket` (reducing receives).
  void DeliverStaged(const RecvTarget& target, size_t socket);
  Status CheckHeader(const RecvTarget& target, size_t bytes);
  // Re-arms TCP_QUICKACK on the sockets read in this ProgressRecv where the
  // peer may be waiting for an ACK (see tcp.cc).
  void AckReads(bool message_complete);

  std::vector<Fd> sockets_;
  std::vector<Part> send_parts_, recv_parts_;
  bool send_active_ = false, recv_active_ = false;
  bool recv_planned_ = false;  // the parts of the next message are planned; its header is coming
  TcpMessageHeader send_header_, recv_header_;
  size_t send_header_done_ = 0, recv_header_done_ = 0;
  // Per socket. Not zero-filled: its pages come when first written, so a
  // rank's memory grows with the peers it receives reductions from, not
  // with the communicator's size.
  // Mapped rather than taken from malloc: its pages come only as they are
  // written, and go back at destruction whichever thread made the channel
  // (connections made on first use are often made on the acceptor thread,
  // whose malloc arena would keep a freed buffer's pages).
  struct Staging {
    uint8_t* bytes = nullptr;
    size_t length = 0;
    Staging() = default;
    Staging(Staging&& other) noexcept;
    Staging& operator=(Staging&&) = delete;
    ~Staging();
    Status Allocate(size_t bytes);
    uint8_t* data() const { return bytes; }
    size_t size() const { return length; }
  };
  std::vector<Staging> staging_;
  std::vector<size_t> staged_;  // bytes of a partial element, per socket
  std::vector<uint8_t> read_;   // sockets that brought data in this ProgressRecv
  // Messages received whole since this channel last sent anything: an ACK
  // owed to the peer can ride on our next send only while this is small.
  size_t unanswered_ = 0;
  uint64_t quick_acks_ = 0;
  int peer_rank_;
};

}  // namespace baton
