// The test binary's precompiled header (tests/CMakeLists.txt): the heavy headers nearly every
// test file includes. It changes no meaning (every header here is include-guarded and each test
// file still includes what it uses); it only saves parsing them once per file.
#pragma once

#include <algorithm>
#include <array>
#include <boost/multiprecision/number.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>
