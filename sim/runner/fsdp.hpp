// Private to the runner: fully sharded data parallelism (FsdpSpec in scenario.hpp, docs/layouts.md
// "Fully sharded data parallelism"). The ranks keep each parameter only as its shard (`storage`);
// the runner calls, per training step:
//   shard             once, after the inputs are loaded: each rank keeps its shard (a local
//                     slice, recorded as `fsdp_shard -> NAME`);
//   gather / release  around each step's forward and again around its backward: the unit's
//                     all-gather on the fsdp dim into the layout the step computes with (flat:
//                     the flat tensor, then each parameter's view, `unflatten -> NAME`); release
//                     drops the gathered copy;
//   reduce_grads      after the unit's backward: every other dim's Partial gradient reduced first
//                     (as DTensor does inside autograd), then the reduce-scatter on the fsdp dim,
//                     a plain sum (the loss divides by the global valid-token count, so the
//                     ranks' gradients are addends of the gradient: no 1/dp);
//   the update        SGD on the shards (the runner, through storage() and members()).
// Mixed precision (param_dtype, reduce_dtype): the rounding points of fsdp_mixed.hpp, in gather
// and reduce_grads.
// The faults of this layer (fault_list.hpp): fsdp_grad_averaged (the reduce-scatter's addends
// pre-divided by the group size), fsdp_full_param_step (step_full_param), fsdp_clip_padding (the
// flat gradient's padding holds garbage: 1 per rank, summed by the reduce-scatter),
// fsdp_stale_shard (gathers read the shards from before the previous update) and
// fsdp_reduce_dtype_bf16 (the ranks' reduce-scatter adds in bf16 whatever reduce_dtype says).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/sgd.hpp"
#include "runner/fsdp_flat.hpp"
#include "runner/fsdp_mixed.hpp"
#include "runner/replicas.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class Fsdp {
 public:
  // Records a replica check: the label, the checked tensor and its reference.
  using Check = std::function<void(const BoundaryLabel&, DistTensor<T>&, const Tensor<T>&)>;

  Fsdp(const Scenario& scenario, const World<T>& world, Check check)
      : scenario_(scenario),
        spec_(scenario.fsdp ? &*scenario.fsdp : nullptr),
        world_(world),
        check_(std::move(check)) {}

  bool on() const { return spec_ != nullptr; }
  bool flat() const { return on() && spec_->style == FsdpSpec::Style::flat; }
  bool owns(const std::string& param) const { return on() && spec_->unit_of_param(param); }
  // The runner's pinned names: the flat tensors and their gradients.
  std::vector<std::string> pinned() const {
    std::vector<std::string> names;
    if (!flat()) return names;
    for (const FsdpSpec::Unit& unit : spec_->units) {
      names.push_back(unit.flat_name);
      names.push_back(grad_name(unit.flat_name));
    }
    return names;
  }

  // The name a parameter is stored (and updated, and gathered) under: itself, or its unit's flat
  // tensor. REQUIRES: owns(param).
  std::string storage_name(const std::string& param) const {
    return flat() ? spec_->unit_of_param(param)->flat_name : param;
  }
  DistTensor<T>& storage(const std::string& name) { return storage_.at(name); }
  // The parameters stored under `name`, in declaration order.
  std::vector<std::string> members(const std::string& name) const {
    if (!flat()) return {name};
    for (const FsdpSpec::Unit& unit : spec_->units) {
      if (unit.flat_name == name) return unit.params;
    }
    return {};
  }
  // Whether `param` is the first of its storage's members (the update runs once per storage).
  bool first_member(const std::string& param) const {
    return members(storage_name(param)).front() == param;
  }

  void shard(StepEnv<T>& env) {
    if (!on()) return;
    const World<T> group = world_.on(spec_->dim);
    for (const FsdpSpec::Unit& unit : spec_->units) {
      if (flat()) {
        refresh_dense(unit.flat_name, env);
        const DistTensor<T> whole =
            flatten(env.sharded, unit.params, unit.flat_name, Placement::replicate(), spec_->dim);
        storage_[unit.flat_name] =
            group.redistribute(whole, flat_shard(), shard_label(unit.flat_name));
      } else {
        for (const std::string& p : unit.params) {
          const DistTensor<T>& param = env.sharded.at(p);
          storage_[p] =
              group.redistribute(param, Placement::shard(param.global[0].name), shard_label(p));
        }
      }
      for (const std::string& p : unit.params) env.sharded.erase(p);
    }
  }

  // Gathers the unit of `step` (if any) into env.sharded, in the layout the step computes with.
  void gather(int step, StepEnv<T>& env) {
    const FsdpSpec::Unit* unit = on() ? spec_->unit_of_step(step) : nullptr;
    if (!unit) return;
    const World<T> group = world_.on(spec_->dim);
    for (const std::string& p : unit->params) cast_dense_param(p, env);
    if (!flat()) {
      for (const std::string& p : unit->params) {
        env.sharded[p] = group.all_gather(cast_shard(p), gather_label(p));
      }
      return;
    }
    const std::string& name = unit->flat_name;
    refresh_dense(name, env);
    const DistTensor<T> full = group.all_gather(cast_shard(name), gather_label(name));
    std::int64_t offset = 0;
    for (const std::string& p : unit->params) {
      const Shape& shape = scenario_.find_tensor(p)->shape;
      env.sharded[p] = unflatten(full, p, shape, offset);
      offset += shape.numel();
      world_.compare_boundary({.op = "unflatten", .tensor = p, .exact = true, .inputs = {name}},
                              env.sharded[p]);
    }
  }

  // Drops the gathered copies; the oracle's step goes back to its master parameters.
  void release(int step, StepEnv<T>& env) {
    const FsdpSpec::Unit* unit = on() ? spec_->unit_of_step(step) : nullptr;
    if (!unit) return;
    for (const std::string& p : unit->params) {
      env.sharded.erase(p);
      if (auto master = dense_master_.find(p); master != dense_master_.end()) {
        env.dense.at(p) = std::move(master->second);
        dense_master_.erase(master);
      }
    }
  }

  // After the backward of `step`: its unit's gradients reduced to the storage layout.
  void reduce_grads(int step, StepEnv<T>& env) {
    const FsdpSpec::Unit* unit = on() ? spec_->unit_of_step(step) : nullptr;
    if (!unit || !env.has_grad(unit->params.front())) return;
    const std::optional<Precision>& param_dtype = spec_->param_dtype;
    for (const std::string& p : unit->params) {
      const std::string key = grad_name(p);
      DistTensor<T>& grad = env.sharded.at(key);
      // The gradient of a param_dtype parameter is in param_dtype: each addend, and the oracle's.
      for (Tensor<T>& local : grad.locals) round_tensor_to(local, param_dtype);
      round_tensor_to(env.dense.at(key), param_dtype);
      // flat: the oracle's update reads these member gradients, rounded as its flat one is.
      if (flat()) round_tensor_to(env.dense.at(key), spec_->reduce_dtype);
      for (int d = 0; d < grad.layout.ndim(); ++d) {
        const Placement& target = scenario_.find_tensor(p)->layout.on(d);
        if (d == spec_->dim || grad.layout.on(d) == target) continue;
        grad = world_.on(d)
                   .rounding_sums(hop_rounding<T>(param_dtype))
                   .redistribute(grad, target, {.tensor = key, .inputs = {key}});
      }
      if (!flat()) {
        grad = reduce_scatter(grad, Placement::shard(grad.global[0].name), key, {key},
                              env.dense.at(key));
      }
    }
    if (!flat()) return;
    const std::string key = grad_name(unit->flat_name);
    std::vector<std::string> inputs;
    for (const std::string& p : unit->params) inputs.push_back(grad_name(p));
    env.dense[key] = flatten_dense(env.dense, inputs, key);
    const Placement held = env.sharded.at(inputs.front()).layout.on(spec_->dim);
    DistTensor<T> grad = flatten(env.sharded, inputs, key, held, spec_->dim);
    for (const std::string& g : inputs) env.sharded.erase(g);
    env.sharded[key] = reduce_scatter(std::move(grad), flat_shard(), key, inputs, env.dense[key]);
    if (scenario_.has_fault(Fault::fsdp_clip_padding)) fill_padding(env.sharded[key]);
  }

  // fsdp_stale_shard: keeps the shard as it is before this update, for the next step's gathers.
  void remember_stale(const std::string& name) {
    if (scenario_.has_fault(Fault::fsdp_stale_shard)) stale_.insert_or_assign(name, storage_[name]);
  }

  // The oracle's flat tensor of `name` rebuilt from its members' current values (flat only).
  void refresh_dense(const std::string& name, StepEnv<T>& env) const {
    if (flat()) env.dense[name] = flatten_dense(env.dense, members(name), name);
  }
  // The same for a per-parameter part (AdamW's NAME.exp_avg): the flat NAME.PART from each
  // member's MEMBER.PART.
  void refresh_dense_part(const std::string& name, std::string_view part,
                          StepEnv<T>& env) const {
    if (!flat()) return;
    std::vector<std::string> parts;
    for (const std::string& m : members(name)) parts.push_back(part_name(m, part));
    const std::string flat_part = part_name(name, part);
    env.dense[flat_part] = flatten_dense(env.dense, parts, flat_part);
  }

  // fsdp_full_param_step: every rank keeps the unsharded parameter (gathered again here), steps
  // it with its own unreduced gradient, and takes its shard from that copy. The dense side steps
  // as usual. Records the gather, the replica check of the full copies and the shards' update.
  // With clip_grad_norm the own gradient is clipped by the coefficient the ranks computed
  // (`clip_coef`), as the reduced one was: the fault is the unreduced gradient only, so a group
  // of one (own = reduced) steps as the correct program does.
  void step_full_param(const std::string& name, StepEnv<T>& env, double learning_rate,
                       const DistTensor<T>* clip_coef = nullptr) {
    DistTensor<T>& shard = storage_.at(name);
    DistTensor<T> full =
        world_.on(spec_->dim).all_gather(shard, {.tensor = name, .exact = true, .inputs = {name}});
    const DistTensor<T>& own = unreduced_.at(grad_name(name));
    for (const std::string& m : members(name)) {
      sgd_update(env.dense.at(m), env.dense.at(grad_name(m)), learning_rate);
    }
    refresh_dense(name, env);
    world_.for_each_rank([&](int r) {
      if (!clip_coef) {
        sgd_update(full.local(r), own.local(r), learning_rate);
        return;
      }
      Tensor<T> clipped = own.local(r);
      for (T& v : clipped.values()) v = v * clip_coef->local(r)[0];
      sgd_update(full.local(r), clipped, learning_rate);
    });
    check_({.op = "replica_check",
            .tensor = moved_name(name, "replicas"),
            .exact = true,
            .kind = BoundaryKind::check},
           full, replica_reference(full, env));
    world_.for_each_rank([&](int r) {
      copy_overlap(full.local(r), local_box(full, r), shard.local(r), local_box(shard, r));
    });
    world_.compare_boundary(
        {.op = "sgd", .tensor = name, .kind = BoundaryKind::update, .inputs = {name}}, shard);
  }

 private:
  // The replica check's reference: the first replica of each group, gathered to the oracle's
  // process (empty elsewhere).
  Tensor<T> replica_reference(const DistTensor<T>& full, const StepEnv<T>& env) const {
    const DistTensor<T> gathered = world_.share(full, /*to_root=*/true);
    return env.oracle ? first_replicas(gathered) : Tensor<T>();
  }
  Placement flat_shard() const {
    return Placement::shard(std::string(kFlatAxis), SplitPolicy::padded);
  }
  static BoundaryLabel shard_label(const std::string& name) {
    return {.op = "fsdp_shard",
            .tensor = name,
            .exact = true,
            .kind = BoundaryKind::input,
            .inputs = {name}};
  }
  // param_dtype: the oracle's step reads its master parameter rounded (the master kept aside
  // until release).
  void cast_dense_param(const std::string& p, StepEnv<T>& env) {
    if (!dtype_rounds<T>(spec_->param_dtype)) return;
    Tensor<T>& param = env.dense.at(p);
    dense_master_.insert_or_assign(p, param);
    round_tensor_to(param, spec_->param_dtype);
  }
  // What a gather sends: each rank's shard (source) cast to param_dtype.
  DistTensor<T> cast_shard(const std::string& name) const {
    DistTensor<T> shard = source(name);
    for (Tensor<T>& local : shard.locals) round_tensor_to(local, spec_->param_dtype);
    return shard;
  }
  BoundaryLabel gather_label(const std::string& name) const {
    BoundaryLabel label{.tensor = name, .exact = true, .inputs = {name}};
    if (dtype_rounds<T>(spec_->param_dtype)) {
      const std::string dtype = spec_->param_dtype->name();
      label.notes.push_back("param_dtype " + dtype + ": each rank's shard cast to " + dtype +
                            " before the gather (the oracle's parameter rounded alike)");
    }
    return label;
  }
  // The dtype the ranks' reduce-scatter adds in: reduce_dtype, or bf16 under
  // fsdp_reduce_dtype_bf16.
  std::optional<Precision> ranks_reduce_dtype() const {
    if (scenario_.has_fault(Fault::fsdp_reduce_dtype_bf16)) return parse_precision("bf16");
    return spec_->reduce_dtype;
  }

  // What a gather reads: the shard, or under fsdp_stale_shard the one from before the update.
  const DistTensor<T>& source(const std::string& name) const {
    auto stale = stale_.find(name);
    return stale != stale_.end() ? stale->second : storage_.at(name);
  }

  // The reduce-scatter on the fsdp dim (a local slice where the gradient is Replicate there),
  // adding in reduce_dtype (addends and hops rounded; the oracle's `dense` gradient rounded
  // once), with the faults that change its addends.
  DistTensor<T> reduce_scatter(DistTensor<T> grad, const Placement& target, const std::string& key,
                               std::vector<std::string> inputs, Tensor<T>& dense) {
    const std::optional<Precision> dtype = ranks_reduce_dtype();
    for (Tensor<T>& local : grad.locals) round_tensor_to(local, dtype);
    round_tensor_to(dense, spec_->reduce_dtype);
    const World<T> group = world_.on(spec_->dim).rounding_sums(hop_rounding<T>(dtype));
    std::vector<std::string> notes;
    if (dtype_rounds<T>(dtype)) {
      notes.push_back("reduce_dtype " + dtype->name() + ": each addend and each hop's sum (" +
                      std::string(reduce_order_name(group.reduce_order())) + " order) rounded to " +
                      dtype->name() + ", widened to the master's dtype");
    }
    if (scenario_.has_fault(Fault::fsdp_full_param_step)) unreduced_.insert_or_assign(key, grad);
    if (scenario_.has_fault(Fault::fsdp_grad_averaged)) {
      // The bug: FSDP's divide-by-world-size on top of the loss's global mean.
      const T size = T(group.group_size());
      world_.for_each_rank([&](int r) {
        for (T& v : grad.local(r).values()) v = v / size;
      });
    }
    return group.redistribute(
        grad, target, {.tensor = key, .inputs = std::move(inputs), .notes = std::move(notes)});
  }

  // fsdp_clip_padding: every rank's unwritten padding held 1, so the reduce-scatter leaves the
  // group size in each padding position.
  void fill_padding(DistTensor<T>& grad) const {
    const T garbage = T(world_.on(spec_->dim).group_size());
    for (int r = 0; r < grad.ranks(); ++r) {
      if (!grad.held(r)) continue;
      const Slice slice = grad.slice(r, kFlatAxis);
      for (std::int64_t i = slice.valid(); i < slice.local_extent; ++i) grad.local(r)[i] = garbage;
    }
  }

  const Scenario& scenario_;
  const FsdpSpec* spec_;
  World<T> world_;
  Check check_;
  std::map<std::string, DistTensor<T>> storage_;    // the shards, by storage name
  std::map<std::string, DistTensor<T>> stale_;      // fsdp_stale_shard: before the last update
  std::map<std::string, DistTensor<T>> unreduced_;  // fsdp_full_param_step: each rank's own grad
  std::map<std::string, Tensor<T>> dense_master_;   // param_dtype: the oracle's masters, gathered
};

}  // namespace shardsim
