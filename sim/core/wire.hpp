// The byte encoding the world's messages use between processes (transport.hpp): little-endian
// fixed-width integers, length-prefixed strings, shapes, layouts and tensors. Values travel
// exactly: float, double and NarrowFloat as their bytes; Mp (wire_mp.hpp) as its sign, exponent
// and integer significand, never through double. A reader that runs past its message or finds a
// malformed one throws TransportError.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/placement.hpp"
#include "core/tensor.hpp"
#include "core/transport.hpp"

namespace shardsim {

class WireWriter {
 public:
  explicit WireWriter(std::string& out) : out_(out) {}
  void u64(std::uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void bytes(const void* data, std::size_t n) {
    if (n != 0) out_.append(static_cast<const char*>(data), n);  // data() of an empty vector may be null
  }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s.data(), s.size());
  }
  void shape(const Shape& s) {
    u64(s.rank());
    for (const Axis& a : s.axes()) {
      str(a.name);
      i64(a.extent);
    }
  }
  void layout(const Layout& l) {
    u64(l.dims.size());
    for (const Placement& p : l.dims) {
      u64(static_cast<std::uint64_t>(p.kind));
      str(p.axis);
      u64(static_cast<std::uint64_t>(p.split));
    }
  }

 private:
  std::string& out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  bool done() const { return at_ == in_.size(); }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    bytes(&v, sizeof v);
    return v;
  }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  void bytes(void* data, std::size_t n) {
    need(n);
    if (n == 0) return;  // an empty tensor's data() may be null, and memcpy forbids null
    std::memcpy(data, in_.data() + at_, n);
    at_ += n;
  }
  std::string str() {
    const std::uint64_t n = u64();
    need(n);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  Shape shape() {
    std::vector<Axis> axes(count(1u << 16));
    for (Axis& a : axes) {
      a.name = str();
      a.extent = i64();
    }
    return Shape(std::move(axes));
  }
  Layout layout() {
    std::vector<Placement> dims(count(1u << 16));
    for (Placement& p : dims) {
      p.kind = static_cast<Placement::Kind>(u64());
      p.axis = str();
      p.split = static_cast<SplitPolicy>(u64());
    }
    return Layout(std::move(dims));
  }
  // A count that must fit the rest of the message (each item at least one byte).
  std::size_t count(std::uint64_t limit) {
    const std::uint64_t n = u64();
    if (n > limit || n > in_.size() - at_) throw TransportError("wire: a malformed message");
    return static_cast<std::size_t>(n);
  }

 private:
  void need(std::uint64_t n) const {
    if (n > in_.size() - at_) throw TransportError("wire: a message ended early");
  }
  std::string_view in_;
  std::size_t at_ = 0;
};

// How one scalar type travels. The primary template: the value's bytes (float, double,
// NarrowFloat hold no pointers). Mp specializes it in wire_mp.hpp.
template <typename T>
struct WireValues {
  static_assert(std::is_trivially_copyable_v<T>, "a scalar with pointers needs WireValues<T>");
  static void put(WireWriter& w, const std::vector<T>& values) {
    w.u64(values.size());
    w.bytes(values.data(), values.size() * sizeof(T));
  }
  static std::vector<T> get(WireReader& r) {
    std::vector<T> values(r.count(UINT64_MAX / sizeof(T)) / 1);
    r.bytes(values.data(), values.size() * sizeof(T));
    return values;
  }
};

template <typename T>
void put_tensor(WireWriter& w, const Tensor<T>& t) {
  w.shape(t.shape());
  WireValues<T>::put(w, t.values());
}

template <typename T>
Tensor<T> get_tensor(WireReader& r) {
  Shape shape = r.shape();
  std::vector<T> values = WireValues<T>::get(r);
  if (static_cast<std::int64_t>(values.size()) != shape.numel() && !(shape.rank() == 0 && values.empty())) {
    throw TransportError("wire: a tensor's values do not fill its shape");
  }
  if (values.empty() && shape.rank() == 0) return Tensor<T>();
  return Tensor<T>(std::move(shape), std::move(values));
}

}  // namespace shardsim
