// Whether each listed fault changes a plan this scenario runs (Loader::fault_plans). The op check
// in Loader::fault only asks that some step has the fault's op; a fault can still name a plan
// that no step of that op runs (combine_token_means on a hidden-sharded LayerNorm) or a case
// the scenario's data cannot reach (padding_in_loss without padding, cache_raw_k without a
// second chunk). Such a fault would change nothing and its scenario would pass silently, so the
// loader refuses it and says what the fault needs. The rules follow the plans' own choices:
//   layer_norm   input Shard(axis) on the step's dim -> the hidden-sharded plans (stats mode;
//                redistribute runs the row plan after its all-to-all); anything else -> the
//                row plan (sim/ops/layer_norm/layer_norm_faults.hpp lists who uses what)
//   mse_loss     input Replicate on every dim -> computed whole on every rank (loss_plan.hpp:
//                one holder, whose own mean is the call's: average_of_rank_means shows only
//                with micro-batches, averaging twice never); padding needs valid_lengths below
//                the seq extent; the [seq, batch] mask equals the right one at batch 1;
//                fsdp_grad_local_mean needs two or more ranks holding tokens
//   attention    the extra key of window_off_by_one exists only if window < the sequence; the
//                cache faults need a second streamed chunk (chunk 1 passes by construction)
//   linear       row-parallel: weight Shard(in) on the step's dim; column-parallel: Shard(out)
//   redistribute Shard(a) -> Replicate: concatenating along the first axis is the same memory
//                as along `a` when every axis before `a` has local extent 1 (other mesh dims
//                may shard those axes: dp's batch shard), or when one rank alone holds a
//                non-empty piece (it is the whole tensor)
//   dropout      p > 0; same_seed also needs an input split between two or more ranks that
//                each hold part of it (otherwise a rank's local index is the global one)
//   ring         ring_merge_*, ring_backward_local_lse: keys split between two or more ranks
//   attention    mask_local_query_positions, mask_zigzag_contiguous: some rank's query
//   masks        positions as the fault computes them differ from the real ones (judged
//                without [stream], on a step whose dim alone shards seq)
//   gradient     unreduced_param_grads, grad_reduce_mean: a parameter Replicate on a dim whose
//   reduction    ranks hold different data (some tensor not Replicate there); wrong_dim also a
//                second dim where it is Replicate (fault_plans_grad.cpp)
//   init         ones_init_assumed: some parameter a step names as its weight (bias) that does not
//                already hold 1 (0) everywhere: a constant init or a file's values, bit for bit
//   optimizer    adamw_*: optimizer.kind = "adamw"; adamw_decay_coupled also weight_decay > 0
//   gqa          gqa_wrong_group: wk Replicate on the step's dim, n_kv_head >= 2 and a group of
//                two or more query heads; gqa_kv_grad_unreduced: wq Shard(head) over two or more
//                ranks with wk Replicate
// Beyond that, numerical faults whose visibility depends on values (ring_merge_no_max needs
// logits large enough to overflow) are not judged here.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "scenario/fault_plans_internal.hpp"
#include "scenario/loader.hpp"
#include "scenario/scenario.hpp"

namespace shardsim {

namespace {

using namespace fault_plans;  // the helpers and the other files' rules (fault_plans_internal.hpp)

bool hidden_sharded_norm(const Scenario& s, const StepSpec& step, const LayerNormArgs& a) {
  const Placement x = on_step_dim(s, step, a.input);
  return x.is_shard() && x.axis == a.axis;
}

bool has_padding(const Scenario& s, const MseLossArgs& a) {
  const Scenario::TensorLayout* t = layout_of(s, a.input);
  if (!a.valid_lengths || t == nullptr || !t->shape.has(a.seq_axis)) return false;
  const std::int64_t seq = t->shape.extent(a.seq_axis);
  return std::any_of(a.valid_lengths->begin(), a.valid_lengths->end(),
                     [&](std::int64_t n) { return n < seq; });
}

// The weight W (out, in) of a linear: its axis 0 is out, 1 is in.
constexpr std::size_t kOutAxis = 0, kInAxis = 1;

// Whether the linear's weight is Shard on its axis `axis` over the step's dim of two or more
// ranks: column-parallel (out) or row-parallel (in), as the weight's placement picks the form
// (ops/linear_plan.hpp linear_parallel_of).
bool weight_sharded_on(const Scenario& s, const StepSpec& step, const LinearArgs& a,
                       std::size_t axis) {
  const Scenario::TensorLayout* w = layout_of(s, a.weight);
  const Placement on = on_step_dim(s, step, a.weight);
  return w != nullptr && w->shape.rank() == 2 && on.is_shard() &&
         on.axis == w->shape.axes()[axis].name && s.mesh.devices.dim(step.mesh_dim).size > 1;
}

// The LayerNorm faults: why one changes nothing here, or "".
std::string norm_effect(Fault fault, const Scenario& s) {
  switch (fault) {
    case Fault::combine_token_means:
    case Fault::rmsnorm_substituted:
    case Fault::dtype_mismatch:
      if (any_step<LayerNormArgs>(s, OpKind::layer_norm, [&](const StepSpec& st, const auto& a) {
            return !hidden_sharded_norm(s, st, a) || a.stats == "redistribute";
          })) {
        return "";
      }
      return "it changes the row-sharded LayerNorm plan, and every layer_norm here normalizes a "
             "Shard(axis) input with distributed statistics (give one a row-sharded input, or "
             "stats = \"redistribute\")";
    case Fault::hidden_shard_local_stats:
      // Not refused where one rank holds the whole axis: the fault still swaps the distributed
      // statistics' arithmetic for the local one (different roundings), though it cannot fail.
      if (any_step<LayerNormArgs>(s, OpKind::layer_norm, [&](const StepSpec& st, const auto& a) {
            return hidden_sharded_norm(s, st, a);
          })) {
        return "";
      }
      return "it changes the hidden-sharded LayerNorm plans, and no layer_norm here has its input "
             "Shard on the normalized axis";
    default:
      return "";
  }
}

// The mse_loss faults.
std::string loss_effect(Fault fault, const Scenario& s) {
  switch (fault) {
    case Fault::loss_averaged_twice:
    case Fault::average_of_rank_means:
      if (any_step<MseLossArgs>(s, OpKind::mse_loss, [&](const StepSpec&, const auto& a) {
            return sharded_somewhere(s, a.input);
          })) {
        return "";
      }
      // One holder of every token: its own mean is the call's mean, which differs from the
      // step's only with micro-batches; dividing "twice" divides by the one holder.
      if (fault == Fault::average_of_rank_means && s.micro_batches >= 2) return "";
      return std::string(
                 "it changes how ranks holding different tokens combine their loss "
                 "sums, and every mse_loss here has its tokens whole on every rank "
                 "(Replicate, or sharded over one rank)") +
             (fault == Fault::average_of_rank_means ? " and there are no micro-batches" : "");
    case Fault::fsdp_grad_local_mean:
      // A rank's own tokens are the call's when it alone holds them (batch 1 over dp 4).
      if (any_step<MseLossArgs>(s, OpKind::mse_loss, [&](const StepSpec&, const auto& a) {
            return split_between_ranks(s, a.input);
          })) {
        return "";
      }
      return "it starts each rank's backward from the mean over its own tokens, and every "
             "mse_loss here has one rank holding all of its tokens (or every rank all of them)";
    case Fault::padding_in_loss:
      if (any_step<MseLossArgs>(s, OpKind::mse_loss, [&](const StepSpec&, const auto& a) {
            return has_padding(s, a);
          })) {
        return "";
      }
      return "it lets padding tokens into the loss, and no mse_loss here has padding "
             "(valid_lengths below the seq extent)";
    case Fault::wrong_axis:
      if (any_step<MseLossArgs>(s, OpKind::mse_loss, [&](const StepSpec&, const auto& a) {
            const Scenario::TensorLayout* t = layout_of(s, a.input);
            return has_padding(s, a) && t != nullptr && t->shape.has(a.batch_axis) &&
                   t->shape.extent(a.batch_axis) > 1;
          })) {
        return "";
      }
      return "it lays the padding mask out [seq, batch], which differs from [batch, seq] only "
             "with padding (valid_lengths below the seq extent) and a batch of two or more";
    default:
      return "";
  }
}

// The linear faults.
std::string linear_effect(Fault fault, const Scenario& s) {
  switch (fault) {
    case Fault::row_bias_every_rank:
      if (any_step<LinearArgs>(s, OpKind::linear, [&](const StepSpec& st, const auto& a) {
            return a.bias && weight_sharded_on(s, st, a, kInAxis);
          })) {
        return "";
      }
      return "it changes the bias of a row-parallel linear, and no linear here has a bias and a "
             "weight Shard(in) on a dim of two or more ranks";
    case Fault::column_backward_unreduced:
      if (any_step<LinearArgs>(s, OpKind::linear, [&](const StepSpec& st, const auto& a) {
            return weight_sharded_on(s, st, a, kOutAxis);
          })) {
        return "";
      }
      return "it changes the backward of a column-parallel linear, and no linear here has its "
             "weight Shard(out) on a dim of two or more ranks";
    default:
      return "";
  }
}

// The redistribute and dropout faults.
std::string transition_effect(Fault fault, const Scenario& s) {
  switch (fault) {
    case Fault::gather_wrong_axis:
      if (any_step<RedistributeArgs>(
              s, OpKind::redistribute, [&](const StepSpec& st, const auto& a) {
                const Scenario::TensorLayout* t = layout_of(s, a.input);
                const Placement from = on_step_dim(s, st, a.input);
                if (t == nullptr || !from.is_shard() || !a.to.is_replicate() ||
                    !t->shape.has(from.axis)) {
                  return false;
                }
                // One non-empty piece is the whole tensor, along any axis.
                if (!pieces_on_step_dim(s, st, a.input)) return false;
                for (const Axis& axis : t->shape.axes()) {
                  if (axis.name == from.axis) return false;
                  // The largest local extent: other dims may shard this axis too (dp on batch).
                  std::int64_t split = 1;
                  for (int d = 0; d < t->layout.ndim() && d < s.mesh.devices.ndim(); ++d) {
                    const Placement& p = t->layout.on(d);
                    if (d != st.mesh_dim && p.is_shard() && p.axis == axis.name) {
                      split *= s.mesh.devices.dim(d).size;
                    }
                  }
                  if ((axis.extent + split - 1) / split > 1) return true;
                }
                return false;
              })) {
        return "";
      }
      return "it concatenates an all-gather's pieces along the first axis, which is the same "
             "memory as along the sharded axis unless an axis before it has a local extent of 2 "
             "or more and two or more ranks hold a piece, and no redistribute here goes from "
             "such a Shard to Replicate";
    case Fault::dropout_same_seed:
      if (any_step<DropoutArgs>(s, OpKind::dropout, [&](const StepSpec&, const auto& a) {
            return a.p > 0 && split_between_ranks(s, a.input);
          })) {
        return "";
      }
      return "it draws each rank's mask from its local indices, which are the global ones on a "
             "Replicate input or where one rank holds the whole tensor, and no dropout here has "
             "p > 0 and an input split between two or more ranks that each hold part of it";
    case Fault::dropout_rank_offset:
      if (s.mesh.devices.size() > 1 &&
          any_step<DropoutArgs>(s, OpKind::dropout,
                                [&](const StepSpec&, const auto& a) { return a.p > 0; })) {
        return "";
      }
      return "it offsets each rank's dropout seed, and no dropout here has p > 0 on two or more "
             "ranks";
    default:
      return "";
  }
}

// Whether every value `spec` loads is `value`, bit for bit (a -0 is not a +0): a constant init
// (drawn as a float, rng.cpp), or a file whose every value is it.
bool holds_only(const TensorSpec& spec, double value) {
  const auto same = [&](double v) {
    return std::bit_cast<std::uint64_t>(v) == std::bit_cast<std::uint64_t>(value);
  };
  if (spec.init.dist == InitDist::constant) {
    return same(static_cast<double>(static_cast<float>(spec.init.value)));
  }
  if (spec.init.dist == InitDist::file && spec.init.values) {
    return std::all_of(spec.init.values->begin(), spec.init.values->end(), same);
  }
  return false;
}

std::string init_effect(Fault fault, const Scenario& s) {
  if (fault != Fault::ones_init_assumed) return "";
  for (const TensorSpec& spec : s.tensors) {
    if (spec.role != TensorRole::parameter) continue;
    const std::optional<double> assumed = assumed_default_init(s, spec.name);
    if (assumed && !holds_only(spec, *assumed)) return "";
  }
  return "it re-initializes every parameter a step names as its weight to ones and as its bias "
         "to zeros, and here there is none, or each already holds exactly those values";
}

// The cross_entropy faults: the vocabulary faults need logits whose vocabulary some dim of two
// or more ranks shards (vocab_padding_in_softmax: with a padded split that pads); counting the
// ignored tokens needs a label equal to ignore_index.
std::string cross_entropy_effect(Fault fault, const Scenario& s) {
  auto vocab_split = [&](const CrossEntropyArgs& a, bool padded) {
    const Scenario::TensorLayout* t = layout_of(s, a.input);
    if (t == nullptr) return false;
    for (int d = 0; d < t->layout.ndim() && d < s.mesh.devices.ndim(); ++d) {
      const Placement& p = t->layout.on(d);
      const int k = s.mesh.devices.dim(d).size;
      if (!p.is_shard() || p.axis != a.vocab_axis || k < 2) continue;
      if (!padded) return true;
      if (p.split == SplitPolicy::padded && t->shape.extent(a.vocab_axis) % k != 0) return true;
    }
    return false;
  };
  switch (fault) {
    case Fault::ce_local_max:
    case Fault::ce_target_every_rank:
      if (any_step<CrossEntropyArgs>(s, OpKind::cross_entropy, [&](const StepSpec&, const auto& a) {
            return vocab_split(a, false);
          })) {
        return "";
      }
      return "it changes the vocab-parallel cross-entropy, and no cross_entropy here has logits "
             "Shard(vocab) on a dim of two or more ranks";
    case Fault::vocab_padding_in_softmax:
      if (any_step<CrossEntropyArgs>(s, OpKind::cross_entropy, [&](const StepSpec&, const auto& a) {
            return vocab_split(a, true);
          })) {
        return "";
      }
      return "it lets padded vocabulary columns into the softmax, and no cross_entropy here has "
             "logits Shard(vocab, padded) over a vocabulary its dim's size does not divide";
    case Fault::embedding_partial_not_reduced:
      if (any_step<EmbeddingArgs>(s, OpKind::embedding, [&](const StepSpec& st, const auto& a) {
            const Placement on = on_step_dim(s, st, a.weight);
            return on.is_shard() && s.mesh.devices.dim(st.mesh_dim).size > 1;
          })) {
        return "";
      }
      return "it skips the vocab-parallel embedding's reduction, and no embedding here has its "
             "weight Shard(vocab) on a dim of two or more ranks";
    case Fault::ce_ignored_tokens_counted:
      if (any_step<CrossEntropyArgs>(s, OpKind::cross_entropy, [&](const StepSpec&, const auto& a) {
            const TensorSpec* labels = s.find_ids(a.labels);
            return labels != nullptr &&
                   std::find(labels->ids->begin(), labels->ids->end(), a.ignore_index) !=
                       labels->ids->end();
          })) {
        return "";
      }
      return "it counts ignored tokens in the mean, and no cross_entropy here has a label equal "
             "to its ignore_index";
    default:
      return "";
  }
}

// Why `fault` changes nothing this scenario runs, or "" when it changes something.
std::string no_effect(Fault fault, const Scenario& s) {
  for (auto* effect : {norm_effect, loss_effect, attention_effect, linear_effect, transition_effect,
                       grad_reduce_effect, init_effect, cross_entropy_effect, tied_effect,
                       optimizer_effect, gqa_effect}) {
    std::string why = effect(fault, s);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace

void Loader::fault_plans(const toml::array& list, const Scenario& s) const {
  for (std::size_t i = 0; i < list.size() && i < s.faults.size(); ++i) {
    if (s.faults[i] == Fault::fsdp_full_param_step && s.adamw()) {
      fail(*list.get(i), "faults[" + std::to_string(i) + "]",
           "fault 'fsdp_full_param_step' is modelled with SGD only (the full copies would need "
           "their own AdamW moments): use optimizer kind = \"sgd\"");
    }
    const std::string why = no_effect(s.faults[i], s);
    if (why.empty()) continue;
    fail(*list.get(i), "faults[" + std::to_string(i) + "]",
         "fault " + quote(std::string(fault_name(s.faults[i]))) +
             " would change nothing this scenario runs: " + why);
  }
}

}  // namespace shardsim
