// The C API of growing a communicator (batonCommGetUniqueId, batonCommGrow),
// as NCCL 2.29's ncclCommGetUniqueId and ncclCommGrow. Argument checks
// here; the work in comm/grow.cc.
#include <baton.h>

#include <string>

#include "api/checks.h"
#include "api/creation.h"
#include "api/handles.h"
#include "comm/grow.h"
#include "cuda/cuda_device.h"
#include "launch/group.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

extern "C" {

batonResult_t batonCommGetUniqueId(batonComm_t comm, batonUniqueId* uniqueId) {
  const char* fn = "batonCommGetUniqueId";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, nullptr, &site), site.comm.get());
  Communicator* c = site.comm.get();
  if (uniqueId == nullptr) return Fail(fn, InvalidArgument("uniqueId is NULL"), c);
  BATON_API_CHECK(fn, c->MakeGrowId(uniqueId), c);
  return batonSuccess;
}

batonResult_t batonCommGrow(batonComm_t comm, int nRanks, const batonUniqueId* uniqueId, int rank,
                            batonComm_t* newcomm, batonConfig_t* config) {
  const char* fn = "batonCommGrow";
  if (newcomm == nullptr) return Fail(fn, InvalidArgument("newcomm is NULL"));
  *newcomm = nullptr;
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommGrow inside a group"));
  CreationOptions options;
  if (comm == nullptr) {
    // A joining rank: the id from an existing rank, its own place.
    if (uniqueId == nullptr)
      return Fail(
          fn, InvalidArgument("comm and uniqueId are both NULL: a joining rank passes the grow id "
                              "it got from an existing rank (batonCommGetUniqueId)"));
    if (nRanks < 2)
      return Fail(fn, InvalidArgument("nRanks " + std::to_string(nRanks) +
                                      ": a grown communicator has at least 2 ranks"));
    if (rank < 0 || rank >= nRanks)
      return Fail(
          fn, InvalidArgument("rank " + std::to_string(rank) + " of a joining rank is not in [0, " +
                              std::to_string(nRanks) + ")"));
    BATON_API_CHECK(fn, ReadConfig(config, &options), nullptr);
    UniqueIdData data;
    BATON_API_CHECK(fn, DecodeUniqueId(*uniqueId, &data), nullptr);
    const Settings settings = CreationSettings(options);
    const std::string name = options.name.value_or("");
    const batonUniqueId id = *uniqueId;
    return CreateComm(
        fn, options, rank, nRanks,
        [settings, nRanks, id, rank, name,
         gpu = CudaCurrentDevicePciBusId()](std::shared_ptr<Communicator>* out) {
          return JoinGrownCommunicator(settings, nRanks, id, rank, out, name, gpu);
        },
        newcomm);
  }
  // An existing rank: keeps its number; the coordinator passes the id.
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, nullptr, &site), site.comm.get());
  std::shared_ptr<Communicator> c = site.comm;
  if (rank != -1)
    return Fail(fn,
                InvalidArgument("rank " + std::to_string(rank) +
                                ": an existing rank passes -1 (it keeps its rank, " +
                                std::to_string(c->rank()) + ")"),
                c.get());
  if (nRanks <= c->nranks())
    return Fail(
        fn,
        InvalidArgument("nRanks " + std::to_string(nRanks) + " does not grow the communicator of " +
                        std::to_string(c->nranks()) + " ranks"),
        c.get());
  BATON_API_CHECK(fn, ReadConfig(config, &options), c.get());
  if (uniqueId != nullptr) {
    UniqueIdData data;
    BATON_API_CHECK(fn, DecodeUniqueId(*uniqueId, &data), c.get());
  }
  const Settings settings = CreationSettings(options, c->config().timeout_s);
  const std::string name = options.name.value_or(c->config().name);
  const bool has_id = uniqueId != nullptr;
  const batonUniqueId id = has_id ? *uniqueId : batonUniqueId{};
  return CreateComm(
      fn, options, c->rank(), nRanks,
      [c, settings, nRanks, has_id, id, name](std::shared_ptr<Communicator>* out) {
        return GrowCommunicator(*c, settings, nRanks, has_id ? &id : nullptr, out, name);
      },
      newcomm, c.get());
}

}  // extern "C"

#pragma GCC visibility pop
