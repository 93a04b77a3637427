// Named, outermost-first shapes and the one view helper that knows named axes.
//
// Axes are named so that no op locates "the sequence axis" by position: an op asks for "seq" and
// gets its extent and stride. A transpose or reshape renames or moves axes explicitly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim {

struct Axis {
  std::string name;
  std::int64_t extent = 0;
  friend bool operator==(const Axis&, const Axis&) = default;
};

class Shape {
 public:
  Shape() = default;
  explicit Shape(std::vector<Axis> axes);

  std::size_t rank() const { return axes_.size(); }
  const std::vector<Axis>& axes() const { return axes_; }
  const Axis& operator[](std::size_t i) const { return axes_[i]; }

  std::optional<std::size_t> find(std::string_view name) const;
  // REQUIRES: the axis exists (checked; aborts otherwise).
  std::size_t position(std::string_view name) const;
  std::int64_t extent(std::string_view name) const { return axes_[position(name)].extent; }
  bool has(std::string_view name) const { return find(name).has_value(); }

  std::int64_t numel() const;
  Shape with_extent(std::string_view name, std::int64_t extent) const;
  Shape without(std::string_view name) const;

  std::string str() const;  // "[batch=2, seq=13, hidden=16]"
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<Axis> axes_;
};

// Element count, or nullopt when it does not fit in int64 (checked before anything allocates).
std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& extents);

// A row-major tensor seen as (outer, extent, inner) around one named axis: flat index of
// (o, i, j) is (o * extent + i) * inner + j. Every op's index arithmetic goes through this.
struct AxisView {
  std::int64_t outer = 1;
  std::int64_t extent = 1;
  std::int64_t inner = 1;

  static AxisView of(const Shape& shape, std::string_view axis);
  std::int64_t flat(std::int64_t o, std::int64_t i, std::int64_t j) const {
    return (o * extent + i) * inner + j;
  }
};

// Row-major multi-index <-> flat index.
std::vector<std::int64_t> unflatten(const Shape& shape, std::int64_t flat);

}  // namespace shardsim
