// Built without libibverbs: there is no real RDMA provider (the emulation
// still is, for tests).
#include "transport/rdma/verbs.h"

namespace baton::rdma {

std::unique_ptr<Provider> MakeIbverbsProvider() {
  return nullptr;
}

}  // namespace baton::rdma
