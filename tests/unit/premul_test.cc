// PreMulSum schedules (launch/premul.h) for every algorithm of allreduce,
// reduce and reduce-scatter, run by the simulator over 1-9 and 16 ranks, in
// and out of place, on one host and on several (hierarchical): the result
// against sum_r scalar_r * x_r computed here in double on inputs where
// every product and partial sum is exact; the scaling must be fused (no
// whole-input pass) and the input of an out-of-place call untouched. Every
// schedule also passes the static checks of unit/schedule_checks.h.
#include "launch/premul.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/datatype.h"
#include "common/reference.h"
#include "tuning/select.h"
#include "unit/schedule_checks.h"

namespace baton {
namespace {

double Scalar(batonDataType_t t, int r) {
  if (IsFloat(t)) {
    static const double kScalars[] = {0.5, 1, 2, -1};
    return kScalars[r % 4];
  }
  return r % 3 + 1;
}

double Input(batonDataType_t t, int r, size_t i) {
  const double v = static_cast<double>((r * 5 + i * 3) % 7);
  return IsUnsigned(t) ? v : v - 3;
}

struct Case {
  Collective collective;
  Algorithm algorithm;
  BuildFn build;
  int hosts;  // ranks on each host: p / hosts
};

// hosts x per_host ranks, host by host.
HostLayout Layout(int p, int hosts) {
  HostLayout l;
  l.hosts = hosts;
  l.per_host = p / hosts;
  for (int r = 0; r < p; ++r) l.ranks.push_back(r);
  l.slot_of = l.ranks;
  return l;
}

void RunCase(const Case& c, int p, size_t count, bool in_place, batonDataType_t t) {
  const size_t es = SizeOf(t);
  const bool rs = c.collective == Collective::kReduceScatter;
  const size_t total = count * (rs ? p : 1);
  const int root = p / 2;
  std::vector<int> ring(p);
  for (int r = 0; r < p; ++r) ring[r] = r;
  const HostLayout layout = Layout(p, c.hosts);
  std::vector<std::vector<uint8_t>> send(p), recv(p);
  const std::string what = std::string(CollectiveName(c.collective)) + " " +
                           AlgorithmName(c.algorithm) + " hosts " + std::to_string(c.hosts) +
                           " p " + std::to_string(p) + " count " + std::to_string(count) +
                           " type " + std::to_string(t) + (in_place ? " in place" : "");
  std::vector<Schedule> schedules(p);
  for (int r = 0; r < p; ++r) {
    send[r].assign(total * es + 1, 0xab);
    for (size_t i = 0; i < total; ++i) Store(t, send[r].data(), i, Input(t, r, i));
    recv[r].assign(count * es + 1, 0xcd);
    CollArgs a;
    a.rank = r;
    a.nranks = p;
    a.count = count;
    a.datatype = t;
    a.root = root;
    a.ring = &ring;
    a.hosts = &layout;
    a.chunk_bytes = 64;  // many chunks
    a.send = send[r].data();
    a.recv = recv[r].data();
    if (in_place) a.recv = send[r].data() + (rs ? r * count * es : 0);
    // The static checks flag a few plain schedules (ring allreduce with
    // fewer elements than ranks orders some steps only through the
    // data's path around the ring): hold the PreMulSum schedule to them
    // where the plain one passes.
    Schedule plain;
    c.build(a, &plain);
    const bool plain_checks = CheckSchedule(plain);
    PreMulScalar scalar;
    scalar.datatype = t;
    Store(t, reinterpret_cast<uint8_t*>(&scalar.value), 0, Scalar(t, r));
    ASSERT_TRUE(BuildPreMulSum(c.collective, scalar, c.build, a, &schedules[r]))
        << what << ": not fused";
    ASSERT_TRUE(schedules[r].build_error.ok()) << what;
    if (plain_checks) {
      ASSERT_TRUE(CheckSchedule(schedules[r])) << what << " rank " << r;
    }
  }
  std::vector<SimRankStats> stats;
  const Status st = SimulateSchedules(schedules, &stats);
  ASSERT_TRUE(st.ok()) << what << ": " << st.message();
  for (int r = 0; r < p; ++r) {
    if (c.collective == Collective::kReduce && r != root) continue;
    const uint8_t* out = in_place ? send[r].data() + (rs ? r * count * es : 0) : recv[r].data();
    const size_t first = rs ? r * count : 0;
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < p; ++q) want += Scalar(t, q) * Input(t, q, first + i);
      std::vector<uint8_t> bits(es);
      Store(t, bits.data(), 0, want);
      ASSERT_EQ(memcmp(bits.data(), out + i * es, es), 0)
          << what << " rank " << r << " element " << i << ": " << Load(t, out, i) << " want "
          << want;
    }
  }
  if (in_place) return;
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < total; ++i)
      ASSERT_EQ(Load(t, send[r].data(), i), Input(t, r, i)) << what << ": input modified";
}

TEST(PreMulSumScheduleTest, EveryAlgorithmFusedAndExact) {
  std::vector<Case> cases;
  for (Collective coll : {Collective::kAllReduce, Collective::kReduce, Collective::kReduceScatter})
    for (const AlgorithmImpl& impl : ImplementationsOf(coll))
      cases.push_back({coll, impl.algorithm, impl.build, 1});
  for (int p : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
    for (const Case& c0 : cases) {
      std::vector<int> host_counts = {1};
      if (c0.algorithm == Algorithm::kHierarchical)
        for (int h = 2; h <= p; ++h)
          if (p % h == 0) host_counts.push_back(h);
      for (int hosts : host_counts) {
        Case c = c0;
        c.hosts = hosts;
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{301}})
          for (bool in_place : {false, true})
            for (batonDataType_t t : {batonFloat32, batonInt32, batonFloat16, batonUint8}) {
              if (p == 16 && t != batonFloat32 && t != batonInt32) continue;
              RunCase(c, p, count, in_place, t);
              if (HasFatalFailure()) return;
            }
      }
    }
  }
}

}  // namespace
}  // namespace baton
