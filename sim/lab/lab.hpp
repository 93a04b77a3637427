// The function lab: one fixed map, y = a*x^2, and its tangent slope dy/dx = 2*a*x, evaluated at a
// chosen precision. You set a and x, predict y and the slope, and `step` reveals the true values
// and says whether each prediction was right. It illustrates sensitivity to input coordinates
// (which inputs a value depends on, and how strongly); it is not LayerNorm, a variance
// calculation or a sequence-parallel kernel.
//
// Commands (one per line; blank lines and lines starting with '#' are ignored):
//   reset                        a = 1, x = 0, predictions and score cleared
//   set a V | set x V            (also "set a=V")
//   predict y V slope V          either part may be given alone, in either order
//   step                         reveal y and the slope for the current a and x, judge predictions
//   show                         the current a, x, pending predictions and score
//   help                         the command list
//   quit                         end (so does end of input)
// A prediction is right when |predicted - true| <= 1e-6 * max(1, |true|), i.e. when it is typed
// to about six significant digits (never when the true value overflowed to inf); values are
// parsed and computed in the lab's precision.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/scalar.hpp"

namespace shardsim {

namespace detail {
class LabEngine;
}  // namespace detail

class Lab {
 public:
  explicit Lab(const Precision& precision);
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  // The opening lines: what the lab is, and that it is not LayerNorm.
  std::string banner() const;
  // Runs one command line and returns what to print (possibly empty). Throws InputError with a
  // one-line message for an unknown command or a bad value; the lab's state is then unchanged.
  std::string execute(std::string_view line);
  bool finished() const { return finished_; }

 private:
  Precision precision_;
  std::unique_ptr<detail::LabEngine> engine_;
  bool finished_ = false;
};

namespace detail {

// The precision-specific part: values are held, parsed and printed in the lab's scalar type.
class LabEngine {
 public:
  virtual ~LabEngine() = default;
  virtual void reset() = 0;
  virtual void set(char variable, std::string_view text) = 0;      // 'a' or 'x'; throws InputError
  virtual void predict(char what, std::string_view text) = 0;      // 'y' or 's'; throws InputError
  virtual std::string step() = 0;
  virtual std::string show() const = 0;
};

std::unique_ptr<LabEngine> make_lab_engine_f32();
std::unique_ptr<LabEngine> make_lab_engine_f64();
std::unique_ptr<LabEngine> make_lab_engine_mp(unsigned bits);  // lab_mp.cpp

}  // namespace detail

}  // namespace shardsim
