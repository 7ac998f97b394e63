// batonrun's output relay: with --prefix, every line a rank writes is passed
// on whole, with "[R] " in front, so lines of different ranks never mix.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/fd.h"

namespace batonrun {

// One of batonrun's own output streams (stdout or stderr). Remembers a broken pipe so output
// for a reader that went away is dropped instead of failing again for every line.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}

  void Write(std::string_view data);

 private:
  int fd_;
  bool broken_ = false;
};

// Copies one output stream of a rank (the read end of its pipe) to a Sink, putting "[R] " in
// front of every line. Lines are gathered and written whole, so lines of different ranks never
// interleave mid-line, and each is passed on as soon as it is complete (line buffering).
class LineRelay {
 public:
  // A line this long with no newline is passed on anyway, so one rank printing without newlines
  // cannot make batonrun hold an unbounded amount of its output.
  static constexpr size_t kMaxLine = 64 * 1024;

  LineRelay(baton::Fd source, Sink* sink, std::string prefix)
      : source_(std::move(source)), sink_(sink), prefix_(std::move(prefix)) {}

  int fd() const { return source_.get(); }
  bool open() const { return source_.valid(); }

  // Reads what is available without blocking and passes on the complete lines. Closes the source
  // at end of file, passing on an unterminated last line as a line of its own.
  void Pump();

  // The rank exited: passes on what it wrote and stops reading. Nothing later is waited for:
  // a background process the rank left behind may hold the pipe open for a long time.
  void Finish();

 private:
  void Consume(std::string_view data);
  void Close();

  baton::Fd source_;
  Sink* sink_;
  std::string prefix_;
  std::string partial_;  // Start of a line whose newline has not arrived yet.
};

}  // namespace batonrun
