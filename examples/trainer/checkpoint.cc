#include "checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "util.h"

namespace trainer {
namespace {

constexpr char kMagic[8] = {'B', 'T', 'N', 'C', 'K', 'P', 'T', '1'};
constexpr uint32_t kEndianMark = 0x01020304;

// Closes the FILE* it owns.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// Sequential binary writer/reader with error context.
class Stream {
 public:
  Stream(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void put(const void* p, size_t bytes) {
    if (bytes > 0 && std::fwrite(p, 1, bytes, f_) != bytes) {
      throw TrainError("writing " + path_ + ": " + std::strerror(errno));
    }
  }
  void get(void* p, size_t bytes) {
    if (bytes > 0 && std::fread(p, 1, bytes, f_) != bytes) {
      throw TrainError(path_ + ": truncated checkpoint");
    }
  }
  template <typename T>
  void putValue(T v) {
    put(&v, sizeof v);
  }
  template <typename T>
  T getValue() {
    T v;
    get(&v, sizeof v);
    return v;
  }
  void putFloats(const std::vector<float>& v) {
    putValue<uint64_t>(v.size());
    put(v.data(), v.size() * sizeof(float));
  }
  std::vector<float> getFloats(uint64_t limit) {
    uint64_t n = getValue<uint64_t>();
    if (n > limit)
      throw TrainError(path_ + ": corrupt checkpoint (array of " + std::to_string(n) + ")");
    std::vector<float> v(n);
    get(v.data(), n * sizeof(float));
    return v;
  }

 private:
  std::FILE* f_;
  const std::string& path_;
};

}  // namespace

void writeCheckpoint(const std::string& path, const Checkpoint& c) {
  std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw TrainError("cannot write checkpoint " + tmp + ": " + std::strerror(errno));
    Stream s(f.get(), tmp);
    s.put(kMagic, sizeof kMagic);
    s.putValue<uint32_t>(kEndianMark);
    s.putValue<uint32_t>(static_cast<uint32_t>(c.mode.size()));
    s.put(c.mode.data(), c.mode.size());
    s.putValue<uint32_t>(static_cast<uint32_t>(c.sizes.size()));
    for (int v : c.sizes) s.putValue<int32_t>(v);
    s.putValue<uint64_t>(c.seed);
    s.putValue<int64_t>(c.epochs_done);
    s.putValue<int64_t>(c.global_step);
    s.putFloats(c.params);
    s.putFloats(c.momentum);
    s.putFloats(c.ema);
    if (std::fflush(f.get()) != 0) throw TrainError("writing " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw TrainError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

Checkpoint readCheckpoint(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw TrainError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  Stream s(f.get(), path);
  char magic[8];
  s.get(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) {
    throw TrainError(path + ": not a baton-train checkpoint (bad magic)");
  }
  if (s.getValue<uint32_t>() != kEndianMark) {
    throw TrainError(path + ": written on a machine of the other byte order");
  }
  Checkpoint c;
  uint32_t mode_len = s.getValue<uint32_t>();
  if (mode_len > 64) throw TrainError(path + ": corrupt checkpoint (mode)");
  c.mode.resize(mode_len);
  s.get(c.mode.data(), mode_len);
  uint32_t layers = s.getValue<uint32_t>();
  if (layers < 2 || layers > 64) throw TrainError(path + ": corrupt checkpoint (layers)");
  for (uint32_t i = 0; i < layers; ++i) c.sizes.push_back(s.getValue<int32_t>());
  c.seed = s.getValue<uint64_t>();
  c.epochs_done = s.getValue<int64_t>();
  c.global_step = s.getValue<int64_t>();
  constexpr uint64_t kLimit = uint64_t{1} << 32;
  c.params = s.getFloats(kLimit);
  c.momentum = s.getFloats(kLimit);
  c.ema = s.getFloats(kLimit);
  if (c.momentum.size() != c.params.size() || (!c.ema.empty() && c.ema.size() != c.params.size())) {
    throw TrainError(path + ": corrupt checkpoint (array sizes disagree)");
  }
  return c;
}

}  // namespace trainer
