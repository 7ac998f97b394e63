// BATON_CALIBRATE=1: measures the cost model's figures on a new
// communicator instead of trusting the defaults. Per link class present, up
// to three pairs of ranks in turn run a ping-pong of small messages (alpha),
// a stream of small messages (overhead) and a ping-pong of 32 MiB (4 MiB
// over a network; beta), and the fastest pair counts: the model adds the
// contention for cores itself. The first rank of each host times the CPU
// reduce-copy of 32 MiB per datatype (gamma; the slowest host counts).
// Every rank gets the same figures (they are exchanged), and the first rank
// of each host caches them in BATON_CALIBRATION_CACHE/calibration-HOST.txt,
// so a later communicator whose hosts all have a cache with its link
// classes skips the measuring. docs/tuning.md describes the procedure.
#pragma once

#include <string>

#include "base/status.h"
#include "tuning/cost_model.h"

namespace baton {

class Communicator;

// Replaces `params` with calibrated figures (measured or cached); a class
// nobody could measure keeps its default. Collective over `comm`.
Status Calibrate(Communicator* comm, CostParams* params);

// The cache directory: BATON_CALIBRATION_CACHE, else $XDG_CACHE_HOME/baton,
// else $HOME/.cache/baton ("" when none can be named).
std::string CalibrationCacheDir(const std::string& setting);

}  // namespace baton
