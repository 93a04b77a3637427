// DistTensor: a global tensor as the ranks of a device mesh hold it. A name, a global shape, a
// layout (one placement per mesh dim, placement.hpp), the mesh, and one local Tensor per rank.
//
// Invariants:
//   locals.size() == mesh->size();
//   layout.ndim() == mesh->ndim();
//   locals[r].shape() == local_shape(global, layout, *mesh, r);
//   padded positions (a Shard with the padded split) hold T(0).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "core/placement.hpp"
#include "core/tensor.hpp"

namespace shardsim {

template <typename T>
struct DistTensor {
  std::string name;
  Shape global;
  Layout layout;
  std::shared_ptr<const Mesh> mesh;
  std::vector<Tensor<T>> locals;

  int ranks() const { return static_cast<int>(locals.size()); }
  // Whether this process holds `rank`'s local (Mesh::holds); a local it does not hold is empty.
  bool held(int rank) const { return mesh->holds(rank); }
  Tensor<T>& local(int rank) { return locals[static_cast<std::size_t>(rank)]; }
  const Tensor<T>& local(int rank) const { return locals[static_cast<std::size_t>(rank)]; }
  // `rank`'s share of `axis`: global [begin, end) and its local extent (placement.hpp).
  Slice slice(int rank, std::string_view axis) const {
    return axis_slice(global, layout, *mesh, rank, axis);
  }
};

// An empty DistTensor with correctly shaped zero locals (for the ranks the mesh holds; the
// others are empty Tensors, transport.hpp).
template <typename T>
DistTensor<T> make_dist(std::string name, const Shape& global, const Layout& layout,
                        std::shared_ptr<const Mesh> mesh) {
  DistTensor<T> out{std::move(name), global, layout, std::move(mesh), {}};
  out.locals.resize(static_cast<std::size_t>(out.mesh->size()));
  // The ranks' tensors are made concurrently (parallel.hpp): each index writes only its own.
  parallel_for(out.mesh->size(), [&](std::int64_t r) {
    const int rank = static_cast<int>(r);
    if (out.mesh->holds(rank)) {
      out.locals[static_cast<std::size_t>(r)] =
          Tensor<T>(local_shape(global, layout, *out.mesh, rank));
    }
  });
  return out;
}

// The output of a plan that computes y = f(x) rank by rank, laid out as x: x's own rank tensors
// when a caller that does not read x again moved them out (`x_values`: then each rank computes
// in place), else zero tensors made as make_dist makes them.
template <typename T>
DistTensor<T> make_output_like(std::string name, const DistTensor<T>& x,
                               std::vector<Tensor<T>> x_values) {
  if (x_values.empty()) return make_dist<T>(std::move(name), x.global, x.layout, x.mesh);
  SHARDSIM_ASSERT(x_values.size() == x.locals.size(), "in place: one tensor per rank");
  return DistTensor<T>{std::move(name), x.global, x.layout, x.mesh, std::move(x_values)};
}

// Copies every element whose global position lies in both boxes. A box gives, per axis of the
// tensors, the global slice a local tensor holds (its valid positions are local [0, valid),
// mapped by to_global: one run, or two for a zigzag share).
// REQUIRES: both tensors and boxes name the same axes in the same order.
template <typename T>
void copy_overlap(const Tensor<T>& src, const std::vector<Slice>& src_box, Tensor<T>& dst,
                  const std::vector<Slice>& dst_box);

// The box of `rank`'s local tensor of `x`: axis_slice for every axis.
template <typename T>
std::vector<Slice> local_box(const DistTensor<T>& x, int rank) {
  std::vector<Slice> box;
  for (const Axis& axis : x.global.axes()) box.push_back(x.slice(rank, axis.name));
  return box;
}

// Calls f(local_flat, global_flat) for every valid (non-pad) position of a local tensor of
// shape `local` holding `box` of a tensor of shape `global`, in row-major local order.
template <typename F>
void for_each_valid(const Shape& local, const std::vector<Slice>& box, const Shape& global, F f) {
  const std::size_t axes = box.size();
  for (const Slice& s : box) {
    if (s.valid() <= 0) return;
  }
  if (axes == 0) {
    f(std::int64_t{0}, std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> index(axes, 0);
  while (true) {
    std::int64_t local_flat = 0;
    std::int64_t global_flat = 0;
    for (std::size_t a = 0; a < axes; ++a) {
      local_flat = local_flat * local[a].extent + index[a];
      global_flat = global_flat * global[a].extent + to_global(box[a], index[a]);
    }
    f(local_flat, global_flat);
    std::size_t a = axes;
    while (a > 0) {
      --a;
      if (++index[a] < box[a].valid()) break;
      index[a] = 0;
      if (a == 0) return;
    }
  }
}

// The ranks that stand for the value of `x` on a mesh with Partial dims: those at coordinate 0
// on every Partial dim. members(r) lists, in rank order, the ranks whose addends sum to what r
// stands for (r itself when no dim is Partial).
template <typename T>
bool represents_value(const DistTensor<T>& x, int rank) {
  for (int d = 0; d < x.layout.ndim(); ++d) {
    if (x.layout.on(d).is_partial() && x.mesh->coord(rank, d) != 0) return false;
  }
  return true;
}
template <typename T>
std::vector<int> partial_members(const DistTensor<T>& x, int rank) {
  std::vector<int> members;
  for (int r = 0; r < x.ranks(); ++r) {
    bool same = true;
    for (int d = 0; d < x.layout.ndim() && same; ++d) {
      if (!x.layout.on(d).is_partial()) same = x.mesh->coord(r, d) == x.mesh->coord(rank, d);
    }
    if (same) members.push_back(r);
  }
  return members;
}

// Lays a global tensor out over the ranks: data loading, before any rank program runs. On a
// Partial dim the value sits on the coordinate-0 member and the others hold zeros (their sum is
// the value).
template <typename T>
DistTensor<T> distribute(std::string name, const Tensor<T>& global, const Layout& layout,
                         std::shared_ptr<const Mesh> mesh) {
  DistTensor<T> out = make_dist<T>(std::move(name), global.shape(), layout, std::move(mesh));
  std::vector<Slice> whole;
  for (const Axis& axis : global.shape().axes()) whole.push_back({0, axis.extent, axis.extent});
  parallel_for(out.ranks(), [&](std::int64_t index) {  // each rank writes only its own tensor
    const int r = static_cast<int>(index);
    bool holds_value = out.held(r);
    for (int d = 0; d < layout.ndim(); ++d) {
      if (layout.on(d).is_partial() && out.mesh->coord(r, d) != 0) holds_value = false;
    }
    if (holds_value) copy_overlap(global, whole, out.local(r), local_box(out, r));
  });
  return out;
}

// distribute() of the tensor whose element at global flat (row-major) index i is value(i), drawing
// only the elements the held ranks store: a process of the mpi transport without the oracle never
// builds the global tensor. The locals are those distribute(name, global, ...) gives: the same
// holders, padding left zero. `value` is called once per stored element (a replicated element
// once per rank that stores it).
template <typename T, typename F>
DistTensor<T> distribute_generated(std::string name, const Shape& global, const Layout& layout,
                                   std::shared_ptr<const Mesh> mesh, F&& value) {
  DistTensor<T> out = make_dist<T>(std::move(name), global, layout, std::move(mesh));
  const std::size_t axes = global.rank();
  std::vector<std::int64_t> stride(axes, 1);  // the global tensor's row-major strides
  for (std::size_t a = axes; a-- > 1;) stride[a - 1] = stride[a] * global[a].extent;
  for (int r = 0; r < out.ranks(); ++r) {
    bool holds_value = out.held(r);
    for (int d = 0; d < layout.ndim(); ++d) {
      if (layout.on(d).is_partial() && out.mesh->coord(r, d) != 0) holds_value = false;
    }
    if (!holds_value) continue;
    Tensor<T>& local = out.local(r);
    const std::vector<Slice> box = local_box(out, r);
    // Per axis, the global position of each local position (-1: padding).
    std::vector<std::vector<std::int64_t>> position(axes);
    for (std::size_t a = 0; a < axes; ++a) {
      position[a].assign(static_cast<std::size_t>(local.shape()[a].extent), -1);
      for (const SliceRun& run : slice_runs(box[a])) {
        for (std::int64_t g = run.begin; g < run.end; ++g) {
          position[a][static_cast<std::size_t>(run.local + g - run.begin)] = g;
        }
      }
    }
    std::vector<std::int64_t> index(axes, 0);  // the local multi-index of `flat`
    for (std::int64_t flat = 0; flat < local.numel(); ++flat) {
      std::int64_t at = 0;
      bool real = true;
      for (std::size_t a = 0; a < axes && real; ++a) {
        const std::int64_t g = position[a][static_cast<std::size_t>(index[a])];
        real = g >= 0;
        at += g * stride[a];
      }
      if (real) local[flat] = value(at);
      for (std::size_t a = axes; a-- > 0;) {
        if (++index[a] < local.shape()[a].extent) break;
        index[a] = 0;
      }
    }
  }
  return out;
}

namespace detail {

// Per axis of a copy: where one overlapping run starts in each local tensor, and its length.
struct OverlapRun {
  std::int64_t src_at = 0;
  std::int64_t dst_at = 0;
  std::int64_t count = 0;
};

// Copies the block whose per-axis runs are `runs` (one per axis) from src to dst.
template <typename T>
void copy_block(const Tensor<T>& src, Tensor<T>& dst, const std::vector<OverlapRun>& runs) {
  const std::size_t axes = runs.size();
  if (axes == 0) {
    dst[0] = src[0];
    return;
  }
  // Row-major strides; the innermost axis is copied as one contiguous run.
  std::vector<std::int64_t> src_stride(axes, 1), dst_stride(axes, 1);
  for (std::size_t a = axes - 1; a > 0; --a) {
    src_stride[a - 1] = src_stride[a] * src.shape()[a].extent;
    dst_stride[a - 1] = dst_stride[a] * dst.shape()[a].extent;
  }
  std::vector<std::int64_t> index(axes, 0);  // over the outer axes; the last is the run
  while (true) {
    std::int64_t s = runs[axes - 1].src_at;
    std::int64_t d = runs[axes - 1].dst_at;
    for (std::size_t a = 0; a + 1 < axes; ++a) {
      s += (runs[a].src_at + index[a]) * src_stride[a];
      d += (runs[a].dst_at + index[a]) * dst_stride[a];
    }
    for (std::int64_t i = 0; i < runs[axes - 1].count; ++i) dst[d + i] = src[s + i];
    std::size_t a = axes - 1;
    while (a > 0) {
      --a;
      if (++index[a] < runs[a].count) break;
      index[a] = 0;
      if (a == 0) return;
    }
    if (axes == 1) return;
  }
}

}  // namespace detail

template <typename T>
void copy_overlap(const Tensor<T>& src, const std::vector<Slice>& src_box, Tensor<T>& dst,
                  const std::vector<Slice>& dst_box) {
  const std::size_t axes = src_box.size();
  SHARDSIM_ASSERT(
      dst_box.size() == axes && src.shape().rank() == axes && dst.shape().rank() == axes,
      "copy_overlap: boxes and tensors name the same axes");
  // Per axis: every overlap of a source run with a destination run (a zigzag share has two
  // runs, any other one), as local starts and a length.
  std::vector<std::vector<detail::OverlapRun>> overlaps(axes);
  for (std::size_t a = 0; a < axes; ++a) {
    for (const SliceRun& from : slice_runs(src_box[a])) {
      for (const SliceRun& to : slice_runs(dst_box[a])) {
        const std::int64_t lo = std::max(from.begin, to.begin);
        const std::int64_t hi = std::min(from.end, to.end);
        if (hi > lo) {
          overlaps[a].push_back({from.local + lo - from.begin, to.local + lo - to.begin, hi - lo});
        }
      }
    }
    if (overlaps[a].empty()) return;
  }
  // Every combination of one overlap per axis is one block.
  std::vector<std::size_t> pick(axes, 0);
  std::vector<detail::OverlapRun> block(axes);
  while (true) {
    for (std::size_t a = 0; a < axes; ++a) block[a] = overlaps[a][pick[a]];
    detail::copy_block(src, dst, block);
    std::size_t a = axes;
    while (a > 0) {
      --a;
      if (++pick[a] < overlaps[a].size()) break;
      pick[a] = 0;
      if (a == 0) return;
    }
    if (axes == 0) return;
  }
}

// 1-D conveniences: `placement` over a 1-D mesh of `ranks` (dim "world").
template <typename T>
DistTensor<T> make_dist(std::string name, const Shape& global, const Placement& placement,
                        int ranks) {
  return make_dist<T>(std::move(name), global, Layout({placement}),
                      std::make_shared<const Mesh>(ranks));
}
template <typename T>
DistTensor<T> distribute(std::string name, const Tensor<T>& global, const Placement& placement,
                         int ranks) {
  return distribute(std::move(name), global, Layout({placement}),
                    std::make_shared<const Mesh>(ranks));
}

}  // namespace shardsim
