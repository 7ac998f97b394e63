// The measured buffers of one rank, wherever -R and -B put them: host memory (aligned_alloc),
// host memory the peers can map (batonMemAlloc, registered on the communicator, -R) or CUDA
// device memory (-B cuda). The expected output always lives in host memory; with device buffers
// the driver writes inputs and reads outputs through a host buffer of the same size, so the
// collectives' own code (InitData, CountWrong) only ever sees host pointers.
#pragma once

#include <cstddef>
#include <string>

#include "baton.h"

namespace baton_perf {

enum class BufferSpace { kHost, kRegistered, kCuda };

class RankBuffers {
 public:
  RankBuffers() = default;
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;
  ~RankBuffers();

  // Send and receive buffers of `bytes` each in `space` (page-aligned, zeroed, touched once so
  // page faults stay out of the timing), and with `expected_bytes` > 0 the host buffer of the
  // expected output. `comm` registers them for kRegistered. Returns batonSuccess or an error
  // described in *error.
  batonResult_t Allocate(BufferSpace space, size_t bytes, size_t expected_bytes, batonComm_t comm,
                         std::string* error);
  // Frees everything; registered buffers must outlive their communicator's use of them.
  void Release();

  std::byte* send() const { return send_; }
  std::byte* recv() const { return recv_; }
  std::byte* expected() const { return expected_; }

  // Sets `bytes` at `at` (inside send or recv) to zero.
  batonResult_t Zero(std::byte* at, size_t bytes, std::string* error);
  // Host memory to write `bytes` of data destined for `at` into: `at` itself for host buffers,
  // else a zeroed host buffer that Store then copies to `at`.
  std::byte* HostView(std::byte* at, size_t bytes);
  batonResult_t Store(std::byte* at, size_t bytes, std::string* error);
  // Host memory holding the `bytes` at `at`: `at` itself, or a host copy of device memory.
  batonResult_t Load(const std::byte* at, size_t bytes, const std::byte** host, std::string* error);

 private:
  BufferSpace space_ = BufferSpace::kHost;
  std::byte* send_ = nullptr;
  std::byte* recv_ = nullptr;
  std::byte* expected_ = nullptr;
  std::byte* host_io_ = nullptr;  // -B cuda: where inputs are written and outputs read
  size_t bytes_ = 0;
};

}  // namespace baton_perf
