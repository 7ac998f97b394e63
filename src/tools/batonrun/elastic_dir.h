// batonrun --elastic's directory: where a replacement rank and the job's ranks meet to hand over
// a batonCommGrow id (the out-of-band step of ncclCommGrow), passed to every rank as
// BATON_ELASTIC_DIR. batonrun only makes it private and removes it; what goes in it is the
// ranks' business (docs/reliability.md, "Elastic jobs").
#pragma once

#include <string>

namespace batonrun {

class ElasticDir {
 public:
  ElasticDir() = default;
  ElasticDir(const ElasticDir&) = delete;
  ElasticDir& operator=(const ElasticDir&) = delete;
  // Removes the directory and every file in it.
  ~ElasticDir();

  // Makes a fresh directory, mode 0700, under $TMPDIR (else /tmp): the grow ids written there
  // hold the job's secret.
  bool Create(std::string* error);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace batonrun
