// micro_batches = k (gradient accumulation): k consecutive micro-batches of the batch axis per
// training step. Read after the steps and train_steps, before the faults and [expect].
#include <string>
#include <vector>

#include "scenario/loader.hpp"

namespace shardsim {

std::vector<std::int64_t> micro_batch_rows(std::int64_t rows, int k) {
  SHARDSIM_ASSERT(k >= 1 && rows >= k, "micro_batch_rows: 1 <= k <= rows");
  const std::int64_t chunk = (rows + k - 1) / k;
  std::vector<std::int64_t> out;
  for (int j = 0; j < k; ++j) {
    const std::int64_t begin = std::min(rows, j * chunk);
    out.push_back(std::min(rows, begin + chunk) - begin);
  }
  SHARDSIM_ASSERT(out.back() > 0, "micro_batch_rows: torch.chunk gives fewer than k pieces");
  return out;
}

namespace {

// torch.chunk of `rows` into k pieces leaves none empty (c = ceil(rows/k), (k-1) c < rows).
bool chunks_evenly_enough(std::int64_t rows, std::int64_t k) {
  const std::int64_t chunk = (rows + k - 1) / k;
  return (k - 1) * chunk < rows;
}

std::string valid_counts(std::int64_t rows) {
  std::string out;
  for (std::int64_t k = 1; k <= rows; ++k) {
    if (chunks_evenly_enough(rows, k)) out += (out.empty() ? "" : ", ") + std::to_string(k);
  }
  return out;
}

}  // namespace

void Loader::micro_batches(const toml::table& root, Scenario& s) const {
  const toml::node* v = root.get("micro_batches");
  if (!v) return;
  const std::string key = "micro_batches";
  const std::int64_t k = integer(*v, key);
  if (k < 1) fail(*v, key, "micro_batches must be >= 1, got " + std::to_string(k));
  if (k == 1) return;
  const std::string axis(kMicroBatchAxis);
  const TensorSpec* first = nullptr;
  for (const TensorSpec& t : s.tensors) {
    if (t.role == TensorRole::parameter || !t.shape.has(axis)) continue;
    if (!first) first = &t;
    if (t.shape.extent(axis) != first->shape.extent(axis)) {
      fail(*v, key,
           "micro-batches cut the " + axis + " axis of every input and target, but '" +
               first->name + "' " + first->shape.str() + " and '" + t.name + "' " + t.shape.str() +
               " differ there");
    }
  }
  if (!first) {
    fail(*v, key, "no input or target has an axis " + quote(axis) + " to cut into micro-batches");
  }
  const std::int64_t rows = first->shape.extent(axis);
  const std::string of =
      " the " + axis + " extent " + std::to_string(rows) + " of '" + first->name + "'";
  if (k > rows) {
    fail(*v, key,
         "micro_batches = " + std::to_string(k) + " exceeds" + of +
             " (a micro-batch holds at least one row)");
  }
  if (!chunks_evenly_enough(rows, k)) {
    fail(*v, key,
         "torch.chunk cuts" + of + " into pieces of " + std::to_string((rows + k - 1) / k) +
             " rows, which makes fewer than " + std::to_string(k) +
             " micro-batches; micro_batches can be " + valid_counts(rows));
  }
  if (root.get("stream")) {
    fail(*v, key, "micro_batches >= 2 is not supported together with [stream]");
  }
  for (const StepSpec& step : s.steps) {
    const std::string at = "steps[" + std::to_string(step.index) + "]";
    if (step.kind == OpKind::dropout) {
      fail(*v, key,
           "micro_batches >= 2 is not supported with dropout (" + at +
               "): its mask is drawn by flat index in the micro-batch's shape, so the "
               "micro-batches' masks are not rows of the whole batch's mask");
    }
    for (const char* axis_key : {"axis", "batch_axis"}) {
      if (!step.has(axis_key)) continue;
      const std::string value = step.str(axis_key);
      const bool reduces_batch = std::string(axis_key) == "axis" && value == axis;
      const bool other_batch = std::string(axis_key) == "batch_axis" && value != axis;
      if (reduces_batch || other_batch) {
        throw LocatedError(located(
            file_, step.params.at(axis_key).loc, at + "." + axis_key,
            reduces_batch ? "this step reduces over " + quote(axis) +
                                ", which micro_batches cuts: a micro-batch would see only its rows"
                          : "micro_batches cuts the " + quote(axis) +
                                " axis; the loss's batch_axis must be it"));
      }
    }
  }
  s.micro_batches = static_cast<int>(k);
}

}  // namespace shardsim
