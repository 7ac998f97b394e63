// oneccl_<collective>_perf: the Baton perf sweep (nccl-tests table, flags and check) run on Intel
// oneCCL, on host buffers (no SYCL queue: oneCCL's CPU path).
//
// Built four times, with PEER_COLLECTIVE set to all_reduce, broadcast, all_gather and
// reduce_scatter: ccl::allreduce, ccl::broadcast (in place; out of place the root first copies
// its input into the output, as for MPI), ccl::allgather and ccl::reduce_scatter, each waited
// on at once (the calls are asynchronous; MPI's are not).
//
// Environment:
//   rank and size   BATON_RANK/BATON_WORLD_SIZE (batonrun), PMI_RANK/PMI_SIZE (mpiexec),
//                   OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/SLURM_NTASKS or RANK/WORLD_SIZE
//   CCL_PERF_STORE  a directory all ranks see, for the rendezvous: rank 0 creates oneCCL's main
//                   KVS and writes its address there, the others read it; defaults to
//                   /tmp/oneccl-perf-<id> under single-host batonrun
//   BATON_TIMEOUT   seconds the other ranks wait for that address (default 300)
//   CCL_ATL_TRANSPORT=ofi CCL_ATL_SHM=1   oneCCL's shared-memory transport (perf/compare.py sets
//                   them; oneCCL's default, MPI, is TCP through Intel MPI's ofi provider)
//
// SPDX-License-Identifier: BSD-3-Clause
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <oneapi/ccl.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "peer_collectives.h"

namespace {

class OnecclLibrary : public baton_perf::PeerLibrary {
 public:
  std::string Description() const override {
    return std::string("oneCCL ") + version_ + ") nccl-headers=0 nccl-library=0";
  }

  batonResult_t Init(const std::string& algo, bool /*use_stream*/) override {
    if (!algo.empty()) {
      detail_ = "-A " + algo +
                ": oneCCL picks its own algorithm; set it with CCL_ALLREDUCE=<algo> (oneCCL's "
                "environment)";
      return batonInvalidArgument;
    }
    baton_perf::PeerJob job;
    if (const batonResult_t r = baton_perf::PeerJobFromEnv("CCL_PERF_STORE", "oneccl-perf",
                                                           "the KVS rendezvous", &job, &detail_);
        r != batonSuccess)
      return r;
    rank_ = job.rank;
    size_ = job.size;
    store_path_ = job.store_path;
    remove_store_ = job.owns_store;
    int timeout_s = 300;
    if (const char* t = std::getenv("BATON_TIMEOUT"); t && std::atoi(t) > 0)
      timeout_s = std::atoi(t);

    return Guard("init", [&] {
      ccl::init();
      version_ = ccl::get_library_version().full;
      const std::string address_file = store_path_ + "/kvs-address";
      std::shared_ptr<ccl::kvs> kvs;
      if (rank_ == 0) {
        kvs = ccl::create_main_kvs();
        const ccl::kvs::address_type address = kvs->get_address();
        // Written whole under another name, then renamed: readers never see half of it.
        const std::string tmp = address_file + ".tmp";
        std::ofstream(tmp, std::ios::binary).write(address.data(), address.size());
        std::filesystem::rename(tmp, address_file);
      } else {
        ccl::kvs::address_type address{};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
        for (;;) {
          std::ifstream in(address_file, std::ios::binary);
          if (in.read(address.data(), address.size())) break;
          if (std::chrono::steady_clock::now() > deadline) {
            throw std::runtime_error("no KVS address from rank 0 in " + address_file + " after " +
                                     std::to_string(timeout_s) + " s");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kvs = ccl::create_kvs(address);
      }
      comm_.emplace(ccl::create_communicator(size_, rank_, kvs));
      kvs_ = std::move(kvs);
    });
  }

  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  std::string ErrorDetail() const override { return detail_; }
  // oneCCL has no abort: exiting closes this rank's connections (batonrun or mpiexec then ends
  // the job).
  void Abort() override {}
  batonResult_t Finalize() override {
    if (!comm_) return batonSuccess;
    batonResult_t result = Barrier();
    if (result == batonSuccess && remove_store_ && rank_ == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(store_path_, ignored);
    }
    comm_.reset();
    kvs_.reset();
    return result;
  }

  batonResult_t Barrier() override {
    return Guard("barrier", [&] { ccl::barrier(*comm_); });
  }
  batonResult_t GatherToRank0(const void* mine, size_t bytes, void* all) override {
    // An allgather: every rank gets everything, the driver reads rank 0's copy only.
    std::vector<char> everything(bytes * static_cast<size_t>(size_));
    const batonResult_t r = Guard("gather", [&] {
      ccl::allgather(mine, everything.data(), bytes, ccl::datatype::uint8, *comm_).wait();
    });
    if (r == batonSuccess && rank_ == 0) std::memcpy(all, everything.data(), everything.size());
    return r;
  }
  batonResult_t BroadcastFromRank0(void* buf, size_t bytes) override {
    return Guard("broadcast",
                 [&] { ccl::broadcast(buf, bytes, ccl::datatype::uint8, 0, *comm_).wait(); });
  }

  bool Supports(batonDataType_t type, batonRedOp_t op, std::string* why) const override {
    if (!Type(type)) {
      *why = std::string("this oneCCL peer does not build ") + baton_perf::TypeName(type);
      return false;
    }
    if (!Op(op)) {
      *why = std::string("oneCCL has no ") + baton_perf::OpName(op) + " reduction here";
      return false;
    }
    return true;
  }

  batonResult_t AllReduce(const baton_perf::PeerCall& c) override {
    return Guard("allreduce", [&] {
      ccl::allreduce(c.send, c.recv, c.count, *Type(c.type), *Op(c.op), *comm_).wait();
    });
  }

  batonResult_t Broadcast(const baton_perf::PeerCall& c) override {
    if (!c.in_place && rank_ == c.root) {
      std::memcpy(c.recv, c.send, c.count * baton_perf::TypeSize(c.type));
    }
    return Guard("broadcast",
                 [&] { ccl::broadcast(c.recv, c.count, *Type(c.type), c.root, *comm_).wait(); });
  }

  batonResult_t AllGather(const baton_perf::PeerCall& c) override {
    return Guard("allgather",
                 [&] { ccl::allgather(c.send, c.recv, c.count, *Type(c.type), *comm_).wait(); });
  }

  batonResult_t ReduceScatter(const baton_perf::PeerCall& c) override {
    return Guard("reduce_scatter", [&] {
      ccl::reduce_scatter(c.send, c.recv, c.count, *Type(c.type), *Op(c.op), *comm_).wait();
    });
  }

 private:
  static std::optional<ccl::datatype> Type(batonDataType_t type) {
    switch (type) {
      case batonInt8:
        return ccl::datatype::int8;
      case batonUint8:
        return ccl::datatype::uint8;
      case batonInt32:
        return ccl::datatype::int32;
      case batonUint32:
        return ccl::datatype::uint32;
      case batonInt64:
        return ccl::datatype::int64;
      case batonUint64:
        return ccl::datatype::uint64;
      case batonFloat32:
        return ccl::datatype::float32;
      case batonFloat64:
        return ccl::datatype::float64;
      default:
        return std::nullopt;  // half, bfloat16, fp8: left out (the driver's check is exact)
    }
  }

  static std::optional<ccl::reduction> Op(batonRedOp_t op) {
    switch (op) {
      case batonSum:
        return ccl::reduction::sum;
      case batonProd:
        return ccl::reduction::prod;
      case batonMax:
        return ccl::reduction::max;
      case batonMin:
        return ccl::reduction::min;
      default:
        return std::nullopt;  // avg and mulsum: left out
    }
  }

  // Runs `body`, turning oneCCL's exceptions into an error with `what` and the message.
  template <typename Body>
  batonResult_t Guard(const char* what, Body&& body) {
    try {
      body();
      return batonSuccess;
    } catch (const std::exception& e) {
      detail_ = std::string("oneCCL ") + what + ": " + e.what();
      return batonSystemError;
    }
  }

  int rank_ = 0;
  int size_ = 1;
  std::string version_ = "?";
  std::string store_path_;
  bool remove_store_ = false;  // the store directory is ours (made from batonrun's id)
  std::shared_ptr<ccl::kvs> kvs_;
  std::optional<ccl::communicator> comm_;
  std::string detail_;
};

}  // namespace

int main(int argc, char** argv) {
  OnecclLibrary ccl_library;
  return baton_perf::PeerMain(argc, argv, PEER_COLLECTIVE, ccl_library);
}
