// The CUDA backend against the CPU backend, operation by operation (meson test
// trainer_cuda_backend; built only with CUDA). Needs a GPU: without one it prints the reason and
// exits 77, which meson reports as skipped.
//
// The element-wise operations share elementwise.h and round every step on the device too, so
// they must match the CPU bit for bit; the matrix products (cuBLAS vs OpenBLAS) and the softmax
// (CUDA's double exp/log vs glibc's) are compared with tolerances. A one-rank communicator then
// checks Baton's allreduce on the backend's stream, fp32 and fp16.
#include <baton.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "elementwise.h"
#include "util.h"

namespace {

using trainer::Backend;
using trainer::Buffer;
using trainer::Rng;

int failures = 0;
int checks = 0;

void Check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) ++failures;
  std::printf("%s - %s\n", ok ? "ok" : "FAIL", what.c_str());
}

std::vector<float> RandomFloats(Rng& rng, size_t n, double spread) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(spread * rng.Normal());
  // Zeros and negative zeros exercise ReLU's comparisons.
  for (size_t i = 0; i < n; i += 13) v[i] = (i / 13) % 2 == 0 ? 0.0f : -0.0f;
  return v;
}

// A vector in a backend's memory.
struct Dev {
  Buffer buf;
  Dev(Backend& b, const std::vector<float>& host) : buf(b.Allocate(host.size())) {
    b.Upload(buf.data(), host.data(), host.size());
  }
  std::vector<float> get(Backend& b) {
    std::vector<float> host(buf.size());
    b.Synchronize();
    b.Download(host.data(), buf.data(), host.size());
    return host;
  }
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool Close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(static_cast<double>(a[i]) - b[i]) > abs + rel * std::fabs(b[i])) return false;
  }
  return true;
}

void CompareBackends(Backend& cpu, Backend& gpu) {
  Rng rng(99);
  Check(gpu.device_memory() && gpu.comm_stream() != nullptr, "device memory and a stream");
  {
    Buffer z = gpu.Allocate(1000);
    std::vector<float> host(1000, 1.0f);
    gpu.Download(host.data(), z.data(), host.size());
    Check(SameBits(host, std::vector<float>(1000, 0.0f)), "allocate gives zeros");
  }
  const int rows = 64;
  const int cols = 300;
  const size_t n = static_cast<size_t>(rows) * cols;
  for (bool relu : {false, true}) {
    std::vector<float> y = RandomFloats(rng, n, 2.0);
    std::vector<float> bias = RandomFloats(rng, cols, 1.0);
    Dev cy(cpu, y), cb(cpu, bias), gy(gpu, y), gb(gpu, bias);
    cpu.AddBias(cy.buf.data(), cb.buf.data(), rows, cols, relu);
    gpu.AddBias(gy.buf.data(), gb.buf.data(), rows, cols, relu);
    Check(SameBits(gy.get(gpu), cy.get(cpu)), std::string("AddBias") + (relu ? " + relu" : ""));
  }
  {
    std::vector<float> m = RandomFloats(rng, n, 1.0);
    Dev cm(cpu, m), gm(gpu, m), co(cpu, std::vector<float>(cols)),
        go(gpu, std::vector<float>(cols));
    cpu.ColumnSums(cm.buf.data(), rows, cols, co.buf.data());
    gpu.ColumnSums(gm.buf.data(), rows, cols, go.buf.data());
    Check(SameBits(go.get(gpu), co.get(cpu)), "ColumnSums (same order of additions)");
  }
  {
    std::vector<float> d = RandomFloats(rng, n, 1.0);
    std::vector<float> act = RandomFloats(rng, n, 1.0);
    Dev cd(cpu, d), ca(cpu, act), gd(gpu, d), ga(gpu, act);
    cpu.ReluBackward(cd.buf.data(), ca.buf.data(), n);
    gpu.ReluBackward(gd.buf.data(), ga.buf.data(), n);
    Check(SameBits(gd.get(gpu), cd.get(cpu)), "ReluBackward");
  }
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int m = 37, nn = 53, k = 129;
      std::vector<float> a = RandomFloats(rng, static_cast<size_t>(m) * k, 1.0);
      std::vector<float> b = RandomFloats(rng, static_cast<size_t>(k) * nn, 1.0);
      std::vector<float> c = RandomFloats(rng, static_cast<size_t>(m) * nn, 1.0);
      Dev ca(cpu, a), cb(cpu, b), cc(cpu, c), ga(gpu, a), gb(gpu, b), gc(gpu, c);
      cpu.Gemm(ta, tb, m, nn, k, 0.75f, ca.buf.data(), cb.buf.data(), 0.5f, cc.buf.data());
      gpu.Gemm(ta, tb, m, nn, k, 0.75f, ga.buf.data(), gb.buf.data(), 0.5f, gc.buf.data());
      Check(Close(gc.get(gpu), cc.get(cpu), 1e-4, 1e-4),
            "gemm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
    }
  }
  for (int batch : {1, 64, 500}) {
    const int classes = 10;
    std::vector<float> logits = RandomFloats(rng, static_cast<size_t>(batch) * classes, 4.0);
    std::vector<uint8_t> labels(static_cast<size_t>(batch));
    for (auto& l : labels) l = static_cast<uint8_t>(rng.Below(classes));
    Dev cl(cpu, logits), gl(gpu, logits);
    Dev cd(cpu, std::vector<float>(logits.size())), gd(gpu, std::vector<float>(logits.size()));
    trainer::BatchStats cs =
        cpu.SoftmaxCrossEntropy(cl.buf.data(), labels.data(), batch, classes, cd.buf.data());
    trainer::BatchStats gs =
        gpu.SoftmaxCrossEntropy(gl.buf.data(), labels.data(), batch, classes, gd.buf.data());
    Check(std::fabs(gs.loss_sum - cs.loss_sum) <= 1e-9 * std::fabs(cs.loss_sum) + 1e-12 &&
              gs.correct == cs.correct && gs.samples == cs.samples,
          "SoftmaxCrossEntropy loss and correct count, batch " + std::to_string(batch));
    Check(Close(gd.get(gpu), cd.get(cpu), 1e-6, 1e-9),
          "SoftmaxCrossEntropy gradient, batch " + std::to_string(batch));
  }
  {
    std::vector<float> w = RandomFloats(rng, n, 0.5), v = RandomFloats(rng, n, 0.1),
                       g = RandomFloats(rng, n, 0.1);
    Dev cw(cpu, w), cv(cpu, v), cg(cpu, g), gw(gpu, w), gv(gpu, v), gg(gpu, g);
    for (int step = 0; step < 3; ++step) {
      cpu.SgdStep(cw.buf.data(), cv.buf.data(), cg.buf.data(), n, 0.1f, 0.9f, 1e-4f);
      gpu.SgdStep(gw.buf.data(), gv.buf.data(), gg.buf.data(), n, 0.1f, 0.9f, 1e-4f);
    }
    Check(SameBits(gw.get(gpu), cw.get(cpu)) && SameBits(gv.get(gpu), cv.get(cpu)), "SgdStep");
    cpu.EmaUpdate(cv.buf.data(), cw.buf.data(), n, 0.99f);
    gpu.EmaUpdate(gv.buf.data(), gw.buf.data(), n, 0.99f);
    Check(SameBits(gv.get(gpu), cv.get(cpu)), "EmaUpdate");
    cpu.Scale(cw.buf.data(), n, 1.0f / 3.0f);
    gpu.Scale(gw.buf.data(), n, 1.0f / 3.0f);
    cpu.Add(cw.buf.data(), cg.buf.data(), n);
    gpu.Add(gw.buf.data(), gg.buf.data(), n);
    Check(SameBits(gw.get(gpu), cw.get(cpu)), "scale and add");
    cpu.Copy(cv.buf.data(), cw.buf.data(), n);
    gpu.Copy(gv.buf.data(), gw.buf.data(), n);
    Check(SameBits(gv.get(gpu), cv.get(cpu)), "copy");
  }
  {
    std::vector<float> x = RandomFloats(rng, n, 1e3);
    x[1] = 1e-7f;     // a subnormal half
    x[2] = 1e6f;      // overflows to infinity
    x[3] = 65520.0f;  // the tie that rounds to infinity
    Dev cx(cpu, x), gx(gpu, x);
    Buffer ch = cpu.Allocate((n + 1) / 2), gh = gpu.Allocate((n + 1) / 2);
    cpu.ToHalf(reinterpret_cast<uint16_t*>(ch.data()), cx.buf.data(), n);
    gpu.ToHalf(reinterpret_cast<uint16_t*>(gh.data()), gx.buf.data(), n);
    cpu.FromHalf(cx.buf.data(), reinterpret_cast<uint16_t*>(ch.data()), n);
    gpu.FromHalf(gx.buf.data(), reinterpret_cast<uint16_t*>(gh.data()), n);
    Check(SameBits(gx.get(gpu), cx.get(cpu)), "ToHalf and FromHalf");
  }
  {
    // Nothing on the communication stream: the compute stream waits for nothing.
    Buffer big = gpu.Allocate(1 << 20);
    gpu.Scale(big.data(), big.size(), 2.0f);
    gpu.CommAfterCompute();
    gpu.ComputeAfterComm();
    double s = gpu.CommSeconds(true);
    Check(s >= 0 && s < 60 && gpu.CommSeconds(true) == 0, "stream timers");
  }
}

// Baton's allreduce on device buffers on the backend's communication stream, ordered with its
// math by CommAfterCompute/ComputeAfterComm, in a one-rank communicator: the average of one rank
// is the input (fp32, and fp16 through the conversion kernels). The multi-rank path is
// tests/trainer_test.sh's --device cuda run.
void CheckStreamAllreduce(Backend& gpu) {
  batonUniqueId id;
  batonComm_t comm = nullptr;
  if (batonGetUniqueId(&id) != batonSuccess || batonCommInitRank(&comm, 1, id, 0) != batonSuccess) {
    Check(false, std::string("one-rank communicator: ") + batonGetLastError(nullptr));
    return;
  }
  Rng rng(5);
  const size_t n = 100000;
  std::vector<float> x = RandomFloats(rng, n, 1.0);
  Dev g(gpu, x);
  auto stream = static_cast<batonStream_t>(gpu.comm_stream());
  gpu.Scale(g.buf.data(), n, 2.0f);  // queued before the allreduce, which must see it
  gpu.CommAfterCompute();
  batonResult_t r =
      batonAllReduce(g.buf.data(), g.buf.data(), n, batonFloat, batonAvg, comm, stream);
  gpu.ComputeAfterComm();
  gpu.Scale(g.buf.data(), n, 0.5f);  // and after it
  std::vector<float> got = g.get(gpu);
  Check(r == batonSuccess && SameBits(got, x),
        std::string("allreduce on the backend's stream: ") + batonGetLastError(comm));
  Buffer half = gpu.Allocate((n + 1) / 2);
  auto* h = reinterpret_cast<uint16_t*>(half.data());
  gpu.ToHalf(h, g.buf.data(), n);
  gpu.CommAfterCompute();
  r = batonAllReduce(h, h, n, batonHalf, batonAvg, comm, stream);
  gpu.ComputeAfterComm();
  gpu.FromHalf(g.buf.data(), h, n);
  got = g.get(gpu);
  bool ok = r == batonSuccess;
  for (size_t i = 0; i < n && ok; ++i) {
    ok = got[i] == trainer::HalfToFloat(trainer::FloatToHalf(x[i]));
  }
  Check(ok, std::string("fp16 allreduce on the backend's stream: ") + batonGetLastError(comm));
  batonCommDestroy(comm);
}

}  // namespace

int main() {
  std::unique_ptr<Backend> gpu;
  try {
    gpu = trainer::MakeCudaBackend(0);
  } catch (const trainer::TrainError& e) {
    if (std::strstr(e.what(), "no CUDA device") != nullptr) {
      std::printf("SKIP: %s\n", e.what());
      return 77;
    }
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", gpu->name().c_str());
  std::unique_ptr<Backend> cpu = trainer::MakeCpuBackend(1);
  try {
    CompareBackends(*cpu, *gpu);
    CheckStreamAllreduce(*gpu);
  } catch (const trainer::TrainError& e) {
    Check(false, std::string("error: ") + e.what());
  }
  std::printf("%d of %d checks passed\n", checks - failures, checks);
  return failures == 0 ? 0 : 1;
}
