// HostStream (comm/stream.h): tasks run in order, and a caller that runs
// ahead by kMaxQueued waits until the worker has room again instead of
// growing the queue without bound.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "comm/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

TEST(HostStreamTest, TheWorkerItselfMayQueuePastTheBound) {
  HostStream stream;
  std::atomic<size_t> count{0};
  stream.Enqueue([&] {
    // A task that queues more on its own stream must not wait for itself.
    for (size_t i = 0; i < HostStream::kMaxQueued + 10; ++i)
      stream.Enqueue([&] {
        count.fetch_add(1);
        return Status::Ok();
      });
    return Status::Ok();
  });
  EXPECT_TRUE(stream.Synchronize().ok());
  EXPECT_EQ(count.load(), HostStream::kMaxQueued + 10);
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
