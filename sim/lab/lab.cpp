#include "lab/lab.hpp"

#include <charconv>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "lab/lab-inl.hpp"

namespace shardsim {

namespace detail {

namespace {

// from_chars rounds a decimal correctly to nearest (even); to_chars prints the shortest text
// that reads back to the same value.
template <typename F>
F parse_ieee(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  F value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    throw InputError(quote(text) + " is out of range for this precision");
  }
  if (error != std::errc() || end != text.data() + text.size()) {
    throw InputError(quote(text) + " is not a number");
  }
  return value;
}

template <typename F>
std::string print_ieee(const F& value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

}  // namespace

std::unique_ptr<LabEngine> make_lab_engine_f32() {
  return std::make_unique<LabEngineT<float>>(&parse_ieee<float>, &print_ieee<float>);
}
std::unique_ptr<LabEngine> make_lab_engine_f64() {
  return std::make_unique<LabEngineT<double>>(&parse_ieee<double>, &print_ieee<double>);
}

}  // namespace detail

namespace {

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::size_t begin = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

constexpr const char* kHelp =
    "commands:\n"
    "  reset                  a = 1, x = 0, predictions and score cleared\n"
    "  set a V | set x V      set an input coordinate\n"
    "  predict y V slope V    predict y = a*x^2 and the tangent slope 2*a*x (either alone)\n"
    "  step                   reveal the true y and slope and judge the predictions\n"
    "  show                   the current state\n"
    "  help                   this list\n"
    "  quit                   end the lab\n";

}  // namespace

Lab::Lab(const Precision& precision) : precision_(precision) {
  switch (precision.kind) {
    case ScalarKind::f32:
      engine_ = detail::make_lab_engine_f32();
      break;
    case ScalarKind::f64:
      engine_ = detail::make_lab_engine_f64();
      break;
    case ScalarKind::mp:
      engine_ = detail::make_lab_engine_mp(precision.bits);
      break;
    case ScalarKind::bf16:
    case ScalarKind::f16:
    case ScalarKind::dd:
    case ScalarKind::qd:
      throw InputError("the lab runs at f32, f64 or mp<bits>, not " + precision.name());
  }
}

Lab::~Lab() = default;

std::string Lab::banner() const {
  return "shardsim lab: the fixed map y = a*x^2 and its tangent slope dy/dx = 2*a*x, in " +
         precision_.name() +
         ".\n"
         "It illustrates sensitivity to input coordinates: which inputs a value depends on, and\n"
         "how strongly. It is not LayerNorm, a variance calculation or a sequence-parallel "
         "kernel.\n"
         "Type 'help' for the commands.\n";
}

std::string Lab::execute(std::string_view line) {
  const std::vector<std::string_view> w = words(line);
  if (w.empty() || w[0].front() == '#') return "";
  const std::string_view command = w[0];
  auto arity = [&](std::size_t n, const char* usage) {
    if (w.size() != n) throw InputError(std::string("usage: ") + usage);
  };
  if (command == "reset") {
    arity(1, "reset");
    engine_->reset();
    return "reset: a = 1, x = 0, predictions and score cleared\n";
  }
  if (command == "set") {
    // "set a V" or "set a=V".
    std::string_view variable, value;
    if (w.size() == 3) {
      variable = w[1];
      value = w[2];
    } else if (w.size() == 2 && w[1].find('=') != std::string_view::npos) {
      variable = w[1].substr(0, w[1].find('='));
      value = w[1].substr(w[1].find('=') + 1);
    } else {
      throw InputError("usage: set a V | set x V");
    }
    if (variable != "a" && variable != "x") {
      throw InputError("unknown variable " + quote(variable) + ": the inputs are a and x");
    }
    engine_->set(variable[0], value);
    return "";
  }
  if (command == "predict") {
    if (w.size() != 3 && w.size() != 5) throw InputError("usage: predict y V slope V");
    // Validate every pair before changing anything.
    for (std::size_t i = 1; i < w.size(); i += 2) {
      if (w[i] != "y" && w[i] != "slope") {
        throw InputError("predict: unknown quantity " + quote(w[i]) + " (expected y or slope)");
      }
      if (!detail::is_decimal(w[i + 1])) {
        throw InputError(quote(w[i + 1]) + " is not a number (expected e.g. 1, 0.5, -2e-3)");
      }
    }
    if (w.size() == 5 && w[1] == w[3]) throw InputError("predict: " + quote(w[1]) + " given twice");
    for (std::size_t i = 1; i < w.size(); i += 2)
      engine_->predict(w[i] == "y" ? 'y' : 's', w[i + 1]);
    return "";
  }
  if (command == "step") {
    arity(1, "step");
    return engine_->step();
  }
  if (command == "show") {
    arity(1, "show");
    return engine_->show();
  }
  if (command == "help") return kHelp;
  if (command == "quit" || command == "exit") {
    arity(1, command == "quit" ? "quit" : "exit");
    finished_ = true;
    return "";
  }
  throw InputError("unknown command " + quote(command) +
                   " (commands: reset, set, predict, step, show, help, quit)");
}

}  // namespace shardsim
