// The manifest's error budgets (budget.hpp, docs/goldens.md "Error budgets"): the "budgets" object
// after "dtypes", and each BF16/F16 tensor's "budget", written and read back.
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/mesh.hpp"
#include "golden/manifest.hpp"

namespace shardsim::golden_detail {

namespace {

// A gap: a number, or "inf" (a NaN or a mismatched infinity; JSON has no infinity).
Json gap_json(double value, bool integer) {
  if (std::isinf(value)) return "inf";
  if (integer) return static_cast<std::uint64_t>(value);
  return value;
}

[[noreturn]] void fail(const std::string& what, const std::string& path,
                       const std::string& message) {
  throw InputError(what + ": " + path + ": " + message);
}

double read_gap(const Json& item, const std::string& key, const std::string& what,
                const std::string& path) {
  auto found = item.find(key);
  if (found == item.end()) fail(what, path, "missing key '" + key + "'");
  if (found->is_string() && found->get<std::string>() == "inf")
    return std::numeric_limits<double>::infinity();
  const bool integer = key == "ulp";
  if (!found->is_number() || (integer && !found->is_number_integer()) ||
      !(found->get<double>() >= 0) || !std::isfinite(found->get<double>())) {
    fail(what, path + "." + key,
         std::string("expected ") + (integer ? "an integer" : "a number") +
             " >= 0 or \"inf\", got " + clipped(found->dump()));
  }
  return found->get<double>();
}

// budgets.reduce_orders or budgets.schedules: the names, each one `parse` reads.
template <typename Parse>
std::string string_list(const Json& budgets, const std::string& key, const std::string& what,
                        Parse parse) {
  auto found = budgets.find(key);
  if (found == budgets.end() || !found->is_array() || found->empty())
    fail(what, "budgets." + key, "expected a non-empty array of names");
  std::string out;
  for (const Json& name : *found) {
    if (!name.is_string()) fail(what, "budgets." + key, "expected names (strings)");
    try {
      parse(name.get<std::string>());
    } catch (const InputError& e) {
      fail(what, "budgets." + key, e.what());
    }
    out += (out.empty() ? "" : ", ") + name.get<std::string>();
  }
  return out;
}

}  // namespace

Json budgets_json(const GoldenBudgets& budgets) {
  Json orders = Json::array();
  for (ReduceOrder order : budgets.programs.reduce_orders)
    orders.push_back(reduce_order_name(order));
  Json schedules = Json::array();
  for (const Schedule& schedule : budgets.programs.schedules) schedules.push_back(schedule.str());
  Json unavailable = Json::object();
  if (budgets.bf16_unavailable) unavailable["bf16"] = *budgets.bf16_unavailable;
  if (budgets.f16_unavailable) unavailable["f16"] = *budgets.f16_unavailable;
  return Json{{"accumulate", "f32"},
              {"reduce_orders", orders},
              {"schedules", schedules},
              {"unavailable", unavailable}};
}

Json tensor_budget_json(const TensorBudget& budget) {
  return Json{{"normwise", gap_json(budget.normwise, false)}, {"ulp", gap_json(budget.ulp, true)}};
}

void parse_budgets(const Json& manifest, const std::string& what, GoldenDir& out) {
  const Json& tensors = manifest.at("tensors");
  auto found = manifest.find("budgets");
  if (found == manifest.end()) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].contains("budget"))
        fail(what, "tensors[" + std::to_string(i) + "].budget", "a budget without \"budgets\"");
    }
    return;
  }
  const Json& budgets = *found;
  if (!budgets.is_object()) fail(what, "budgets", "expected an object");
  if (!budgets.contains("accumulate") || budgets["accumulate"] != "f32")
    fail(what, "budgets.accumulate", "expected \"f32\"");
  out.has_budgets = true;
  out.budget_programs = "accumulate f32; reduce orders " +
                        string_list(budgets, "reduce_orders", what, parse_reduce_order) +
                        "; schedules " + string_list(budgets, "schedules", what, parse_schedule);
  if (!budgets.contains("unavailable") || !budgets["unavailable"].is_object())
    fail(what, "budgets.unavailable", "expected an object");
  for (const auto& [format, reason] : budgets["unavailable"].items()) {
    if ((format != "bf16" && format != "f16") || !reason.is_string())
      fail(what, "budgets.unavailable." + clipped(format), "expected bf16 or f16: a reason");
    out.budgets_unavailable[format] = reason.get<std::string>();
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    GoldenInfo& info = out.infos.at(i);
    const std::string path = "tensors[" + std::to_string(i) + "]";
    const char* format = info.dtype == format::Dtype::bf16  ? "bf16"
                         : info.dtype == format::Dtype::f16 ? "f16"
                                                            : nullptr;
    const bool expected = format && !out.budgets_unavailable.count(format);
    if (tensors[i].contains("budget") != expected) {
      fail(what, path + ".budget",
           expected ? "missing: every BF16/F16 tensor has a budget"
                    : "unexpected: only BF16/F16 tensors of a format with budgets have one");
    }
    if (!expected) continue;
    const Json& budget = tensors[i]["budget"];
    if (!budget.is_object()) fail(what, path + ".budget", "expected an object");
    info.budget = TensorBudget{read_gap(budget, "normwise", what, path + ".budget"),
                               read_gap(budget, "ulp", what, path + ".budget")};
  }
}

}  // namespace shardsim::golden_detail
