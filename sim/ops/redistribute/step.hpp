// An explicit placement change between steps: the Megatron sequence<->tensor transitions.
//
// Forward composes the world's collectives (S->R all-gather, P->S reduce-scatter, P->R
// all-reduce, ...). A change to the placement already held is the identity and is recorded as
// op "identity" (Megatron's f: identity forward, all-reduce backward).
//
// Backward moves the gradient back with the conjugate collective:
//   input Shard or Replicate  the gradient goes back to the input's placement, e.g. a Partial
//                             gradient of an all-gathered (Replicate) tensor is reduce-scattered
//                             back into sequence shards;
//   input Partial(sum)        the gradient of a sum is the same full gradient for every addend,
//                             so it goes to Replicate: the gradient of a reduce-scattered tensor
//                             is all-gathered.
#pragma once

#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class RedistributeStep final : public StepOp<T> {
 public:
  RedistributeStep(const StepSpec& step, const Scenario& scenario)
      : args_(step.as<RedistributeArgs>()),
        gather_wrong_axis_(scenario.has_fault(Fault::gather_wrong_axis)) {}

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    env.dense[output] = env.dense_at(args_.input);  // placement does not change values
    const DistTensor<T>& input = env.sharded_at(args_.input);
    const Placement& to = args_.to;
    if (gather_wrong_axis_ && env.world.placement(input).is_shard() && to.is_replicate()) {
      env.sharded[output] = gather_along_first_axis(env.world, input, output);
      return;
    }
    // Moving data is exact; summing Partial addends reorders arithmetic and is not.
    DistTensor<T> moved = env.world.redistribute(input, to,
                                                 {.tensor = output,
                                                  .exact = !env.world.placement(input).is_partial(),
                                                  .inputs = {input.name}});
    moved.name = output;
    if (env.world.placement(input) == to) {
      env.world.compare_boundary(
          {.op = "identity", .tensor = output, .exact = true, .inputs = {input.name}}, moved);
    }
    env.sharded[output] = std::move(moved);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    const DistTensor<T>& grad = env.sharded_at(grad_name(output));
    // Back to the input's layout on every dim; a Partial input's gradient is the whole
    // gradient on every member (the gradient of a sum is the same for each addend).
    Layout back_to = env.sharded_at(input).layout;
    for (Placement& p : back_to.dims) {
      if (p.is_partial()) p = Placement::replicate();
    }
    const std::string moved = moved_name(grad_name(input), output);
    DistTensor<T> moved_grad = env.world.redistribute(grad, back_to,
                                                      {.tensor = moved,
                                                       .dense = grad_name(output),
                                                       .exact = !grad.layout.has_partial(),
                                                       .inputs = {grad.name}});
    // The claim rests on the moved value when a collective ran, else on the gradient itself.
    const std::string source = grad.layout == back_to ? grad.name : moved;
    env.add_grad(input, env.dense_at(grad_name(output)), std::move(moved_grad),
                 {.op = backward_label(OpKind::redistribute), .exact = true, .inputs = {source}});
  }

 private:
  // The gather_wrong_axis fault's all-gather, recorded as the all-gather: every member's buffer
  // is its group's local buffers concatenated in coordinate order (as all_gather_into_tensor
  // concatenates along dim 0), read as the global shape; a tail past them, if any, is zero.
  static DistTensor<T> gather_along_first_axis(const World<T>& world, const DistTensor<T>& in,
                                               const std::string& output) {
    DistTensor<T> out =
        world.make(output, in.global, in.layout.with(world.dim(), Placement::replicate()));
    // The members' buffers, on every process (a copy; over the mpi transport a gather).
    const DistTensor<T> all = world.share(in);
    world.for_each_rank([&](int r) {
      std::vector<T> joined;
      for (int c = 0; c < world.group_size(); ++c) {
        const Tensor<T>& piece = all.local(world.peer(r, c));
        joined.insert(joined.end(), piece.values().begin(), piece.values().end());
      }
      Tensor<T>& local = out.local(r);
      for (std::int64_t i = 0; i < local.numel(); ++i) {
        const auto at = static_cast<std::size_t>(i);
        local[i] = at < joined.size() ? joined[at] : T(0);
      }
    });
    // Labelled like the collective it replaces (World::report): all_gather[DIM] on an N-D mesh.
    std::string op = "all_gather";
    if (world.mesh().ndim() > 1) op += "[" + world.mesh().dim(world.dim()).name + "]";
    world.compare_boundary({.op = op,
                            .tensor = output,
                            .exact = true,
                            .kind = BoundaryKind::collective,
                            .inputs = {in.name}},
                           out);
    return out;
  }

  const RedistributeArgs& args_;
  bool gather_wrong_axis_ = false;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone.
inline void check_oracle_rows(const RedistributeArgs&, OracleRowsUse&) {}

}  // namespace shardsim
