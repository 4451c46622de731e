// Transport cases: scattered messages (runs), direct and through the packing default, including
// many small runs and a size mismatch between the two sides' runs.
#include <algorithm>
#include <cstring>

#include "tests/comm/transport_cases_support.h"

namespace dynatrain::comm::testing {
namespace {

using namespace support;

// symmetric.
std::vector<ByteRun> uneven_runs(std::size_t total, std::size_t seed, std::size_t* span) {
  std::vector<ByteRun> runs;
  std::size_t at = 3, left = total;
  for (std::size_t i = 0; left > 0; ++i) {
    const std::size_t n = std::min(left, 1 + (seed * 131 + i * 977) % 5000);
    runs.push_back({at, n});
    at += n + (i % 3);  // gaps of 0, 1 or 2 bytes
    left -= n;
  }
  *span = at + 5;
  return runs;
}

void scattered_runs(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (int base_class = 0; base_class < 2; ++base_class) {
    std::vector<Bytes> out(static_cast<std::size_t>(n)), in(static_cast<std::size_t>(n));
    std::vector<std::vector<ByteRun>> in_runs(static_cast<std::size_t>(n));
    Requests reqs;
    for (int q = 0; q < n; ++q) {
      const std::size_t bytes = 20000 + 997 * static_cast<std::size_t>(q) + 131 * static_cast<std::size_t>(r);
      std::size_t span = 0;
      auto& rr = in_runs[static_cast<std::size_t>(q)];
      rr = uneven_runs(20000 + 997 * static_cast<std::size_t>(r) + 131 * static_cast<std::size_t>(q),
                       static_cast<std::size_t>(q) + 7, &span);
      in[static_cast<std::size_t>(q)].assign(span, 0xEE);
      void* ib = in[static_cast<std::size_t>(q)].data();
      reqs.push_back(base_class ? t.Transport::irecv_runs(ib, rr, q, 5) : t.irecv_runs(ib, rr, q, 5));
      std::vector<ByteRun> sr = uneven_runs(bytes, static_cast<std::size_t>(r) + 1, &span);
      const Bytes msg = filled(r, q, 5, bytes);
      auto& o = out[static_cast<std::size_t>(q)];
      o.assign(span, 0);
      std::size_t k = 0;
      for (const ByteRun& run : sr)
        for (std::size_t i = 0; i < run.bytes; ++i) o[run.offset + i] = msg[k++];
      reqs.push_back(base_class ? t.Transport::isend_runs(o.data(), sr, q, 5) : t.isend_runs(o.data(), sr, q, 5));
    }
    wait_all(reqs);
    for (int q = 0; q < n; ++q) {
      const auto& rr = in_runs[static_cast<std::size_t>(q)];
      const Bytes& got = in[static_cast<std::size_t>(q)];
      const Bytes want = filled(q, r, 5, runs_bytes(rr));
      std::vector<char> covered(got.size(), 0);
      std::size_t k = 0;
      for (const ByteRun& run : rr)
        for (std::size_t i = 0; i < run.bytes; ++i, ++k) {
          CASE_REQUIRE(got[run.offset + i] == want[k], "byte ", k, " from rank ", q, " base class ", base_class);
          covered[run.offset + i] = 1;
        }
      for (std::size_t i = 0; i < got.size(); ++i)
        if (!covered[i]) CASE_REQUIRE(got[i] == 0xEE, "gap byte ", i, " written, from rank ", q);
    }
  }
  std::vector<std::uint8_t> mine(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) mine[static_cast<std::size_t>(q)] = t.runs_direct(q) ? 1 : 0;
  const auto all = all_gather_values(t, mine);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      CASE_REQUIRE(all[static_cast<std::size_t>(a * n + b)] == all[static_cast<std::size_t>(b * n + a)],
                   "runs_direct not symmetric between ", a, " and ", b);
}

// Thousands of runs, more than one direct read takes (IOV_MAX = 1024 iovecs a side): a TP slice
// as one run on one side and a run per row on the other, both ways, and both sides split into
// different row lengths. Every byte lands in message order; gap bytes stay untouched.
void many_small_runs(Transport& t) {
  const int n = t.size(), r = t.rank();
  const int peer = (r + 1) % n, from = (r + n - 1) % n;
  auto rows = [](std::size_t count, std::size_t len, std::size_t stride, std::size_t* span) {
    std::vector<ByteRun> v;
    for (std::size_t i = 0; i < count; ++i) v.push_back({5 + i * stride, len});
    *span = 5 + count * stride + 3;
    return v;
  };
  struct Shape {
    const char* name;
    std::size_t send_count, send_len, send_stride, recv_count, recv_len, recv_stride;
  };
  const std::size_t total = 2500 * 24;
  const Shape shapes[] = {{"one run -> rows", 1, total, total, 2500, 24, 40},
                          {"rows -> one run", 2500, 24, 48, 1, total, total},
                          {"rows -> other rows", 2500, 24, 30, 3000, 20, 21},
                          {"adjacent rows -> rows", 2500, 24, 24, 1500, 40, 64}};
  for (const Shape& sh : shapes) {
    std::size_t send_span = 0, recv_span = 0;
    const auto sr = rows(sh.send_count, sh.send_len, sh.send_stride, &send_span);
    const auto rr = rows(sh.recv_count, sh.recv_len, sh.recv_stride, &recv_span);
    const Bytes msg = filled(r, peer, 6, total);
    Bytes out(send_span, 0), in(recv_span, 0xEE);
    std::size_t k = 0;
    for (const ByteRun& run : sr)
      for (std::size_t b = 0; b < run.bytes; ++b) out[run.offset + b] = msg[k++];
    Requests reqs;
    reqs.push_back(t.irecv_runs(in.data(), rr, from, 6));
    reqs.push_back(t.isend_runs(out.data(), sr, peer, 6));
    wait_all(reqs);
    const Bytes want = filled(from, r, 6, total);
    std::vector<char> covered(in.size(), 0);
    k = 0;
    for (const ByteRun& run : rr)
      for (std::size_t b = 0; b < run.bytes; ++b, ++k) {
        CASE_REQUIRE(in[run.offset + b] == want[k], sh.name, ": byte ", k, " from rank ", from);
        covered[run.offset + b] = 1;
      }
    for (std::size_t b = 0; b < in.size(); ++b)
      if (!covered[b]) CASE_REQUIRE(in[b] == 0xEE, sh.name, ": gap byte ", b, " written");
  }
}

// A scattered message whose receive runs total another size: CommError on the receive (and,
// where the backend can tell, on the send), on a pair communicator of its own.
void scattered_size_mismatch(Transport& t) {
  const int r = t.rank();
  auto pair = t.split(r / 2, r);
  CASE_REQUIRE(pair != nullptr);
  if (pair->size() == 2) {
    if (pair->rank() == 0) {
      const Bytes out = filled(r, r + 1, 2, 4096);
      try {
        pair->isend_runs(out.data(), {{0, 1000}, {2000, 2000}}, 1, 2)->wait();
      } catch (const CommError&) {
        // the send may or may not fail, depending on the backend
      }
    } else {
      Bytes in(4096, 0);
      expect_throws(
          t,
          [&] {
            pair->irecv_runs(in.data(), {{0, 1000}, {1500, 1000}}, 0, 2)->wait();
          },
          "CommError", is<CommError>, "runs receive smaller than the runs message");
    }
  }
  t.barrier();
}

}  // namespace

void add_runs_cases(std::vector<CommCase>& cases) {
  cases.insert(cases.end(), {
                                {"scattered_runs", scattered_runs},
                                {"many_small_runs", many_small_runs},
                                {"scattered_size_mismatch", scattered_size_mismatch},
                            });
}

}  // namespace dynatrain::comm::testing
