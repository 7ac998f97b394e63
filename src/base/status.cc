#include "base/status.h"

#include <cstring>

namespace baton {

Status ErrnoError(const std::string& what, int errno_value) {
  return SystemError(what + ": " + strerror(errno_value));
}

}  // namespace baton
