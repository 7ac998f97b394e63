// Shared driver of the Baton perf binaries (all_reduce_perf, all_gather_perf, ...).
//
// The binaries reproduce NVIDIA nccl-tests: same flags, same size sweep, same timing and
// bandwidth formulas, same table, so results and scripts carry over between NCCL and Baton. The
// driver here owns everything that is common (argument parsing, communicator, buffers, the
// sweep, timing, data checking, printing); one small file per collective describes only what
// differs, by implementing `Collective` and calling `PerfMain` from its main():
//
//   class AllReduce : public baton_perf::Collective { ... };
//   int main(int argc, char** argv) { return baton_perf::PerfMain(argc, argv, AllReduce()); }
//
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "baton.h"

namespace baton_perf {

// -o mulsum: the driver's stand-in for a PreMulSum op, as nccl-tests uses ncclNumOps. Each call
// gets its own op from batonRedOpCreatePreMulSum with PreMulSumScalar(rank) in the call's
// datatype; DataPattern and CountWrong take this value to mean "sum of scalar * input".
inline constexpr batonRedOp_t kPreMulSum = static_cast<batonRedOp_t>(batonNumOps);

// nccl-tests' ncclVerifiablePremulScalar: 1 on even ranks, 2 on odd ones, exact in every type.
inline int PreMulSumScalar(int rank) {
  return rank % 2 == 0 ? 1 : 2;
}

// Element counts of one call for a given size, as nccl-tests' getCollByteCount gives them.
struct CollCounts {
  size_t send_count = 0;           // elements of input each rank provides
  size_t recv_count = 0;           // elements of output each rank checks
  size_t param_count = 0;          // the count argument of the Baton call
  size_t send_inplace_offset = 0;  // in place, the input is at recv + rank * this (elements)
  size_t recv_inplace_offset = 0;  // in place, the output is at recv + rank * this (elements)
};

// Deterministic test data. Input(rank, index) is a pseudo-random function of (seed, rank, index)
// whose values keep every reduction exact whatever the order the library reduces in:
//   sum, avg, min, max: small integers (negative ones too for signed and floating types), bounded
//                       so that the sum over all ranks fits the type's exact integer range
//                       (fp16: 2048, bf16: 256, int8: 127, ...);
//   mulsum:             as sum, with half the bound, as odd ranks' inputs are doubled;
//   prod:               1 or 2, with at most as many 2s per element as the type can multiply
//                       without overflow, so every product is an exact power of two.
// Integer avg rounds like C integer division, as Baton documents; floating avg is the only
// result that is not exact (the division rounds), so the check allows a relative error there.
class DataPattern {
 public:
  DataPattern(batonDataType_t type, batonRedOp_t op, int nranks, uint64_t seed);

  // buf[i] = Input(rank, first_index + i) for i < count.
  void FillInput(void* buf, size_t count, size_t first_index, int rank) const;
  // buf[i] = op over ranks 0..nranks-1 of Input(r, first_index + i) (avg: the sum / nranks),
  // computed with a plain loop, independently of Baton.
  void FillReduced(void* buf, size_t count, size_t first_index) const;

  batonDataType_t type() const { return type_; }
  batonRedOp_t op() const { return op_; }
  int nranks() const { return nranks_; }

 private:
  batonDataType_t type_;
  batonRedOp_t op_;
  int nranks_;
  uint64_t seed_;
};

// Bytes per element of `type` (0 for an invalid one).
size_t TypeSize(batonDataType_t type);

// Address of element `index` of a buffer of `type`: blocks of gathered or scattered data.
void* ElementAt(void* base, size_t index, batonDataType_t type);

// Each rank's share of `count` elements for the gathering and scattering collectives, as
// nccl-tests computes it: count / nranks rounded down to a multiple of 16 bytes, which nccl-tests
// does so that every rank's block starts aligned for vector loads. Baton needs no alignment, but
// the same rounding keeps the size and count columns identical to nccl-tests' for the same flags.
inline size_t RankShare(size_t count, size_t type_size, int nranks) {
  const size_t per_16_bytes = type_size >= 16 ? 1 : 16 / type_size;
  return count / static_cast<size_t>(nranks) / per_16_bytes * per_16_bytes;
}

// What InitData gets: where this rank's input goes and where the expected output goes.
struct InitArgs {
  const CollCounts& counts;
  const DataPattern& pattern;  // seeded for this run; pattern.op() is batonSum for "none"
  int rank;
  int nranks;
  int root;        // -1 for collectives without a root
  bool in_place;   // input lies inside the receive buffer (see CollCounts' offsets)
  void* input;     // send_count elements: the send buffer, or its in-place slot in recv
  void* expected;  // recv_count elements; the driver compares the output with it
};

// What Run gets: the arguments of the Baton call, in-place pointers already resolved.
struct RunArgs {
  const void* send;
  void* recv;
  size_t count;  // CollCounts::param_count
  batonDataType_t type;
  batonRedOp_t op;
  int root;
  batonComm_t comm;
  batonStream_t stream;
  int rank;  // for point-to-point collectives, which name their peers
  int nranks;
};

// One collective: everything that differs between the nccl-tests binaries.
class Collective {
 public:
  virtual ~Collective() = default;

  // Name for the JSON records, e.g. "AllReduce".
  virtual const char* Name() const = 0;
  // Reduction collectives sweep the -o ops; the others run once and print op "none".
  virtual bool UsesOp() const = 0;
  // Rooted collectives run every root for -r -1 and print it; the others print root -1.
  virtual bool UsesRoot() const = 0;
  // Counts for a size of `count` elements of `type_size` bytes (the -b/-e size divided by the
  // element size).
  virtual CollCounts GetCounts(size_t count, size_t type_size, int nranks) const = 0;
  // Bytes algbw is computed from (nccl-tests' getBw): by default param_count elements; the
  // gathering and scattering collectives count all ranks' shares.
  virtual double AlgBytes(const CollCounts& counts, size_t type_size, int nranks) const {
    (void)nranks;
    return static_cast<double>(counts.param_count) * static_cast<double>(type_size);
  }
  // busbw = algbw * factor: the fraction of the data that crosses the slowest link of an
  // optimal algorithm, which makes busbw comparable with the hardware's peak bandwidth.
  virtual double BusBwFactor(int nranks) const = 0;
  // Fills args.input (this rank's data) and args.expected, recv_count elements that every rank
  // compares its output with (a non-root of a reduce: its receive buffer as it was before the
  // call). The driver has zeroed the receive buffer before, so a rank that provides no input (a
  // non-root of a broadcast) can skip it.
  virtual void InitData(const InitArgs& args) const = 0;
  // Whether the in-place result is defined and checked. nccl-tests prints N/A for sendrecv in
  // place, where each rank sends from and receives into one buffer at the same time.
  virtual bool ChecksInPlace() const { return true; }
  // The Baton call itself.
  virtual batonResult_t Run(const RunArgs& args) const = 0;
};

// The library being measured: how ranks find each other, synchronise and exchange the driver's
// bookkeeping (times, error counts, host names). Baton's own binaries use the Baton backend that
// PerfMain(argc, argv, coll) creates; perf/peers implements it for Open MPI and Gloo, so that
// their tables come from the very same sweep, timing, check and printing code as Baton's.
// Every call returns batonSuccess or an error whose text ErrorDetail() gives.
class Backend {
 public:
  virtual ~Backend() = default;

  // What the first table line shows in parentheses, e.g. "baton 0.1.0" or "Open MPI v4.1.4".
  virtual std::string Description() const = 0;
  // Creates the communicator. `algo` is -A (empty when not given), `use_stream` is false for
  // -y 1 / -s null; backends without streams ignore it.
  virtual batonResult_t Init(const std::string& algo, bool use_stream) = 0;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  // Text explaining the last failure, for error messages.
  virtual std::string ErrorDetail() const = 0;
  // Error text left when the run ended (the footer's "# error:" line); empty when none.
  virtual std::string FinalError() const { return ""; }
  // Ends the job after a failure, so that peers blocked in a collective fail instead of hanging.
  virtual void Abort() = 0;
  // Frees the communicator at the end of the run. Called once, after the last collective.
  virtual batonResult_t Finalize() = 0;

  virtual batonResult_t Barrier() = 0;
  // Rank 0 gets every rank's `bytes` at all + rank * bytes; other ranks' `all` is not touched.
  virtual batonResult_t GatherToRank0(const void* mine, size_t bytes, void* all) = 0;
  // Every rank gets rank 0's `bytes` at buf.
  virtual batonResult_t BroadcastFromRank0(void* buf, size_t bytes) = 0;

  // -m: calls between GroupStart and GroupEnd may be fused; synchronous backends run them in
  // turn.
  virtual batonResult_t GroupStart() { return batonSuccess; }
  virtual batonResult_t GroupEnd() { return batonSuccess; }
  // Waits for the calls queued on the backend's stream; synchronous backends return at once.
  virtual batonResult_t Synchronize() { return batonSuccess; }
  // Baton's communicator and stream for Collective::Run; null for other libraries.
  virtual batonComm_t comm() const { return nullptr; }
  virtual batonStream_t stream() const { return nullptr; }

  // Whether successive iterations may use successive slices of the buffers (see the driver's
  // StartColl). Libraries that bind an algorithm object to its buffers (Gloo) say no, so that
  // every timed call reuses one object instead of building a new one per slice.
  virtual bool ShiftsBuffers() const { return true; }
  // Whether a peer may write into this rank's receive buffer before this rank's call starts.
  // Gloo's algorithm objects register the user's buffers with the transport once, so a fast
  // peer's first message can land before this rank has written its input; the driver then puts
  // a barrier between writing the check's data and the (untimed) checked call.
  virtual bool PeersWriteEarly() const { return false; }
  // Whether the library takes CUDA device buffers on a cudaStream_t (-B cuda).
  virtual bool SupportsDeviceBuffers() const { return false; }
  // Whether the library implements `type` and `op`; when not, the driver prints a comment line
  // with `why` and skips that combination instead of failing.
  virtual bool Supports(batonDataType_t type, batonRedOp_t op, std::string* why) const {
    (void)type;
    (void)op;
    (void)why;
    return true;
  }
};

// Name of a type as -d and the table spell it ("float", "half", ...).
const char* TypeName(batonDataType_t type);
// Name of a reduction op as -o and the table spell it ("sum", "prod", ...).
const char* OpName(batonRedOp_t op);

// Parses the nccl-tests flags, creates the communicator with batonCommInitFromEnv, runs the
// sweep and prints the table on rank 0. Returns the process exit status: 0 when every check
// passed, 1 on wrong results, a failed Baton call or bad arguments.
int PerfMain(int argc, char** argv, const Collective& coll);

// The same, measuring `backend` instead of Baton: `coll` calls the backend's library in Run.
int PerfMain(int argc, char** argv, const Collective& coll, Backend& backend);

}  // namespace baton_perf
