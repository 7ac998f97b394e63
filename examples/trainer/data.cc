#include "data.h"

#include <zlib.h>

#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "util.h"

namespace trainer {
namespace {

constexpr uint32_t kImageMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelMagic = 0x00000801;  // unsigned byte, 1 dimension

// Owns a zlib gzFile (reads gzip and plain files alike).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      throw TrainError("cannot open " + path + ": " + std::strerror(errno) +
                       " (install the dataset-fashion-mnist package or pass --data DIR)");
    }
    if (!S_ISREG(st.st_mode)) throw TrainError(path + ": not a regular file");
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) throw TrainError("cannot open " + path + ": " + std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `bytes`; returns how many were read. Throws on a corrupt gzip stream.
  size_t Read(void* out, size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
      int n = gzread(file_, static_cast<char*>(out) + done, chunk);
      if (n < 0) {
        int err = 0;
        const char* msg = gzerror(file_, &err);
        throw TrainError(path_ + ": corrupt or unreadable gzip data: " + msg);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  uint32_t ReadBigEndian32(const char* what) {
    unsigned char b[4];
    if (Read(b, 4) != 4) throw TrainError(path_ + ": truncated header (no " + what + ")");
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

  // True when the stream has bytes left (a file longer than its header says is malformed too).
  bool HasMore() {
    unsigned char b;
    return Read(&b, 1) == 1;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Prefers PATH.gz, then PATH.
std::string PickFile(const std::string& dir, const std::string& name) {
  std::string gz = dir + "/" + name + ".gz";
  struct stat st {};
  if (stat(gz.c_str(), &st) == 0) return gz;
  std::string plain = dir + "/" + name;
  if (stat(plain.c_str(), &st) == 0) return plain;
  return gz;  // reported as missing by GzReader
}

}  // namespace

Dataset ReadIdx(const std::string& images_path, const std::string& labels_path) {
  Dataset d;
  {
    GzReader in(images_path);
    uint32_t magic = in.ReadBigEndian32("magic number");
    if (magic != kImageMagic) {
      throw TrainError(images_path + ": bad magic " + Hex(magic) + ", expected " +
                       Hex(kImageMagic) + " (an IDX file of unsigned-byte images)");
    }
    uint32_t count = in.ReadBigEndian32("image count");
    uint32_t rows = in.ReadBigEndian32("row count");
    uint32_t cols = in.ReadBigEndian32("column count");
    if (count == 0 || rows == 0 || cols == 0 || rows > 4096 || cols > 4096 || count > (1u << 26)) {
      throw TrainError(images_path + ": implausible dimensions " + std::to_string(count) + " x " +
                       std::to_string(rows) + " x " + std::to_string(cols));
    }
    d.count = count;
    d.features = size_t{rows} * cols;
    d.pixels.resize(d.count * d.features);
    size_t got = in.Read(d.pixels.data(), d.pixels.size());
    if (got != d.pixels.size()) {
      throw TrainError(images_path + ": truncated: the header announces " + std::to_string(count) +
                       " images of " + std::to_string(rows) + "x" + std::to_string(cols) + " (" +
                       std::to_string(d.pixels.size()) + " bytes) but only " + std::to_string(got) +
                       " bytes follow");
    }
    if (in.HasMore()) throw TrainError(images_path + ": trailing bytes after the last image");
  }
  {
    GzReader in(labels_path);
    uint32_t magic = in.ReadBigEndian32("magic number");
    if (magic != kLabelMagic) {
      throw TrainError(labels_path + ": bad magic " + Hex(magic) + ", expected " +
                       Hex(kLabelMagic) + " (an IDX file of unsigned-byte labels)");
    }
    uint32_t count = in.ReadBigEndian32("label count");
    if (count != d.count) {
      throw TrainError(labels_path + ": " + std::to_string(count) + " labels for " +
                       std::to_string(d.count) + " images in " + images_path);
    }
    d.labels.resize(count);
    size_t got = in.Read(d.labels.data(), count);
    if (got != count) {
      throw TrainError(labels_path + ": truncated: the header announces " + std::to_string(count) +
                       " labels but only " + std::to_string(got) + " bytes follow");
    }
    if (in.HasMore()) throw TrainError(labels_path + ": trailing bytes after the last label");
    for (size_t i = 0; i < count; ++i) {
      if (d.labels[i] >= d.classes) {
        throw TrainError(labels_path + ": label " + std::to_string(d.labels[i]) + " at index " +
                         std::to_string(i) + " is not below " + std::to_string(d.classes));
      }
    }
  }
  return d;
}

DataSplit LoadFashionMnist(const std::string& dir) {
  DataSplit s;
  s.train =
      ReadIdx(PickFile(dir, "train-images-idx3-ubyte"), PickFile(dir, "train-labels-idx1-ubyte"));
  s.test =
      ReadIdx(PickFile(dir, "t10k-images-idx3-ubyte"), PickFile(dir, "t10k-labels-idx1-ubyte"));
  if (s.train.features != s.test.features) {
    throw TrainError(dir + ": train images have " + std::to_string(s.train.features) +
                     " pixels but test images " + std::to_string(s.test.features));
  }
  s.description = "fashion-mnist " + dir + " (" + std::to_string(s.train.count) + " train, " +
                  std::to_string(s.test.count) + " test)";
  return s;
}

DataSplit MakeSynthetic(size_t count, uint64_t seed) {
  constexpr size_t kFeatures = 784;
  Rng proto_rng(MixSeed(seed, 0x5e7));
  std::vector<float> prototypes(kClasses * kFeatures);
  for (float& p : prototypes) p = static_cast<float>(proto_rng.Uniform() * 255.0);
  auto fill = [&](Dataset& d, size_t n, uint64_t stream) {
    Rng rng(MixSeed(seed, stream));
    d.count = n;
    d.features = kFeatures;
    d.classes = kClasses;
    d.pixels.resize(n * kFeatures);
    d.labels.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int label = static_cast<int>(rng.Below(kClasses));
      d.labels[i] = static_cast<uint8_t>(label);
      for (size_t f = 0; f < kFeatures; ++f) {
        double v = prototypes[label * kFeatures + f] + 90.0 * rng.Normal();
        d.pixels[i * kFeatures + f] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  };
  DataSplit s;
  fill(s.train, count, 1);
  fill(s.test, std::max<size_t>(count / 5, 1), 2);
  s.description = "synthetic (" + std::to_string(s.train.count) + " train, " +
                  std::to_string(s.test.count) + " test)";
  return s;
}

}  // namespace trainer
