#include "tools/batonrun/elastic_dir.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace batonrun {

ElasticDir::~ElasticDir() {
  if (path_.empty()) return;
  if (DIR* dir = opendir(path_.c_str())) {
    std::vector<std::string> names;
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
    for (const std::string& name : names) unlink((path_ + "/" + name).c_str());
  }
  rmdir(path_.c_str());
}

bool ElasticDir::Create(std::string* error) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/baton-elastic-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    *error = "cannot make the --elastic directory " + pattern + ": " + strerror(errno);
    return false;
  }
  path_ = buf.data();
  return true;
}

}  // namespace batonrun
