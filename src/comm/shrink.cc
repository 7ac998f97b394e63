#include "comm/shrink.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "bootstrap/rendezvous.h"
#include "transport/channel_set.h"

namespace baton {
namespace {

// FNV-1a over the sorted list: equal lists, equal fingerprints.
uint64_t ListFingerprint(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r : ranks)
    for (int i = 0; i < 4; ++i)
      h = (h ^ ((static_cast<uint32_t>(r) >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h ^ ranks.size();
}

}  // namespace

Status ShrinkCommunicator(Communicator& parent, const Settings& settings,
                          const std::vector<int>& excluded, bool abort_first,
                          std::shared_ptr<Communicator>* out, const std::string& name) {
  out->reset();
  const int n = parent.nranks(), me = parent.rank();
  std::vector<char> left_out(n, 0);
  for (int r : excluded) {
    if (r < 0 || r >= n)
      return InvalidArgument("excludeRanksList holds rank " + std::to_string(r) +
                             ", not a rank of the communicator (0 to " + std::to_string(n - 1) +
                             ")");
    if (left_out[r])
      return InvalidArgument("excludeRanksList names rank " + std::to_string(r) + " twice");
    left_out[r] = 1;
  }
  if (left_out[me])
    return InvalidUsage("rank " + std::to_string(me) +
                        " is in excludeRanksList: only the ranks that stay call batonCommShrink");
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (!left_out[r]) survivors.push_back(r);
  const int leader = survivors.front();
  const auto new_rank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), me) - survivors.begin());
  const int new_size = static_cast<int>(survivors.size());
  if (abort_first)
    parent.Abort("rank " + std::to_string(me) + " shrinks the communicator (BATON_SHRINK_ABORT)");

  const double timeout_s = TimeoutSeconds(settings);
  ShrinkOffer offer;
  offer.excluded_fingerprint = ListFingerprint(excluded);
  offer.survivors = static_cast<uint32_t>(new_size);
  batonUniqueId id;
  if (me == leader) {
    BATON_RETURN_IF_ERROR(CreateUniqueId(settings.socket_ifname, timeout_s, &id));
    static_assert(sizeof(offer.unique_id) == sizeof(id.internal));
    memcpy(offer.unique_id, id.internal, sizeof(offer.unique_id));
    for (int r : survivors) {
      if (r == me) continue;
      // Connected on first use, the leader may have no control socket to r.
      BATON_RETURN_IF_ERROR(
          parent.channels()->Connect({r}, DeadlineIn(timeout_s)).WithContext("batonCommShrink"));
      parent.channels()->SendShrinkOffer(r, offer);
    }
  } else {
    ShrinkOffer got;
    if (!parent.channels()->WaitShrinkOffer(leader, DeadlineIn(timeout_s), &got))
      return TimeoutError("batonCommShrink: no word from rank " + std::to_string(leader) +
                          ", the lowest rank that stays, within BATON_TIMEOUT: every rank that "
                          "stays must call batonCommShrink with the same excludeRanksList");
    if (got.excluded_fingerprint != offer.excluded_fingerprint || got.survivors != offer.survivors)
      return InvalidUsage("batonCommShrink: rank " + std::to_string(leader) +
                          " passed another excludeRanksList than rank " + std::to_string(me) +
                          " (it keeps " + std::to_string(got.survivors) + " ranks, this rank " +
                          std::to_string(new_size) + ")");
    memcpy(id.internal, got.unique_id, sizeof(id.internal));
  }
  UniqueIdData data;
  BATON_RETURN_IF_ERROR(DecodeUniqueId(id, &data));
  return Communicator::Create(settings, data, new_size, new_rank, out, name,
                              parent.config().transport.rdma.gpu_pci)
      .WithContext("batonCommShrink: rank " + std::to_string(new_rank) + " of " +
                   std::to_string(new_size));
}

}  // namespace baton
