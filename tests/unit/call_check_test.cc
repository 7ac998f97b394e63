// The words of mismatch errors and the weighing of a peer's answer about
// where it is (exec/call_check.h).
#include "exec/call_check.h"

#include <gtest/gtest.h>

#include "algorithms/collective.h"

namespace baton {
namespace {

CallDescriptor Call(Collective c, uint32_t seq, uint64_t count, batonRedOp_t op, int root = 0) {
  CallDescriptor d;
  d.kind = static_cast<uint8_t>(kCallKindCollectiveBase + static_cast<int>(c));
  d.seq = seq;
  d.count = count;
  d.datatype = batonFloat32;
  d.op = static_cast<uint8_t>(op);
  d.root = root;
  return d;
}

TEST(CallCheckTest, DescribesCalls) {
  EXPECT_EQ(DescribeCall(Call(Collective::kAllReduce, 17, 4096, batonMax)),
            "allreduce #17 (4096 x float, max)");
  EXPECT_EQ(DescribeCall(Call(Collective::kBroadcast, 3, 10, batonSum, 2)),
            "broadcast #3 (10 x float, root 2)");
  EXPECT_EQ(DescribeCall(Call(Collective::kAllGather, 4, 8, batonSum)), "allgather #4 (8 x float)");
  CallDescriptor barrier;
  barrier.kind = kCallKindBarrier;
  barrier.seq = 9;
  EXPECT_EQ(DescribeCall(barrier), "barrier #9");
}

TEST(CallCheckTest, MismatchNamesBothRanksAndCalls) {
  CallMismatch found;
  found.kind = CallMismatch::Kind::kOtherCall;
  found.theirs = Call(Collective::kAllReduce, 17, 4096, batonMax);
  Status st = CallMismatchError(0, 2, Call(Collective::kAllReduce, 17, 4096, batonSum), found, 0);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_EQ(st.message(),
            "collective mismatch between rank 2 and rank 0: rank 2 called allreduce #17 (4096 x "
            "float, max), rank 0 allreduce #17 (4096 x float, sum)");
  // Only the algorithm differs.
  CallDescriptor mine = found.theirs;
  mine.algorithm = static_cast<uint8_t>(Algorithm::kRecursiveHalvingDoubling);
  st = CallMismatchError(0, 2, mine, found, 0);
  EXPECT_NE(st.message().find("ran ring and rank 0 rhd"), std::string::npos) << st.message();
  found.kind = CallMismatch::Kind::kSize;
  found.their_bytes = 800;
  st = CallMismatchError(1, 3, mine, found, 400);
  EXPECT_NE(st.message().find("rank 3 sent 800 bytes where rank 1 expected 400"), std::string::npos)
      << st.message();
}

TEST(CallCheckTest, WeighsAPeersAnswer) {
  const std::vector<CallDescriptor> mine = {Call(Collective::kAllReduce, 5, 64, batonSum)};
  std::string behind;
  CallState theirs;
  // In the same call: fine.
  theirs.call = mine[0];
  theirs.in_call = true;
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind).ok());
  // In another call with the same number: a mismatch, also once it finished.
  theirs.call = Call(Collective::kBroadcast, 5, 64, batonSum);
  EXPECT_EQ(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind).code(), batonInvalidUsage);
  theirs.in_call = false;
  Status st = CheckPeerState(0, 1, "rank 1", mine, theirs, &behind);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("finished"), std::string::npos) << st.message();
  // Behind: not an error, a line for the verdict.
  theirs.call = Call(Collective::kAllReduce, 4, 64, batonSum);
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1 (pid 7 on h1)", mine, theirs, &behind).ok());
  EXPECT_EQ(behind,
            "; rank 1 (pid 7 on h1) has not entered allreduce #5 (64 x float, sum): its last "
            "call is allreduce #4 (64 x float, sum), finished");
  // Ahead (it finished ours and went on): nothing to say.
  behind.clear();
  theirs.call = Call(Collective::kAllReduce, 6, 64, batonSum);
  theirs.in_call = true;
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind).ok());
  EXPECT_TRUE(behind.empty());
  // Point-to-point numbers are per pair: never compared.
  theirs.call.kind = kCallKindPointToPoint;
  theirs.call.seq = 5;
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind).ok());
}

// A receive that waits on a peer in a collective: the verdict says where
// the peer is ("every rank answered and is in this call" named nobody).
TEST(CallCheckTest, SaysWhereAPeerOfASendOrReceiveIs) {
  CallDescriptor recv = Call(Collective::kAllReduce, 1, 4, batonSum);
  recv.kind = kCallKindPointToPoint;
  const std::vector<CallDescriptor> mine = {recv};
  CallState theirs;
  theirs.call = Call(Collective::kAllReduce, 1, 2, batonSum);
  theirs.in_call = true;
  std::string behind;
  // A peer the run does not wait on: nothing said.
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind).ok());
  EXPECT_TRUE(behind.empty());
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind, /*waited_on=*/true).ok());
  EXPECT_EQ(behind,
            "; rank 1 is in allreduce #1 (2 x float, sum), not in the matching send or receive");
  // A peer in a send or receive itself: not comparable, nothing said.
  behind.clear();
  theirs.call.kind = kCallKindPointToPoint;
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", mine, theirs, &behind, /*waited_on=*/true).ok());
  EXPECT_TRUE(behind.empty());
  // A run that holds a collective is weighed by its number, as before.
  theirs.call = Call(Collective::kAllReduce, 3, 2, batonSum);
  EXPECT_TRUE(CheckPeerState(0, 1, "rank 1", {Call(Collective::kAllReduce, 3, 2, batonSum)}, theirs,
                             &behind, /*waited_on=*/true)
                  .ok());
  EXPECT_TRUE(behind.empty());
}

}  // namespace
}  // namespace baton
