// Terminal text of a diagnosis (report.hpp): the ranked causes after `run`, and the full
// signature analysis for `explain --diagnose`.
#include <cstdio>
#include <sstream>

#include "report/report.hpp"

namespace shardsim {

namespace {

std::string heading(const Diagnosis& d) {
  return "diagnosis of " + d.where + " (" + d.precision.name() + " run)";
}

void write_causes(std::ostringstream& out, const Diagnosis& d) {
  if (d.causes.empty()) {
    out << "  no signature points to a cause\n";
    return;
  }
  int rank = 0;
  for (const Finding& f : d.causes) {
    char confidence[16];
    std::snprintf(confidence, sizeof confidence, "%.2f", f.confidence);
    out << "  " << ++rank << ". " << cause_name(f.cause) << " (" << confidence
        << "): " << cause_summary(f.cause) << "\n"
        << "     evidence: " << f.evidence << "\n";
  }
}

}  // namespace

std::string format_diagnosis(const Diagnosis& d) {
  if (!d.analysed) return "";
  std::ostringstream out;
  out << heading(d) << ", probable causes:\n";
  write_causes(out, d);
  return out.str();
}

std::string format_signature_analysis(const Diagnosis& d) {
  if (!d.analysed) return "nothing diverged: nothing to diagnose\n";
  std::ostringstream out;
  out << "signature analysis, " << heading(d) << ":\n";
  for (const Finding& f : d.findings) {
    char line[96];
    if (f.present()) {
      std::snprintf(line, sizeof line, "  %-16s %-25s %.2f  ", f.signature.c_str(),
                    std::string(cause_name(f.cause)).c_str(), f.confidence);
    } else {
      std::snprintf(line, sizeof line, "  %-16s %-25s   -   ", f.signature.c_str(), "");
    }
    out << line << f.evidence << "\n";
  }
  out << "probable causes:\n";
  write_causes(out, d);
  return out.str();
}

}  // namespace shardsim
