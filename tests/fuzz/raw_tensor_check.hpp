// Shared by the reader fuzz harnesses (npy_fuzz.cpp, safetensors_fuzz.cpp): the invariant every
// decoded tensor must hold.
#pragma once

#include <cstddef>
#include <cstdlib>

#include "io/tensor_file.hpp"

namespace fuzz {

// The RawTensor invariant (golden.hpp): bytes.size() == numel(shape) * dtype size; aborts (a
// finding) otherwise, then reads every element.
inline void check(const shardsim::RawTensor& t) {
  const auto size = shardsim::format::dtype_info(t.dtype).size;
  if (t.bytes.size() != static_cast<std::size_t>(t.numel()) * size) std::abort();
  (void)shardsim::raw_values(t);
}

}  // namespace fuzz
