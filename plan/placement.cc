#include "plan/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/error.h"
#include "plan/planner.h"

namespace dynatrain::plan {

Placement::Placement(std::vector<int> process_of_rank) {
  bool identity = true;
  for (std::size_t r = 0; r < process_of_rank.size(); ++r) identity &= process_of_rank[r] == static_cast<int>(r);
  if (identity) return;
  process_of_ = std::move(process_of_rank);
  int top = -1;
  for (int p : process_of_) top = std::max(top, p);
  rank_of_.assign(top + 1, -1);
  for (std::size_t r = 0; r < process_of_.size(); ++r)
    if (process_of_[r] >= 0) rank_of_[process_of_[r]] = static_cast<int>(r);
}

Placement Placement::parse(const std::string& text) {
  if (text == "fixed") return {};
  std::vector<int> processes;
  std::stringstream in(text);
  std::string token;
  while (std::getline(in, token, ',')) {
    std::size_t used = 0;
    int p = -1;
    try {
      p = std::stoi(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != token.size() || p < 0)
      DT_INPUT_ERROR("placement '", text, "': '", token,
                     "' is not a process number; valid: fixed, auto, or one process per rank, e.g. 1,0,3,2");
    processes.push_back(p);
  }
  if (processes.empty())
    DT_INPUT_ERROR("placement '", text, "' is empty; valid: fixed, auto, or one process per rank, e.g. 1,0,3,2");
  return Placement(std::move(processes));
}

int Placement::rank_of(int process, int ranks) const {
  if (process_of_.empty()) return process >= 0 && process < ranks ? process : -1;
  if (process < 0 || process >= static_cast<int>(rank_of_.size())) return -1;
  return rank_of_[process];
}

void Placement::validate(int ranks, int processes) const {
  if (process_of_.empty()) {
    if (ranks > processes) DT_INPUT_ERROR("a layout of ", ranks, " ranks does not fit ", processes, " processes");
    return;
  }
  if (static_cast<int>(process_of_.size()) != ranks)
    DT_INPUT_ERROR("placement ", str(), " names ", process_of_.size(), " processes but the layout has ", ranks,
                   " ranks; give one process per rank");
  std::vector<int> seen(processes, -1);
  for (int r = 0; r < ranks; ++r) {
    const int p = process_of_[r];
    if (p < 0 || p >= processes)
      DT_INPUT_ERROR("placement ", str(), " puts rank ", r, " on process ", p, "; valid processes: 0..", processes - 1);
    if (seen[p] >= 0)
      DT_INPUT_ERROR("placement ", str(), " puts ranks ", seen[p], " and ", r, " on process ", p,
                     "; each process takes at most one rank");
    seen[p] = r;
  }
}

std::vector<int> Placement::processes_of(int ranks) const {
  std::vector<int> out(ranks);
  for (int r = 0; r < ranks; ++r) out[r] = process_of(r);
  return out;
}

std::string Placement::str() const {
  if (process_of_.empty()) return "fixed";
  std::string out;
  for (std::size_t r = 0; r < process_of_.size(); ++r) {
    if (r > 0) out += ',';
    out += std::to_string(process_of_[r]);
  }
  return out;
}

int Placement::moved_ranks(int ranks) const {
  int moved = 0;
  for (int r = 0; r < ranks; ++r) moved += process_of(r) != r;
  return moved;
}

// The Hungarian method with potentials (shortest augmenting paths), O(rows^2 * cols).
std::vector<int> min_cost_assignment(int rows, int cols, const std::vector<std::int64_t>& cost) {
  DT_CHECK(rows <= cols, "more rows than columns: ", rows, " > ", cols);
  DT_CHECK(cost.size() == static_cast<std::size_t>(rows) * cols, "cost matrix size ", cost.size());
  constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max() / 4;
  // 1-based rows and columns; column 0 is the virtual start of each augmenting path.
  std::vector<std::int64_t> u(rows + 1, 0), v(cols + 1, 0), min_slack(cols + 1);
  std::vector<int> row_of_col(cols + 1, 0), prev_col(cols + 1, 0);
  std::vector<char> used(cols + 1);
  for (int i = 1; i <= rows; ++i) {
    row_of_col[0] = i;
    int col = 0;
    std::fill(min_slack.begin(), min_slack.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[col] = 1;
      const int row = row_of_col[col];
      std::int64_t delta = kInf;
      int next = 0;
      for (int j = 1; j <= cols; ++j) {
        if (used[j]) continue;
        const std::int64_t slack = cost[static_cast<std::size_t>(row - 1) * cols + (j - 1)] - u[row] - v[j];
        if (slack < min_slack[j]) min_slack[j] = slack, prev_col[j] = col;
        if (min_slack[j] < delta) delta = min_slack[j], next = j;
      }
      for (int j = 0; j <= cols; ++j) {
        if (used[j]) {
          u[row_of_col[j]] += delta;
          v[j] -= delta;
        } else {
          min_slack[j] -= delta;
        }
      }
      col = next;
    } while (row_of_col[col] != 0);
    do {  // flip the augmenting path
      const int back = prev_col[col];
      row_of_col[col] = row_of_col[back];
      col = back;
    } while (col != 0);
  }
  std::vector<int> col_of_row(rows, -1);
  for (int j = 1; j <= cols; ++j)
    if (row_of_col[j] != 0) col_of_row[row_of_col[j] - 1] = j - 1;
  return col_of_row;
}

std::uint64_t inter_node_floor(const Affinity& a, const Topology& topology, const std::vector<int>& eligible) {
  std::vector<char> process_eligible(a.processes, eligible.empty() ? 1 : 0);
  for (int p : eligible)
    if (p >= 0 && p < a.processes) process_eligible[p] = 1;
  std::vector<char> node_eligible(a.nodes, 0);
  for (int p = 0; p < a.processes; ++p)
    if (process_eligible[p]) node_eligible[topology.node_of(p)] = 1;
  std::vector<char> node_holds(a.nodes, 0);
  std::vector<std::uint64_t> best(a.ranks, 0);  // bytes of rank q on its best eligible node
  std::uint64_t floor = 0;
  for (int q = 0; q < a.ranks; ++q) {
    for (int n = 0; n < a.nodes; ++n) {
      const std::uint64_t held = std::min(a.need[q], a.on_node[static_cast<std::size_t>(q) * a.nodes + n]);
      if (held > 0) node_holds[n] = 1;
      if (node_eligible[n]) best[q] = std::max(best[q], held);
    }
    floor += a.need[q] - best[q];
  }
  int seats = 0;  // eligible processes on nodes holding source state
  for (int p = 0; p < a.processes; ++p) seats += node_holds[topology.node_of(p)] && process_eligible[p];
  const int homeless = std::max(0, a.ranks - seats);  // ranks that must sit on a node holding nothing
  std::sort(best.begin(), best.end());
  for (int i = 0; i < homeless; ++i) floor += best[i];
  return floor;
}

namespace {
// Makes every assignment that gives rank 0 to another process than 0, or process 0 to another
// rank, cost more than any assignment that does not (more than the sum of every row's largest
// cost), so the exact solver pins rank 0 and solves the rest as before.
void pin_rank0(std::vector<std::int64_t>& cost, int ranks, const std::vector<int>& columns) {
  const int cols = static_cast<int>(columns.size());
  const auto zero = std::find(columns.begin(), columns.end(), 0);
  if (zero == columns.end()) DT_INPUT_ERROR("rank 0 must stay on process 0, but process 0 is not eligible");
  const int c0 = static_cast<int>(zero - columns.begin());
  std::int64_t big = 1;
  for (int q = 0; q < ranks; ++q)
    big += *std::max_element(cost.begin() + static_cast<std::ptrdiff_t>(q) * cols,
                             cost.begin() + static_cast<std::ptrdiff_t>(q + 1) * cols);
  for (int c = 0; c < cols; ++c)
    if (c != c0) cost[static_cast<std::size_t>(c)] = big;                               // rank 0 elsewhere
  for (int q = 1; q < ranks; ++q) cost[static_cast<std::size_t>(q) * cols + c0] = big;  // process 0 to another rank
}
}  // namespace

std::vector<int> place_around(int ranks, int processes, const std::vector<int>& vacate) {
  std::vector<bool> used(static_cast<std::size_t>(processes), false);
  for (int v : vacate) {
    DT_CHECK(v >= 0 && v < processes, "vacated process ", v, " is outside 0..", processes - 1);
    used[v] = true;
  }
  DT_CHECK(processes - static_cast<int>(vacate.size()) >= ranks, ranks, " ranks do not fit on ", processes,
           " processes with ", vacate.size(), " vacated");
  std::vector<int> out(static_cast<std::size_t>(ranks), -1);
  for (int r = 0; r < ranks && r < processes; ++r)
    if (!used[r]) out[r] = r, used[r] = true;
  int q = 0;
  for (int& p : out)
    if (p < 0) {
      while (used[q]) ++q;
      p = q;
      used[q] = true;
    }
  return out;
}

Placement auto_placement(const vps::Layout& src, const vps::Layout& dst, const Topology& topology,
                         const Placement& src_placement, const Bandwidth& bandwidth, const std::vector<int>& eligible,
                         bool rank0_on_process0) {
  const Planner planner(src, dst, topology, SwitchPlacement{src_placement, {}});
  const Affinity a = planner.affinity();
  std::vector<int> columns = eligible;  // the processes that may take a rank
  if (columns.empty())
    for (int p = 0; p < a.processes; ++p) columns.push_back(p);
  std::sort(columns.begin(), columns.end());
  columns.erase(std::unique(columns.begin(), columns.end()), columns.end());
  for (int p : columns)
    if (p < 0 || p >= a.processes)
      DT_INPUT_ERROR("eligible process ", p, " is not in the job (0..", a.processes - 1, ")");
  if (static_cast<int>(columns.size()) < a.ranks)
    DT_INPUT_ERROR(columns.size(), " eligible processes cannot take the ", a.ranks, " ranks of ", dst.config().str());
  // Cost of rank q on process p, in bytes weighted by link speed: what q's node lacks crosses
  // nodes (weight intra/inter bandwidth), what q's process lacks but its node holds moves inside
  // the node (weight 1). Rounded to 256 bytes, then scaled so that a tie-break of one unit per
  // rank off its identity process can never outweigh a real difference.
  const std::int64_t inter_weight =
      std::max<std::int64_t>(1, std::llround(bandwidth.intra_node / bandwidth.inter_node));
  const std::int64_t scale = a.ranks + 1;
  const int cols = static_cast<int>(columns.size());
  std::vector<std::int64_t> cost(static_cast<std::size_t>(a.ranks) * cols);
  for (int q = 0; q < a.ranks; ++q) {
    const std::uint64_t need = a.need[q];
    for (int c = 0; c < cols; ++c) {
      const int p = columns[c];
      const std::uint64_t on_node =
          std::min(need, a.on_node[static_cast<std::size_t>(q) * a.nodes + topology.node_of(p)]);
      const std::uint64_t on_self = std::min(on_node, a.on_process[static_cast<std::size_t>(q) * a.processes + p]);
      const std::uint64_t inter = need - on_node, intra = on_node - on_self;
      const auto weighted = static_cast<std::int64_t>((inter * inter_weight + intra) >> 8);
      cost[static_cast<std::size_t>(q) * cols + c] = weighted * scale + (p != q ? 1 : 0);
    }
  }
  if (rank0_on_process0 && a.ranks > 0) pin_rank0(cost, a.ranks, columns);
  std::vector<int> process_of = min_cost_assignment(a.ranks, cols, cost);
  for (int& p : process_of) p = columns[p];
  return Placement(std::move(process_of));
}

}  // namespace dynatrain::plan
