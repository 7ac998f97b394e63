// Training data: Fashion-MNIST in IDX format (gzip or plain) and a deterministic synthetic set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

// Both data sources have ten classes (Fashion-MNIST's, and the synthetic set's prototypes).
inline constexpr int kClasses = 10;

// A labelled image set kept as bytes (0..255); batches are converted to floats on the fly, which
// keeps four ranks' copies of Fashion-MNIST at 55 MB each instead of 220 MB.
struct Dataset {
  size_t count = 0;
  size_t features = 0;  // pixels per image (784)
  int classes = kClasses;
  std::vector<uint8_t> pixels;  // count * features
  std::vector<uint8_t> labels;  // count, each < classes

  const uint8_t* image(size_t i) const { return pixels.data() + i * features; }
};

// The train and test halves of one data source (and --val-fraction of the train half held out).
struct DataSplit {
  Dataset train;
  Dataset val;  // empty without --val-fraction
  Dataset test;
  std::string description;  // e.g. "fashion-mnist (60000 train, 10000 test)"
};

// Reads an IDX image file (magic 0x00000803) and its label file (0x00000801). Each path may name
// a .gz file or a plain one. Throws TrainError naming the file for a missing file, a bad magic
// number, dimensions that do not fit, a truncated payload, a count mismatch or a label >= 10.
Dataset ReadIdx(const std::string& images_path, const std::string& labels_path);

// Loads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
DataSplit LoadFashionMnist(const std::string& dir);

// A deterministic, learnable set: ten random class prototypes (28x28) plus per-sample noise, the
// same bytes for a given (count, seed) everywhere. The test half has count / 5 samples.
DataSplit MakeSynthetic(size_t count, uint64_t seed);

// The default data directory (Debian's dataset-fashion-mnist package).
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

}  // namespace trainer
