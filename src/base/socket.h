// Thin RAII wrappers over POSIX sockets with deadlines on every wait.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"

namespace baton {

// An IPv4 or IPv6 socket address in a fixed-size, trivially copyable form so
// it can travel inside the unique id and the bootstrap tables.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  bool valid() const { return len != 0; }
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  std::string ToString() const;  // "10.77.0.2:41234" or "[::1]:41234"
};

// Compact wire form of a SockAddr (24 bytes).
struct WireAddr {
  uint16_t family;
  uint16_t port;  // host byte order
  uint8_t addr[16];
  uint32_t scope;
};
static_assert(sizeof(WireAddr) == 24);
WireAddr ToWire(const SockAddr& a);
SockAddr FromWire(const WireAddr& w);

// Resolves "host:port", "[v6]:port" (numeric or by name).
Status ParseHostPort(const std::string& text, SockAddr* out);

// The address to listen on for this process's bootstrap and TCP traffic:
// the first interface matching `ifname_spec` (BATON_SOCKET_IFNAME, NCCL's
// syntax: "eth,ib" prefixes, "^docker" excludes, "=eth0" exact); when the
// spec is empty, the first up interface that is neither loopback nor a
// docker bridge, else loopback. Port 0. `ifname` gets the interface.
Status SelectInterfaceAddress(const std::string& ifname_spec, SockAddr* out, std::string* ifname);

// The speed of network interface `ifname` in Mbit/s as the kernel reports
// it (/sys/class/net/IF/speed); 0 when it reports none (loopback, some
// virtual interfaces) or the name is empty.
int InterfaceSpeedMbps(const std::string& ifname);

// Binds and listens (port 0 picks one), returning the bound address.
Status ListenOn(const SockAddr& bind_addr, Fd* out, SockAddr* bound);

// Connects, retrying refused connections (the peer may not listen yet)
// until the deadline. The returned socket is blocking, with TCP_NODELAY.
Status ConnectWithRetry(const SockAddr& addr, Deadline deadline, Fd* out);

// Accepts one connection on a listening socket, waiting until the deadline.
Status AcceptWithDeadline(int listen_fd, Deadline deadline, Fd* out);

// Sends or receives exactly `len` bytes, waiting with poll until the deadline.
// Works on blocking and non-blocking sockets; never raises SIGPIPE.
Status SendAll(int fd, const void* buf, size_t len, Deadline deadline);
Status RecvAll(int fd, void* buf, size_t len, Deadline deadline);

// Whether this thread's socket waits have been cancelled (CancelScope, in
// base/deadline.h): for loops that poll many sockets themselves, in slices
// of kCancelSliceMs.
bool WaitsCancelled();
// How long such a loop may wait in one poll: until `deadline`, or
// kCancelSliceMs while a CancelScope is active (idle waits stay asleep).
int PollSliceMs(Deadline deadline);

Status SetNonBlocking(int fd, bool nonblocking);
void SetNoDelay(int fd);

// Constant-time comparison, for secrets.
bool SecretsEqual(const void* a, const void* b, size_t len);

}  // namespace baton
