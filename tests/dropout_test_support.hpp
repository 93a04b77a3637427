// Dropout scenarios shared by the repetition and diagnosis tests.
#pragma once

#include <string>

namespace dropout_test {

// The text of a dropout with faults = ["dropout_same_seed"] (p = 0.1, f64) on x [batch=1,
// seq=2*ranks, hidden=4] Shard(seq) over a 1-D mesh of `ranks`: 8 elements per rank, so every
// rank draws local words 0..7 and all ranks repeat one stream.
inline std::string same_seed_scenario(int ranks) {
  return "name = \"same_seed_" + std::to_string(ranks) +
         "\"\nseed = 3\nprecisions = [\"f64\"]\nfaults = [\"dropout_same_seed\"]\n[mesh]\n"
         "ranks = " + std::to_string(ranks) +
         "\n[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
         "shape = [1, " + std::to_string(2 * ranks) +
         ", 4]\nplacement = \"Shard(seq)\"\n[[steps]]\nop = \"dropout\"\ninput = \"x\"\n"
         "output = \"y\"\np = 0.1\n";
}

}  // namespace dropout_test
