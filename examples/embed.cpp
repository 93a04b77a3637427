// An embedding program on shardsim's public API (include/shardsim/shardsim.hpp): load a
// scenario, run it at f32 and f64, judge it against its [expect] block, and print each run's
// first divergence or "pass". Built with the project (target shardsim_embed_example); ctest runs
// it on a clean and a faulty bundled scenario (tests/CMakeLists.txt, "api:").
//
// Usage: shardsim_embed_example SCENARIO.toml
// Exit status: 0 when the outcome matches the scenario's expectation, 1 when not, 2 on bad input.
#include <iostream>
#include <vector>

#include "shardsim/shardsim.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: shardsim_embed_example SCENARIO.toml\n";
    return 2;
  }
  try {
    const shardsim::Scenario scenario = shardsim::load_scenario(argv[1]);
    std::vector<shardsim::RunReport> reports;
    for (const char* level : {"f32", "f64"}) {
      reports.push_back(shardsim::evaluate(scenario, shardsim::parse_precision(level)));
      const shardsim::RunReport& report = reports.back();
      std::cout << level << ": ";
      if (report.first_divergence) {
        const shardsim::Divergence& d = *report.first_divergence;
        std::cout << "diverges at step " << d.step << ", " << d.op << " -> " << d.tensor
                  << ", rank " << d.rank << "\n";
      } else {
        std::cout << "pass (" << report.boundaries.size() << " boundaries)\n";
      }
    }
    const shardsim::Outcome outcome = shardsim::judge(scenario, reports);
    std::cout << (outcome.matches_expectation ? "matches its expectation" : outcome.why) << "\n";
    return outcome.matches_expectation ? 0 : 1;
  } catch (const shardsim::InputError& error) {
    std::cerr << "shardsim_embed_example: " << error.what() << "\n";
    return 2;
  }
}
