// HostStream (comm/stream.h): tasks run in order, and a caller that runs
// ahead by kMaxQueued waits until the worker has room again instead of
// growing the queue without bound.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "comm/stream.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

namespace baton {
namespace {

TEST(HostStreamTest, CallerWaitsWhenTheQueueIsFullAndEveryTaskRunsInOrder) {
  HostStream stream;
  std::atomic<bool> started{false}, release{false};
  std::vector<size_t> ran;
  // The first task holds the worker, so everything after it stays queued.
  stream.Enqueue([&] {
    started.store(true);
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ran.push_back(0);
    return Status::Ok();
  });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const size_t total = HostStream::kMaxQueued + 100;
  std::atomic<size_t> queued{1};
  std::thread producer([&] {
    for (size_t i = 1; i < total; ++i) {
      stream.Enqueue([&ran, i] {
        ran.push_back(i);
        return Status::Ok();
      });
      queued.store(i + 1);
    }
  });
  // The producer stops at the bound while the worker is held.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (queued.load() < HostStream::kMaxQueued && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(queued.load(), HostStream::kMaxQueued + 1);  // the held task is out of the queue
  release.store(true);
  producer.join();
  EXPECT_TRUE(stream.Synchronize().ok());
  ASSERT_EQ(ran.size(), total);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(ran[i], i);
}

// A task whose closure is larger than a slot (it goes to the heap).
struct LargeTask {
  std::vector<size_t>* ran;
  size_t index;
  std::shared_ptr<int> held;
  std::array<std::byte, 2 * HostStream::kTaskBytes> ballast{};
  Status operator()() {
    ran->push_back(index);
    return Status::Ok();
  }
};

// Queues task `index` on `stream`: every third one too large for a slot,
// each holding `held` until it is destroyed.
void QueueMixed(HostStream& stream, std::vector<size_t>* ran, size_t index,
                const std::shared_ptr<int>& held) {
  if (index % 3 == 2) {
    stream.Enqueue(LargeTask{ran, index, held});
  } else {
    stream.Enqueue([ran, index, held] {
      ran->push_back(index);
      return Status::Ok();
    });
  }
}

TEST(HostStreamTest, TheWorkerItselfMayQueuePastTheBound) {
  HostStream stream;
  std::vector<size_t> ran;
  auto held = std::make_shared<int>(0);
  const size_t total = 2 * HostStream::kMaxQueued + 10;
  // Task 0 queues the rest on its own stream, past the bound: the ring
  // grows twice while task 0 runs from its slot; it must not wait for
  // itself, and every task must run once, in order.
  stream.Enqueue([&] {
    for (size_t i = 1; i < total; ++i) QueueMixed(stream, &ran, i, held);
    ran.push_back(0);
    return Status::Ok();
  });
  EXPECT_TRUE(stream.Synchronize().ok());
  ASSERT_EQ(ran.size(), total);
  EXPECT_EQ(ran[0], 0u);
  for (size_t i = 1; i < total; ++i) ASSERT_EQ(ran[i], i);
  // What the tasks captured went with them.
  EXPECT_EQ(held.use_count(), 1);
}

TEST(HostStreamTest, LargeAndSmallTasksRunInOrderAndReleaseWhatTheyHeld) {
  HostStream stream;
  std::vector<size_t> ran;
  auto held = std::make_shared<int>(0);
  const size_t total = 3 * HostStream::kMaxQueued;  // laps around the ring
  for (size_t i = 0; i < total; ++i) QueueMixed(stream, &ran, i, held);
  EXPECT_TRUE(stream.Synchronize().ok());
  ASSERT_EQ(ran.size(), total);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(ran[i], i);
  EXPECT_EQ(held.use_count(), 1);
}

TEST(HostStreamTest, MarksCarryTheErrorsSinceThePreviousMark) {
  HostStream stream;
  stream.Enqueue([] { return InvalidArgument("before the first mark"); });
  auto first = stream.Mark();
  auto second = stream.Mark();
  stream.Enqueue([] { return InvalidUsage("before the third mark"); });
  auto third = stream.Mark();
  EXPECT_EQ(first->Wait().code(), batonInvalidArgument);
  EXPECT_TRUE(second->Wait().ok());
  EXPECT_EQ(third->Wait().code(), batonInvalidUsage);
  // The stream's own first error is the first of all, until synchronize.
  EXPECT_EQ(stream.Query(), batonInvalidArgument);
  EXPECT_EQ(stream.Synchronize().code(), batonInvalidArgument);
  EXPECT_EQ(stream.Query(), batonSuccess);
}

TEST(HostStreamTest, FirstErrorIsKeptUntilSynchronize) {
  HostStream stream;
  stream.Enqueue([] { return InvalidArgument("first"); });
  stream.Enqueue([] { return InvalidUsage("second"); });
  Status st = stream.Synchronize();
  EXPECT_EQ(st.code(), batonInvalidArgument);
  EXPECT_TRUE(stream.Synchronize().ok());
}

}  // namespace
}  // namespace baton
