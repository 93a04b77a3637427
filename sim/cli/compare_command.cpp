// shardsim compare GOLDEN CANDIDATE [--rtol R] [--atol A] [--max-ulp U] [--map GOLDEN=CANDIDATE]
//                  [--precision bf16|f16]
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "golden/golden_compare.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

namespace {

constexpr const char* kCompareUsage =
    "usage: shardsim compare GOLDEN CANDIDATE [options]\n"
    "  GOLDEN     a directory written by 'shardsim run --golden' (manifest.json + goldens)\n"
    "  CANDIDATE  a safetensors file, or a directory of .npy files (named like the goldens'\n"
    "             npy files), written by the backend under test\n"
    "  --precision bf16|f16 judges the goldens of that format against the error budgets of\n"
    "             correct programs instead of tolerances: each tensor noise or bug\n"
    "exit codes: 0 every compared tensor within tolerance (--precision: noise); 1 some outside\n"
    "            (a bug); 2 bad input\n";

// A tolerance flag's value: a decimal number, >= 0 and finite. One that underflows to 0 (1e-400)
// is refused rather than read as 0.
double non_negative(const po::variables_map& vm, const char* flag) {
  const std::string text = vm[flag].as<std::string>();
  const std::string name = std::string("--") + flag;
  // strtod reads hexadecimal too; a tolerance is written in decimal (or as inf or nan, which
  // are refused below as not finite).
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() ||
      text.find_first_of("xX") != std::string::npos) {
    throw InputError(name + ": expected a decimal number, got " + quote(text));
  }
  if (!(v >= 0) || !std::isfinite(v)) {
    throw InputError(name + " must be >= 0 and finite, got " + quote(text));
  }
  const std::size_t exponent = text.find_first_of("eE");  // v is finite: no "inf" here
  if (v == 0 && text.substr(0, exponent).find_first_of("123456789") != std::string::npos) {
    throw InputError(name + ": " + quote(text) +
                     " is below the double range and would read as 0; give 0 or a larger value");
  }
  return v;
}

// --map GOLDEN=CANDIDATE, repeatable; a golden name mapped twice is refused.
std::vector<std::pair<std::string, std::string>> parse_maps(const std::vector<std::string>& pairs) {
  std::vector<std::pair<std::string, std::string>> map;
  for (const std::string& pair : pairs) {
    // Golden names hold '=' inside their [SLICE]: split at the first '=' outside brackets.
    std::size_t eq = std::string::npos;
    int depth = 0;
    for (std::size_t i = 0; i < pair.size() && eq == std::string::npos; ++i) {
      if (pair[i] == '[') ++depth;
      if (pair[i] == ']' && depth > 0) --depth;
      if (pair[i] == '=' && depth == 0) eq = i;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size()) {
      throw InputError("--map " + quote(pair) + ": expected GOLDEN_NAME=CANDIDATE_NAME");
    }
    const std::string golden_name = pair.substr(0, eq);
    for (const auto& [mapped, candidate_name] : map) {
      if (mapped == golden_name) {
        throw InputError("--map " + quote(pair) + ": " + quote(golden_name) +
                         " is already mapped to " + quote(candidate_name));
      }
    }
    map.emplace_back(golden_name, pair.substr(eq + 1));
  }
  return map;
}

}  // namespace

int compare_command(const Args& args) {
  po::options_description options("compare options");
  options.add_options()("rtol", po::value<std::string>(),
                        "relative tolerance (see docs/goldens.md)")(
      "atol", po::value<std::string>(), "absolute tolerance")(
      "max-ulp", po::value<std::string>(), "also accept elements within this many ULPs")(
      "precision", po::value<std::string>(),
      "bf16 or f16: judge against the goldens' error budgets (noise or bug), not tolerances")(
      "map", po::value<std::vector<std::string>>()->composing(),
      "GOLDEN_NAME=CANDIDATE_NAME, repeatable (split at the first '=' outside [...])")(
      "help,h", "show this help");
  po::options_description all;
  all.add(options).add_options()("golden", po::value<std::string>(), "")(
      "candidate", po::value<std::string>(), "");
  po::positional_options_description positional;
  positional.add("golden", 1).add("candidate", 1);
  po::variables_map vm;
  parse_command_line(args, all, positional, vm);
  if (vm.count("help")) {
    std::cout << kCompareUsage << "\n" << options;
    return 0;
  }
  if (!vm.count("golden") || !vm.count("candidate")) {
    throw InputError(
        "compare: missing GOLDEN or CANDIDATE (usage: shardsim compare GOLDEN CANDIDATE "
        "[options]; see 'shardsim help compare')");
  }
  for (const char* path : {"golden", "candidate"}) {
    if (vm[path].as<std::string>().empty()) {
      throw InputError(std::string("compare: ") + (path[0] == 'g' ? "GOLDEN" : "CANDIDATE") +
                       " is an empty path");
    }
  }
  CompareOptions compare;
  if (vm.count("rtol")) compare.rtol = non_negative(vm, "rtol");
  if (vm.count("atol")) compare.atol = non_negative(vm, "atol");
  if (vm.count("max-ulp")) compare.max_ulp = non_negative(vm, "max-ulp");
  if (vm.count("precision")) {
    const std::string name = vm["precision"].as<std::string>();
    if (name != "bf16" && name != "f16") {
      throw InputError("--precision: expected bf16 or f16 (the narrow precisions with error "
                       "budgets), got " + quote(name));
    }
    for (const char* flag : {"rtol", "atol", "max-ulp"}) {
      if (vm.count(flag)) {
        throw InputError(std::string("--precision judges against error budgets; it takes no --") +
                         flag);
      }
    }
    compare.precision = name == "bf16" ? NarrowFormat::bf16 : NarrowFormat::f16;
  }
  if (vm.count("map")) compare.map = parse_maps(vm["map"].as<std::vector<std::string>>());
  const GoldenDir golden = load_golden_dir(vm["golden"].as<std::string>());
  const Candidate candidate = load_candidate(vm["candidate"].as<std::string>());
  const ComparisonReport report = compare_candidate(golden, candidate, compare);
  std::cout << format_comparison(report);
  return report.pass ? 0 : 1;
}

}  // namespace shardsim::cli
