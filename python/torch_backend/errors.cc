// The backend's errors: Baton's results as torch's DistBackendError (work.h).
#include "work.h"

namespace baton_torch {

std::exception_ptr BackendError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

[[noreturn]] void ThrowBackendError(const std::string& message) {
  std::rethrow_exception(BackendError(message));
}

std::string ErrorText(const std::string& what, batonResult_t result, batonComm_t comm,
                      batonComm_t failed_of) {
  const char* message = batonGetLastError(comm);
  std::string text = "baton " + what + ": " + batonGetErrorString(result) +
                     (message != nullptr && *message != '\0' ? std::string(": ") + message : "");
  // The ranks that failed, from the API rather than the message's words, in one form a
  // program can parse: "[failed ranks: 1, 3]".
  int n = 0;
  if (failed_of == nullptr) failed_of = comm;
  if (failed_of != nullptr && (result == batonRemoteError || result == batonTimeout) &&
      batonCommGetFailedRanks(failed_of, nullptr, 0, &n) == batonSuccess && n > 0) {
    std::vector<int> ranks(static_cast<size_t>(n));
    if (batonCommGetFailedRanks(failed_of, ranks.data(), n, &n) == batonSuccess) {
      text += " [failed ranks: ";
      for (size_t i = 0; i < ranks.size() && i < static_cast<size_t>(n); ++i)
        text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
      text += "]";
    }
  }
  return text;
}

std::exception_ptr CaptureError(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::DistBackendError&) {
    return std::current_exception();
  } catch (const c10::Error& e) {
    return BackendError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return BackendError(e.what());
  } catch (...) {
    return BackendError("baton backend: unknown error");
  }
  return nullptr;
}

}  // namespace baton_torch
