// Transport cases: collectives (barrier, broadcast, reductions, gathers, all_to_all), split, and
// collectives kept apart from user point-to-point messages.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/comm/transport_cases_support.h"

namespace dynatrain::comm::testing {
namespace {

using namespace support;

void barrier_repeated(Transport& t) {
  for (int i = 0; i < 10; ++i) t.barrier();
  float one = 1.0f;
  t.all_reduce_sum(&one, 1);
  CASE_REQUIRE(one == static_cast<float>(t.size()));
}

void broadcast_every_root(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (int root = 0; root < n; ++root) {
    const std::size_t bytes = static_cast<std::size_t>(n) * 3 + 1 + 13 * static_cast<std::size_t>(root);
    Bytes buf = root == r ? filled(root, -1, root, bytes) : Bytes(bytes, 0xEE);
    t.broadcast(buf.data(), buf.size(), root);
    expect_pattern(t, buf, root, -1, root, "broadcast");
  }
  Bytes empty;
  t.broadcast(empty.data(), 0, 0);
}

void all_reduce_sum_sizes(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(n) * 3 + 1, std::size_t{1000}}) {
    std::vector<float> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = value(r, i);
    t.all_reduce_sum(buf.data(), count);
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += value(q, i);
      CASE_REQUIRE(buf[i] == want, "count ", count, " element ", i, ": ", buf[i], " vs ", want);
    }
  }
}

void all_gather_sizes(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(n) * 3 + 1, std::size_t{257}}) {
    std::vector<float> send(count), recv(count * n, NAN);
    for (std::size_t i = 0; i < count; ++i) send[i] = value(r, i);
    t.all_gather(send.data(), recv.data(), count);
    for (int q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < count; ++i) {
        CASE_REQUIRE(recv[q * count + i] == value(q, i), "count ", count, " block ", q, " element ", i);
      }
    }
  }
}

// all_gather_values is bit-exact: 64-bit counters past 2^53, doubles, and odd-sized structs
// whose bytes would look like NaN patterns as floats.
void all_gather_values_exact(Transport& t) {
  const int n = t.size(), r = t.rank();
  auto big = [](int q) { return 0xFFFF'FFFF'FFFF'FF00ull - static_cast<std::uint64_t>(q) * 0x1'0000'0001ull; };
  auto real = [](int q) { return 1.0 / 3.0 + q * 1e-17 + q; };
  struct Odd {
    std::uint8_t bytes[7];
  };
  Odd mine{};
  for (int i = 0; i < 7; ++i) mine.bytes[i] = static_cast<std::uint8_t>(0xFF - r - i);
  const auto ints = all_gather_values(t, big(r));
  const auto reals = all_gather_values(t, real(r));
  const auto odds = all_gather_values(t, mine);
  CASE_REQUIRE(static_cast<int>(ints.size()) == n, "one value per rank");
  for (int q = 0; q < n; ++q) {
    CASE_REQUIRE(ints[q] == big(q), "uint64 from rank ", q, " is ", ints[q], ", want ", big(q));
    CASE_REQUIRE(reals[q] == real(q), "double from rank ", q);
    for (int i = 0; i < 7; ++i)
      CASE_REQUIRE(odds[q].bytes[i] == static_cast<std::uint8_t>(0xFF - q - i), "byte ", i, " from rank ", q);
  }
}

// broadcast_string / all_gather_strings: rank 0's bytes everywhere, and every rank's bytes of
// its own length (uneven, empty, with NUL bytes) by rank.
void string_collectives(Transport& t) {
  const int n = t.size(), r = t.rank();
  auto text_of = [](int q) {
    return std::string(static_cast<std::size_t>(q * 3 + 1) % 5, '\0') + "rank" + std::to_string(q);
  };
  std::string root = r == 0 ? std::string("from root\0with a NUL", 21) : std::string(100, 'x');
  broadcast_string(t, root);
  CASE_REQUIRE(root == std::string("from root\0with a NUL", 21), "broadcast of ", root.size(), " bytes");
  const std::vector<std::string> all = all_gather_strings(t, r == n - 1 ? std::string() : text_of(r));
  CASE_REQUIRE(all.size() == static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) CASE_REQUIRE(all[q] == (q == n - 1 ? std::string() : text_of(q)), "string of rank ", q);
}

// all_gather_bytes of odd byte counts (not a multiple of a float) and of vectors: every byte
// of every rank's block in place, uneven sizes, and the vector form of all_gather_values.
void all_gather_bytes_sizes(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, static_cast<std::size_t>(n) * 3 + 1, std::size_t{4099}}) {
    std::vector<unsigned char> send(bytes), recv(bytes * n, 0xAB);
    for (std::size_t i = 0; i < bytes; ++i) send[i] = static_cast<unsigned char>(0xFF ^ (r * 31 + i));
    t.all_gather_bytes(send.data(), recv.data(), bytes);
    for (int q = 0; q < n; ++q)
      for (std::size_t i = 0; i < bytes; ++i)
        CASE_REQUIRE(recv[q * bytes + i] == static_cast<unsigned char>(0xFF ^ (q * 31 + i)), "bytes ", bytes, " block ",
                     q, " byte ", i);
  }
  const std::vector<std::uint64_t> mine = {~0ull - static_cast<std::uint64_t>(r), static_cast<std::uint64_t>(r) << 60};
  const auto all = all_gather_values(t, mine);
  CASE_REQUIRE(all.size() == 2 * static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q)
    CASE_REQUIRE(all[2 * q] == ~0ull - static_cast<std::uint64_t>(q) && all[2 * q + 1] == static_cast<std::uint64_t>(q)
                                                                                              << 60,
                 "vector from rank ", q);
}

void reduce_scatter_sizes(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(n) * 3 + 1, std::size_t{257}}) {
    std::vector<float> send(count * n), recv(count, NAN);
    for (int q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < count; ++i) send[q * count + i] = value(r * 7 + q, i);
    }
    t.reduce_scatter_sum(send.data(), recv.data(), count);
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += value(q * 7 + r, i);
      CASE_REQUIRE(recv[i] == want, "count ", count, " element ", i, ": ", recv[i], " vs ", want);
    }
  }
}

// Uneven (sometimes zero) counts, blocks out of order with gaps on both sides; the gaps of the
// receive buffer must stay untouched. Run small and large (large takes MPI's chunked path when
// the chunk is lowered).
void all_to_all_uneven(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (std::size_t scale : {std::size_t{1}, std::size_t{40}}) {
    auto count = [&](int src, int dst) { return scale * static_cast<std::size_t>((src * 5 + dst * 3 + n) % 7); };
    std::vector<std::size_t> sc(n), so(n), rc(n), ro(n);
    std::size_t at = 0;
    for (int d = n - 1; d >= 0; --d) {  // send blocks in reverse order, 2-byte gaps
      so[d] = at + 2;
      sc[d] = count(r, d);
      at = so[d] + sc[d];
    }
    Bytes send(at + 2, 0x5A);
    for (int d = 0; d < n; ++d) {
      for (std::size_t i = 0; i < sc[d]; ++i) send[so[d] + i] = pattern(r, d, 21, i);
    }
    at = 0;
    for (int s = 0; s < n; ++s) {  // receive blocks in order, 3-byte gaps
      ro[s] = at + 3;
      rc[s] = count(s, r);
      at = ro[s] + rc[s];
    }
    Bytes recv(at + 3, 0xA5);
    t.all_to_all(send.data(), sc, so, recv.data(), rc, ro);
    std::vector<bool> written(recv.size(), false);
    for (int s = 0; s < n; ++s) {
      for (std::size_t i = 0; i < rc[s]; ++i) {
        CASE_REQUIRE(recv[ro[s] + i] == pattern(s, r, 21, i), "scale ", scale, " block from ", s, " byte ", i);
        written[ro[s] + i] = true;
      }
    }
    for (std::size_t i = 0; i < recv.size(); ++i) {
      if (!written[i]) CASE_REQUIRE(recv[i] == 0xA5, "scale ", scale, " gap byte ", i, " was written");
    }
  }
}

// Even/odd split with reversed keys, collectives and p2p inside the children, a nested split,
// and a split where rank 0 opts out.
void split_cases(Transport& t) {
  const int n = t.size(), r = t.rank();
  auto child = t.split(r % 2, -r);
  CASE_REQUIRE(child != nullptr);
  std::vector<int> members;  // world ranks of my child, in child rank order (key = -rank)
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == r % 2) members.push_back(q);
  }
  Transport& c = *child;
  CASE_REQUIRE(c.size() == static_cast<int>(members.size()), "child size ", c.size());
  CASE_REQUIRE(members[c.rank()] == r, "child rank ", c.rank());

  float world_rank = static_cast<float>(r);
  std::vector<float> gathered(members.size());
  c.all_gather(&world_rank, gathered.data(), 1);
  for (std::size_t i = 0; i < members.size(); ++i) CASE_REQUIRE(gathered[i] == members[i], "slot ", i);

  float sum = static_cast<float>(r);
  c.all_reduce_sum(&sum, 1);
  float want = 0;
  for (int m : members) want += static_cast<float>(m);
  CASE_REQUIRE(sum == want);

  // p2p in the child (peer numbers are child ranks) while the parent is untouched.
  const int cn = c.size(), cr = c.rank();
  const int cnext = (cr + 1) % cn, cprev = (cr + cn - 1) % cn;
  const Bytes out = filled(r, members[cnext], 8, msg_bytes(r, members[cnext], n));
  Bytes in(msg_bytes(members[cprev], r, n), 0);
  c.sendrecv(out.data(), out.size(), cnext, in.data(), in.size(), cprev, 8);
  expect_pattern(t, in, members[cprev], r, 8, "child ring");

  // Nested: duplicate the child with keys in child order.
  auto grandchild = c.split(0, c.rank());
  CASE_REQUIRE(grandchild && grandchild->size() == cn && grandchild->rank() == cr);
  grandchild->barrier();

  // Rank 0 opts out.
  auto rest = t.split(r == 0 ? -1 : 1, r);
  if (r == 0) {
    CASE_REQUIRE(rest == nullptr);
  } else {
    CASE_REQUIRE(rest && rest->size() == n - 1 && rest->rank() == r - 1);
    float one = 1;
    rest->all_reduce_sum(&one, 1);
    CASE_REQUIRE(one == static_cast<float>(n - 1));
  }
  t.barrier();
}

// A user receive posted before collectives run must not catch any collective traffic.
void collectives_do_not_match_p2p(Transport& t) {
  const int n = t.size(), r = t.rank();
  Bytes in(msg_bytes(prev(t), r, n), 0);
  auto recv = t.irecv(in.data(), in.size(), prev(t), 0);
  t.barrier();
  std::vector<float> v(static_cast<std::size_t>(n) * 3 + 1, 1.0f);
  t.all_reduce_sum(v.data(), v.size());
  for (float x : v) CASE_REQUIRE(x == static_cast<float>(n));
  Bytes b = r == 0 ? filled(0, -1, 0, 17) : Bytes(17, 0);
  t.broadcast(b.data(), b.size(), 0);
  expect_pattern(t, b, 0, -1, 0, "broadcast");
  const Bytes out = filled(r, next(t), 0, msg_bytes(r, next(t), n));
  auto send = t.isend(out.data(), out.size(), next(t), 0);
  recv->wait();
  send->wait();
  expect_pattern(t, in, prev(t), r, 0, "p2p around collectives");
}

}  // namespace

void add_collective_cases(std::vector<CommCase>& cases) {
  cases.insert(cases.end(), {
                                {"barrier_repeated", barrier_repeated},
                                {"broadcast_every_root", broadcast_every_root},
                                {"all_reduce_sum_sizes", all_reduce_sum_sizes},
                                {"all_gather_sizes", all_gather_sizes},
                                {"all_gather_values_exact", all_gather_values_exact},
                                {"all_gather_bytes_sizes", all_gather_bytes_sizes},
                                {"string_collectives", string_collectives},
                                {"reduce_scatter_sizes", reduce_scatter_sizes},
                                {"all_to_all_uneven", all_to_all_uneven},
                                {"split", split_cases},
                                {"collectives_do_not_match_p2p", collectives_do_not_match_p2p},
                            });
}

}  // namespace dynatrain::comm::testing
