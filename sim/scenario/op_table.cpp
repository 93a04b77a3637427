// The op schemas and fault catalogue the scenario loader accepts, and the per-op shape and
// placement rules used to validate the steps. Each op issue adds its rows here.
#include <cstdio>

#include "shardsim/error.hpp"
#include "sim/scenario/loader_internal.hpp"

namespace shardsim {

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> schemas = {
      {"layer_norm",
       "LayerNorm over one named axis: mean, biased variance, eps inside the sqrt, weight, bias",
       {
           {"input", ParamType::tensor, true, "tensor to normalize", {}},
           {"output", ParamType::output, true, "name of the normalized tensor", {}},
           {"weight", ParamType::tensor, false,
            "scale, shape [axis]: Replicate, or Shard(axis) for a Shard(axis) input", {}},
           {"bias", ParamType::tensor, false, "shift, shape [axis], placed like weight", {}},
           {"axis", ParamType::string, false, "normalized axis (default hidden)", {}},
           {"eps", ParamType::number, false, "added to the variance inside the sqrt (default 1e-5)",
            {}},
           {"stats", ParamType::string, false,
            "distributed statistics when the input is Shard(axis) (required then): all-reduce of "
            "sum and sum of squares (cancellation risk when |mean| >> std), Chan's parallel "
            "merge of (count, mean, M2), or all-to-all to token shards and back",
            {"sum_sumsq", "welford", "redistribute"}},
           {"token_axis", ParamType::string, false,
            "axis the redistribute mode shards tokens on (default seq)", {}},
       }},
      {"rms_norm",
       "RMSNorm over one named axis: x / sqrt(mean(x^2) + eps) * weight; its own statistic "
       "(rrms), no mean, no bias; Shard(axis) input all-reduces the sum of squares",
       {
           {"input", ParamType::tensor, true, "tensor to normalize", {}},
           {"output", ParamType::output, true, "name of the normalized tensor", {}},
           {"weight", ParamType::tensor, false,
            "scale, shape [axis]: Replicate, or Shard(axis) for a Shard(axis) input", {}},
           {"axis", ParamType::string, false, "normalized axis (default hidden)", {}},
           {"eps", ParamType::number, false,
            "added to the mean square inside the sqrt (default 1e-5)", {}},
       }},
      {"redistribute",
       "change a tensor's placement through collectives (all_gather, all_reduce, "
       "reduce_scatter, all_to_all, local slice)",
       {
           {"input", ParamType::tensor, true, "tensor to move", {}},
           {"output", ParamType::output, true, "name of the moved tensor", {}},
           {"to", ParamType::placement, true, "target placement", {}},
       }},
      {"linear",
       "y = x W^T (+ b) with W named (out, in), e.g. [ffn, hidden]; the weight's placement "
       "picks the form: Replicate (none), Shard(out) (column-parallel, input Replicate, output "
       "Shard(out)), Shard(in) (row-parallel, input Shard(in), output Partial(sum))",
       {
           {"input", ParamType::tensor, true, "x, with the weight's in axis", {}},
           {"weight", ParamType::tensor, true, "W, axes [out, in]", {}},
           {"bias", ParamType::tensor, false,
            "b, shape [out]: Shard(out) like W when column-parallel, else Replicate", {}},
           {"output", ParamType::output, true, "y: x's shape with in replaced by out", {}},
           {"parallel", ParamType::string, false,
            "assert the form the weight's placement implies", {"none", "column", "row"}},
       }},
      {"gelu",
       "GELU, elementwise: x/2 (1 + erf(x/sqrt 2)), or the tanh approximation",
       {
           {"input", ParamType::tensor, true, "x (Shard or Replicate)", {}},
           {"output", ParamType::output, true, "y", {}},
           {"approximate", ParamType::string, false, "form (default none, i.e. erf)",
            {"none", "tanh"}},
       }},
      {"dropout",
       "dropout with a Philox mask drawn from (seed, stream, forward pass, element index); "
       "records the mask and, for a Shard input, the repetition detector's check",
       {
           {"input", ParamType::tensor, true, "x (Shard or Replicate)", {}},
           {"output", ParamType::output, true, "y = x * mask / (1 - p)", {}},
           {"p", ParamType::number, true, "drop probability in [0, 1); 0 disables dropout", {}},
           {"seed", ParamType::integer, false, "Philox key (default: the scenario seed)", {}},
           {"stream", ParamType::integer, false,
            "dropout site id in [0, 2^32), Philox counter word 2 (default: the step index)", {}},
           {"policy", ParamType::string, false,
            "how the sharded program draws its masks (default global; the others are the "
            "seeded bugs, also switched on by the dropout_* faults)",
            {"global", "same_seed", "rank_offset"}},
       }},
      {"add",
       "residual add y = input + residual, elementwise",
       {
           {"input", ParamType::tensor, true, "first addend", {}},
           {"residual", ParamType::tensor, true, "second addend, same shape and placement", {}},
           {"output", ParamType::output, true, "the sum", {}},
       }},
      {"mse_loss",
       "masked MSE: sum over valid tokens of sum_h (y - target)^2, divided once by the global "
       "valid-token count",
       {
           {"input", ParamType::tensor, true, "prediction", {}},
           {"target", ParamType::tensor, true, "target, same shape and placement as input", {}},
           {"output", ParamType::output, true, "name of the scalar loss", {}},
           {"valid_lengths", ParamType::integer_list, false,
            "valid tokens per batch element (token (b, s) is valid iff s < valid_lengths[b]); "
            "default: all valid",
            {}},
           {"batch_axis", ParamType::string, false, "default batch", {}},
           {"seq_axis", ParamType::string, false, "default seq", {}},
           {"feature_axis", ParamType::string, false, "default hidden", {}},
       }},
      {"sliding_window_attention",
       "streamed sliding-window attention with RoPE and a carried KV cache, context-parallel: "
       "the KV axis (cache ++ chunk) is sharded over the ranks (torch.chunk)",
       {
           {"input", ParamType::tensor, true, "x, [batch, seq, hidden], Replicate", {}},
           {"wq", ParamType::tensor, true, "query projection, [hidden, head, head_dim]", {}},
           {"wk", ParamType::tensor, true, "key projection, [hidden, head, head_dim]", {}},
           {"wv", ParamType::tensor, true, "value projection, [hidden, head, head_dim]", {}},
           {"wo", ParamType::tensor, true, "output projection, [head, head_dim, hidden]", {}},
           {"output", ParamType::output, true, "y = attn wo, [batch, seq, hidden], Replicate", {}},
           {"n_head", ParamType::integer, true, "number of heads (>= 1)", {}},
           {"head_dim", ParamType::integer, true, "per-head width (even, >= 2)", {}},
           {"window", ParamType::integer, false,
            "key j is visible to query i iff 0 <= pos(i) - pos(j) < window (>= 1); omit for "
            "plain causal",
            {}},
           {"rope_theta", ParamType::number, false, "RoPE base theta (default 10000)", {}},
           {"rope", ParamType::string, false, "RoPE pairing (default rotate_half)",
            {"rotate_half", "interleaved"}},
           {"cp_mode", ParamType::string, false,
            "context-parallel plan (default allgather)", {"allgather", "ring", "ulysses"}},
       }},
  };
  return schemas;
}

const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> faults = {
      {"combine_token_means",
       "layer_norm (row-sharded): one mean for all tokens, all-reduced across the ranks' token "
       "means, instead of each token's own"},
      {"rmsnorm_substituted",
       "layer_norm (row-sharded): RMSNorm's statistic (no mean subtracted) where LayerNorm is "
       "specified"},
      {"hidden_shard_local_stats",
       "layer_norm (Shard(hidden)): each rank normalizes its slice of a token with the slice's "
       "own statistics"},
      {"unbiased_variance", "layer_norm: variance divided by H - 1 instead of H"},
      {"eps_mismatch", "layer_norm: eps outside the sqrt, rstd = 1 / (sqrt(var) + eps)"},
      {"unreduced_param_grads",
       "each replica of a Replicate parameter steps with its own rank's Partial gradient; the "
       "replica check fails"},
      {"loss_averaged_twice", "mse_loss: divided by the world size as well as by the count"},
      {"average_of_rank_means",
       "mse_loss: mean over ranks of each rank's own mean (wrong under uneven shards or "
       "padding)"},
      {"padding_in_loss", "mse_loss: ignores valid_lengths, padding tokens enter the loss"},
      {"dtype_mismatch",
       "layer_norm (row-sharded): normalized output rounded through f32 inside an f64/mp run"},
      {"ones_init_assumed",
       "the sharded program re-initializes parameters named as a step's weight to ones and "
       "bias to zeros, trusting default init"},
      {"wrong_axis",
       "mse_loss: the padding mask is laid out [seq, batch] while the tokens are [batch, seq]"},
      {"dropout_same_seed",
       "dropout: every rank draws its mask from its local element index with the same seed, so "
       "equally shaped shards repeat each other's masks (the repetition check names the ranks)"},
      {"dropout_rank_offset",
       "dropout: Megatron-style per-rank seed (seed + 2718 + rank) on local indices: masks "
       "differ across ranks but are not the dense mask"},
      {"cache_raw_k",
       "sliding_window_attention: the KV cache keeps K before RoPE; chunk 1 passes, the cache "
       "carried into chunk 2 diverges"},
      {"rope_local_positions",
       "sliding_window_attention: each KV shard rotates its chunk keys at shard-local positions "
       "(0, 1, ...) instead of their absolute ones"},
      {"window_off_by_one",
       "sliding_window_attention: the mask allows q_pos - k_pos <= window (one key too many)"},
      {"rope_after_gather_wrong_offset",
       "sliding_window_attention (cp_mode allgather): RoPE once on the gathered keys, at "
       "positions offset by the cache length twice; chunk 1 passes"},
  };
  return faults;
}

namespace {

// sliding_window_attention (ops/attention/plan.hpp): x [batch, seq, hidden] Replicate (queries
// are not sharded); wq, wk, wv [hidden, head, head_dim] and wo [head, head_dim, hidden],
// Replicate; output like x.
void infer_attention(const StepSpec& step, StepContext& ctx, const TensorState& input) {
  const std::string& x_name = step.str("input");
  const std::vector<Axis>& axes = input.shape.axes();
  if (axes.size() != 3 || axes[0].name != "batch" || axes[1].name != "seq" ||
      axes[2].name != "hidden") {
    ctx.fail(step, "input", "sliding_window_attention needs input axes [batch, seq, hidden]; '" +
                                x_name + "' is " + input.shape.str());
  }
  if (!input.placement.is_replicate()) {
    ctx.fail(step, "input", "'" + x_name + "' must be Replicate over the cp group (queries are "
                            "not sharded), not " + input.placement.str());
  }
  const std::int64_t n_head = step.int_or("n_head", 0);
  if (n_head < 1) ctx.fail(step, "n_head", "n_head must be >= 1, got " + std::to_string(n_head));
  const std::int64_t head_dim = step.int_or("head_dim", 0);
  if (head_dim < 2 || head_dim % 2 != 0) {
    ctx.fail(step, "head_dim", "RoPE rotates pairs: head_dim must be even and >= 2, got " +
                                   std::to_string(head_dim));
  }
  if (step.has("window") && step.int_or("window", 1) < 1) {
    ctx.fail(step, "window", "window must be >= 1 key (omit it for plain causal attention), got " +
                                 std::to_string(step.int_or("window", 1)));
  }
  if (step.has("rope_theta") && !(step.num_or("rope_theta", 1) > 0)) {
    ctx.fail(step, "rope_theta", "rope_theta must be > 0");
  }
  const std::int64_t hidden = input.shape.extent("hidden");
  const Shape in_proj({{"hidden", hidden}, {"head", n_head}, {"head_dim", head_dim}});
  const Shape out_proj({{"head", n_head}, {"head_dim", head_dim}, {"hidden", hidden}});
  for (const std::string key : {"wq", "wk", "wv", "wo"}) {
    const TensorState& w = ctx.tensor(step, key);
    const Shape& want = key == "wo" ? out_proj : in_proj;
    if (!(w.shape == want)) {
      ctx.fail(step, key, "shape mismatch: '" + step.str(key) + "' is " + w.shape.str() +
                              " but '" + x_name + "' " + input.shape.str() + " with n_head = " +
                              std::to_string(n_head) + ", head_dim = " +
                              std::to_string(head_dim) + " needs " + want.str());
    }
    if (!w.placement.is_replicate()) {
      ctx.fail(step, key, "'" + step.str(key) + "' must be Replicate, not " + w.placement.str());
    }
  }
  ctx.define(step, "output", {input.shape, Placement::replicate()});
}

}  // namespace

void infer_step(const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  if (step.op == "layer_norm" || step.op == "rms_norm") {
    const bool layer_norm = step.op == "layer_norm";
    const std::string axis = step.str_or("axis", "hidden");
    if (!input.shape.has(axis)) {
      ctx.fail(step, "axis", "axis '" + axis + "' is not an axis of '" + step.str("input") + "' " +
                                 input.shape.str());
    }
    if (step.num_or("eps", 1e-5) < 0) ctx.fail(step, "eps", "eps must be >= 0");
    if (input.placement.is_partial()) {
      ctx.fail(step, "input", step.op + " needs a Shard or Replicate input, not Partial(sum)");
    }
    // A Shard(axis) input has no whole row on any rank: distributed statistics, and parameters
    // sharded like the input's features.
    const bool hidden = input.placement.is_shard() && input.placement.axis == axis;
    if (layer_norm && hidden && !step.has("stats")) {
      ctx.fail(step, "input",
               "'" + step.str("input") + "' is " + input.placement.str() +
                   ", sharded on the normalized axis '" + axis +
                   "': choose the distributed statistics with stats = \"sum_sumsq\", "
                   "\"welford\" or \"redistribute\"");
    }
    if (layer_norm && !hidden && step.has("stats")) {
      ctx.fail(step, "stats", "stats applies only to an input sharded on the normalized axis '" +
                                  axis + "'; '" + step.str("input") + "' is " +
                                  input.placement.str());
    }
    if (layer_norm && hidden && step.str("stats") == "redistribute") {
      const std::string token_axis = step.str_or("token_axis", "seq");
      if (!input.shape.has(token_axis) || token_axis == axis) {
        ctx.fail(step, step.has("token_axis") ? "token_axis" : "stats",
                 "the redistribute mode needs a token axis other than '" + axis + "': '" +
                     token_axis + "' is not one of " + input.shape.str());
      }
    }
    const Placement param_placement = hidden ? input.placement : Placement::replicate();
    const Shape param_shape(std::vector<Axis>{{axis, input.shape.extent(axis)}});
    for (const char* key : {"weight", "bias"}) {
      if (!step.has(key)) continue;
      const TensorState& param = ctx.tensor(step, key);
      if (!(param.shape == param_shape)) {
        ctx.fail(step, key,
                 "shape mismatch: '" + step.str(key) + "' is " + param.shape.str() + " but '" +
                     step.str("input") + "' " + input.shape.str() + " needs " + param_shape.str());
      }
      if (!(param.placement == param_placement)) {
        ctx.fail(step, key, "'" + step.str(key) + "' must be " + param_placement.str() +
                                " (the input '" + step.str("input") + "' is " +
                                input.placement.str() + "), not " + param.placement.str());
      }
    }
    ctx.define(step, "output", {input.shape, input.placement});
  } else if (step.op == "mse_loss") {
    const TensorState& target = ctx.tensor(step, "target");
    if (!(target.shape == input.shape)) {
      ctx.fail(step, "target", "shape mismatch: '" + step.str("target") + "' is " +
                                   target.shape.str() + " but '" + step.str("input") + "' is " +
                                   input.shape.str());
    }
    if (!(target.placement == input.placement)) {
      ctx.fail(step, "target", "placement mismatch: '" + step.str("target") + "' is " +
                                   target.placement.str() + " but '" + step.str("input") +
                                   "' is " + input.placement.str());
    }
    const std::string batch = step.str_or("batch_axis", "batch");
    const std::string seq = step.str_or("seq_axis", "seq");
    const std::string feature = step.str_or("feature_axis", "hidden");
    for (const auto& [key, axis] : {std::pair{"batch_axis", batch}, {"seq_axis", seq},
                                    {"feature_axis", feature}}) {
      if (!input.shape.has(axis)) {
        ctx.fail(step, key, "axis '" + axis + "' is not an axis of '" + step.str("input") + "' " +
                                input.shape.str());
      }
    }
    if (input.placement.is_partial() ||
        (input.placement.is_shard() && input.placement.axis != batch &&
         input.placement.axis != seq)) {
      ctx.fail(step, "input", "mse_loss needs whole tokens: Replicate or Shard(" + batch +
                                  ") or Shard(" + seq + "), not " + input.placement.str());
    }
    if (step.has("valid_lengths")) {
      const auto& lengths = step.ints("valid_lengths");
      const std::int64_t batch_size = input.shape.extent(batch);
      if (static_cast<std::int64_t>(lengths.size()) != batch_size) {
        ctx.fail(step, "valid_lengths", "needs one length per batch element (" +
                                            std::to_string(batch_size) + "), got " +
                                            std::to_string(lengths.size()));
      }
      std::int64_t total = 0;
      for (std::int64_t n : lengths) {
        if (n < 0 || n > input.shape.extent(seq)) {
          ctx.fail(step, "valid_lengths", "each length must be in [0, " +
                                              std::to_string(input.shape.extent(seq)) + "]");
        }
        total += n;
      }
      if (total == 0) ctx.fail(step, "valid_lengths", "at least one token must be valid");
    }
    ctx.define(step, "output", {Shape(), Placement::replicate()});
  } else if (step.op == "linear") {
    infer_linear(step, ctx, input);
  } else if (step.op == "gelu" || step.op == "dropout" || step.op == "add") {
    infer_elementwise(step, ctx, input);
  } else if (step.op == "sliding_window_attention") {
    infer_attention(step, ctx, input);
  } else if (step.op == "redistribute") {
    const Placement to = ctx.placement(step, "to");
    if (to.is_shard() && !input.shape.has(to.axis)) {
      ctx.fail(step, "to", "unknown axis '" + to.axis + "' in placement " + to.str() + ": '" +
                               step.str("input") + "' has axes " + input.shape.str());
    }
    ctx.define(step, "output", {input.shape, to});
  }
}

void check_plans(const Scenario& scenario) {
  for (const StepSpec& step : scenario.steps) {
    if (step.op != "sliding_window_attention") continue;
    const std::string path = "steps[" + std::to_string(step.index) + "]";
    auto loc_of = [&](const std::string& key) {
      return step.has(key) ? step.params.at(key).loc : step.loc;
    };
    const std::string mode = step.str_or("cp_mode", "allgather");
    if (scenario.has_fault("rope_after_gather_wrong_offset") && mode != "allgather") {
      throw InputError(located(scenario.file, loc_of("cp_mode"), path + ".cp_mode",
                               "fault 'rope_after_gather_wrong_offset' rotates the gathered keys, "
                               "so it needs cp_mode = \"allgather\", not \"" + mode + "\""));
    }
    // A valid but pointless plan: about one key of a query's window per shard, or fewer.
    const std::int64_t cp_size = scenario.mesh.ranks;
    if (cp_size > 1 && step.has("window") && step.int_or("window", 1) <= cp_size) {
      const std::int64_t window = step.int_or("window", 1);
      std::fprintf(stderr, "%s\n",
                   located(scenario.file, loc_of("window"), path + ".window",
                           "warning: window = " + std::to_string(window) + " over cp_size = " +
                               std::to_string(cp_size) + " ranks leaves about " +
                               std::to_string(window) + "/" + std::to_string(cp_size) +
                               " <= 1 key of a query's window per shard: valid, but unlikely to "
                               "pay for its communication")
                       .c_str());
    }
  }
}

}  // namespace shardsim
