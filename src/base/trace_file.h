// The names of BATON_TRACE_FILE's files (docs/tracing.md): every rank
// writes its own Chrome trace-event JSON file beside the path it was given,
// and batonrun merges a job's files into that path. Shared by the library
// (which writes) and batonrun and programs that add their own events to
// the timeline (which read, or write beside it).
//
// For BATON_TRACE_FILE=dir/t.json, rank 3 writes dir/t.rank3.json for its
// first traced communicator, dir/t.rank3.comm2.json for its second, and so
// on; another writer of rank 3 (baton-train's own events) picks another
// tag: dir/t.rank3.trainer.json. Every file of rank 3 starts with
// TraceRankPrefix ("dir/t.rank3.") and ends with ".json".
#pragma once

#include <string>

namespace baton {

// `base` without a trailing ".json" (the stem the rank files share).
inline std::string TraceStem(const std::string& base) {
  const std::string ext = ".json";
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
    return base.substr(0, base.size() - ext.size());
  return base;
}

// "dir/t.rank3." for base "dir/t.json" and rank 3.
inline std::string TraceRankPrefix(const std::string& base, int rank) {
  return TraceStem(base) + ".rank" + std::to_string(rank) + ".";
}

// Rank `rank`'s file tagged `tag` ("" for the first communicator's).
inline std::string TraceRankFile(const std::string& base, int rank, const std::string& tag = "") {
  return TraceRankPrefix(base, rank) + (tag.empty() ? "" : tag + ".") + "json";
}

}  // namespace baton
