// The boundary trace: one entry per op output and per collective, in execution order.
//
// Each entry records the step (training step, 1-based), the streamed chunk (1-based), the op and
// tensor, the global shape with named axes, the placement, and for every rank its local shape and
// global slice. `explain` prints it and the report carries it (DESIGN.md invariant 2).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardsim/dist_tensor.hpp"

namespace shardsim {

// What a plan says about a boundary it produces.
struct BoundaryLabel {
  std::string op;      // "layer_norm", "all_gather", ...
  std::string tensor;  // the sharded tensor's name at this boundary
  // The dense-oracle tensor it must equal (defaults to `tensor`). Empty string: not compared.
  std::string dense;
  // The sharded arithmetic is the dense arithmetic in the same order, so the values must be
  // bitwise equal (DESIGN.md invariant 5). Anything less is a failure, not noise. The runner
  // keeps the claim only while every tensor in `inputs` matched the oracle bitwise: the same
  // arithmetic on different inputs need not give the same bits.
  bool exact = false;
  std::string kind = "op";  // "input", "op", "collective", "update", "check"
  std::vector<std::string> inputs;  // the tensors this value is computed from
  // Free-text findings shown under the boundary (report "notes", table, explain), e.g. the
  // dropout repetition detector's per-pair agreement.
  std::vector<std::string> notes;

  const std::string& dense_name() const { return dense.empty() ? tensor : dense; }
};

struct RankExtent {
  int rank = 0;
  Shape local_shape;
  std::map<std::string, std::int64_t> offset;  // global offset per sharded axis
  std::string slice;                           // "seq[12:13)", "seq[12:13)+3pad" or "full"
};

struct TraceEntry {
  int id = 0;
  int step = 1;
  int chunk = 1;
  std::string kind;
  std::string op;
  std::string tensor;
  std::string dense;
  bool exact = false;
  Shape global;
  Placement placement;
  std::vector<RankExtent> ranks;
  std::vector<std::string> notes;  // BoundaryLabel::notes
};

// Builds the per-rank extents of a DistTensor from its metadata.
std::vector<RankExtent> rank_extents(const Shape& global, const Placement& placement, int ranks);

// One line per boundary plus one indented line per rank.
std::string format_entry(const TraceEntry& entry);

}  // namespace shardsim
