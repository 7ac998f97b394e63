// Status: a result code with a message, the way errors travel inside Baton.
#pragma once

#include <baton.h>

#include <string>
#include <utility>

namespace baton {

// The outcome of an internal operation. Cheap when ok (no allocation);
// carries a human-readable message otherwise. Converted to batonResult_t at
// the C boundary, where the message becomes batonGetLastError's text.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(batonResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == batonSuccess; }
  batonResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context ("bootstrap: ..."), keeping the code.
  Status& WithContext(const std::string& context) {
    if (!ok()) message_ = context + ": " + message_;
    return *this;
  }

 private:
  batonResult_t code_ = batonSuccess;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {batonInvalidArgument, std::move(m)};
}
inline Status InvalidUsage(std::string m) {
  return {batonInvalidUsage, std::move(m)};
}
inline Status SystemError(std::string m) {
  return {batonSystemError, std::move(m)};
}
inline Status InternalError(std::string m) {
  return {batonInternalError, std::move(m)};
}
inline Status RemoteError(std::string m) {
  return {batonRemoteError, std::move(m)};
}
inline Status TimeoutError(std::string m) {
  return {batonTimeout, std::move(m)};
}

// A SystemError whose message ends with strerror(errno_value).
Status ErrnoError(const std::string& what, int errno_value);

}  // namespace baton

// Returns from the enclosing function when `expr` yields a failed Status.
#define BATON_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::baton::Status _baton_st = (expr);    \
    if (!_baton_st.ok()) return _baton_st; \
  } while (0)
