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
  void Put(const void* p, size_t bytes) {
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
  void PutValue(T v) {
    Put(&v, sizeof v);
  }
  template <typename T>
  T GetValue() {
    T v;
    get(&v, sizeof v);
    return v;
  }
  void PutFloats(const std::vector<float>& v) {
    PutValue<uint64_t>(v.size());
    Put(v.data(), v.size() * sizeof(float));
  }
  std::vector<float> GetFloats(uint64_t limit) {
    uint64_t n = GetValue<uint64_t>();
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

void WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw TrainError("cannot write checkpoint " + tmp + ": " + std::strerror(errno));
    Stream s(f.get(), tmp);
    s.Put(kMagic, sizeof kMagic);
    s.PutValue<uint32_t>(kEndianMark);
    s.PutValue<uint32_t>(static_cast<uint32_t>(c.mode.size()));
    s.Put(c.mode.data(), c.mode.size());
    s.PutValue<uint32_t>(static_cast<uint32_t>(c.sizes.size()));
    for (int v : c.sizes) s.PutValue<int32_t>(v);
    s.PutValue<uint64_t>(c.seed);
    s.PutValue<int64_t>(c.epochs_done);
    s.PutValue<int64_t>(c.global_step);
    s.PutFloats(c.params);
    s.PutFloats(c.momentum);
    s.PutFloats(c.ema);
    if (!c.model_state.empty()) s.PutFloats(c.model_state);
    if (std::fflush(f.get()) != 0) throw TrainError("writing " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw TrainError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

Checkpoint ReadCheckpoint(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw TrainError("cannot open checkpoint " + path + ": " + std::strerror(errno));
  Stream s(f.get(), path);
  char magic[8];
  s.get(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) {
    throw TrainError(path + ": not a baton-train checkpoint (bad magic)");
  }
  if (s.GetValue<uint32_t>() != kEndianMark) {
    throw TrainError(path + ": written on a machine of the other byte order");
  }
  Checkpoint c;
  uint32_t mode_len = s.GetValue<uint32_t>();
  if (mode_len > 64) throw TrainError(path + ": corrupt checkpoint (mode)");
  c.mode.resize(mode_len);
  s.get(c.mode.data(), mode_len);
  uint32_t layers = s.GetValue<uint32_t>();
  if (layers < 2 || layers > 64) throw TrainError(path + ": corrupt checkpoint (layers)");
  for (uint32_t i = 0; i < layers; ++i) c.sizes.push_back(s.GetValue<int32_t>());
  c.seed = s.GetValue<uint64_t>();
  c.epochs_done = s.GetValue<int64_t>();
  c.global_step = s.GetValue<int64_t>();
  constexpr uint64_t kLimit = uint64_t{1} << 32;
  c.params = s.GetFloats(kLimit);
  c.momentum = s.GetFloats(kLimit);
  c.ema = s.GetFloats(kLimit);
  if (const int next = std::fgetc(f.get()); next != EOF) {
    std::ungetc(next, f.get());
    c.model_state = s.GetFloats(kLimit);
  }
  // The optimizer's state is one vector of the parameters' size per part (Adam: two).
  const bool state_fits =
      c.momentum.size() == c.params.size() || c.momentum.size() == 2 * c.params.size();
  if (!state_fits || (!c.ema.empty() && c.ema.size() != c.params.size())) {
    throw TrainError(path + ": corrupt checkpoint (array sizes disagree)");
  }
  return c;
}

}  // namespace trainer
