#include "exec/wave_agreement.h"

#include <algorithm>

#include "common/error.h"

namespace dynatrain::exec {

// kBalanced: at each step take the front or the back key, whichever keeps the worst rank's
// running growth (relative to its final growth) lower, so that ranks whose destination sits at
// low keys and ranks whose destination sits at high keys are served in turn.
std::vector<std::size_t> key_sequence(const WaveStats& stats, WaveOrder order) {
  const std::size_t n = stats.keys;
  std::vector<std::size_t> seq;
  seq.reserve(n);
  if (order != WaveOrder::kBalanced) {
    for (std::size_t i = 0; i < n; ++i) seq.push_back(order == WaveOrder::kDescending ? n - 1 - i : i);
    return seq;
  }
  const int W = stats.world;
  std::vector<double> run(static_cast<std::size_t>(W), 0.0), fin(static_cast<std::size_t>(W), 0.0);
  for (int r = 0; r < W; ++r)
    for (std::size_t k = 0; k < n; ++k) fin[r] += stats.net(r, k);
  auto cost = [&](std::size_t k) {
    double worst = -1e300;
    for (int r = 0; r < W; ++r) worst = std::max(worst, run[r] + stats.net(r, k) - std::max(0.0, fin[r]));
    return worst;
  };
  std::size_t lo = 0, hi = n;  // keys [lo, hi) remain
  while (lo < hi) {
    const std::size_t k = cost(lo) <= cost(hi - 1) ? lo++ : --hi;
    for (int r = 0; r < W; ++r) run[r] += stats.net(r, k);
    seq.push_back(k);
  }
  return seq;
}

WaveCut cut_waves(const WaveStats& stats, WaveOrder order, std::size_t mem_budget) {
  const int W = stats.world;
  const std::vector<std::size_t> seq = key_sequence(stats, order);
  const double target = static_cast<double>(mem_budget) / 16;
  WaveCut out;
  out.wave_of_key.assign(seq.size(), 0);
  std::vector<double> cur(static_cast<std::size_t>(W), 0.0);
  int wave = 0;
  bool open = false;  // the current wave holds some load
  for (std::size_t k : seq) {
    bool any = false, over = false;
    for (int r = 0; r < W; ++r) {
      const double v = stats.load(r, k);
      any |= v > 0;
      over |= cur[r] + v > target;
    }
    if (any && over && open) {
      ++wave;
      std::fill(cur.begin(), cur.end(), 0.0);
      open = false;
    }
    for (int r = 0; r < W; ++r) cur[r] += stats.load(r, k);
    open |= any;
    out.wave_of_key[k] = wave;
  }
  out.waves = seq.empty() ? 0 : wave + 1;
  return out;
}

void SharedWaveAgreement::contribute(int rank, int world, const std::vector<float>& mine) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.world == 0) {
    DT_CHECK(world > 0 && mine.size() % 2 == 0, "wave stats of ", mine.size(), " floats from a world of ", world);
    stats_.world = world;
    stats_.keys = mine.size() / 2;
    stats_.values.assign(static_cast<std::size_t>(world) * mine.size(), 0.f);
    given_.assign(static_cast<std::size_t>(world), 0);
  }
  DT_CHECK(world == stats_.world && mine.size() == 2 * stats_.keys, "rank ", rank, " gives ", mine.size(),
           " wave stats in a world of ", world, "; expected ", 2 * stats_.keys, " in ", stats_.world);
  DT_CHECK(rank >= 0 && rank < world && !given_[rank], "rank ", rank, " gives its wave stats twice or is out of range");
  given_[rank] = 1;
  std::copy(mine.begin(), mine.end(),
            stats_.values.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank) * mine.size()));
}

std::shared_ptr<const WaveCut> SharedWaveAgreement::cut(WaveOrder order, std::size_t mem_budget) {
  std::lock_guard<std::mutex> lock(mu_);
  DT_CHECK(std::count(given_.begin(), given_.end(), 1) == stats_.world && stats_.world > 0,
           "a wave cut asked before every rank gave its stats");
  auto& c = cuts_[{static_cast<int>(order), mem_budget}];
  if (!c) c = std::make_shared<const WaveCut>(cut_waves(stats_, order, mem_budget));
  return c;
}

void SharedWaveAgreement::give_max(int step, int rank, int world, const std::vector<double>& mine) {
  std::lock_guard<std::mutex> lock(mu_);
  Max& m = maxes_[step];
  if (m.given.empty()) {
    m.values = mine;
    m.given.assign(static_cast<std::size_t>(world), 0);
  }
  DT_CHECK(m.given.size() == static_cast<std::size_t>(world) && mine.size() == m.values.size(), "rank ", rank,
           " gives ", mine.size(), " values to agreement step ", step, " in a world of ", world, "; expected ",
           m.values.size(), " in ", m.given.size());
  DT_CHECK(rank >= 0 && rank < world && !m.given[rank], "rank ", rank, " gives agreement step ", step,
           " twice or is out of range");
  m.given[rank] = 1;
  for (std::size_t i = 0; i < mine.size(); ++i) m.values[i] = std::max(m.values[i], mine[i]);
}

std::vector<double> SharedWaveAgreement::max_of(int step) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = maxes_.find(step);
  DT_CHECK(it != maxes_.end() && std::count(it->second.given.begin(), it->second.given.end(), 1) ==
                                     static_cast<std::ptrdiff_t>(it->second.given.size()),
           "agreement step ", step, " read before every rank gave its values");
  return it->second.values;
}

}  // namespace dynatrain::exec
