// Private to the runner: FSDP1's flat tensor (fsdp style "flat"). A unit's parameters (or their
// gradients) are flattened row-major and concatenated in declaration order into one tensor
// [flat = N]; parameter i occupies [offset_i, offset_i + numel_i) with offset_i the sum of the
// numels before it (no alignment padding between parameters, as FSDP1 with
// use_orig_params=False). Sharded as Shard(flat, padded) on the fsdp dim: every rank holds
// c = ceil(N/k) elements; rank r's valid ones are [min(N, r c), min(N, (r+1) c)), the rest
// zero padding (torch.flatten(flat).chunk(k) then F.pad, as FlatParamHandle._get_shard).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dist_tensor.hpp"

namespace shardsim {

inline constexpr std::string_view kFlatAxis = "flat";

// The oracle's flat tensor of `names` (global tensors in `dense`), named `name` by the caller.
template <typename T>
Tensor<T> flatten_dense(const std::map<std::string, Tensor<T>>& dense,
                        const std::vector<std::string>& names, const std::string& name) {
  (void)name;
  std::int64_t total = 0;
  for (const std::string& n : names) total += dense.at(n).numel();
  Tensor<T> flat(Shape({{std::string(kFlatAxis), total}}));
  std::int64_t offset = 0;
  for (const std::string& n : names) {
    const Tensor<T>& part = dense.at(n);
    for (std::int64_t i = 0; i < part.numel(); ++i) flat[offset + i] = part[i];
    offset += part.numel();
  }
  return flat;
}

// The ranks' flat tensor of `names`, each of which every rank holds whole (Replicate on every
// dim, or Partial on `dim`): each rank concatenates its own locals, a local copy. The result is
// Replicate on every dim but `dim`, where it has `held` (Replicate or Partial).
template <typename T>
DistTensor<T> flatten(const std::map<std::string, DistTensor<T>>& sharded,
                      const std::vector<std::string>& names, const std::string& name,
                      const Placement& held, int dim) {
  const DistTensor<T>& first = sharded.at(names.front());
  std::int64_t total = 0;
  for (const std::string& n : names) total += sharded.at(n).global.numel();
  const Layout layout =
      Layout::uniform(first.layout.ndim(), Placement::replicate()).with(dim, held);
  DistTensor<T> flat =
      make_dist<T>(name, Shape({{std::string(kFlatAxis), total}}), layout, first.mesh);
  for (int r = 0; r < flat.ranks(); ++r) {
    if (!flat.held(r)) continue;  // another process's rank (transport.hpp)
    std::int64_t offset = 0;
    for (const std::string& n : names) {
      const Tensor<T>& part = sharded.at(n).local(r);
      SHARDSIM_ASSERT(part.numel() == sharded.at(n).global.numel(), "flatten: a whole local");
      for (std::int64_t i = 0; i < part.numel(); ++i) flat.local(r)[offset + i] = part[i];
      offset += part.numel();
    }
  }
  return flat;
}

// Parameter `name` of shape `shape` as a view of the gathered flat tensor `full` (Replicate on
// every dim), starting at `offset`: every rank copies its own elements.
template <typename T>
DistTensor<T> unflatten(const DistTensor<T>& full, const std::string& name, const Shape& shape,
                        std::int64_t offset) {
  DistTensor<T> param = make_dist<T>(name, shape, full.layout, full.mesh);
  for (int r = 0; r < param.ranks(); ++r) {
    if (!param.held(r)) continue;
    Tensor<T>& local = param.local(r);
    for (std::int64_t i = 0; i < local.numel(); ++i) local[i] = full.local(r)[offset + i];
  }
  return param;
}

}  // namespace shardsim
