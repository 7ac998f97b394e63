// The registered pool behind baton.use_registered_memory and
// baton.torch.use_registered_memory (python/common/registered_pool.h), with
// no Python: which sizes it takes, size classes and the cache, its limit,
// registrations on attached communicators (one-rank communicators here,
// where registering is local), a forked child, and many threads at once.
// The pool is one per process: each test starts from what the previous left
// and resets what it changes (run in file order: gtest keeps it).
#include "../../python/common/registered_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

namespace {

using baton_python::RegisteredPool;

RegisteredPool& Pool() {
  return RegisteredPool::Get();
}

// First in the file, before any Enable: a communicator attached before the
// pool's first Enable (a process group made before use_registered_memory)
// keeps its place.
TEST(RegisteredPoolFirst, AttachedBeforeTheFirstEnable) {
  batonComm_t comm = nullptr;
  int devices[1] = {0};
  ASSERT_EQ(batonCommInitAll(&comm, 1, devices), batonSuccess);
  Pool().Attach(comm);
  EXPECT_EQ(Pool().Allocate(1 << 20), nullptr);  // off until enabled
  Pool().Enable(4096, 1 << 20);
  void* p = Pool().Allocate(1 << 20);
  ASSERT_NE(p, nullptr);
  const RegisteredPool::Stats s = Pool().GetStats();
  EXPECT_EQ(s.communicators, 1u);
  EXPECT_EQ(s.registrations, 1u);
  Pool().Free(p);
  Pool().Detach(comm);
  EXPECT_EQ(batonCommDestroy(comm), batonSuccess);
  Pool().ReleaseCached();
  Pool().Disable();
}

class RegisteredPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Pool().Enable(4096, 64 << 20);
  }
  void TearDown() override {
    Pool().ReleaseCached();
    Pool().Disable();
  }
};

TEST_F(RegisteredPoolTest, TakesAtLeastMinBytes) {
  EXPECT_EQ(Pool().Allocate(4095), nullptr);
  EXPECT_EQ(Pool().Allocate(0), nullptr);
  void* p = Pool().Allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(Pool().Contains(p));
  EXPECT_TRUE(Pool().Contains(static_cast<char*>(p) + 4095));
  EXPECT_FALSE(Pool().Free(&p));  // not a block
  EXPECT_EQ(Pool().SmallestTaken(), 4096u);
  EXPECT_FALSE(Pool().Free(&p, 4095));  // smaller than any the pool took: not looked up
  EXPECT_TRUE(Pool().Free(p, 4096));
  Pool().Disable();
  EXPECT_EQ(Pool().Allocate(1 << 20), nullptr);
}

TEST_F(RegisteredPoolTest, SizeClassesAndReuse) {
  // 100000 bytes: an eighth of 65536 is 8192, so the class is 106496.
  void* p = Pool().Allocate(100000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Pool().BlockBytes(p), 106496u);
  memset(p, 7, 100000);
  const RegisteredPool::Stats before = Pool().GetStats();
  ASSERT_TRUE(Pool().Free(p));
  EXPECT_EQ(Pool().GetStats().bytes_cached, before.bytes_cached + 106496);
  void* again = Pool().Allocate(106000);  // the same class
  EXPECT_EQ(again, p);
  EXPECT_EQ(Pool().GetStats().reused, before.reused + 1);
  void* other = Pool().Allocate(120000);  // the next class: a new block
  EXPECT_NE(other, p);
  EXPECT_EQ(Pool().BlockBytes(other), 122880u);
  Pool().Free(again);
  Pool().Free(other);
  // The class freed last comes back first.
  void* a = Pool().Allocate(8192);
  void* b = Pool().Allocate(8192);
  Pool().Free(a);
  Pool().Free(b);
  EXPECT_EQ(Pool().Allocate(8192), b);
  Pool().Free(b);
}

TEST_F(RegisteredPoolTest, CacheLimit) {
  Pool().Enable(4096, 8192);
  Pool().ReleaseCached();
  void* a = Pool().Allocate(8192);
  void* b = Pool().Allocate(8192);
  const size_t blocks = Pool().GetStats().blocks_in_use;
  Pool().Free(a);  // cached: 8192 of 8192
  Pool().Free(b);  // over the limit: given back
  const RegisteredPool::Stats s = Pool().GetStats();
  EXPECT_EQ(s.blocks_cached, 1u);
  EXPECT_EQ(s.bytes_cached, 8192u);
  EXPECT_EQ(s.blocks_in_use, blocks - 2);
  EXPECT_EQ(Pool().ReleaseCached(), 8192u);
  EXPECT_EQ(Pool().GetStats().blocks_cached, 0u);
}

TEST_F(RegisteredPoolTest, RegistersOnAttachedCommunicators) {
  batonComm_t comms[2] = {nullptr, nullptr};
  int devices[1] = {0};
  ASSERT_EQ(batonCommInitAll(&comms[0], 1, devices), batonSuccess);
  ASSERT_EQ(batonCommInitAll(&comms[1], 1, devices), batonSuccess);
  void* before = Pool().Allocate(1 << 16);  // made before the communicators attach
  Pool().Attach(comms[0]);
  void* after = Pool().Allocate(1 << 17);
  Pool().Attach(comms[1]);
  RegisteredPool::Stats s = Pool().GetStats();
  const size_t blocks = s.blocks_in_use + s.blocks_cached;
  EXPECT_EQ(s.communicators, 2u);
  EXPECT_EQ(s.registrations, 2 * blocks);
  // A registered block cannot be freed behind the pool's back ...
  EXPECT_EQ(batonMemFree(after), batonInvalidArgument);
  // ... and the pool deregisters before it gives one back.
  Pool().Free(before);
  Pool().Free(after);
  EXPECT_GT(Pool().ReleaseCached(), 0u);
  s = Pool().GetStats();
  EXPECT_EQ(s.registrations, 2 * (s.blocks_in_use + s.blocks_cached));
  Pool().Detach(comms[0]);
  s = Pool().GetStats();
  EXPECT_EQ(s.communicators, 1u);
  EXPECT_EQ(s.registrations, s.blocks_in_use + s.blocks_cached);
  Pool().Detach(comms[1]);
  EXPECT_EQ(Pool().GetStats().registrations, 0u);
  for (batonComm_t c : comms) EXPECT_EQ(batonCommDestroy(c), batonSuccess);
}

TEST_F(RegisteredPoolTest, ForkedChildLeavesBlocksAlone) {
  void* shared = Pool().Allocate(1 << 16);
  void* cached = Pool().Allocate(1 << 16);
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(cached, nullptr);
  Pool().Free(cached);
  memset(shared, 0, 1 << 16);
  const pid_t pid = fork();
  if (pid == 0) {
    bool ok = Pool().Allocate(1 << 16) == nullptr;  // not from the parent's cache
    ok &= Pool().Free(shared);                      // the parent's, left alone
    static_cast<char*>(shared)[0] = 42;             // MAP_SHARED: the parent sees it
    // Its own pool once it asks: new blocks, the parent's still left alone.
    Pool().Enable(4096, 1 << 20);
    void* mine = Pool().Allocate(1 << 16);
    ok &= mine != nullptr && mine != cached && mine != shared && Pool().Contains(mine);
    ok &= !Pool().Contains(shared) && Pool().Free(shared) && Pool().Free(cached);
    ok &= Pool().BlockBytes(shared) == (1 << 16);  // a realloc copies from it
    ok &= Pool().GetStats().blocks_in_use == 1 && Pool().Free(mine);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(static_cast<char*>(shared)[0], 42);
  EXPECT_EQ(Pool().Allocate(1 << 16), cached);  // still the parent's, still cached
  Pool().Free(cached);
  Pool().Free(shared);
}

TEST_F(RegisteredPoolTest, ManyThreads) {
  batonComm_t comm = nullptr;
  int devices[1] = {0};
  ASSERT_EQ(batonCommInitAll(&comm, 1, devices), batonSuccess);
  Pool().Attach(comm);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      std::vector<void*> held;
      for (int i = 0; i < 300; ++i) {
        const size_t bytes = 4096 * (1 + (i * 7 + t) % 5);
        void* p = Pool().Allocate(bytes);
        ASSERT_NE(p, nullptr);
        memset(p, t, bytes);
        held.push_back(p);
        if (held.size() > 3) {
          Pool().Free(held.front());
          held.erase(held.begin());
        }
      }
      for (void* p : held) Pool().Free(p);
    });
  }
  for (auto& th : threads) th.join();
  const RegisteredPool::Stats s = Pool().GetStats();
  EXPECT_EQ(s.registrations, s.blocks_in_use + s.blocks_cached);
  Pool().Detach(comm);
  EXPECT_EQ(batonCommDestroy(comm), batonSuccess);
}

}  // namespace
