// Recursive halving / doubling algorithms (Rabenseifner allreduce,
// recursive doubling allreduce and allgather, recursive halving
// reduce-scatter). They take log2(p) steps instead of the ring's p - 1, so
// they win when latency dominates: small messages or many ranks.
//
// All of them work in rank order (CollArgs::rank / nranks; the ring order
// is not used). A rank count p that is not a power of two is folded as in
// MPICH and Open MPI: with p' the largest power of two <= p and r = p - p',
// each even rank 2i < 2r hands its data to the odd rank 2i + 1 and sits
// out; the odd ranks and the ranks >= 2r (p' of them, renumbered 0..p'-1 in
// rank order) run the power-of-two algorithm, and each odd rank 2i + 1 sends
// the even rank its result at the end. That costs two extra steps on the
// folded pairs only.
//
// Every reduction puts the operand of the lower ranks first (Op::
// incoming_first), so the result of an element is the balanced tree
// ((x0 op x1) op (x2 op x3)) op ... over the ranks in order, computed alike
// on every rank: results are bitwise identical on all ranks, and the two
// allreduce variants give the same bits as each other.
#pragma once

#include <cstddef>

#include "algorithms/schedule.h"

namespace baton {

// Allreduce: recursive doubling (the whole vector in each of L = log2(p')
// steps) when count < nranks or the vector is smaller than
// args.rhd_switch_bytes, Rabenseifner (2(p'-1)/p' of the vector in 2L steps)
// otherwise. Rabenseifner's L extra latencies pay off once the vector
// transfers and reductions it saves cost more, i.e. around n ~ L alpha /
// beta; the tuner puts the switch there from the cost model's step costs
// (kRhdSmallMessageBytes when nothing set it).
void BuildRhdAllReduce(const CollArgs& args, Schedule* out);

// Rabenseifner allreduce for any count: reduce-scatter by recursive halving
// (partners at distance 1, 2, 4, ... exchange half of what they hold), then
// allgather by recursive doubling in the reverse order. 2 log2(p') steps.
void BuildRabenseifnerAllReduce(const CollArgs& args, Schedule* out);

// Recursive doubling allreduce for any count: partners at distance 1, 2, 4,
// ... exchange their whole vectors and both reduce. log2(p') steps.
void BuildRecursiveDoublingAllReduce(const CollArgs& args, Schedule* out);

// Reduce-scatter (args.count elements per rank; the input holds nranks
// blocks, rank r ends with block r reduced) by recursive halving: partners
// at distance p'/2, p'/4, ..., 1 exchange the half of the blocks the other
// keeps. In place when recv == send + rank * count * element size.
void BuildRecursiveHalvingReduceScatter(const CollArgs& args, Schedule* out);

// Allgather (args.count elements per rank; the output holds nranks blocks
// in rank order) by recursive doubling: partners at distance 1, 2, 4, ...
// exchange all the blocks they have. In place when send == recv + rank *
// count * element size.
void BuildRecursiveDoublingAllGather(const CollArgs& args, Schedule* out);

// Allgatherv (CollArgs::counts and displs) by the same steps: a group's
// blocks travel as one message, back to back in rank order; where the
// output's displacements lay them out otherwise, the steps run in scratch
// and the blocks are copied into place at the end. In place when send is
// this rank's block of recv.
void BuildRecursiveDoublingAllGatherV(const CollArgs& args, Schedule* out);

}  // namespace baton
