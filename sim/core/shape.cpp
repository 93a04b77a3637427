#include "core/shape.hpp"

#include "core/error.hpp"

namespace shardsim {

Shape::Shape(std::vector<Axis> axes) : axes_(std::move(axes)) {}

std::optional<std::size_t> Shape::find(std::string_view name) const {
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == name) return i;
  }
  return std::nullopt;
}

std::size_t Shape::position(std::string_view name) const {
  auto found = find(name);
  SHARDSIM_ASSERT(found.has_value(), std::string(name).c_str());
  return *found;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (const Axis& axis : axes_) n *= axis.extent;
  return n;
}

Shape Shape::with_extent(std::string_view name, std::int64_t extent) const {
  Shape out = *this;
  out.axes_[position(name)].extent = extent;
  return out;
}

Shape Shape::without(std::string_view name) const {
  std::vector<Axis> kept;
  for (const Axis& axis : axes_) {
    if (axis.name != name) kept.push_back(axis);
  }
  return Shape(std::move(kept));
}

std::string Shape::str() const {
  std::string out = "[";
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (i) out += ", ";
    out += axes_[i].name + "=" + std::to_string(axes_[i].extent);
  }
  return out + "]";
}

std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& extents) {
  std::int64_t n = 1;
  for (std::int64_t e : extents) {
    if (e < 0 || __builtin_mul_overflow(n, e, &n)) return std::nullopt;
  }
  return n;
}

AxisView AxisView::of(const Shape& shape, std::string_view axis) {
  const std::size_t p = shape.position(axis);
  AxisView view;
  for (std::size_t i = 0; i < p; ++i) view.outer *= shape[i].extent;
  view.extent = shape[p].extent;
  for (std::size_t i = p + 1; i < shape.rank(); ++i) view.inner *= shape[i].extent;
  return view;
}

std::vector<std::int64_t> unflatten(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(shape.rank());
  for (std::size_t i = shape.rank(); i-- > 0;) {
    const std::int64_t extent = shape[i].extent;
    index[i] = extent ? flat % extent : 0;
    flat = extent ? flat / extent : 0;
  }
  return index;
}

}  // namespace shardsim
