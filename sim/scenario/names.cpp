// Tensor names a scenario may use (loader_internal.hpp).
//
// The runner keeps every tensor in maps by name, next to the names it builds from them
// (trace.hpp): grad(NAME), NAME.PART for a step's intermediates, NAME@WHERE for moved copies, and
// the goldens' NAME@rankR[...] and NAME#K. A scenario tensor that took one of those names would be
// overwritten by, or would overwrite, the runner's own tensor: a wrong gradient, an abort, or a
// false divergence. So a scenario's names use letters, digits, '_', '.' and '-' only (no '(',
// '@', '#', '[' or spaces), none is or extends a name the runner uses of its own, and no name is
// another's NAME.PART for a PART the runner records (exactly: ln.weight.mean or attn.q.weight is
// no part of ln or attn, since the runner never appends to a part but with '@').
#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "ops/attention/parts.hpp"
#include "ops/cross_entropy/cross_entropy_plan.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/loss/loss_plan.hpp"
#include "ops/rms_norm/rms_norm.hpp"
#include "scenario/loader_internal.hpp"

namespace shardsim {
namespace {

// Names the runner uses of its own: the global gradient norm of clip_grad_norm and its parts
// (sim/runner/clip.hpp), and FSDP's flat parameters flat_param.OUTPUT (loader_fsdp.cpp).
constexpr std::array<std::string_view, 2> kRunnerRoots = {"grad_norm", "flat_param"};

// Parts the runner and the plans record as OWNER.PART besides those with their own tables
// (layer_norm_parts, rms_norm_parts, loss_parts, kAttentionParts): dropout's mask
// (dropout_step.hpp, dropout_plan.hpp; its repetition check is mask@repetition), a micro-batched
// run's accumulated loss and a gradient's moved addend (runner, micro_step-inl.hpp), AdamW's
// moments of a parameter (update_step-inl.hpp), gqa_attention's rotated keys (its other parts
// share kAttentionParts' names: q, k, v, q_rot, attn).
constexpr std::array<std::string_view, 6> kOtherParts = {"mask",    "accumulated", "addend",
                                                         "exp_avg", "exp_avg_sq",  "k_rot"};

bool allowed_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

}  // namespace

bool is_runner_part(std::string_view part) {
  const std::string_view head = part.substr(0, part.find('@'));  // a part moved: PART@WHERE
  for (std::string_view p :
       {layer_norm_parts::mean, layer_norm_parts::rstd, layer_norm_parts::sum,
        layer_norm_parts::sum_sq, layer_norm_parts::moments, layer_norm_parts::token_mean_sum,
        layer_norm_parts::token_count, layer_norm_parts::sum_dnorm,
        layer_norm_parts::sum_dnorm_norm, layer_norm_parts::gathered, rms_norm_parts::rrms,
        rms_norm_parts::sum_sq, rms_norm_parts::sum_dnorm_norm, loss_parts::sum,
        loss_parts::valid_tokens, loss_parts::step_valid_tokens, cross_entropy_parts::max,
        cross_entropy_parts::max_shards, cross_entropy_parts::sumexp,
        cross_entropy_parts::target_logit, cross_entropy_parts::logit_sum,
        cross_entropy_parts::lse}) {
    if (head == p) return true;
  }
  for (const AttentionPartRow& row : kAttentionParts) {
    if (head == row.suffix) return true;
  }
  return std::find(kOtherParts.begin(), kOtherParts.end(), head) != kOtherParts.end();
}

bool is_runner_name(std::string_view name) {
  return std::any_of(kRunnerRoots.begin(), kRunnerRoots.end(),
                     [&](std::string_view root) { return derived_from(name, root); });
}

std::string tensor_name_problem(std::string_view name) {
  if (name.empty()) return "tensor name must not be empty";
  for (char c : name) {
    if (allowed_char(c)) continue;
    const auto byte = static_cast<unsigned char>(c);
    const std::string shown = byte >= 0x80                 ? "a non-ASCII character"
                              : (byte > ' ' && byte < 127) ? std::string(1, c)
                                                           : "a space or control character";
    return "tensor name '" + std::string(name) + "' uses '" + shown +
           "': names use letters, digits, '_', '.' and '-' (the runner builds grad(NAME), "
           "NAME@WHERE and the goldens' NAME@rankR[...] and NAME#K from them)";
  }
  for (std::string_view root : kRunnerRoots) {
    if (derived_from(name, root)) {
      return "tensor name '" + std::string(name) + "' is reserved: the runner names its own '" +
             std::string(root) + "' (and " + std::string(root) + ".PART) tensors so";
    }
  }
  return "";
}

std::string tensor_name_clash(std::string_view name,
                              const std::map<std::string, TensorState>& defined) {
  const auto clash = [](std::string_view owner, std::string_view part_of) {
    return "tensor name '" + std::string(part_of) + "' is the name of the part '" +
           std::string(part_of.substr(owner.size() + 1)) + "' that the runner records for '" +
           std::string(owner) +
           "' (NAME.PART, e.g. y.mean, y.rstd, d.mask, loss.sum); rename one of the two";
  };
  // name = OWNER.PART for a defined OWNER.
  const std::string_view owner = runner_part_owner(
      name, [&](std::string_view o) { return defined.count(std::string(o)) != 0; });
  if (!owner.empty()) return clash(owner, name);
  // A defined name = name.PART.
  const std::string prefix = std::string(name) + ".";
  for (auto it = defined.lower_bound(prefix); it != defined.end() && it->first.starts_with(prefix);
       ++it) {
    if (is_runner_part(std::string_view(it->first).substr(prefix.size()))) {
      return clash(name, it->first);
    }
  }
  return "";
}

}  // namespace shardsim
