// The tuning layer: BATON_ALGO parsing (NCCL's syntax: lists, exclusion,
// per-collective scopes) and the candidate lists of the selection, which
// must hold exactly the algorithms algorithms/collective.h says implement
// each collective; and the automatic choice runs exactly what forcing it
// with BATON_ALGO runs.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "topology/comm_topology.h"
#include "tuning/algorithm_filter.h"
#include "tuning/cost_model.h"
#include "tuning/select.h"

namespace baton {
namespace {

TEST(AlgorithmFilterTest, EmptyAllowsEverything) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  Algorithm a;
  ASSERT_TRUE(f.Choose(Collective::kAllReduce, {Algorithm::kRing, Algorithm::kTree}, &a).ok());
  EXPECT_EQ(a, Algorithm::kRing);
}

TEST(AlgorithmFilterTest, ListsExclusionAndScopes) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("Tree,rhd", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kBroadcast, Algorithm::kTree));
  EXPECT_FALSE(f.Allows(Collective::kBroadcast, Algorithm::kRing));
  ASSERT_TRUE(AlgorithmFilter::Parse("^ring", &f).ok());
  EXPECT_FALSE(f.Allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  ASSERT_TRUE(AlgorithmFilter::Parse("allreduce:tree;ring", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  EXPECT_FALSE(f.Allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.Allows(Collective::kBroadcast, Algorithm::kRing));
  EXPECT_FALSE(f.Allows(Collective::kBroadcast, Algorithm::kTree));
}

TEST(AlgorithmFilterTest, ImpossibleRequestsAreInvalidUsage) {
  AlgorithmFilter f;
  EXPECT_EQ(AlgorithmFilter::Parse("bogus", &f).code(), batonInvalidUsage);
  EXPECT_EQ(AlgorithmFilter::Parse("gathering:ring", &f).code(), batonInvalidUsage);
  ASSERT_TRUE(AlgorithmFilter::Parse("tree", &f).ok());
  Algorithm a;
  Status st = f.Choose(Collective::kAllReduce, {Algorithm::kRing}, &a);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("available: ring"), std::string::npos) << st.message();
}

// The builders the selection knows are the algorithms that implement each
// collective, each once.
TEST(SelectTest, ImplementationsAreTheImplementingAlgorithms) {
  for (int c = 0; c < kNumCollectives; ++c) {
    const auto coll = static_cast<Collective>(c);
    std::set<Algorithm> listed;
    for (const AlgorithmImpl& impl : ImplementationsOf(coll)) {
      EXPECT_TRUE(listed.insert(impl.algorithm).second)
          << CollectiveName(coll) << " lists " << AlgorithmName(impl.algorithm) << " twice";
      EXPECT_NE(impl.build, nullptr);
    }
    for (int a = 0; a < kNumAlgorithms; ++a) {
      const auto algo = static_cast<Algorithm>(a);
      EXPECT_EQ(listed.count(algo) == 1, Implements(coll, algo))
          << CollectiveName(coll) << " / " << AlgorithmName(algo);
    }
  }
}

TEST(SelectTest, NamesRoundTrip) {
  for (int c = 0; c < kNumCollectives; ++c) {
    Collective parsed;
    ASSERT_TRUE(CollectiveFromName(CollectiveName(static_cast<Collective>(c)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), c);
  }
  for (int a = 0; a < kNumAlgorithms; ++a) {
    Algorithm parsed;
    ASSERT_TRUE(AlgorithmFromName(AlgorithmName(static_cast<Algorithm>(a)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), a);
  }
  Algorithm unused;
  EXPECT_TRUE(AlgorithmFromName("RING", &unused));
  EXPECT_FALSE(AlgorithmFromName("chain", &unused));
}

// The automatic path and BATON_ALGO set to its choice must run the same
// call: the same builder with the same chunk size and inter-host stage, so
// the same schedule, the same peers and the same connections (launch/call.cc
// takes one path for both). A per-call cost the automatic path added would
// show here as a differing entry; docs/tuning.md has the timings.
TEST(SelectTest, ForcingTheAutomaticChoiceRunsTheSameCall) {
  struct Layout {
    std::vector<int> per_host;  // ranks of each host
    int cores;
    int nic_mbps;
  };
  std::vector<Layout> layouts;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16})
    for (int cores : {2, 64}) layouts.push_back({{n}, cores, 0});
  for (int mbps : {1000, 10000}) {
    layouts.push_back({{1, 1, 1, 1}, 2, mbps});
    layouts.push_back({{2, 2, 2, 2}, 2, mbps});
    layouts.push_back({{1, 1, 1, 1, 1, 1, 1, 1}, 2, mbps});
    layouts.push_back({{3, 3, 3}, 16, mbps});
    layouts.push_back({{3, 2}, 16, mbps});  // unequal hosts: no hier
  }
  int compared = 0;
  for (const Layout& l : layouts) {
    std::vector<RankPlace> places;
    for (size_t h = 0; h < l.per_host.size(); ++h)
      for (int r = 0; r < l.per_host[h]; ++r)
        places.push_back({static_cast<uint64_t>(h + 1), 0, 0, 1, 1, false, l.cores, l.nic_mbps});
    const CommTopology topo(places);
    const CostModel model(topo, topo.RingOrder(), std::vector<int>(topo.hosts(), l.cores),
                          DefaultCostParams(l.nic_mbps));
    std::string name = std::to_string(l.cores) + " cores, hosts of";
    for (int n : l.per_host) {
      name += ' ';
      name += std::to_string(n);
    }
    // As the communicator builds its tables (comm/tuning_setup.cc), with a
    // last-level cache of 32 MiB.
    const int nranks = static_cast<int>(places.size());
    const uint64_t folded = FoldedRhdMaxBytes(topo.hosts(), nranks, l.cores, 32 << 20);
    for (size_t fixed_chunk : {size_t{0}, size_t{128} << 10}) {
      SelectionTable automatic;
      AlgorithmFilter all;
      ASSERT_TRUE(AlgorithmFilter::Parse("", &all).ok());
      automatic.Build(model, all, fixed_chunk, folded);
      // One table per forced algorithm, as BATON_ALGO=<name> builds it, and
      // one with the algorithm forced for a single collective.
      for (int a = 0; a < kNumAlgorithms; ++a) {
        const auto algo = static_cast<Algorithm>(a);
        AlgorithmFilter everywhere;
        ASSERT_TRUE(AlgorithmFilter::Parse(AlgorithmName(algo), &everywhere).ok());
        SelectionTable forced;
        forced.Build(model, everywhere, fixed_chunk, folded);
        for (int ci = 0; ci < kNumCollectives; ++ci) {
          const auto c = static_cast<Collective>(ci);
          if (!Implements(c, algo)) continue;
          AlgorithmFilter scoped;
          ASSERT_TRUE(AlgorithmFilter::Parse(
                          std::string(CollectiveName(c)) + ":" + AlgorithmName(algo), &scoped)
                          .ok());
          SelectionTable forced_here;
          forced_here.Build(model, scoped, fixed_chunk, folded);
          for (int dt = 0; dt < batonNumTypes; ++dt) {
            const auto type = static_cast<batonDataType_t>(dt);
            for (int k = 0; k < SelectionTable::kSizeClasses; ++k) {
              const size_t bytes = SelectionTable::ClassBytes(k);
              const Choice& want = automatic.Lookup(c, type, bytes);
              ASSERT_NE(want.build, nullptr) << name << " " << CollectiveName(c);
              if (want.algorithm != algo) continue;
              for (const SelectionTable* t : {&forced, &forced_here}) {
                const Choice& got = t->Lookup(c, type, bytes);
                const std::string where = name + ", " + CollectiveName(c) + " " +
                                          std::to_string(bytes) + " B type " + std::to_string(dt) +
                                          " forced " + AlgorithmName(algo);
                EXPECT_EQ(got.build, want.build) << where;
                EXPECT_EQ(got.algorithm, want.algorithm) << where;
                EXPECT_EQ(got.chunk_bytes, want.chunk_bytes) << where;
                EXPECT_EQ(got.inter, want.inter) << where;
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 10000);
}

TEST(SelectTest, LinesLimitByRanksAndCores) {
  // Left to the machine: about 128 KiB of peers' inputs read per rank where
  // ranks outnumber cores, 2 KiB where each has a core, in powers of two
  // from 512 bytes to the lines' 32 KiB.
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 2), kLinesCapacityBytes);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 3), 32u << 10);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 4), 32u << 10);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 8), 16u << 10);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 16), 8u << 10);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, true, 1024), 512u);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, false, 2), 2048u);
  EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, false, 3), 1024u);
  for (int n : {4, 5, 8, 9, 16, 256})
    EXPECT_EQ(LinesMaxBytes(kSizeFromMachine, false, n), 512u) << n;
  // Set: as set, up to what the lines hold; 0 keeps every call off them.
  EXPECT_EQ(LinesMaxBytes(0, true, 4), 0u);
  EXPECT_EQ(LinesMaxBytes(100, false, 2), 100u);
  EXPECT_EQ(LinesMaxBytes(uint64_t{1} << 20, false, 2), kLinesCapacityBytes);
}

// Where ranks outnumber cores and rhd's power of two does not, allreduce
// takes rhd up to what the exchanging ranks' buffers leave of the
// last-level cache; nowhere else.
TEST(SelectTest, FoldedRhdWhereThePowerOfTwoFitsTheCores) {
  constexpr uint64_t kLlc = 32 << 20;
  EXPECT_EQ(FoldedRhdMaxBytes(1, 3, 2, kLlc), 8u << 20);  // 2 exchange, a core each
  EXPECT_EQ(FoldedRhdMaxBytes(1, 5, 4, kLlc), 4u << 20);  // 4 exchange
  EXPECT_EQ(FoldedRhdMaxBytes(1, 7, 4, kLlc), 4u << 20);
  EXPECT_EQ(FoldedRhdMaxBytes(1, 4, 2, kLlc), 0u);  // 4 exchange on 2 cores
  EXPECT_EQ(FoldedRhdMaxBytes(1, 5, 2, kLlc), 0u);
  EXPECT_EQ(FoldedRhdMaxBytes(1, 2, 2, kLlc), 0u);  // a core per rank
  EXPECT_EQ(FoldedRhdMaxBytes(1, 3, 64, kLlc), 0u);
  EXPECT_EQ(FoldedRhdMaxBytes(2, 3, 2, kLlc), 0u);  // several hosts
  EXPECT_EQ(FoldedRhdMaxBytes(1, 3, 0, kLlc), 0u);  // cores unknown
  EXPECT_EQ(FoldedRhdMaxBytes(1, 3, 2, 0), 0u);     // cache unknown

  std::vector<RankPlace> places(3, RankPlace{1, 0, 0, 1, 1, false, 2, 0});
  const CommTopology topo(places);
  const CostModel model(topo, topo.RingOrder(), {2}, DefaultCostParams(0));
  AlgorithmFilter all, ring;
  ASSERT_TRUE(AlgorithmFilter::Parse("", &all).ok());
  ASSERT_TRUE(AlgorithmFilter::Parse("allreduce:ring", &ring).ok());
  SelectionTable folded, plain, forced;
  folded.Build(model, all, 0, 8 << 20);
  plain.Build(model, all, 0);
  forced.Build(model, ring, 0, 8 << 20);
  for (int k = 1; k < SelectionTable::kSizeClasses; ++k) {
    const size_t bytes = SelectionTable::ClassBytes(k);
    for (int dt = 0; dt < batonNumTypes; ++dt) {
      const auto type = static_cast<batonDataType_t>(dt);
      const Choice& got = folded.Lookup(Collective::kAllReduce, type, bytes);
      const Choice& model_choice = plain.Lookup(Collective::kAllReduce, type, bytes);
      if (bytes < (8u << 20)) {
        EXPECT_EQ(got.algorithm, Algorithm::kRecursiveHalvingDoubling) << bytes;
      } else {
        EXPECT_EQ(got.algorithm, model_choice.algorithm) << bytes;
        EXPECT_EQ(got.chunk_bytes, model_choice.chunk_bytes) << bytes;
      }
      // BATON_ALGO keeps the call as asked.
      EXPECT_EQ(forced.Lookup(Collective::kAllReduce, type, bytes).algorithm, Algorithm::kRing);
    }
    // The other collectives keep the model's choice.
    EXPECT_EQ(folded.Lookup(Collective::kAllGather, batonFloat32, bytes).algorithm,
              plain.Lookup(Collective::kAllGather, batonFloat32, bytes).algorithm);
  }
  // The model itself prefers the ring at 1 MiB here: the rule decides.
  EXPECT_EQ(plain.Lookup(Collective::kAllReduce, batonFloat32, 1 << 20).algorithm,
            Algorithm::kRing);
}

}  // namespace
}  // namespace baton
