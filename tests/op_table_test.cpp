// The op list and the fault list: one row each (op_list.hpp, fault_list.hpp), the loader's
// table in the same order, and the loader's refusal of a fault that changes nothing.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ops/attention/plan_common.hpp"
#include "ops/attention/rope.hpp"
#include "ops/layer_norm/layer_norm_hidden_plan.hpp"
#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"

using namespace shardsim;

namespace {

using scenario_test::load_error;

// A LayerNorm scenario (4 ranks, Shard(seq)) with top-level keys `top` and the step's extra
// keys `step_keys`.
std::string layer_norm_scenario(const std::string& top, const std::string& step_keys = "") {
  return top + R"toml(
[mesh]
ranks = 4
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 5, 4]
placement = "Shard(seq)"
[[steps]]
op = "layer_norm"
input = "x"
output = "y"
)toml" + step_keys;
}

const ParamSchema& param(OpKind kind, const std::string& key) {
  for (const ParamSchema& p : op_schemas()[static_cast<std::size_t>(kind)].params) {
    if (p.key == key) return p;
  }
  FAIL("no key " << key);
  throw;
}

}  // namespace

TEST_CASE("the op table follows SHARDSIM_OP_LIST: one schema per op, in OpKind order", "[ops]") {
  REQUIRE(op_schemas().size() == kOpCount);
  for (std::size_t k = 0; k < kOpCount; ++k) {
    const OpSchema& schema = op_schemas()[k];
    CHECK(schema.kind == static_cast<OpKind>(k));
    CHECK(schema.name == op_name(schema.kind));
    CHECK(find_op(schema.name) == schema.kind);
    // Every op reads an input and defines an output.
    CHECK(param(schema.kind, "input").type == ParamType::tensor);
    CHECK(param(schema.kind, "output").type == ParamType::output);
  }
  CHECK_FALSE(find_op("layernorm").has_value());
}

TEST_CASE("the fault catalogue follows SHARDSIM_FAULT_LIST", "[faults]") {
  REQUIRE(fault_catalogue().size() == kFaultCount);
  for (std::size_t k = 0; k < kFaultCount; ++k) {
    const FaultInfo& info = fault_catalogue()[k];
    CHECK(info.fault == static_cast<Fault>(k));
    CHECK(info.name == fault_name(info.fault));
    CHECK(find_fault(info.name) == info.fault);
    CHECK_FALSE(info.summary.empty());
  }
}

TEST_CASE("every choice the schema accepts is one the step's parser accepts", "[ops]") {
  for (const std::string& c : param(OpKind::layer_norm, "stats").choices) {
    CHECK_NOTHROW(parse_hidden_stats(c));
  }
  for (const std::string& c : param(OpKind::sliding_window_attention, "rope").choices) {
    CHECK_NOTHROW(parse_rope_convention(c));
  }
  for (const std::string& c : param(OpKind::sliding_window_attention, "cp_mode").choices) {
    CHECK_NOTHROW(parse_cp_mode(c));
  }
  for (const std::string& c : param(OpKind::dropout, "policy").choices) {
    CHECK_NOTHROW(parse_dropout_policy(c));
  }
}

TEST_CASE("typed arguments: parsed once, defaults from the Args struct", "[ops]") {
  const Scenario s = parse_scenario(layer_norm_scenario(""), "s.toml");
  REQUIRE(s.steps.size() == 1);
  const LayerNormArgs& args = s.steps[0].as<LayerNormArgs>();
  CHECK(args.input == "x");
  CHECK(args.output == "y");
  CHECK(args.axis == "hidden");
  CHECK(args.eps == 1e-5);
  CHECK_FALSE(args.weight.has_value());
  CHECK_FALSE(args.stats.has_value());
}

TEST_CASE("a fault that applies to no op of the scenario is refused at its location", "[faults]") {
  CHECK_THAT(load_error(layer_norm_scenario("faults = [\"window_off_by_one\"]\n")),
             Catch::Contains("s.toml:1:11: faults[0]: fault 'window_off_by_one' applies to "
                             "sliding_window_attention, which this scenario does not use"));
  CHECK_THAT(load_error(layer_norm_scenario("faults = [\"unreduced_param_grads\"]\n")),
             Catch::Contains("changes the training loop; it needs train_steps"));
  CHECK_THAT(load_error(layer_norm_scenario("faults = [\"eps_mismatch\", \"eps_mismatch\"]\n")),
             Catch::Contains("faults[1]: fault 'eps_mismatch' is listed twice"));
  // The same fault on a scenario that has the op loads.
  const Scenario s = parse_scenario(layer_norm_scenario("faults = [\"eps_mismatch\"]\n"), "s.toml");
  CHECK(s.has_fault(Fault::eps_mismatch));
  CHECK(s.fault_names() == std::vector<std::string>{"eps_mismatch"});
}

TEST_CASE("numbers outside an op's bounds, or not finite, are refused at their key", "[ops]") {
  // eps is used as float(eps) at f32: its range is [0, FLT_MAX], FLT_MAX printed as the double.
  const std::string range =
      "eps must be in [0, 3.4028234663852886e+38] (the f32 range: f32 runs "
      "use float(eps)), got ";
  CHECK_THAT(load_error(layer_norm_scenario("", "eps = inf\n")),
             Catch::Contains("s.toml:13:7: steps[0].eps: " + range + "inf"));
  CHECK_THAT(load_error(layer_norm_scenario("", "eps = nan\n")),
             Catch::Contains("steps[0].eps: " + range + "nan"));
  CHECK_THAT(load_error(layer_norm_scenario("", "eps = -1e-300\n")),
             Catch::Contains("steps[0].eps: " + range + "-1e-300"));
  // Finite as a double, infinite as a float: FLT_MAX rounds to itself, 3.5e38 to inf.
  CHECK_THAT(load_error(layer_norm_scenario("", "eps = 3.5e38\n")),
             Catch::Contains("steps[0].eps: " + range + "3.5e+38"));
  CHECK(parse_scenario(layer_norm_scenario("", "eps = 3.4028234663852886e38\n"), "s.toml")
            .steps[0]
            .as<LayerNormArgs>()
            .eps == 3.4028234663852886e38);
  // token_axis means something only to the redistribute statistics.
  CHECK_THAT(load_error(layer_norm_scenario("", "token_axis = \"seq\"\n")),
             Catch::Contains("steps[0].token_axis: token_axis is the token axis of stats = "
                             "\"redistribute\"; it means nothing without stats"));
}
