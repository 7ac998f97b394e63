// Merging timelines (docs/tracing.md): every rank of a job run with
// BATON_TRACE_FILE writes its own Chrome trace-event files (base/trace_file.h),
// one process track per rank; batonrun joins its ranks' files into the path
// the job was given when the job ends, and `batonrun --merge-trace OUT IN...`
// joins any such files (the hosts of a multi-host job, or jobs started by
// mpirun or srun).
#pragma once

#include <string>
#include <vector>

#include "tools/batonrun/options.h"

namespace batonrun {

// The files of global ranks [first_rank, first_rank + count) for `base`,
// rank by rank, each rank's sorted by name; only files modified at or
// after `since` (seconds since the epoch), so a rerun never picks up an
// earlier job's files.
std::vector<std::string> RankTraceFiles(const std::string& base, int first_rank, int count,
                                        double since);

// The inner text of `json`'s traceEvents array (a trace-event file's
// "traceEvents" member, or the whole array of the array form), trimmed;
// false with *error when there is none.
bool TraceEventsOf(const std::string& json, std::string* events, std::string* error);

// Writes one trace-event file at `out` holding the events of every file of
// `inputs`, whose tracks (pids) stay as they are. False with *error when an
// input cannot be read or holds no traceEvents, or `out` cannot be written.
bool MergeTraceFiles(const std::vector<std::string>& inputs, const std::string& out,
                     std::string* error);

// Before a job: creates the file where the ranks note the BATON_TRACE_FILE
// they write (a program may set it itself, as baton-train --trace does)
// and exports its path as BATON_TRACE_LIST to them. Returns the path ("":
// none could be made; then only a BATON_TRACE_FILE given to batonrun is
// merged).
std::string PrepareTraceList();

// After a job: for each BATON_TRACE_FILE the ranks were given (batonrun's
// environment or -x) or noted in `list`, merges the files its ranks wrote
// since `job_start` (seconds since the epoch) into that path, or into
// STEM.ranksA-B.json when this batonrun started only part of the job;
// removes the merged rank files and `list`, and says where the timeline is
// on stderr.
void MergeJobTrace(const Options& options, double job_start, const std::string& list);

}  // namespace batonrun
