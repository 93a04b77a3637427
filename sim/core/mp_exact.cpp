#include "shardsim/mp_exact.hpp"

#include <cstdio>

#include "shardsim/error.hpp"

namespace shardsim {

std::string mp_exact_text(const Mp& value) {
  char* text = nullptr;
  const int length = mpfr_asprintf(&text, "%Ra", value.backend().data());
  SHARDSIM_ASSERT(length >= 0 && text != nullptr, "mpfr_asprintf failed");
  std::string out(text, static_cast<std::size_t>(length));
  mpfr_free_str(text);
  return out;
}

}  // namespace shardsim
