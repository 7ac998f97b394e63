// The perf driver's Backend for Baton itself; perf/peers has Open MPI's and
// Gloo's.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "driver/device.h"
#include "perf_common.h"

namespace baton_perf {
namespace {

struct CommDestroyer {
  void operator()(batonComm* comm) const { batonCommDestroy(comm); }
};
using CommPtr = std::unique_ptr<batonComm, CommDestroyer>;

struct StreamDestroyer {
  void operator()(batonStream* stream) const { batonStreamDestroy(stream); }
};
using StreamPtr = std::unique_ptr<batonStream, StreamDestroyer>;

// Baton itself: a communicator from batonCommInitFromEnv, calls queued on a host stream.
class BatonBackend : public Backend {
 public:
  std::string Description() const override {
    int version = 0;
    batonGetVersion(&version);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "baton %d.%d.%d) nccl-headers=%d nccl-library=%d",
                  version / 10000, version / 100 % 100, version % 100, BATON_VERSION_CODE, version);
    return buf;
  }

  batonResult_t Init(const std::string& algo, bool use_stream) override {
    if (!algo.empty()) setenv("BATON_ALGO", algo.c_str(), 1);
    batonComm_t comm = nullptr;
    const batonResult_t init = batonCommInitFromEnv(&comm);
    if (init != batonSuccess) return init;
    comm_.reset(comm);
    if (batonResult_t r = batonCommUserRank(comm, &rank_); r != batonSuccess) return r;
    if (batonResult_t r = batonCommCount(comm, &nranks_); r != batonSuccess) return r;
    if (use_stream) {
      batonStream_t stream = nullptr;
      if (batonResult_t r = batonStreamCreate(&stream); r != batonSuccess) return r;
      stream_.reset(stream);
    }
    return batonSuccess;
  }

  int Rank() const override { return rank_; }
  int Size() const override { return nranks_; }
  std::string ErrorDetail() const override { return batonGetLastError(comm_.get()); }
  std::string FinalError() const override { return batonGetLastError(nullptr); }
  void Abort() override {
    if (comm_) batonCommAbort(comm_.release());
  }

  batonResult_t Finalize() override {
    if (stream_) {
      if (batonResult_t r = batonStreamDestroy(stream_.release()); r != batonSuccess) return r;
    }
    return comm_ ? batonCommDestroy(comm_.release()) : batonSuccess;
  }

  batonResult_t Barrier() override { return batonBarrier(comm_.get(), nullptr); }
  batonResult_t GatherToRank0(const void* mine, size_t bytes, void* all) override;
  batonResult_t BroadcastFromRank0(void* buf, size_t bytes) override;

  batonResult_t GroupStart() override { return batonGroupStart(); }
  batonResult_t GroupEnd() override { return batonGroupEnd(); }
  batonResult_t Synchronize() override {
    return stream_ ? batonStreamSynchronize(stream_.get()) : batonSuccess;
  }
  bool SupportsDeviceBuffers() const override { return DeviceBuild(); }
  batonComm_t comm() const override { return comm_.get(); }
  batonStream_t stream() const override { return stream_.get(); }

 private:
  CommPtr comm_;
  StreamPtr stream_;  // after comm_: destroyed first, as its queued calls use the communicator
  int rank_ = 0;
  int nranks_ = 1;
};

// The driver's bookkeeping uses batonBarrier and point-to-point calls only, never
// batonAllReduce or batonAllGather: -A (BATON_ALGO) restricts the algorithms of collectives and
// may leave none for the ones the driver would use (-A pairwise), while the driver's own
// bookkeeping must work whatever is measured, as nccl-tests' MPI calls do whatever NCCL_ALGO says.
// One group, so that rank 0 drains all its peers at once whatever order their messages come in.
batonResult_t BatonBackend::GatherToRank0(const void* mine, size_t bytes, void* all) {
  if (rank_ == 0) std::memcpy(all, mine, bytes);
  if (nranks_ == 1) return batonSuccess;
  if (batonResult_t r = batonGroupStart(); r != batonSuccess) return r;
  batonResult_t result = batonSuccess;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_ && result == batonSuccess; ++r) {
      result = batonRecv(static_cast<std::byte*>(all) + r * bytes, bytes, batonUint8, r,
                         comm_.get(), nullptr);
    }
  } else {
    result = batonSend(mine, bytes, batonUint8, 0, comm_.get(), nullptr);
  }
  const batonResult_t end = batonGroupEnd();
  return result != batonSuccess ? result : end;
}

batonResult_t BatonBackend::BroadcastFromRank0(void* buf, size_t bytes) {
  if (nranks_ == 1) return batonSuccess;
  if (batonResult_t r = batonGroupStart(); r != batonSuccess) return r;
  batonResult_t result = batonSuccess;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_ && result == batonSuccess; ++r) {
      result = batonSend(buf, bytes, batonUint8, r, comm_.get(), nullptr);
    }
  } else {
    result = batonRecv(buf, bytes, batonUint8, 0, comm_.get(), nullptr);
  }
  const batonResult_t end = batonGroupEnd();
  return result != batonSuccess ? result : end;
}

}  // namespace

int PerfMain(int argc, char** argv, const Collective& coll) {
  BatonBackend baton;
  return PerfMain(argc, argv, coll, baton);
}

}  // namespace baton_perf
