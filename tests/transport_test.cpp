// Tests for transport.hpp, wire.hpp and the world over a transport (world.hpp): the rank blocks,
// the exact value encoding, and collectives run by P "processes" (threads over an in-memory
// transport, so no MPI is needed) against the single-process world, bitwise.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include "core/error.hpp"
#include "core/mp.hpp"
#include "core/wire_mp.hpp"
#include "core/world.hpp"
#include "thread_transport.hpp"

using namespace shardsim;
using shardsim::test::Mailboxes;
using shardsim::test::ThreadTransport;

namespace {

// [batch=2, seq=7, hidden=3], value e + 1.25 + rank/8 on rank r's addend: the sums differ by order
// only in the last bits at f32, so a wrong order shows.
template <typename T>
DistTensor<T> partial_input(const World<T>& world) {
  DistTensor<T> x = world.make("x", Shape({{"batch", 2}, {"seq", 7}, {"hidden", 3}}),
                               Layout({Placement::partial()}));
  for (int r = 0; r < world.size(); ++r) {
    if (!x.held(r)) continue;
    for (std::int64_t e = 0; e < x.local(r).numel(); ++e) {
      x.local(r)[e] = T(1) / T(static_cast<double>(e) + 3) + T(static_cast<double>(r) / 8 + 0.1);
    }
  }
  return x;
}

// Every rank's result of all_reduce, reduce_scatter(seq) and one ring hop, as one process would
// see them all (share).
template <typename T>
std::vector<Tensor<T>> results(const World<T>& world) {
  const DistTensor<T> x = partial_input(world);
  std::vector<Tensor<T>> out;
  for (const DistTensor<T>& y : {world.all_reduce(x, {}), world.reduce_scatter(x, Placement::shard("seq"), {})}) {
    const DistTensor<T> all = world.share(y);
    out.insert(out.end(), all.locals.begin(), all.locals.end());
  }
  std::vector<Tensor<T>> blocks(static_cast<std::size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    if (world.holds(r)) blocks[static_cast<std::size_t>(r)] = x.local(r);
  }
  std::vector<Tensor<T>> hop = world.ring_send_recv(blocks);
  DistTensor<T> received = world.make("hop", x.global, x.layout);
  for (int r = 0; r < world.size(); ++r) {
    if (world.holds(r)) received.local(r) = hop[static_cast<std::size_t>(r)];
  }
  const DistTensor<T> all = world.share(received);
  out.insert(out.end(), all.locals.begin(), all.locals.end());
  return out;
}

template <typename T>
void check_processes(int ranks, int processes, ReduceOrder order) {
  const std::vector<Tensor<T>> expected = results(World<T>(Mesh(ranks), order, Schedule{}));
  Mailboxes boxes(processes);
  std::vector<std::vector<Tensor<T>>> got(static_cast<std::size_t>(processes));
  std::vector<std::thread> threads;
  const unsigned bits = std::is_same_v<T, Mp> ? mp_significand_bits() : 0;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      if (bits) set_mp_precision(bits);
      auto link = std::make_shared<ThreadTransport>(boxes, p, processes);
      got[static_cast<std::size_t>(p)] = results(World<T>(Mesh(ranks), order, Schedule{}, link));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& mine : got) {
    REQUIRE(mine.size() == expected.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      REQUIRE(mine[i].shape() == expected[i].shape());
      for (std::int64_t e = 0; e < mine[i].numel(); ++e) {
        REQUIRE(ScalarTraits<T>::identical(mine[i][e], expected[i][e]));
      }
    }
  }
}

}  // namespace

TEST_CASE("rank blocks are contiguous and balanced like tensor_split", "[transport]") {
  // 8 ranks over 3 processes: 8 = 3 + 3 + 2, the first 8 mod 3 = 2 processes one more.
  CHECK(rank_block(0, 3, 8).begin == 0);
  CHECK(rank_block(0, 3, 8).end == 3);
  CHECK(rank_block(1, 3, 8).begin == 3);
  CHECK(rank_block(1, 3, 8).end == 6);
  CHECK(rank_block(2, 3, 8).begin == 6);
  CHECK(rank_block(2, 3, 8).end == 8);
  CHECK(rank_owner(5, 3, 8) == 1);
  CHECK(rank_owner(7, 3, 8) == 2);
  CHECK(rank_block(3, 4, 16).begin == 12);
}

TEST_CASE("more processes than ranks is bad input", "[transport]") {
  Mailboxes boxes(3);
  auto link = std::make_shared<ThreadTransport>(boxes, 0, 3);
  CHECK_THROWS_AS(World<double>(Mesh(2), ReduceOrder::rank, Schedule{}, link), InputError);
}

TEST_CASE("mp values travel exactly, specials and signs included", "[transport]") {
  set_mp_precision(256);
  // 1/3 at 256 bits fills every significand bit; -0, inf, nan and 2^-1000 test the classes and
  // the exponent.
  std::vector<Mp> values = {Mp(1) / Mp(3), -Mp(0), Mp(0), -Mp(1) / Mp(7), Mp(1),
                            std::numeric_limits<Mp>::infinity(), -std::numeric_limits<Mp>::infinity(),
                            ldexp(Mp(1), -1000), std::numeric_limits<Mp>::quiet_NaN()};
  std::string bytes;
  WireWriter w(bytes);
  WireValues<Mp>::put(w, values);
  WireReader r(bytes);
  const std::vector<Mp> back = WireValues<Mp>::get(r);
  REQUIRE(r.done());
  REQUIRE(back.size() == values.size());
  for (std::size_t i = 0; i + 1 < values.size(); ++i) {
    CHECK(ScalarTraits<Mp>::identical(back[i], values[i]));
    // The precision travels too (set_mp_precision(256) may round the bits up; whatever it
    // chose, the received value has the sent one's).
    CHECK(mpfr_get_prec(back[i].backend().data()) == mpfr_get_prec(values[i].backend().data()));
  }
  CHECK(isnan(back.back()));
  // A message cut short is an error, not a read past its end.
  WireReader cut(std::string_view(bytes).substr(0, bytes.size() - 3));
  CHECK_THROWS_AS(WireValues<Mp>::get(cut), TransportError);
}

TEST_CASE("mp values at the widest accepted precision travel, and a wider one is refused",
          "[transport]") {
  // set_mp_precision(kMaxMpBits) carries Boost's first decimal-digit step at or above it (19726
  // digits: 19726000 / 301 = 65534 rem 274, + 2 = 65536 bits, exactly kMaxMpBits today): a run at
  // the widest precision sends values that wide, and they must be accepted.
  const unsigned carried = set_mp_precision(kMaxMpBits);
  REQUIRE(carried >= kMaxMpBits);
  const std::vector<Mp> values = {Mp(1) / Mp(3)};
  std::string bytes;
  WireWriter w(bytes);
  WireValues<Mp>::put(w, values);
  WireReader r(bytes);
  const std::vector<Mp> back = WireValues<Mp>::get(r);
  REQUIRE(back.size() == 1);
  CHECK(ScalarTraits<Mp>::identical(back[0], values[0]));
  CHECK(back[0].backend().precision_bits() == static_cast<mpfr_prec_t>(carried));
  // A message of one +0 claiming 1 000 000 bits (count, precision, kind, sign: put_one's layout)
  // is refused before anything that wide is made.
  std::string wide_bytes;
  WireWriter wide(wide_bytes);
  wide.u64(1);
  wide.u64(1000000);
  wide.u64(0);  // kind: zero
  wide.u64(0);  // sign
  WireReader too_wide(wide_bytes);
  CHECK_THROWS_AS(WireValues<Mp>::get(too_wide), TransportError);
  set_mp_precision(256);
}

TEST_CASE("collectives over 2 and 3 processes are bitwise the single process's", "[transport]") {
  for (ReduceOrder order : {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}) {
    check_processes<float>(5, 2, order);
    check_processes<float>(5, 3, order);
    check_processes<double>(4, 3, order);
  }
  set_mp_precision(256);
  check_processes<Mp>(4, 3, ReduceOrder::tree);
}
