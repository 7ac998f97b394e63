// Whole-file writes that a concurrent reader never sees half done.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace baton {

// Writes `text` to a temporary file beside `path` (named for this process),
// then renames it onto `path`: a reader sees the old file or the new one,
// never part of it. The mode is fopen's (0666 less the umask). On failure
// the temporary file is removed and `path` is left as it was.
Status WriteFileAtomically(const std::string& path, std::string_view text);

}  // namespace baton
