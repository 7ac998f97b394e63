#include "cuda/device_channel.h"

#include <atomic>

#include "base/affinity.h"
#include "base/log.h"
#include "cuda/cuda_util.h"

namespace baton {

Status DeviceChannel::Init() {
  // Before any stream waits for this communicator's host side (kernels.h).
  BATON_RETURN_IF_ERROR(LoadCudaKernels());
  BATON_RETURN_IF_ERROR(
      flag_memory_.Allocate(sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  flag_ = reinterpret_cast<uint32_t*>(flag_memory_.data());
  std::atomic_ref<uint32_t>(*flag_).store(0);
  void* device_ptr = nullptr;
  if (cudaError_t err = cudaHostGetDevicePointer(&device_ptr, flag_memory_.data(), 0);
      err != cudaSuccess)
    return CudaErrorStatus(err, "cudaHostGetDevicePointer(flag)");
  device_flag_ = static_cast<const volatile uint32_t*>(device_ptr);
  // The worker must not share one CPU with a caller that spins on its
  // stream (base/affinity.h; what that cost: docs/cuda.md).
  worker_.Enqueue([] {
    if (const std::string line = WidenSingleCpuAffinity(); !line.empty())
      BATON_INFO(kLogColl, "device worker: %s", line.c_str());
    return Status::Ok();
  });
  return Status::Ok();
}

void DeviceChannel::Publish(uint32_t seq) {
  std::atomic_ref<uint32_t>(*flag_).store(seq, std::memory_order_release);
}

void DeviceChannel::Drain() {
  const Status earlier = worker_.Synchronize();
  if (!earlier.ok())
    BATON_INFO(kLogColl, "an earlier device call on this communicator failed (reported then): %s",
               earlier.message().c_str());
}

ChannelRegistry& ChannelRegistry::Get() {
  static ChannelRegistry registry;
  return registry;
}

Status ChannelRegistry::GetOrCreate(const std::shared_ptr<Communicator>& comm,
                                    DeviceChannel** out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.comm.expired() && it->first != comm.get())
      it = channels_.erase(it);
    else
      ++it;
  }
  auto it = channels_.find(comm.get());
  if (it != channels_.end() && it->second.comm.lock() == comm) {
    *out = it->second.channel.get();
    return Status::Ok();
  }
  Entry entry;
  entry.comm = comm;
  entry.channel = std::make_unique<DeviceChannel>();
  BATON_RETURN_IF_ERROR(entry.channel->Init());
  // The worker's log lines name the rank, as the caller's do.
  entry.channel->worker().Enqueue([rank = comm->rank()] {
    SetLogRank(rank);
    return Status::Ok();
  });
  *out = entry.channel.get();
  channels_[comm.get()] = std::move(entry);
  return Status::Ok();
}

DeviceChannel* ChannelRegistry::Find(const std::shared_ptr<Communicator>& comm) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(comm.get());
  if (it == channels_.end() || it->second.comm.lock() != comm) return nullptr;
  return it->second.channel.get();
}

}  // namespace baton
