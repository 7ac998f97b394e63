// batonMemAlloc / batonMemFree and batonCommRegister / batonCommDeregister:
// argument errors, the lifecycle (free refused while registered, allowed
// after deregister or destroy), memory not from batonMemAlloc accepted, and
// that the memory is really shared memory (a forked child sees the parent's
// writes through the same pages).
#include <baton.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

TEST(MemAlloc, BadArguments) {
  void* p = nullptr;
  EXPECT_EQ(batonMemAlloc(nullptr, 64), batonInvalidArgument);
  EXPECT_NE(std::string(batonGetLastError(nullptr)).find("ptr is NULL"), std::string::npos);
  EXPECT_EQ(batonMemAlloc(&p, 0), batonInvalidArgument);
  EXPECT_NE(std::string(batonGetLastError(nullptr)).find("size is 0"), std::string::npos);
  EXPECT_EQ(batonMemFree(nullptr), batonInvalidArgument);
  int local = 0;
  EXPECT_EQ(batonMemFree(&local), batonInvalidArgument);
  EXPECT_NE(std::string(batonGetLastError(nullptr)).find("not returned by batonMemAlloc"),
            std::string::npos);
  ASSERT_EQ(batonMemAlloc(&p, 100), batonSuccess);
  ASSERT_NE(p, nullptr);
  // Not the start of the allocation.
  EXPECT_EQ(batonMemFree(static_cast<char*>(p) + 8), batonInvalidArgument);
  EXPECT_EQ(batonMemFree(p), batonSuccess);
  EXPECT_EQ(batonMemFree(p), batonInvalidArgument);  // twice
}

TEST(MemAlloc, ZeroedAndSharedWithForkedChild) {
  void* p = nullptr;
  const size_t bytes = (size_t{3} << 20) + 5;  // not a page multiple
  ASSERT_EQ(batonMemAlloc(&p, bytes), batonSuccess);
  auto* b = static_cast<uint8_t*>(p);
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes; ++i) nonzero += b[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  // MAP_SHARED: a child's write shows in the parent.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    b[bytes - 1] = 0x5a;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(b[bytes - 1], 0x5a);
  EXPECT_EQ(batonMemFree(p), batonSuccess);
}

TEST(CommRegister, LifecycleAndBadArguments) {
  RunRanks(2, [](RankContext& ctx) {
    batonComm_t comm = ctx.comm();
    void* mem = nullptr;
    MP_ASSERT_OK(ctx, batonMemAlloc(&mem, 1 << 20));
    void* h = nullptr;
    MP_EXPECT_EQ(ctx, batonCommRegister(nullptr, mem, 64, &h), batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonCommRegister(comm, nullptr, 64, &h), batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonCommRegister(comm, mem, 0, &h), batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonCommRegister(comm, mem, 64, nullptr), batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonCommDeregister(comm, nullptr), batonInvalidArgument);
    int bogus = 0;
    MP_EXPECT_EQ(ctx, batonCommDeregister(comm, &bogus), batonInvalidArgument);

    // Two registrations inside one allocation; free is refused until both
    // are gone, and the message says why.
    void* h1 = nullptr;
    void* h2 = nullptr;
    MP_ASSERT_OK(ctx, batonCommRegister(comm, mem, 4096, &h1));
    MP_ASSERT_OK(ctx, batonCommRegister(comm, static_cast<char*>(mem) + 4096, 8192, &h2));
    MP_EXPECT_NE(ctx, h1, h2);
    MP_EXPECT_EQ(ctx, batonMemFree(mem), batonInvalidArgument);
    MP_EXPECT_NE(ctx, std::string(batonGetLastError(nullptr)).find("still registered"),
                 std::string::npos)
        << batonGetLastError(nullptr);
    MP_EXPECT_OK(ctx, batonCommDeregister(comm, h1));
    MP_EXPECT_EQ(ctx, batonCommDeregister(comm, h1), batonInvalidArgument);  // twice
    MP_EXPECT_EQ(ctx, batonMemFree(mem), batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonCommDeregister(comm, h2));
    MP_EXPECT_OK(ctx, batonMemFree(mem));

    // Memory not from batonMemAlloc: accepted, with a handle.
    std::vector<float> plain(256);
    void* hp = nullptr;
    MP_EXPECT_OK(ctx, batonCommRegister(comm, plain.data(), plain.size() * sizeof(float), &hp));
    MP_EXPECT_NE(ctx, hp, nullptr);
    MP_EXPECT_OK(ctx, batonCommDeregister(comm, hp));

    // A handle of another communicator is not this one's.
    batonComm_t dup = nullptr;
    MP_ASSERT_OK(ctx, batonCommSplit(comm, 0, ctx.rank(), &dup, nullptr));
    void* other = nullptr;
    MP_ASSERT_OK(ctx, batonMemAlloc(&other, 4096));
    void* ho = nullptr;
    MP_ASSERT_OK(ctx, batonCommRegister(dup, other, 4096, &ho));
    MP_EXPECT_EQ(ctx, batonCommDeregister(comm, ho), batonInvalidArgument);
    // Destroying the communicator releases its registrations.
    MP_EXPECT_EQ(ctx, batonMemFree(other), batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonCommDestroy(dup));
    MP_EXPECT_OK(ctx, batonMemFree(other));
  });
}

}  // namespace
