// Hierarchical algorithms: a collective in stages, the ranks of each host
// working over shared memory and one rank per host (or every local rank on
// its own slice) across the network, so that the slow links carry each
// byte once and see fewer, larger messages. They need CollArgs::hosts (the
// same number of ranks on every host); the stages are the ring and
// recursive halving/doubling builders run on subgroups, chained so that a
// stage starts when this rank's part of the previous one is done.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// Allreduce: ring reduce-scatter within the host (local rank i ends with
// slice i' of the vector), an allreduce of that slice among the ranks with
// the same local index on every host (CollArgs::inter_host: ring or rhd;
// the per_host slices travel in parallel), then ring allgather within the
// host. With one rank per host it is the inter-host allreduce alone; on one
// host, the ring allreduce. Every rank ends with the same bits: each slice
// is reduced in one order within its host and the inter-host algorithms
// give identical results on all their ranks.
void BuildHierarchicalAllReduce(const CollArgs& args, Schedule* out);

// Broadcast: the root sends to one rank on each other host (the ranks with
// the root's local index) along a chain or binomial tree of hosts, then each
// host broadcasts within itself (chain).
void BuildHierarchicalBroadcast(const CollArgs& args, Schedule* out);

// Reduce: the mirror: each host reduces into its rank with the root's local
// index, then those ranks reduce to the root.
void BuildHierarchicalReduce(const CollArgs& args, Schedule* out);

// Allgather: the ranks with the same local index on every host gather their
// blocks along a ring of hosts (each local rank its own share, all at once),
// then each host's ranks pass those on along the host's ring, so every byte
// crosses the network once and a network message is never more than one
// block.
void BuildHierarchicalAllGather(const CollArgs& args, Schedule* out);

}  // namespace baton
