#include "comm/grow.h"

#include <cstring>
#include <vector>

#include "bootstrap/rendezvous.h"

namespace baton {
namespace {

// What each existing rank brings to a grow; every rank gathers everyone's.
enum GrowRole : int32_t {
  kPassesNothing = 0,
  kCoordinator = 1,  // passes the id it made with batonCommGetUniqueId
  kPassesId = 2,     // passes an id it did not make (the coordinator's, it must be)
};
struct GrowWord {
  int32_t role;
  int32_t nranks;
  batonUniqueId id;
};
static_assert(sizeof(GrowWord) == 8 + sizeof(batonUniqueId));

bool SameId(const batonUniqueId& a, const batonUniqueId& b) {
  return memcmp(a.internal, b.internal, sizeof(a.internal)) == 0;
}

// The checks every rank makes on the gathered words, alike: the same
// verdict, and the same words, everywhere.
Status AgreeOnGrow(const std::vector<GrowWord>& all, int* coordinator) {
  const int n = static_cast<int>(all.size());
  *coordinator = -1;
  int stray = -1;  // a rank passing an id although nobody made one
  for (int r = 0; r < n; ++r) {
    if (all[r].nranks != all[0].nranks)
      return InvalidUsage("rank 0 asks for " + std::to_string(all[0].nranks) + " ranks and rank " +
                          std::to_string(r) + " for " + std::to_string(all[r].nranks) +
                          ": every rank must pass the same nRanks");
    if (all[r].role == kCoordinator) {
      if (*coordinator >= 0)
        return InvalidUsage("ranks " + std::to_string(*coordinator) + " and " + std::to_string(r) +
                            " both pass a grow id of their own: one rank makes it "
                            "(batonCommGetUniqueId), the others pass NULL");
      *coordinator = r;
    } else if (all[r].role == kPassesId && stray < 0) {
      stray = r;
    }
  }
  if (*coordinator < 0) {
    std::string why =
        "no rank passes the grow id made by batonCommGetUniqueId on this "
        "communicator (the rank that made it passes it, the others NULL)";
    if (stray >= 0)
      why += "; rank " + std::to_string(stray) +
             " passes an id that no rank made here, or one a grow used already";
    return InvalidUsage(why);
  }
  for (int r = 0; r < n; ++r)
    if (all[r].role == kPassesId && !SameId(all[r].id, all[*coordinator].id))
      return InvalidUsage("rank " + std::to_string(r) + " passes another grow id than rank " +
                          std::to_string(*coordinator) +
                          ", which made it (the others may pass NULL)");
  return Status::Ok();
}

}  // namespace

Status Communicator::MakeGrowId(batonUniqueId* out) {
  std::lock_guard<std::mutex> lock(grow_mu_);
  if (grow_id_pending_)
    return InvalidUsage(
        "this communicator's previous grow id is not used yet (one at a "
        "time: batonCommGrow takes it)");
  // The id's rendezvous waits as long as this communicator waits for
  // anything: the joining ranks must come within it.
  BATON_RETURN_IF_ERROR(CreateUniqueId(config_.socket_ifname, config_.timeout_s, &grow_id_));
  grow_id_pending_ = true;
  *out = grow_id_;
  return Status::Ok();
}

bool Communicator::TakeGrowId(const batonUniqueId& id) {
  std::lock_guard<std::mutex> lock(grow_mu_);
  if (!grow_id_pending_ || !SameId(id, grow_id_)) return false;
  grow_id_pending_ = false;
  return true;
}

Status GrowCommunicator(Communicator& parent, const Settings& settings, int nranks,
                        const batonUniqueId* id, std::shared_ptr<Communicator>* out,
                        const std::string& name) {
  out->reset();
  GrowWord mine{};
  mine.nranks = nranks;
  if (id != nullptr) {
    mine.role = parent.TakeGrowId(*id) ? kCoordinator : kPassesId;
    mine.id = *id;
  }
  std::vector<GrowWord> all(parent.nranks());
  BATON_RETURN_IF_ERROR(parent.AllGatherBytes(&mine, sizeof(GrowWord), all.data())
                            .WithContext("exchanging the grow's arguments"));
  int coordinator = -1;
  BATON_RETURN_IF_ERROR(AgreeOnGrow(all, &coordinator));
  UniqueIdData data;
  BATON_RETURN_IF_ERROR(DecodeUniqueId(all[coordinator].id, &data));
  return Communicator::Create(settings, data, nranks, parent.rank(), out, name,
                              parent.config().transport.rdma.gpu_pci)
      .WithContext("rank " + std::to_string(parent.rank()) + " of " + std::to_string(nranks));
}

Status JoinGrownCommunicator(const Settings& settings, int nranks, const batonUniqueId& id,
                             int rank, std::shared_ptr<Communicator>* out, const std::string& name,
                             const std::string& gpu_pci) {
  out->reset();
  UniqueIdData data;
  BATON_RETURN_IF_ERROR(DecodeUniqueId(id, &data));
  return Communicator::Create(settings, data, nranks, rank, out, name, gpu_pci)
      .WithContext("joining rank " + std::to_string(rank) + " of " + std::to_string(nranks));
}

}  // namespace baton
