// The language-model faults' rules of Loader::fault_plans (fault_plans.cpp lists them all): the
// tied weight, AdamW and GQA attention.
#include <string>

#include "scenario/fault_plans_internal.hpp"
#include "scenario/scenario.hpp"

namespace shardsim::fault_plans {

// tied_grad_one_use: some parameter is named by two or more steps (a tied weight).
std::string tied_effect(Fault fault, const Scenario& s) {
  if (fault != Fault::tied_grad_one_use) return "";
  for (const TensorSpec& t : s.tensors) {
    if (t.role != TensorRole::parameter) continue;
    int uses = 0;
    for (const StepSpec& step : s.steps) {
      for (const auto& [key, value] : step.params) {
        const auto* name = std::get_if<std::string>(&value.value);
        if (name && *name == t.name && key != "output") {
          ++uses;
          break;
        }
      }
    }
    if (uses >= 2) return "";
  }
  return "it drops one use's gradient of a parameter two steps use, and no parameter here is "
         "named by two steps (tie an embedding and an LM head by naming one weight in both)";
}

// The AdamW faults need the AdamW update; the coupled decay needs a decay to couple.
std::string optimizer_effect(Fault fault, const Scenario& s) {
  if (fault != Fault::adamw_bias_correction_missing && fault != Fault::adamw_decay_coupled) {
    return "";
  }
  if (!s.adamw()) return "it changes the AdamW update, and this scenario's optimizer is SGD";
  if (fault == Fault::adamw_decay_coupled && s.optimizer.weight_decay == 0) {
    return "it moves the weight decay into the gradient, and optimizer.weight_decay is 0";
  }
  return "";
}

// gqa_wrong_group: a step whose query heads read another kv head under h % KV than under h / G
// (some h with h % KV != h / G: G >= 2 and KV >= 2) with the kv weights Replicate on the step's
// dim (a rank holding a slice of kv heads reads only its own). gqa_kv_grad_unreduced: heads
// split over two or more ranks with the kv weights Replicate (their gradient is Partial).
std::string gqa_effect(Fault fault, const Scenario& s) {
  if (fault != Fault::gqa_wrong_group && fault != Fault::gqa_kv_grad_unreduced) return "";
  const bool wrong = fault == Fault::gqa_wrong_group;
  if (any_step<GqaAttentionArgs>(s, OpKind::gqa_attention, [&](const StepSpec& st,
                                                               const auto& a) {
        const bool kv_replicated = on_step_dim(s, st, a.wk).is_replicate();
        if (wrong) return kv_replicated && a.n_kv_head >= 2 && a.n_head / a.n_kv_head >= 2;
        return kv_replicated && on_step_dim(s, st, a.wq).is_shard() &&
               s.mesh.devices.dim(st.mesh_dim).size >= 2;
      })) {
    return "";
  }
  return wrong ? "it maps query heads to kv heads by h % n_kv_head, and no gqa_attention here "
                 "has two or more kv heads, each read by two or more query heads, with wk and wv "
                 "Replicate on its dim"
               : "it leaves the shared kv heads' gradient unreduced, and no gqa_attention here "
                 "splits its query heads over two or more ranks with wk and wv Replicate";
}

}  // namespace shardsim::fault_plans
