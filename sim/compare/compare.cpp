#include "compare/evaluate-inl.hpp"

namespace shardsim {

std::string_view status_name(Status status) {
  switch (status) {
    case Status::exact: return "exact";
    case Status::within: return "within";
    case Status::fail: return "fail";
    case Status::unchecked: return "unchecked";
  }
  return "?";
}

namespace detail {
RunReport evaluate_f32(const Scenario& s, const RunOptions& o) {
  return evaluate_at<float>(s, parse_precision("f32"), 24, o);
}
RunReport evaluate_f64(const Scenario& s, const RunOptions& o) {
  return evaluate_at<double>(s, parse_precision("f64"), 53, o);
}
}  // namespace detail

RunReport evaluate(const Scenario& scenario, const Precision& precision,
                   const RunOptions& options) {
  check_memory(scenario, precision, options);
  switch (precision.kind) {
    case ScalarKind::f32: return detail::evaluate_f32(scenario, options);
    case ScalarKind::f64: return detail::evaluate_f64(scenario, options);
    case ScalarKind::mp: return detail::evaluate_mp(scenario, precision.bits, options);
    case ScalarKind::dd: return detail::evaluate_dd(scenario, options);
    case ScalarKind::qd: return detail::evaluate_qd(scenario, options);
    case ScalarKind::bf16:
    case ScalarKind::f16:
      // Not modelled: where a micro-batch's values would be stored (accumulated gradients);
      // and a narrow run stores every parameter and its update in its format, where FSDP keeps
      // master shards in f32: bf16 FSDP is fsdp.param_dtype on an f32 run (docs/layouts.md "Mixed
      // precision").
      if (scenario.fsdp) {
        throw InputError(scenario.file + ": " + precision.name() +
                         " runs of an fsdp scenario are not supported: a " + precision.name() +
                         " run stores every parameter and its update in " + precision.name() +
                         ", where FSDP keeps f32 master shards; model FSDP mixed precision "
                         "with fsdp = { ..., param_dtype = \"" +
                         precision.name() + "\" } on an f32 run");
      }
      if (scenario.micro_batches >= 2) {
        throw InputError(scenario.file + ": " + precision.name() +
                         " runs of a scenario with micro_batches >= 2 are not supported yet; "
                         "run it at f32, f64, dd, qd or mp (the scenario's micro_batches is " +
                         std::to_string(scenario.micro_batches) + ")");
      }
      if (options.accumulate.value_or(scenario.accumulate) == Accumulate::storage) {
        return detail::evaluate_narrow_storage(scenario, precision, options);
      }
      return evaluate_at<float>(scenario, precision, precision.bits, options);
  }
  SHARDSIM_ASSERT(false, "unknown precision kind");
  return {};
}

const RunReport* earliest_failure(const std::vector<RunReport>& reports) {
  const RunReport* earliest = nullptr;
  for (const RunReport& report : reports) {
    if (report.pass) continue;
    if (!earliest) {
      earliest = &report;
    } else if (report.first_divergence &&
               (!earliest->first_divergence ||
                report.first_divergence->boundary < earliest->first_divergence->boundary)) {
      earliest = &report;
    }
  }
  return earliest;
}

Outcome judge(const Scenario& scenario, const std::vector<RunReport>& reports) {
  Outcome outcome;
  if (const RunReport* failed = earliest_failure(reports)) {
    outcome.pass = false;
    outcome.failed_at = failed->precision;
    outcome.first_divergence = failed->first_divergence;
  }
  const Expectation& expect = scenario.expect;
  auto mismatch = [&](const std::string& message) {
    outcome.matches_expectation = false;
    outcome.why = message;
    return outcome;
  };
  if (expect.pass) {
    if (outcome.pass) return outcome;
    return mismatch("expected pass, but the sharded program diverged at " +
                    outcome.failed_at->name());
  }
  if (outcome.pass) return mismatch("expected a divergence, but every boundary passed");
  const Divergence& d = *outcome.first_divergence;
  if (expect.step && *expect.step != d.step) {
    return mismatch("expected the first divergence at step " + std::to_string(*expect.step) +
                    ", got step " + std::to_string(d.step));
  }
  if (expect.chunk && *expect.chunk != d.chunk) {
    return mismatch("expected the first divergence at chunk " + std::to_string(*expect.chunk) +
                    ", got chunk " + std::to_string(d.chunk));
  }
  if (expect.micro && *expect.micro != d.micro) {
    return mismatch("expected the first divergence in micro-batch " +
                    std::to_string(*expect.micro) + ", got " +
                    (d.micro ? "micro-batch " + std::to_string(d.micro) : "the step's update"));
  }
  if (expect.tensor && *expect.tensor != d.tensor) {
    return mismatch("expected the first divergence at tensor '" + *expect.tensor + "', got '" +
                    d.tensor + "'");
  }
  if (expect.op && *expect.op != d.op) {
    return mismatch("expected the first divergence in op '" + *expect.op + "', got '" + d.op +
                    "'");
  }
  return outcome;
}

}  // namespace shardsim
