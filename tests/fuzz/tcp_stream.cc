// Fuzz target: what a TCP peer sends (message headers with call
// descriptors, then data), received by a TcpChannel that expects one
// message of a given size and call: the header must be checked before any
// of the data lands, and no input may crash the receiver, make it write
// past its buffer, or hang it.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/fd.h"
#include "transport/tcp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4 || size > 65536) return 0;
  // The receiver's side of the message: its size, whether it reduces, and
  // whether it opens a call (the descriptor the sender should send).
  const size_t expected = 1 + (data[0] | (data[1] << 8)) % 4096;
  const bool reduce = data[2] & 1;
  const bool opens = data[2] & 2;
  data += 3;
  size -= 3;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  std::vector<baton::Fd> ends;
  ends.emplace_back(sv[1]);
  std::unique_ptr<baton::TcpChannel> rx;
  if (!baton::TcpChannel::Create(std::move(ends), 4096, 0, &rx).ok()) {
    close(sv[0]);
    return 0;
  }
  if (write(sv[0], data, size) != static_cast<ssize_t>(size)) {
    close(sv[0]);
    return 0;
  }
  close(sv[0]);  // then EOF: the receiver must fail, not wait
  std::vector<float> dst(expected / sizeof(float) + 1), local(dst.size(), 1.0f);
  baton::CallDescriptor call;
  call.kind = baton::kCallKindCollectiveBase;
  call.seq = 1;
  call.count = expected / 4;
  baton::RecvTarget t;
  t.dst = reinterpret_cast<uint8_t*>(dst.data());
  if (reduce) {
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat32;
    t.elem_size = 4;
  }
  t.opens = opens ? &call : nullptr;
  const size_t bytes = reduce ? expected / 4 * 4 + 4 : expected;
  size_t done = 0;
  for (int i = 0; i < 64 && done < bytes; ++i)
    if (!rx->ProgressRecv(t, bytes, &done).ok()) break;
  if (done > bytes) __builtin_trap();
  return 0;
}
