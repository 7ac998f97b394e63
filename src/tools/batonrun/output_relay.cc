#include "tools/batonrun/output_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace batonrun {

void Sink::Write(std::string_view data) {
  while (!broken_ && !data.empty()) {
    ssize_t n = write(fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      // Inherited O_NONBLOCK stream: wait until it drains rather than losing lines.
      pollfd pfd = {fd_, POLLOUT, 0};
      poll(&pfd, 1, -1);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      broken_ = true;
    }
  }
}

void LineRelay::Pump() {
  char buffer[16 * 1024];
  while (source_.valid()) {
    ssize_t n = read(source_.get(), buffer, sizeof(buffer));
    if (n > 0) {
      Consume(std::string_view(buffer, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {  // End of file, or an error that would only repeat.
      Close();
    }
  }
}

void LineRelay::Finish() {
  Pump();
  Close();
}

void LineRelay::Consume(std::string_view data) {
  std::string out;
  for (;;) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) break;
    out += prefix_;
    out += partial_;
    out += data.substr(0, newline + 1);
    partial_.clear();
    data.remove_prefix(newline + 1);
  }
  partial_ += data;
  if (partial_.size() >= kMaxLine) {
    out += prefix_;
    out += partial_;
    out += '\n';
    partial_.clear();
  }
  sink_->Write(out);
}

void LineRelay::Close() {
  if (!partial_.empty()) {
    sink_->Write(prefix_ + partial_ + "\n");
    partial_.clear();
  }
  source_.reset();
}

}  // namespace batonrun
