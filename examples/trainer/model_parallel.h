// The model-parallel modes: --mode tensor (Megatron-style layers split over a tensor group),
// --mode pipeline (layers cut into stages, micro-batches sent along them) and --mode hybrid
// (replicas of tensor-parallel pipeline stages, --dp x --tp x --pp). One training loop serves
// all three: a rank holds one Stage (tensor_parallel.h: its layers, split over its tensor group),
// runs the schedule's micro-batches through it (pipeline.h), and averages its gradients with the
// replicas of the same stage and tensor index in overlapped buckets, as --mode sync does
// (buckets.h).
//
// Step s of replica r trains on samples order[s G + r B + i], i < B, where B is --batch and
// G = dp B: the global batch of step s is order[s G .. (s + 1) G), the batch a single process
// with --batch G trains on at step s, which is what makes the modes comparable with it (and
// each other) step for step (tests/scripts/model_parallel_test.sh).
#pragma once

#include "layout.h"
#include "trainer.h"

namespace trainer {

// Trains with the model split as `layout` says (MakeLayout has checked it against the ranks).
void TrainModelParallel(RunContext& run, Layout layout);

// --simulate: every stage of the pipeline in this one process, in an order the schedule allows,
// with the same Stage code and per-stage order of operations as the distributed run, so the
// same parameters come out (pipeline_sim.cc).
void SimulatePipeline(RunContext& run, Layout layout);

}  // namespace trainer
