// Reads `optimizer = { kind, lr, betas, eps, weight_decay }` (docs/scenario-format.md
// "Training"): plain SGD (the default; `learning_rate` is its short form) or AdamW with
// torch.optim.AdamW's defaults. Every hyperparameter is checked where it is written.
#include <cmath>
#include <limits>

#include "scenario/loader.hpp"

namespace shardsim {

namespace {

constexpr double kF32Max = std::numeric_limits<float>::max();

}  // namespace

void Loader::optimizer(const toml::table& root, Scenario& s) const {
  const toml::node* node = root.get("optimizer");
  if (!node) return;
  const toml::table& t = table(*node, "optimizer");
  if (s.train_steps == 0) fail(*node, "optimizer", "an optimizer needs train_steps");
  if (root.get("learning_rate")) {
    fail(*node, "optimizer",
         "give the learning rate once: optimizer.lr, or learning_rate without an optimizer table");
  }
  const toml::node* kind = t.get("kind");
  if (!kind) fail(*node, "optimizer", "missing required key 'kind' (\"sgd\" or \"adamw\")");
  const std::string name = string(*kind, "optimizer.kind");
  using Kind = Scenario::Optimizer::Kind;
  if (name == "sgd") {
    check_keys(t, "optimizer", {"kind", "lr"});
    s.optimizer.kind = Kind::sgd;
  } else if (name == "adamw") {
    check_keys(t, "optimizer", {"kind", "lr", "betas", "eps", "weight_decay"});
    s.optimizer.kind = Kind::adamw;
    // [stream] updates once per chunk: AdamW's t would count chunks, not training steps.
    if (s.stream) fail(*kind, "optimizer.kind", "adamw with [stream] is not supported");
    s.learning_rate = 1e-3;  // torch.optim.AdamW's default
  } else {
    fail(*kind, "optimizer.kind", "unknown optimizer '" + name + "' (\"sgd\" or \"adamw\")");
  }
  if (const toml::node* v = t.get("lr")) {
    s.learning_rate = number(*v, "optimizer.lr");
    if (!(s.learning_rate > 0) || !(s.learning_rate <= kF32Max)) {
      fail(*v, "optimizer.lr",
           "lr must be > 0 and within the f32 range (f32 runs use float(lr)), got " +
               format_number(s.learning_rate));
    }
  }
  Scenario::Optimizer& o = s.optimizer;
  if (const toml::node* v = t.get("betas")) {
    const toml::array& betas = array(*v, "optimizer.betas");
    if (betas.size() != 2) fail(*v, "optimizer.betas", "betas is a pair [beta1, beta2]");
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string path = "optimizer.betas[" + std::to_string(i) + "]";
      const double beta = number(*betas.get(i), path);
      // torch refuses beta outside [0, 1); beta = 1 would divide by a zero bias correction.
      if (!(beta >= 0 && beta < 1)) {
        fail(*betas.get(i), path, "a beta is in [0, 1), got " + format_number(beta));
      }
      (i == 0 ? o.beta1 : o.beta2) = beta;
    }
  }
  if (const toml::node* v = t.get("eps")) {
    o.eps = number(*v, "optimizer.eps");
    // eps = 0 divides by zero where a gradient element has been zero so far.
    if (!(o.eps > 0) || !(o.eps <= kF32Max)) {
      fail(*v, "optimizer.eps",
           "eps must be > 0 and within the f32 range, got " + format_number(o.eps));
    }
  }
  if (const toml::node* v = t.get("weight_decay")) {
    o.weight_decay = number(*v, "optimizer.weight_decay");
    if (!(o.weight_decay >= 0) || !(o.weight_decay <= kF32Max)) {
      fail(*v, "optimizer.weight_decay",
           "weight_decay must be >= 0 and within the f32 range, got " +
               format_number(o.weight_decay));
    }
  }
}

}  // namespace shardsim
