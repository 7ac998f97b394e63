// DeviceChannel: per communicator, the worker thread that runs the host
// sides of its device calls in call order, and the mapped flag through which
// that worker tells the CUDA streams how far it has got. CUDA builds only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "base/status.h"
#include "comm/comm.h"
#include "comm/stream.h"
#include "cuda/cuda_ipc.h"
#include "cuda/cuda_util.h"
#include "cuda/ipc_bounce.h"

namespace baton {

class DeviceChannel {
 public:
  Status Init();

  HostStream& worker() { return worker_; }
  CudaIpcContext& ipc() { return ipc_; }
  std::mutex& launch_mutex() { return launch_mu_; }
  IpcBounceBuffers& bounce() { return bounce_; }  // under launch_mutex()
  uint32_t NextSequence() { return ++issued_; }   // under launch_mutex()
  const volatile uint32_t* device_flag() const { return device_flag_; }
  // Release: the staged result written before is visible to the stream's copy.
  void Publish(uint32_t seq);
  // Waits for the device calls queued so far; a failure among them was
  // reported when it happened (the communicator's last error), so it is
  // only logged here.
  void Drain();

 private:
  PinnedMemory flag_memory_;
  uint32_t* flag_ = nullptr;  // host view of the pinned word
  const volatile uint32_t* device_flag_ = nullptr;
  std::mutex launch_mu_;
  uint32_t issued_ = 0;
  IpcBounceBuffers bounce_;
  CudaIpcContext ipc_;
  HostStream worker_;  // last: destroyed first, draining tasks that use the flag and ipc_
};

// Channels by communicator. An entry lives until its communicator is gone
// (checked whenever a channel is looked up).
class ChannelRegistry {
 public:
  static ChannelRegistry& Get();

  // The channel of comm, made on first use.
  Status GetOrCreate(const std::shared_ptr<Communicator>& comm, DeviceChannel** out);

  // The channel of comm if one exists (nullptr otherwise).
  DeviceChannel* Find(const std::shared_ptr<Communicator>& comm);

 private:
  struct Entry {
    std::weak_ptr<Communicator> comm;
    std::unique_ptr<DeviceChannel> channel;
  };
  std::mutex mu_;
  std::map<Communicator*, Entry> channels_;
};

}  // namespace baton
