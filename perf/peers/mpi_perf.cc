// mpi_<collective>_perf: the Baton perf sweep (nccl-tests table, flags and check) run on MPI.
//
// Built four times, with PEER_COLLECTIVE set to all_reduce, broadcast, all_gather and
// reduce_scatter. Start it like any MPI program: mpirun -np 4 mpi_all_reduce_perf -b 8 -e 64M.
// MPI_Allreduce, MPI_Bcast, MPI_Allgather and MPI_Reduce_scatter_block are called with
// MPI_IN_PLACE where nccl-tests' layout allows; Open MPI picks its algorithm (coll tuned), which
// -A does not change: use --mca coll_tuned_use_dynamic_rules 1 --mca
// coll_tuned_allreduce_algorithm N instead.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "peer_collectives.h"

namespace {

// MPI_COMM_WORLD as a perf backend. Errors return instead of aborting (MPI_ERRORS_RETURN), so
// that the driver prints which call failed before it aborts the job.
class MpiLibrary : public baton_perf::PeerLibrary {
 public:
  std::string Description() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, static_cast<size_t>(length));
    text = text.substr(0, text.find_first_of(",\n"));  // "Open MPI v4.1.4"
    return text + ") nccl-headers=0 nccl-library=0";
  }

  batonResult_t Init(const std::string& algo, bool /*use_stream*/) override {
    if (!algo.empty()) {
      detail_ = "-A " + algo +
                ": the MPI peers use the MPI library's own choice; set it with "
                "--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_<coll>_algorithm N";
      return batonInvalidArgument;
    }
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init(nullptr, nullptr) != MPI_SUCCESS) {
      detail_ = "MPI_Init failed";
      return batonSystemError;
    }
    initialized_ = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    return batonSuccess;
  }

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string ErrorDetail() const override { return detail_; }
  void Abort() override {
    if (initialized_) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  batonResult_t Finalize() override {
    if (!initialized_) return batonSuccess;
    initialized_ = false;
    return Status(MPI_Finalize(), "MPI_Finalize");
  }

  batonResult_t Barrier() override { return Status(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  batonResult_t GatherToRank0(const void* mine, size_t bytes, void* all) override {
    return Status(MPI_Gather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                             MPI_BYTE, 0, MPI_COMM_WORLD),
                  "MPI_Gather");
  }
  batonResult_t BroadcastFromRank0(void* buf, size_t bytes) override {
    return Status(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD),
                  "MPI_Bcast");
  }

  bool Supports(batonDataType_t type, batonRedOp_t op, std::string* why) const override {
    if (Type(type) == MPI_DATATYPE_NULL) {
      *why = std::string("MPI has no ") + baton_perf::TypeName(type) + " type";
      return false;
    }
    if (Op(op) == MPI_OP_NULL) {
      *why = std::string("MPI has no ") + baton_perf::OpName(op) + " reduction";
      return false;
    }
    return true;
  }

  batonResult_t AllReduce(const baton_perf::PeerCall& c) override {
    if (!FitsInt(c.count)) return TooLarge(c.count);
    return Status(MPI_Allreduce(c.in_place ? MPI_IN_PLACE : c.send, c.recv,
                                static_cast<int>(c.count), Type(c.type), Op(c.op), MPI_COMM_WORLD),
                  "MPI_Allreduce");
  }

  batonResult_t Broadcast(const baton_perf::PeerCall& c) override {
    if (!FitsInt(c.count)) return TooLarge(c.count);
    // MPI broadcasts in one buffer: out of place, the root first copies its input there.
    if (!c.in_place && rank_ == c.root) {
      std::memcpy(c.recv, c.send, c.count * baton_perf::TypeSize(c.type));
    }
    return Status(
        MPI_Bcast(c.recv, static_cast<int>(c.count), Type(c.type), c.root, MPI_COMM_WORLD),
        "MPI_Bcast");
  }

  batonResult_t AllGather(const baton_perf::PeerCall& c) override {
    if (!FitsInt(c.count)) return TooLarge(c.count);
    // In place, MPI takes each rank's input from its block of recv: nccl-tests' layout.
    const int n = static_cast<int>(c.count);
    return Status(MPI_Allgather(c.in_place ? MPI_IN_PLACE : c.send, n, Type(c.type), c.recv, n,
                                Type(c.type), MPI_COMM_WORLD),
                  "MPI_Allgather");
  }

  batonResult_t ReduceScatter(const baton_perf::PeerCall& c) override {
    if (!FitsInt(c.count)) return TooLarge(c.count);
    const int n = static_cast<int>(c.count);
    if (!c.in_place) {
      return Status(
          MPI_Reduce_scatter_block(c.send, c.recv, n, Type(c.type), Op(c.op), MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
    }
    // MPI's in-place result lands at the start of the buffer, nccl-tests expects it at the
    // rank's own block: one extra copy of the rank's share.
    void* base = const_cast<void*>(c.send);
    const batonResult_t r = Status(
        MPI_Reduce_scatter_block(MPI_IN_PLACE, base, n, Type(c.type), Op(c.op), MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block");
    if (r == batonSuccess && c.recv != base) {
      std::memcpy(c.recv, base, c.count * baton_perf::TypeSize(c.type));
    }
    return r;
  }

 private:
  static MPI_Datatype Type(batonDataType_t type) {
    switch (type) {
      case batonInt8:
        return MPI_INT8_T;
      case batonUint8:
        return MPI_UINT8_T;
      case batonInt32:
        return MPI_INT32_T;
      case batonUint32:
        return MPI_UINT32_T;
      case batonInt64:
        return MPI_INT64_T;
      case batonUint64:
        return MPI_UINT64_T;
      case batonFloat32:
        return MPI_FLOAT;
      case batonFloat64:
        return MPI_DOUBLE;
      default:
        return MPI_DATATYPE_NULL;  // half and bfloat16: not in MPI 3.1
    }
  }

  static MPI_Op Op(batonRedOp_t op) {
    switch (op) {
      case batonSum:
        return MPI_SUM;
      case batonProd:
        return MPI_PROD;
      case batonMax:
        return MPI_MAX;
      case batonMin:
        return MPI_MIN;
      default:
        return MPI_OP_NULL;  // avg, mulsum
    }
  }

  static bool FitsInt(size_t count) { return count <= static_cast<size_t>(INT32_MAX); }
  batonResult_t TooLarge(size_t count) {
    detail_ = "count " + std::to_string(count) + " does not fit MPI's int count";
    return batonInvalidArgument;
  }

  batonResult_t Status(int mpi_result, const char* what) {
    if (mpi_result == MPI_SUCCESS) return batonSuccess;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(mpi_result, text, &length);
    detail_ = std::string(what) + ": " + text;
    return batonSystemError;
  }

  bool initialized_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::string detail_;
};

}  // namespace

int main(int argc, char** argv) {
  MpiLibrary mpi;
  return baton_perf::PeerMain(argc, argv, PEER_COLLECTIVE, mpi);
}
