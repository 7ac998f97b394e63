#include "comm/split.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "bootstrap/rendezvous.h"

namespace baton {

Status SplitCommunicator(Communicator& parent, const Settings& settings, int color, int key,
                         std::shared_ptr<Communicator>* out, const std::string& name) {
  out->reset();
  const int n = parent.nranks(), me = parent.rank();
  // 1. Everyone learns everyone's (color, key).
  struct Entry {
    int32_t color, key;
  };
  std::vector<Entry> all(n);
  const Entry mine{color, key};
  BATON_RETURN_IF_ERROR(parent.AllGatherBytes(&mine, sizeof(Entry), all.data()));
  // 2. The lowest rank of each color makes the new unique id; everyone
  //    gathers all ids and takes its leader's.
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (color != BATON_SPLIT_NOCOLOR && all[r].color == color) members.push_back(r);
  batonUniqueId my_id;
  memset(&my_id, 0, sizeof(my_id));
  if (!members.empty() && members[0] == me)
    BATON_RETURN_IF_ERROR(CreateUniqueId(settings.socket_ifname, TimeoutSeconds(settings), &my_id));
  std::vector<batonUniqueId> ids(n);
  BATON_RETURN_IF_ERROR(parent.AllGatherBytes(&my_id, sizeof(batonUniqueId), ids.data()));
  if (color == BATON_SPLIT_NOCOLOR) return Status::Ok();
  // 3. The new communicator, ranked by key (stable: ties keep parent order).
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  const int leader = *std::min_element(members.begin(), members.end());
  const int new_size = static_cast<int>(members.size());
  UniqueIdData data;
  BATON_RETURN_IF_ERROR(DecodeUniqueId(ids[leader], &data));
  return Communicator::Create(settings, data, new_size, new_rank, out, name,
                              parent.config().transport.rdma.gpu_pci)
      .WithContext("rank " + std::to_string(new_rank) + " of " + std::to_string(new_size));
}

}  // namespace baton
