// Multi-process test harness: runs a test body in one forked process per rank.
//
// Baton keeps per-process state (communicator registry, transports, host
// streams), so ranks must be real processes, not threads. The parent gets a
// unique id, forks the ranks and supervises them with a hard deadline; each
// child initializes its communicator, runs the body, destroys the communicator
// and _exits. gtest assertions are meaningless inside a forked child, so bodies
// use the MP_* macros below: they send failure records through a pipe and the
// parent turns every record into a gtest failure tagged with the rank.
//
//   baton_test::RunRanks(4, [](baton_test::RankContext& ctx) {
//     int v = ctx.rank(), out = 0;
//     MP_ASSERT_OK(ctx, batonAllReduce(&v, &out, 1, batonInt32, batonSum, ctx.comm(), nullptr));
//     MP_EXPECT_EQ(ctx, out, 6);
//   });
#pragma once

#include <baton.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace baton_test {

struct Options {
  // Set in every child (setenv) before the communicator is created, e.g.
  // {"BATON_TRANSPORT", "tcp"} or {"BATON_TIMEOUT", "3"}.
  std::vector<std::pair<std::string, std::string>> env;
  // When false the child does not create a communicator: the body gets only
  // the unique id and may call batonCommInitRank itself (init failure tests),
  // handing the result to RankContext::set_comm if the harness should destroy it.
  bool init_comm = true;
  // Whether the parent creates the unique id at all. Each id runs a
  // rendezvous server in the parent until every rank joined or BATON_TIMEOUT
  // passed, so tests that never create a communicator turn it off.
  bool unique_id = true;
  // Extra unique ids obtained in the parent, for bodies that need several
  // communicators (RankContext::extra_id).
  int extra_ids = 0;
  // After this long every remaining child is killed and the test fails: a hang
  // must fail the test rather than hang the test binary.
  std::chrono::milliseconds deadline{std::chrono::seconds(120)};
  // Once a rank has failed, the others get this long to finish (they are
  // probably blocked on the failed one) before they are killed.
  std::chrono::milliseconds grace_after_failure{std::chrono::seconds(15)};
  // Ranks expected to die from a signal (rank -> signal number). Any other
  // outcome of such a rank (a normal exit, another signal) is a failure.
  std::map<int, int> expected_signal;
};

// Per-rank view passed to the body. Lives in the child process only.
class RankContext {
 public:
  RankContext(int rank, int nranks, const batonUniqueId& id, std::vector<batonUniqueId> extra_ids,
              int report_fd, void* shared);
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // The communicator the harness created (nullptr when Options::init_comm is false).
  batonComm_t comm() const { return comm_; }
  // The unique id (all zero when Options::unique_id and init_comm are false).
  const batonUniqueId& id() const { return id_; }
  const batonUniqueId& extra_id(int i) const { return extra_ids_.at(i); }
  // kSharedBytes of zeroed memory shared by all ranks of this RunRanks (and
  // not by the library): out-of-band flags for tests that must order events
  // across ranks without using the communicator under test.
  static constexpr size_t kSharedBytes = 4096;
  void* shared() const { return shared_; }

  // Hands a communicator to the harness, which destroys it after the body.
  void set_comm(batonComm_t comm) { comm_ = comm; }
  // Takes the communicator away from the harness (after the body destroyed or
  // aborted it itself, or to leak it on purpose).
  batonComm_t TakeComm() {
    batonComm_t c = comm_;
    comm_ = nullptr;
    return c;
  }

  bool failed() const { return failures_ > 0; }
  // Records a failure; the parent reports it as a gtest failure.
  void AddFailure(const char* file, int line, const std::string& message);
  // Records a failure and ends this rank at once (exit status 1) without
  // destroying the communicator: the peers will see it as a dead rank.
  [[noreturn]] void FatalFailure(const char* file, int line, const std::string& message);
  // Writes an informational line to the parent's log (not a failure).
  void Log(const std::string& message);
  // Names what the rank is about to do. If the rank then dies from a signal
  // (a crash in the library), the failure report quotes the last step.
  void SetStep(std::string_view step);

  // The message of batonGetLastError for this rank's communicator, for
  // failure messages.
  std::string LastError() const;

 private:
  void Send(char kind, const std::string& message);
  void Send(char kind, const std::string& file, int line, const std::string& message);

  int rank_;
  int nranks_;
  batonUniqueId id_;
  std::vector<batonUniqueId> extra_ids_;
  int report_fd_;
  void* shared_;
  batonComm_t comm_ = nullptr;
  int failures_ = 0;
};

// Forks nranks children running body and waits for them; failures inside the
// children become gtest failures of the calling test. Use from the gtest
// thread only.
void RunRanks(int nranks, const std::function<void(RankContext&)>& body,
              const Options& options = Options());

// Seconds elapsed on a monotonic clock since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// Human-readable name of a result code ("batonTimeout (8)") for messages.
std::string ResultName(batonResult_t r);

namespace internal {

// Collects a streamed message and records it when destroyed, so macros can
// be used as `MP_EXPECT_TRUE(ctx, x) << "more context";`.
class FailureMessage {
 public:
  FailureMessage(RankContext& ctx, const char* file, int line, bool fatal, std::string headline)
      : ctx_(ctx), file_(file), line_(line), fatal_(fatal) {
    stream_ << headline;
  }
  FailureMessage(const FailureMessage&) = delete;
  FailureMessage& operator=(const FailureMessage&) = delete;
  ~FailureMessage() {
    if (fatal_) ctx_.FatalFailure(file_, line_, stream_.str());
    ctx_.AddFailure(file_, line_, stream_.str());
  }
  template <typename T>
  FailureMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  RankContext& ctx_;
  const char* file_;
  int line_;
  bool fatal_;
  std::ostringstream stream_;
};

// Streams chars and enums as numbers, everything else as itself.
template <typename T>
void Print(std::ostream& os, const T& value) {
  if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(value);
  } else if constexpr (std::is_arithmetic_v<T>) {
    os << +value;
  } else {
    os << value;
  }
}

template <typename Op, typename A, typename B>
std::optional<std::string> CheckCompare(Op op, const char* op_str, const char* a_expr,
                                        const char* b_expr, const A& a, const B& b) {
  if (op(a, b)) return std::nullopt;
  std::ostringstream os;
  os << "Expected: (" << a_expr << ") " << op_str << " (" << b_expr << "), actual: ";
  Print(os, a);
  os << " vs ";
  Print(os, b);
  return os.str();
}

inline std::optional<std::string> CheckResult(const char* expr, batonResult_t got,
                                              batonResult_t want, const RankContext& ctx) {
  if (got == want) return std::nullopt;
  std::ostringstream os;
  os << expr << " returned " << ResultName(got) << ", expected " << ResultName(want)
     << "; last error: \"" << ctx.LastError() << "\"";
  return os.str();
}

}  // namespace internal
}  // namespace baton_test

// The macros evaluate their arguments once. Each is a one-shot `for` whose
// body runs only on failure: unlike an if/else it cannot capture a caller's
// `else`, and it still takes a trailing `<< message`.
#define MP_INTERNAL_CHECK(ctx, ok, fatal, headline)                 \
  for (bool mp_ok_ = static_cast<bool>(ok); !mp_ok_; mp_ok_ = true) \
  ::baton_test::internal::FailureMessage(ctx, __FILE__, __LINE__, fatal, headline)

#define MP_INTERNAL_CMP(ctx, a, b, op_fn, op_str, fatal)                                       \
  for (auto mp_msg_ = ::baton_test::internal::CheckCompare(op_fn{}, op_str, #a, #b, (a), (b)); \
       mp_msg_; mp_msg_.reset())                                                               \
  ::baton_test::internal::FailureMessage(ctx, __FILE__, __LINE__, fatal, *mp_msg_)

// MP_EXPECT_* record a failure and continue. MP_ASSERT_* and MP_FAIL record
// it and end the rank at once (exit status 1, communicator not destroyed),
// unlike gtest's ASSERT_*, which only returns from the current function.
#define MP_EXPECT_TRUE(ctx, cond) MP_INTERNAL_CHECK(ctx, (cond), false, "Expected true: " #cond)
#define MP_ASSERT_TRUE(ctx, cond) MP_INTERNAL_CHECK(ctx, (cond), true, "Expected true: " #cond)
#define MP_FAIL(ctx) MP_INTERNAL_CHECK(ctx, false, true, "Failed: ")
#define MP_ADD_FAILURE(ctx) MP_INTERNAL_CHECK(ctx, false, false, "Failed: ")

#define MP_EXPECT_EQ(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::equal_to<>, "==", false)
#define MP_EXPECT_NE(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::not_equal_to<>, "!=", false)
#define MP_EXPECT_LE(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::less_equal<>, "<=", false)
#define MP_EXPECT_LT(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::less<>, "<", false)
#define MP_EXPECT_GE(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::greater_equal<>, ">=", false)
#define MP_ASSERT_EQ(ctx, a, b) MP_INTERNAL_CMP(ctx, a, b, std::equal_to<>, "==", true)

// Checks a batonResult_t, quoting batonGetLastError(ctx.comm()) on failure.
#define MP_INTERNAL_RESULT(ctx, expr, want, fatal)                                              \
  for (auto mp_msg_ = ::baton_test::internal::CheckResult(#expr, (expr), (want), ctx); mp_msg_; \
       mp_msg_.reset())                                                                         \
  ::baton_test::internal::FailureMessage(ctx, __FILE__, __LINE__, fatal, *mp_msg_)

#define MP_EXPECT_OK(ctx, expr) MP_INTERNAL_RESULT(ctx, expr, batonSuccess, false)
#define MP_ASSERT_OK(ctx, expr) MP_INTERNAL_RESULT(ctx, expr, batonSuccess, true)
#define MP_EXPECT_RESULT(ctx, expr, want) MP_INTERNAL_RESULT(ctx, expr, want, false)
