// The options `run` and `explain` share: the mesh overrides (--reduce-order, --schedule),
// --accumulate, --max-memory and --threads, read into RunOptions.
#pragma once

#include <boost/program_options.hpp>
#include <vector>

#include "runner/runner.hpp"
#include "core/scalar.hpp"

namespace shardsim::cli {

// Declares the options below.
void add_mesh_options(boost::program_options::options_description& options);
// Reads them (and applies --threads). Throws InputError naming the flag of a bad value.
RunOptions run_options(const boost::program_options::variables_map& vm);
// --accumulate acts on bf16 and f16 runs only: given where none of `precisions` is one, it is
// refused rather than ignored (InputError). (A goldens' reference is never narrow.)
void check_accumulate_applies(const RunOptions& run, const std::vector<Precision>& precisions);

}  // namespace shardsim::cli
