#include "base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "base/fd.h"

namespace baton {

Status WriteFileAtomically(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    const Fd file(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
    if (!file.valid()) return ErrnoError("opening " + tmp, errno);
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = write(file.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        unlink(tmp.c_str());
        return ErrnoError("writing " + tmp, err);
      }
      done += static_cast<size_t>(n);
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("renaming " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

}  // namespace baton
