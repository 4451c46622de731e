// Transport cases: point to point (isend / irecv / sendrecv, polling, request lifetime, large
// messages, threads sharing one transport).
#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "tests/comm/transport_cases_support.h"

namespace dynatrain::comm::testing {
namespace {

using namespace support;

void identity(Transport& t) {
  CASE_REQUIRE(t.size() >= 1);
  CASE_REQUIRE(t.rank() >= 0 && t.rank() < t.size());
  CASE_REQUIRE(t.backend() != nullptr && std::strlen(t.backend()) > 0);
  const float me = static_cast<float>(t.rank());
  std::vector<float> all(static_cast<std::size_t>(t.size()), -1.0f);
  t.all_gather(&me, all.data(), 1);
  for (int r = 0; r < t.size(); ++r) CASE_REQUIRE(all[r] == static_cast<float>(r), "slot ", r);
}

void p2p_ring(Transport& t) {
  const int n = t.size(), r = t.rank();
  const Bytes out = filled(r, next(t), 7, msg_bytes(r, next(t), n));
  Bytes in(msg_bytes(prev(t), r, n), 0);
  Requests reqs;
  reqs.push_back(t.irecv(in.data(), in.size(), prev(t), 7));
  reqs.push_back(t.isend(out.data(), out.size(), next(t), 7));
  wait_all(reqs);
  expect_pattern(t, in, prev(t), r, 7, "ring");
}

// Every pair (self included), three tags, two messages per tag: receives are posted in reverse
// tag order (matching by tag) but in order within a tag (non-overtaking).
void p2p_all_pairs_tags(Transport& t) {
  const int n = t.size(), r = t.rank();
  const int tags[] = {0, 5, kMaxTag};
  auto size_of = [&](int src, int dst, int tag, int seq) {
    return msg_bytes(src, dst, n) + static_cast<std::size_t>(tag % 7) + static_cast<std::size_t>(seq);
  };
  auto pat_tag = [](int tag, int seq) { return tag * 2 + seq; };
  std::vector<Bytes> outs, ins;
  std::vector<std::tuple<int, int, int>> in_ids;  // (src, tag, seq)
  outs.reserve(6 * static_cast<std::size_t>(n));
  ins.reserve(6 * static_cast<std::size_t>(n));
  Requests reqs;
  for (int q = 0; q < n; ++q) {
    for (int k = 2; k >= 0; --k) {
      for (int seq = 0; seq < 2; ++seq) {
        ins.emplace_back(size_of(q, r, tags[k], seq), 0);
        in_ids.emplace_back(q, tags[k], seq);
        reqs.push_back(t.irecv(ins.back().data(), ins.back().size(), q, tags[k]));
      }
    }
  }
  for (int q = n - 1; q >= 0; --q) {
    for (int tag : tags) {
      for (int seq = 0; seq < 2; ++seq) {
        outs.push_back(filled(r, q, pat_tag(tag, seq), size_of(r, q, tag, seq)));
        reqs.push_back(t.isend(outs.back().data(), outs.back().size(), q, tag));
      }
    }
  }
  wait_all(reqs);
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const auto [src, tag, seq] = in_ids[k];
    expect_pattern(t, ins[k], src, r, pat_tag(tag, seq), "all pairs");
  }
}

// The deadlock-free schedule of design.md: step s talks to rank ^ s; plus a ring shift (an
// asymmetric pattern a blocking send-then-receive would deadlock on).
void sendrecv_xor_and_shift(Transport& t) {
  const int n = t.size(), r = t.rank();
  int steps = 1;
  while (steps < n) steps *= 2;
  for (int s = 0; s < steps; ++s) {
    const int peer = r ^ s;
    if (peer >= n) continue;
    const Bytes out = filled(r, peer, s, msg_bytes(r, peer, n));
    Bytes in(msg_bytes(peer, r, n), 0);
    t.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, s);
    expect_pattern(t, in, peer, r, s, "xor step");
  }
  const Bytes out = filled(r, next(t), 99, msg_bytes(r, next(t), n));
  Bytes in(msg_bytes(prev(t), r, n), 0);
  t.sendrecv(out.data(), out.size(), next(t), in.data(), in.size(), prev(t), 99);
  expect_pattern(t, in, prev(t), r, 99, "shift");
}

void test_polling(Transport& t) {
  const int n = t.size(), r = t.rank();
  const Bytes out = filled(r, next(t), 3, msg_bytes(r, next(t), n));
  Bytes in(msg_bytes(prev(t), r, n), 0);
  auto recv = t.irecv(in.data(), in.size(), prev(t), 3);
  auto send = t.isend(out.data(), out.size(), next(t), 3);
  bool recv_done = false, send_done = false;
  for (long spins = 0; !(recv_done && send_done); ++spins) {
    CASE_REQUIRE(spins < 50'000'000, "test() never reported completion");
    if (!recv_done) recv_done = recv->test();
    if (!send_done) send_done = send->test();
    if (!(recv_done && send_done)) std::this_thread::yield();
  }
  CASE_REQUIRE(recv->test() && send->test(), "test() after completion");
  recv->wait();  // waiting on a completed request returns at once
  expect_pattern(t, in, prev(t), r, 3, "polled");
}

void request_destructor_waits(Transport& t) {
  const int n = t.size(), r = t.rank();
  const Bytes out = filled(r, next(t), 4, msg_bytes(r, next(t), n));
  Bytes in(msg_bytes(prev(t), r, n), 0);
  {
    auto recv = t.irecv(in.data(), in.size(), prev(t), 4);
    auto send = t.isend(out.data(), out.size(), next(t), 4);
    // Both destroyed here without wait(): destruction waits for completion.
  }
  expect_pattern(t, in, prev(t), r, 4, "destroyed request");
}

void many_outstanding(Transport& t) {
  const int n = t.size(), r = t.rank();
  constexpr int kMessages = 64;
  std::vector<Bytes> outs, ins;
  outs.reserve(kMessages);
  ins.reserve(kMessages);
  Requests reqs;
  for (int i = 0; i < kMessages; ++i) {
    ins.emplace_back(msg_bytes(prev(t), r, n) + static_cast<std::size_t>(i), 0);
    reqs.push_back(t.irecv(ins.back().data(), ins.back().size(), prev(t), i % 3));
  }
  for (int i = 0; i < kMessages; ++i) {
    outs.push_back(filled(r, next(t), 1000 + i, msg_bytes(r, next(t), n) + static_cast<std::size_t>(i)));
    reqs.push_back(t.isend(outs.back().data(), outs.back().size(), next(t), i % 3));
  }
  wait_all(reqs);
  for (int i = 0; i < kMessages; ++i) expect_pattern(t, ins[i], prev(t), r, 1000 + i, "outstanding");
}

void large_message(Transport& t) {
  const int r = t.rank();
  const std::size_t bytes = (std::size_t{1} << 20) + 3 + static_cast<std::size_t>(r);
  const std::size_t in_bytes = (std::size_t{1} << 20) + 3 + static_cast<std::size_t>(prev(t));
  const Bytes out = filled(r, next(t), 11, bytes);
  Bytes in(in_bytes, 0);
  t.sendrecv(out.data(), out.size(), next(t), in.data(), in.size(), prev(t), 11);
  expect_pattern(t, in, prev(t), r, 11, "large");
}

// Several threads of one rank use one transport at once (MPI_THREAD_MULTIPLE), one tag each.
void threads_share_transport(Transport& t) {
  const int n = t.size(), r = t.rank();
  constexpr int kThreads = 3, kRounds = 20;
  std::mutex mu;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  for (int j = 0; j < kThreads; ++j) {
    threads.emplace_back([&, j] {
      try {
        for (int round = 0; round < kRounds; ++round) {
          const int tag = 100 + j;
          const Bytes out = filled(r, next(t), tag * 1000 + round, msg_bytes(r, next(t), n) + j);
          Bytes in(msg_bytes(prev(t), r, n) + j, 0);
          Requests reqs;
          reqs.push_back(t.irecv(in.data(), in.size(), prev(t), tag));
          reqs.push_back(t.isend(out.data(), out.size(), next(t), tag));
          wait_all(reqs);
          expect_pattern(t, in, prev(t), r, tag * 1000 + round, "threaded");
        }
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

void add_point_to_point_cases(std::vector<CommCase>& cases) {
  cases.insert(cases.end(), {
                                {"identity", identity},
                                {"p2p_ring", p2p_ring},
                                {"p2p_all_pairs_tags", p2p_all_pairs_tags},
                                {"sendrecv_xor_and_shift", sendrecv_xor_and_shift},
                                {"test_polling", test_polling},
                                {"request_destructor_waits", request_destructor_waits},
                                {"many_outstanding", many_outstanding},
                                {"large_message", large_message},
                                {"threads_share_transport", threads_share_transport},
                            });
}

}  // namespace dynatrain::comm::testing
