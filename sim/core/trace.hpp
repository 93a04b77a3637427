// The boundary trace: one entry per op output and per collective, in execution order.
//
// Each entry records the step (training step, 1-based), the streamed chunk (1-based), the op and
// tensor, the global shape with named axes, the placement, and for every rank its local shape and
// global slice. `explain` prints it and the report carries it (invariant 2 in
// docs/architecture.md).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dist_tensor.hpp"

namespace shardsim {

// What a boundary is: a scenario tensor arriving, an op's output, a collective's result, a
// parameter update, or a consistency check (e.g. replicas bitwise equal).
enum class BoundaryKind { input, op, collective, update, check };
std::string_view boundary_kind_name(BoundaryKind kind);

// Boundary names. Every name a plan records and every oracle tensor a step stores is built by
// these helpers, so the two sides of a comparison cannot drift apart by a spelling:
//   grad_name("x")            "grad(x)"       the gradient of x
//   part_name("y", "mean")    "y.mean"        a named intermediate of the step that outputs y
//   moved_name("dy", "x")     "dy@x"          a copy of dy moved to the layout x needs
// Runner bookkeeping relies on the same shapes: an entry derived from NAME is NAME, NAME.PART or
// NAME@WHERE (derived_from).
std::string grad_name(std::string_view tensor);
bool is_grad_name(std::string_view name);
std::string part_name(std::string_view owner, std::string_view part);
std::string moved_name(std::string_view tensor, std::string_view destination);
bool derived_from(std::string_view key, std::string_view name);

// What a plan says about a boundary it produces.
//
// The contract with the oracle: a boundary is compared with the oracle tensor named `dense`
// (defaults to `tensor`), which the step must have stored before the plan runs. A boundary
// that has no dense counterpart by design (a per-rank merge state, a faulty plan's private
// partial sums) says so with has_oracle = false. The runner treats a missing oracle tensor
// under has_oracle, or an exactness claim without an oracle, as a broken internal invariant
// (InternalError), so a misspelt name cannot silently turn a check into "unchecked".
struct BoundaryLabel {
  std::string op;      // "layer_norm", "all_gather", ...
  std::string tensor;  // the sharded tensor's name at this boundary
  std::string dense;   // the oracle tensor it must equal; empty: the same name as `tensor`
  // The sharded arithmetic is the dense arithmetic in the same order, so the values must be
  // bitwise equal (invariant 5 in docs/architecture.md). Anything less is a failure, not noise. The
  // runner keeps the claim only while every tensor in `inputs` matched the oracle bitwise: the same
  // arithmetic on different inputs need not give the same bits.
  bool exact = false;
  BoundaryKind kind = BoundaryKind::op;
  std::vector<std::string> inputs;  // the tensors this value is computed from
  // Free-text findings shown under the boundary (report "notes", table, explain), e.g. the
  // dropout repetition detector's per-pair agreement.
  std::vector<std::string> notes;
  bool has_oracle = true;  // false: no dense counterpart exists by design (see above)
  // A bf16/f16 run: the kernel that wrote the ranks' values and the oracle's rounded every
  // element to the storage format as it stored it (LayerNormParams::store), so recording the
  // boundary rounds nothing again. Only a label whose two tensors both come straight from such a
  // kernel (or are copies of its values) may say so; a sum of such values may not.
  bool stored = false;

  const std::string& dense_name() const { return dense.empty() ? tensor : dense; }
};

struct RankExtent {
  int rank = 0;
  std::vector<int> coords;  // one per mesh dim
  Shape local_shape;
  std::map<std::string, std::int64_t> offset;  // global offset per sharded axis
  // "seq[12:13)", "seq[12:13)+3pad", "batch[0:2) seq[4:8)" or "full"; " (addend)" or
  // "full (addend)" where a dim is Partial
  std::string slice;
};

struct TraceEntry {
  int id = 0;
  int step = 1;
  int chunk = 1;
  // Gradient accumulation (micro_batches = k >= 2): the micro-batch j in [1, k] that recorded
  // it, and k. Both 0 in a run without micro-batches. The step's update (after the last
  // micro-batch) carries micro = k; the scenario's tensors as first loaded carry micro = 0.
  int micro = 0;
  int micro_count = 0;
  BoundaryKind kind = BoundaryKind::op;
  std::string op;
  std::string tensor;
  std::string dense;
  bool exact = false;
  Shape global;
  Layout layout;
  std::shared_ptr<const Mesh> mesh;
  std::vector<RankExtent> ranks;
  std::vector<std::string> notes;   // BoundaryLabel::notes
  std::vector<std::string> inputs;  // BoundaryLabel::inputs
  // A narrow run stored this boundary's values in its format (storage.hpp); false for an op's
  // f32 parts and in every wider run.
  bool narrow = false;
  // The [[steps]] entry (0-based) whose forward or backward recorded it; -1 for the runner's own
  // boundaries (inputs, chunk loads, parameter updates). Golden manifests use it to give each
  // boundary its op's parameters.
  int scenario_step = -1;
};

// Builds the per-rank extents of a DistTensor from its metadata.
std::vector<RankExtent> rank_extents(const Shape& global, const Layout& layout, const Mesh& mesh);

// "step 1 chunk 1", or "step 1 micro 2/3 chunk 1" in a micro-batched run (micro > 0).
std::string where_label(int step, int micro, int micro_count, int chunk);

// One line per boundary plus one indented line per rank.
std::string format_entry(const TraceEntry& entry);

}  // namespace shardsim
