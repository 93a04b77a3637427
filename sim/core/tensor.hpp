// A dense, row-major tensor with a named shape. One rank's local data, or a dense global tensor.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace shardsim {

template <typename T>
class Tensor {
 public:
  Tensor() = default;
  // Every element is T(0).
  explicit Tensor(Shape shape) : shape_(std::move(shape)), data_(shape_.numel(), T(0)) {}
  Tensor(Shape shape, std::vector<T> data) : shape_(std::move(shape)), data_(std::move(data)) {
    SHARDSIM_ASSERT(static_cast<std::int64_t>(data_.size()) == shape_.numel(),
                    "tensor data size must match its shape");
  }

  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(data_.size()); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::vector<T>& values() { return data_; }
  const std::vector<T>& values() const { return data_; }
  T& operator[](std::int64_t flat) { return data_[static_cast<std::size_t>(flat)]; }
  const T& operator[](std::int64_t flat) const { return data_[static_cast<std::size_t>(flat)]; }

  // Same data under new axis names/extents with the same element count (an explicit reshape).
  Tensor reshaped(Shape shape) const {
    SHARDSIM_ASSERT(shape.numel() == shape_.numel(), "reshape must keep the element count");
    return Tensor(std::move(shape), data_);
  }

 private:
  Shape shape_;
  std::vector<T> data_;  // row-major, outermost axis first
};

// Makes t a tensor of `shape` for a caller that then writes every element: when t already has
// exactly that shape its storage is kept (no reallocation; the old values remain until
// overwritten), otherwise t is remade with zeros. For Mp this saves one heap allocation per
// element on every repeated call (a copy into a kept element takes the source's precision).
template <typename T>
void prepare_output(Tensor<T>& t, const Shape& shape) {
  if (!(t.shape() == shape)) t = Tensor<T>(shape);
}

// Copies `count` positions along `axis` from src[src_begin...] into dst[dst_begin...].
// REQUIRES: src and dst agree on every axis except `axis` (outer and inner sizes match).
template <typename T>
void copy_along(const Tensor<T>& src, std::string_view axis, std::int64_t src_begin, Tensor<T>& dst,
                std::int64_t dst_begin, std::int64_t count) {
  const AxisView s = AxisView::of(src.shape(), axis);
  const AxisView d = AxisView::of(dst.shape(), axis);
  SHARDSIM_ASSERT(s.outer == d.outer && s.inner == d.inner, "copy_along: other axes differ");
  SHARDSIM_ASSERT(src_begin + count <= s.extent && dst_begin + count <= d.extent,
                  "copy_along: range out of bounds");
  for (std::int64_t o = 0; o < s.outer; ++o) {
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t from = s.flat(o, src_begin + i, 0);
      const std::int64_t to = d.flat(o, dst_begin + i, 0);
      for (std::int64_t j = 0; j < s.inner; ++j) dst[to + j] = src[from + j];
    }
  }
}

}  // namespace shardsim
