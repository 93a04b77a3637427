// Tests for ops/attention/parts.hpp: the typed boundary names of sliding_window_attention spell
// exactly the names the report, the goldens and docs/ops/attention.md document.
#include <catch2/catch.hpp>
#include <cstddef>
#include <set>
#include <string>

#include "ops/attention/parts.hpp"
#include "ops/attention/plan.hpp"

using shardsim::AttentionPart;

TEST_CASE("attention parts spell the documented boundary names", "[attention]") {
  // The names listed in docs/ops/attention.md ("Boundaries, in order"), in enum order, for output
  // "y".
  const char* const expected[] = {
      "y.q",          "y.k",       "y.v",           "y.q_rot",   "y.cache_k",    "y.cache_v",
      "y.k_cat",      "y.v_shard", "y.k_shard",     "y.k_all",   "y.v_all",      "y.q_shard",
      "y.attn_shard", "y.q_heads", "y.k_heads",     "y.v_heads", "y.attn_heads", "y.attn_seq",
      "y.lse",        "y.attn",    "y.k_cat_shard", "y.k_new",   "y.v_new"};
  REQUIRE(std::size(expected) == static_cast<std::size_t>(AttentionPart::count));
  shardsim::CpAttentionConfig config;
  config.name = "y";
  std::set<std::string> seen;
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    const auto part = static_cast<AttentionPart>(i);
    INFO("part " << i);
    CHECK(shardsim::attention_part_name("y", part) == expected[i]);
    CHECK(config.part(part) == expected[i]);
    CHECK(config.part_grad(part) == "grad(" + std::string(expected[i]) + ")");
    seen.insert(config.part(part));
  }
  CHECK(seen.size() == std::size(expected));  // no two parts share a name
}
