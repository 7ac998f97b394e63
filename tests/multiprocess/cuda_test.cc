// Collectives on CUDA device buffers (CUDA builds only): several ranks (one
// process each, through tests/mp_harness.h) run allreduce, broadcast, reduce,
// allgather, reduce-scatter, alltoall and send/recv on cudaMalloc'd buffers,
// on a cudaStream_t and synchronously, for every datatype and op, against a
// host reference computed here. Inputs are small integers so that every
// reference value is exact in every datatype and independent of the
// reduction order. Skips (with the reason) when no CUDA device is visible.
//
// The parent process never calls CUDA itself: the device probe runs in a
// forked child, because a process that initialized CUDA cannot use it in
// children it forks afterwards (the harness forks the ranks).
//
// SPDX-License-Identifier: BSD-3-Clause

#include <gtest/gtest.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include <baton.h>

#include "common/mp_harness.h"
#include "common/reference.h"

namespace {

using baton_test::RankContext;
using baton_test::RunRanks;

constexpr int kRanks = 3;  // not a power of two: the folding paths too

// Number of CUDA devices, probed once in a forked child (see the top);
// sets *reason when there are none.
int DeviceCount(std::string* reason) {
  static int count = -1;
  static std::string why;
  if (count < 0) {
    int fds[2];
    if (pipe(fds) != 0) {
      why = "pipe failed";
      return count = 0;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int n = 0;
      const cudaError_t err = cudaGetDeviceCount(&n);
      char msg[256];
      snprintf(msg, sizeof(msg), "%d %s", err == cudaSuccess ? n : 0,
               err == cudaSuccess ? "no CUDA device" : cudaGetErrorString(err));
      ssize_t written = write(fds[1], msg, strlen(msg));
      (void)written;
      _exit(0);
    }
    close(fds[1]);
    char buf[256] = {};
    ssize_t got = 0, r;
    while (got < static_cast<ssize_t>(sizeof(buf) - 1) &&
           (r = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0)
      got += r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    count = atoi(buf);
    const char* space = strchr(buf, ' ');
    why = std::string("cudaGetDeviceCount: ") + (space ? space + 1 : "probe failed");
  }
  if (reason) *reason = why;
  return count;
}

#define SKIP_WITHOUT_GPU()                                                       \
  do {                                                                           \
    std::string reason;                                                          \
    if (DeviceCount(&reason) <= 0) GTEST_SKIP() << "no CUDA device: " << reason; \
  } while (0)

// Rank r's input element i for op: small integers whose reduction over
// kRanks ranks is exact in every type (non-negative for unsigned types), and
// for avg a sum divisible by the rank count.
double Input(batonDataType_t dt, batonRedOp_t op, int r, size_t i) {
  const double lift = IsUnsigned(dt) ? 6 : 0;
  switch (op) {
    case batonProd:
      return static_cast<double>((i + r) % 3) - (IsUnsigned(dt) ? -1 : 1);
    case batonMax:
    case batonMin:
      return static_cast<double>((i * 5 + r * 3) % 11) - 5 + lift;
    default: {
      // fp8 e5m2 has no 9 or 11: its sums stay within +-8 (every partial sum exact too).
      const size_t span = dt == batonFloat8e4m3 || dt == batonFloat8e5m2 ? 5 : 7;
      return static_cast<double>(i % span) - (span / 2) + lift + (r - (kRanks - 1) / 2.0) * 1;
    }
  }
}

double Reference(batonDataType_t dt, batonRedOp_t op, int nranks, size_t i) {
  double acc = Input(dt, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const double v = Input(dt, op, r, i);
    acc = CombineReference(op, acc, v);
  }
  return op == batonAvg ? acc / nranks : acc;
}

// A cudaMalloc'd buffer, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr_, bytes ? bytes : 1) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// Per rank: the rank's GPU (round robin) and a non-blocking stream.
class RankGpu {
 public:
  explicit RankGpu(RankContext& ctx) {
    int n = 0;
    cudaGetDeviceCount(&n);
    ok_ = n > 0 && cudaSetDevice(ctx.rank() % n) == cudaSuccess &&
          cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess;
  }
  ~RankGpu() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  RankGpu(const RankGpu&) = delete;
  RankGpu& operator=(const RankGpu&) = delete;
  bool ok() const { return ok_; }
  cudaStream_t stream() const { return stream_; }
  batonStream_t baton() const { return reinterpret_cast<batonStream_t>(stream_); }

 private:
  bool ok_ = false;
  cudaStream_t stream_ = nullptr;
};

// cudaMemcpy from pageable memory may return before the DMA into the device has ended, and the
// collectives run on a non-blocking stream that does not wait for the legacy stream: wait here.
cudaError_t ToDevice(void* dst, const void* src, size_t bytes) {
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

std::vector<uint8_t> ToHost(const DeviceBuffer& d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  if (bytes) cudaMemcpy(h.data(), d.get(), bytes, cudaMemcpyDeviceToHost);
  return h;
}

TEST(CudaCollectivesTest, AllReduceEveryTypeAndOpOnStream) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const size_t count = 1037;  // odd: scalar tails
    // One pair of buffers for every call, as applications keep theirs (FreshBuffersEachCall
    // covers buffers that change between calls).
    DeviceBuffer send(count * 8), recv(count * 8);
    MP_ASSERT_TRUE(ctx, send.get() && recv.get());
    for (batonDataType_t dt : kAllTypes) {
      for (batonRedOp_t op : kAllOps) {
        const size_t bytes = count * SizeOf(dt);
        std::vector<uint8_t> in(bytes);
        for (size_t i = 0; i < count; ++i) Store(dt, in.data(), i, Input(dt, op, ctx.rank(), i));
        MP_ASSERT_TRUE(ctx, ToDevice(send.get(), in.data(), bytes) == cudaSuccess);
        MP_ASSERT_OK(
            ctx, batonAllReduce(send.get(), recv.get(), count, dt, op, ctx.comm(), gpu.baton()));
        MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
        const std::vector<uint8_t> out = ToHost(recv, bytes);
        for (size_t i = 0; i < count; ++i) {
          const double want = Reference(dt, op, ctx.nranks(), i);
          if (Load(dt, out.data(), i) != want) {
            MP_ADD_FAILURE(ctx) << "dtype " << dt << " op " << op << " element " << i << ": got "
                                << Load(dt, out.data(), i) << ", want " << want;
            break;
          }
        }
      }
    }
    batonResult_t async = batonSuccess;
    MP_EXPECT_OK(ctx, batonCommGetAsyncError(ctx.comm(), &async));
    MP_EXPECT_EQ(ctx, async, batonSuccess);
  });
}

// Each call on buffers allocated for it and freed after: the IPC path maps every peer's new
// allocation (and keeps the old mappings cached until they are evicted or the communicator goes).
TEST(CudaCollectivesTest, FreshBuffersEachCall) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    for (size_t count : {size_t{1}, size_t{1037}, size_t{4096}, size_t{65537}}) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 13) + ctx.rank();
      DeviceBuffer send(count * 4), recv(count * 4);
      MP_ASSERT_TRUE(ctx, send.get() && recv.get());
      MP_ASSERT_TRUE(ctx, ToDevice(send.get(), in.data(), count * 4) == cudaSuccess);
      MP_ASSERT_OK(ctx, batonAllReduce(send.get(), recv.get(), count, batonFloat, batonSum,
                                       ctx.comm(), gpu.baton()));
      MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
      const std::vector<uint8_t> out = ToHost(recv, count * 4);
      const float rank_sum = static_cast<float>(ctx.nranks() * (ctx.nranks() - 1) / 2);
      for (size_t i = 0; i < count; ++i) {
        float got;
        std::memcpy(&got, out.data() + i * 4, 4);
        const float want = static_cast<float>(i % 13) * ctx.nranks() + rank_sum;
        if (got != want) {
          MP_ADD_FAILURE(ctx) << "count " << count << " element " << i << ": got " << got
                              << ", want " << want;
          break;
        }
      }
    }
  });
}

TEST(CudaCollectivesTest, AllReduceInPlaceSynchronousAndLarge) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{3} << 20}) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 1000) + ctx.rank();
      DeviceBuffer buf(count * 4);
      MP_ASSERT_TRUE(ctx, buf.get() != nullptr);
      ToDevice(buf.get(), in.data(), count * 4);
      // NULL stream: synchronous, in place.
      MP_ASSERT_OK(ctx, batonAllReduce(buf.get(), buf.get(), count, batonFloat32, batonSum,
                                       ctx.comm(), nullptr));
      std::vector<float> out(count);
      cudaMemcpy(out.data(), buf.get(), count * 4, cudaMemcpyDeviceToHost);
      const float rank_sum = ctx.nranks() * (ctx.nranks() - 1) / 2.0f;
      for (size_t i = 0; i < count; ++i) {
        const float want = ctx.nranks() * static_cast<float>(i % 1000) + rank_sum;
        if (out[i] != want) {
          MP_ADD_FAILURE(ctx) << "count " << count << " element " << i << ": " << out[i]
                              << " != " << want;
          break;
        }
      }
    }
  });
}

// Five dependent allreduces queued on one stream, one synchronize: the
// stream ordering (input copy, host collective, result copy) must chain.
TEST(CudaCollectivesTest, QueuedCallsKeepStreamOrder) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const size_t count = 100000;
    std::vector<int64_t> in(count, 1);
    DeviceBuffer a(count * 8), b(count * 8);
    ToDevice(a.get(), in.data(), count * 8);
    for (int step = 0; step < 5; ++step) {
      uint8_t* src = step % 2 ? b.get() : a.get();
      uint8_t* dst = step % 2 ? a.get() : b.get();
      MP_ASSERT_OK(ctx,
                   batonAllReduce(src, dst, count, batonInt64, batonSum, ctx.comm(), gpu.baton()));
    }
    MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
    std::vector<int64_t> out(count);
    cudaMemcpy(out.data(), b.get(), count * 8, cudaMemcpyDeviceToHost);
    int64_t want = 1;
    for (int step = 0; step < 5; ++step) want *= ctx.nranks();
    MP_EXPECT_EQ(ctx, out[0], want);
    MP_EXPECT_EQ(ctx, out[count - 1], want);
  });
}

// Broadcast, allgather, reduce-scatter, alltoall, reduce, send/recv and a
// barrier on a cudaStream_t, each checked against a host reference.
void OtherCollectivesOnStream(RankContext& ctx) {
  {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const int n = ctx.nranks(), me = ctx.rank();
    const size_t count = 777;
    auto value = [](int rank, size_t i) { return static_cast<int32_t>(rank * 100000 + i); };
    std::vector<int32_t> mine(count * n), out(count * n);
    for (size_t i = 0; i < count * n; ++i) mine[i] = value(me, i);
    DeviceBuffer send(count * n * 4), recv(count * n * 4);
    ToDevice(send.get(), mine.data(), count * n * 4);
    auto sync_and_read = [&](size_t elems) {
      cudaStreamSynchronize(gpu.stream());
      cudaMemcpy(out.data(), recv.get(), elems * 4, cudaMemcpyDeviceToHost);
    };

    const int root = 1;
    MP_ASSERT_OK(ctx, batonBroadcast(send.get(), recv.get(), count, batonInt32, root, ctx.comm(),
                                     gpu.baton()));
    sync_and_read(count);
    for (size_t i = 0; i < count; ++i) MP_ASSERT_EQ(ctx, out[i], value(root, i));

    MP_ASSERT_OK(
        ctx, batonAllGather(send.get(), recv.get(), count, batonInt32, ctx.comm(), gpu.baton()));
    sync_and_read(count * n);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) MP_ASSERT_EQ(ctx, out[r * count + i], value(r, i));

    MP_ASSERT_OK(ctx, batonReduceScatter(send.get(), recv.get(), count, batonInt32, batonSum,
                                         ctx.comm(), gpu.baton()));
    sync_and_read(count);
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += value(r, me * count + i);
      MP_ASSERT_EQ(ctx, out[i], want);
    }

    MP_ASSERT_OK(ctx,
                 batonAlltoAll(send.get(), recv.get(), count, batonInt32, ctx.comm(), gpu.baton()));
    sync_and_read(count * n);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        MP_ASSERT_EQ(ctx, out[r * count + i], value(r, me * count + i));

    // Reduce: only the root's receive buffer changes.
    std::vector<int32_t> sentinel(count, -7);
    ToDevice(recv.get(), sentinel.data(), count * 4);
    MP_ASSERT_OK(ctx, batonReduce(send.get(), recv.get(), count, batonInt32, batonMax, root,
                                  ctx.comm(), gpu.baton()));
    sync_and_read(count);
    for (size_t i = 0; i < count; ++i) MP_ASSERT_EQ(ctx, out[i], me == root ? value(n - 1, i) : -7);

    // Send/recv around the ring, then a stream-ordered barrier.
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    if (me % 2 == 0) {
      MP_ASSERT_OK(ctx, batonSend(send.get(), count, batonInt32, next, ctx.comm(), gpu.baton()));
      MP_ASSERT_OK(ctx, batonRecv(recv.get(), count, batonInt32, prev, ctx.comm(), gpu.baton()));
    } else {
      MP_ASSERT_OK(ctx, batonRecv(recv.get(), count, batonInt32, prev, ctx.comm(), gpu.baton()));
      MP_ASSERT_OK(ctx, batonSend(send.get(), count, batonInt32, next, ctx.comm(), gpu.baton()));
    }
    MP_ASSERT_OK(ctx, batonBarrier(ctx.comm(), gpu.baton()));
    sync_and_read(count);
    for (size_t i = 0; i < count; ++i) MP_ASSERT_EQ(ctx, out[i], value(prev, i));
  }
}

// Sets an environment variable for the ranks forked in its scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// The ranks of these tests share one host, so collectives on device buffers
// go through CUDA IPC (peer memory, CUDA kernels) unless BATON_CUDA_IPC=0
// (pinned host staging): both must give the reference results.
TEST(CudaCollectivesTest, OtherCollectivesOnStream) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, OtherCollectivesOnStream);
}

TEST(CudaCollectivesTest, OtherCollectivesStagedWithoutIpc) {
  SKIP_WITHOUT_GPU();
  ScopedEnv off("BATON_CUDA_IPC", "0");
  RunRanks(kRanks, OtherCollectivesOnStream);
}

// Nine ranks: reductions over more inputs than one kernel takes (two passes).
TEST(CudaCollectivesTest, OtherCollectivesNineRanks) {
  SKIP_WITHOUT_GPU();
  RunRanks(9, OtherCollectivesOnStream);
}

// Ranks that disagree on a call get batonInvalidUsage on every rank from the
// IPC exchange (no hang, no garbage), and the communicator stays usable.
// In-place alltoall, which IPC cannot serve, falls back to staging.
TEST(CudaCollectivesTest, IpcMismatchIsAnErrorAndInPlaceAlltoAllFallsBack) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const int n = ctx.nranks(), me = ctx.rank();
    DeviceBuffer buf(4096 * 4);
    MP_ASSERT_TRUE(ctx, buf.get() != nullptr);
    const size_t count = me == 0 ? 100 : 200;
    MP_EXPECT_RESULT(
        ctx,
        batonAllReduce(buf.get(), buf.get(), count, batonFloat32, batonSum, ctx.comm(), nullptr),
        batonInvalidUsage);
    // The same call everywhere works afterwards.
    std::vector<int32_t> in(count * n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(me * 1000 + i);
    MP_ASSERT_TRUE(ctx, ToDevice(buf.get(), in.data(), in.size() * 4) == cudaSuccess);
    const size_t block = 100;
    MP_ASSERT_OK(ctx,
                 batonAlltoAll(buf.get(), buf.get(), block, batonInt32, ctx.comm(), gpu.baton()));
    MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
    std::vector<int32_t> out(block * n);
    cudaMemcpy(out.data(), buf.get(), out.size() * 4, cudaMemcpyDeviceToHost);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < block; ++i)
        MP_ASSERT_EQ(ctx, out[r * block + i], static_cast<int32_t>(r * 1000 + me * block + i));
  });
}

// Device calls inside batonGroupStart/End: an alltoallv-style exchange of
// sends and receives with every rank (itself included) plus an allreduce,
// all in one group, on a stream and synchronously. A group that mixes host
// and device calls on one communicator is batonInvalidUsage on every rank.
TEST(CudaCollectivesTest, DeviceCallsInGroups) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const int n = ctx.nranks(), me = ctx.rank();
    // Rank r sends (r + q + 1) * 100 elements to rank q: every pair differs.
    auto block = [](int from, int to) { return static_cast<size_t>(from + to + 1) * 100; };
    auto value = [](int from, int to, size_t i) {
      return static_cast<int32_t>(from * 1000000 + to * 10000 + i);
    };
    for (bool on_stream : {true, false}) {
      std::vector<std::unique_ptr<DeviceBuffer>> sends, recvs;
      for (int q = 0; q < n; ++q) {
        std::vector<int32_t> data(block(me, q));
        for (size_t i = 0; i < data.size(); ++i) data[i] = value(me, q, i);
        sends.push_back(std::make_unique<DeviceBuffer>(data.size() * 4));
        recvs.push_back(std::make_unique<DeviceBuffer>(block(q, me) * 4));
        ToDevice(sends.back()->get(), data.data(), data.size() * 4);
      }
      DeviceBuffer sum(64 * 4);
      std::vector<int32_t> ones(64, me + 1);
      ToDevice(sum.get(), ones.data(), 64 * 4);
      batonStream_t stream = on_stream ? gpu.baton() : nullptr;
      MP_ASSERT_OK(ctx, batonGroupStart());
      for (int q = 0; q < n; ++q) {
        MP_ASSERT_OK(ctx,
                     batonSend(sends[q]->get(), block(me, q), batonInt32, q, ctx.comm(), stream));
        MP_ASSERT_OK(ctx,
                     batonRecv(recvs[q]->get(), block(q, me), batonInt32, q, ctx.comm(), stream));
      }
      MP_ASSERT_OK(
          ctx, batonAllReduce(sum.get(), sum.get(), 64, batonInt32, batonSum, ctx.comm(), stream));
      MP_ASSERT_OK(ctx, batonGroupEnd());
      MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
      for (int q = 0; q < n; ++q) {
        std::vector<int32_t> got(block(q, me));
        cudaMemcpy(got.data(), recvs[q]->get(), got.size() * 4, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < got.size(); ++i) MP_ASSERT_EQ(ctx, got[i], value(q, me, i));
      }
      cudaMemcpy(ones.data(), sum.get(), 64 * 4, cudaMemcpyDeviceToHost);
      MP_EXPECT_EQ(ctx, ones[63], n * (n + 1) / 2);
    }
    // Host and device calls of one communicator in one group.
    DeviceBuffer dev(16 * 4);
    std::vector<float> host(16, 1.0f);
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_ASSERT_OK(ctx, batonAllReduce(host.data(), host.data(), 16, batonFloat32, batonSum,
                                     ctx.comm(), nullptr));
    MP_ASSERT_OK(
        ctx, batonAllReduce(dev.get(), dev.get(), 16, batonFloat32, batonSum, ctx.comm(), nullptr));
    MP_EXPECT_RESULT(ctx, batonGroupEnd(), batonInvalidUsage);
  });
}

TEST(CudaCollectivesTest, BadBufferCombinationsAreInvalidArguments) {
  SKIP_WITHOUT_GPU();
  RunRanks(2, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    DeviceBuffer dev(64);
    std::vector<float> host(16);
    // Mixed host and device buffers.
    MP_EXPECT_RESULT(
        ctx,
        batonAllReduce(dev.get(), host.data(), 16, batonFloat32, batonSum, ctx.comm(), gpu.baton()),
        batonInvalidArgument);
    MP_EXPECT_RESULT(
        ctx,
        batonAllReduce(host.data(), dev.get(), 16, batonFloat32, batonSum, ctx.comm(), nullptr),
        batonInvalidArgument);
    // Host buffers with a cudaStream_t.
    MP_EXPECT_RESULT(ctx,
                     batonAllReduce(host.data(), host.data(), 16, batonFloat32, batonSum,
                                    ctx.comm(), gpu.baton()),
                     batonInvalidArgument);
    // Device buffers with a Baton host stream.
    batonStream_t hs = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&hs));
    MP_EXPECT_RESULT(
        ctx, batonAllReduce(dev.get(), dev.get(), 16, batonFloat32, batonSum, ctx.comm(), hs),
        batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonStreamDestroy(hs));
    // Host collectives still work in the same process.
    float x = 1.0f + ctx.rank();
    MP_ASSERT_OK(ctx, batonAllReduce(&x, &x, 1, batonFloat32, batonSum, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, x, 3.0f);
  });
}

// Buffers from cudaMallocAsync's pool, which CUDA IPC cannot share: the call goes through
// IPC scratch copied in and out on the stream (cuda/ipc_bounce.h), out of place, in place, and
// for an allgather whose input lies inside its output; one rank's buffers from the pool and its
// peers' from cudaMalloc too. Last in this file: its first GPU run (copies by the runtime)
// hung, and a hang here should not keep the others from running.
TEST(CudaCollectivesTest, PoolBuffersOnAStream) {
  SKIP_WITHOUT_GPU();
  RunRanks(kRanks, [](RankContext& ctx) {
    RankGpu gpu(ctx);
    MP_ASSERT_TRUE(ctx, gpu.ok());
    const int n = ctx.nranks(), me = ctx.rank();
    const float rank_sum = static_cast<float>(n * (n - 1) / 2);
    for (int pooled_ranks : {n, 1}) {
      const bool pooled = me < pooled_ranks;
      auto allocate = [&](size_t bytes) {
        void* p = nullptr;
        const cudaError_t err =
            pooled ? cudaMallocAsync(&p, bytes, gpu.stream()) : cudaMalloc(&p, bytes);
        return err == cudaSuccess ? p : nullptr;
      };
      auto release = [&](void* p) { pooled ? cudaFreeAsync(p, gpu.stream()) : cudaFree(p); };
      for (size_t count : {size_t{1}, size_t{4099}, size_t{1} << 20}) {
        const size_t bytes = count * 4;
        std::vector<float> in(count);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 13) + me;
        void* send = allocate(bytes);
        void* recv = allocate(bytes);
        MP_ASSERT_TRUE(ctx, send != nullptr && recv != nullptr);
        MP_ASSERT_TRUE(ctx, cudaMemcpyAsync(send, in.data(), bytes, cudaMemcpyHostToDevice,
                                            gpu.stream()) == cudaSuccess);
        MP_ASSERT_OK(
            ctx, batonAllReduce(send, recv, count, batonFloat, batonSum, ctx.comm(), gpu.baton()));
        // In place on the result: every element times n.
        MP_ASSERT_OK(
            ctx, batonAllReduce(recv, recv, count, batonFloat, batonSum, ctx.comm(), gpu.baton()));
        std::vector<float> out(count);
        MP_ASSERT_TRUE(ctx, cudaMemcpyAsync(out.data(), recv, bytes, cudaMemcpyDeviceToHost,
                                            gpu.stream()) == cudaSuccess);
        MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
        for (size_t i = 0; i < count; ++i) {
          const float want = (static_cast<float>(i % 13) * n + rank_sum) * n;
          if (out[i] != want) {
            MP_ADD_FAILURE(ctx) << pooled_ranks << " pooled ranks, count " << count << " element "
                                << i << ": got " << out[i] << ", want " << want;
            break;
          }
        }
        release(send);
        release(recv);
      }
      // Allgather in place: this rank's block is its input.
      const size_t block = 1037;
      auto* gathered = static_cast<int32_t*>(allocate(block * n * 4));
      MP_ASSERT_TRUE(ctx, gathered != nullptr);
      std::vector<int32_t> mine(block);
      for (size_t i = 0; i < block; ++i) mine[i] = static_cast<int32_t>(me * 100000 + i);
      MP_ASSERT_TRUE(ctx, cudaMemcpyAsync(gathered + me * block, mine.data(), block * 4,
                                          cudaMemcpyHostToDevice, gpu.stream()) == cudaSuccess);
      MP_ASSERT_OK(ctx, batonAllGather(gathered + me * block, gathered, block, batonInt32,
                                       ctx.comm(), gpu.baton()));
      std::vector<int32_t> all(block * n);
      MP_ASSERT_TRUE(ctx, cudaMemcpyAsync(all.data(), gathered, all.size() * 4,
                                          cudaMemcpyDeviceToHost, gpu.stream()) == cudaSuccess);
      MP_ASSERT_TRUE(ctx, cudaStreamSynchronize(gpu.stream()) == cudaSuccess);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < block; ++i)
          MP_ASSERT_EQ(ctx, all[r * block + i], static_cast<int32_t>(r * 100000 + i));
      release(gathered);
    }
    batonResult_t async = batonSuccess;
    MP_EXPECT_OK(ctx, batonCommGetAsyncError(ctx.comm(), &async));
    MP_EXPECT_EQ(ctx, async, batonSuccess);
  });
}

}  // namespace
