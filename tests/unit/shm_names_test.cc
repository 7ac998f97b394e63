// Segment names and their removal (base/shm_names.h): what the owner
// unlinks at exit (and a forked child does not), and what a launcher
// removes for a dead pid.
#include "base/shm_names.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace baton {
namespace {

bool Linked(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

bool Make(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// Runs `body` in a forked child that leaves through exit() (atexit
// handlers run); returns its exit status.
template <typename Body>
int InChild(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ShmNamesTest, NameCarriesCommunicatorRankAndPid) {
  EXPECT_EQ(ShmSegmentName(0x1234abcdULL, 7, 4242), "/baton-000000001234abcd-7-4242");
}

TEST(ShmNamesTest, AForkedChildLeavesItsParentsNames) {
  const int status = InChild([] {
    const std::string own = ShmSegmentName(0xbeefULL, 2, getpid());
    if (!Make(own)) exit(3);
    UnlinkAtExit(own);
    // A child forked after the registration (a data loader's worker) exits:
    // the name is its parent's and must stay.
    const pid_t grandchild = fork();
    if (grandchild == 0) exit(0);
    int s = 0;
    waitpid(grandchild, &s, 0);
    if (!Linked(own)) exit(4);
    // ... and the parent's own exit removes it.
  });
  EXPECT_EQ(status, 0) << (status == 4 ? "a forked child's exit unlinked its parent's name" : "");
}

TEST(ShmNamesTest, ExitUnlinksWhatTheProcessRegistered) {
  const std::string kept = ShmSegmentName(0xfeedULL, 0, 1);  // no real process's name
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string own = ShmSegmentName(0xfeedULL, 3, getpid());
    if (!Make(own) || !Make(kept)) _exit(3);
    UnlinkAtExit(own);
    UnlinkAtExit(kept);
    ForgetAtExit(kept);  // as ShmSegment::Unlink does once it unlinked the name itself
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(Linked(ShmSegmentName(0xfeedULL, 3, pid))) << "exit() left the name behind";
  EXPECT_TRUE(Linked(kept)) << "a name taken off the list was unlinked at exit";
  shm_unlink(kept.c_str());
}

TEST(ShmNamesTest, RemovesWhatADeadProcessLeftAndNothingElse) {
  const pid_t pid = fork();
  if (pid == 0) {
    // Killed before it could unlink anything.
    if (!Make(ShmSegmentName(0xdeadULL, 0, getpid())) ||
        !Make(ShmSegmentName(0xdeadULL, 1, getpid())))
      _exit(3);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Names that only look alike: another pid with the same digits at its
  // end, and something that is not a segment's name.
  const std::string other = ShmSegmentName(0xdeadULL, 0, 10 * pid + 1);
  const std::string suffixed = ShmSegmentName(0xdeadULL, 0, pid) + "x";
  ASSERT_TRUE(Make(other));
  ASSERT_TRUE(Make(suffixed));
  EXPECT_TRUE(Linked(ShmSegmentName(0xdeadULL, 0, pid)));
  EXPECT_EQ(RemoveShmSegmentsOf(pid), 2);
  EXPECT_FALSE(Linked(ShmSegmentName(0xdeadULL, 0, pid)));
  EXPECT_FALSE(Linked(ShmSegmentName(0xdeadULL, 1, pid)));
  EXPECT_TRUE(Linked(other));
  EXPECT_TRUE(Linked(suffixed));
  shm_unlink(other.c_str());
  shm_unlink(suffixed.c_str());
}

}  // namespace
}  // namespace baton
