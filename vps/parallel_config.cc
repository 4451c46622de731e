#include "vps/parallel_config.h"

#include <charconv>
#include <numeric>
#include <sstream>

#include "common/error.h"

namespace dynatrain::vps {

namespace {

std::int64_t parse_int(const std::string& key, const std::string& value, const std::string& text) {
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size())
    DT_INPUT_ERROR("config '", text, "': ", key, "=", value, " is not an integer");
  return v;
}

// "1, 2, 4, 8": found in O(sqrt n) (a hostile head count of 1e12 must not loop), at most 64
// listed; beyond 1e14 (a sqrt over 1e7 steps) only the count is described.
std::string divisors_of(std::int64_t n) {
  if (n < 1) return "none";
  if (n > 100'000'000'000'000) return "the divisors of " + std::to_string(n);
  std::vector<std::int64_t> low, high;
  for (std::int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      low.push_back(d);
      if (d != n / d) high.push_back(n / d);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  std::string s;
  for (std::size_t i = 0; i < low.size() && i < 64; ++i) s += (i ? ", " : "") + std::to_string(low[i]);
  if (low.size() > 64) s += ", ... (" + std::to_string(low.size()) + " in all)";
  return s;
}

// "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, ..."
void require_divides(const char* key, int value, std::int64_t n, const char* what) {
  if (n % value != 0)
    DT_INPUT_ERROR(key, "=", value, " does not divide ", n, " ", what, "; valid ", key, ": ", divisors_of(n));
}

}  // namespace

std::string ParallelConfig::str() const {
  std::ostringstream os;
  os << "tp=" << tp << ",pp=" << pp << ",dp=" << dp;
  if (cp != 1) os << ",cp=" << cp;
  if (ep != 1) os << ",ep=" << ep;
  if (etp != 1) os << ",etp=" << etp;
  os << ",zero=" << zero;
  if (!pp_layers.empty()) {
    bool even = true;
    for (auto n : pp_layers) even = even && n == pp_layers.front();
    if (!even) {
      os << ",pp_layers=";
      for (std::size_t i = 0; i < pp_layers.size(); ++i) os << (i ? "/" : "") << pp_layers[i];
    }
  }
  return os.str();
}

ParallelConfig ParallelConfig::parse(const std::string& text) {
  ParallelConfig c;
  if (text.empty()) DT_INPUT_ERROR("empty config string; expected e.g. tp=2,pp=2,dp=4");
  if (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos)
    DT_INPUT_ERROR("config '", text, "' has an empty item (a stray comma); expected e.g. tp=2,pp=2,dp=4");
  std::stringstream items(text);
  std::string item;
  std::vector<std::string> seen;
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      DT_INPUT_ERROR("config '", text, "': '", item,
                     "' is not key=value; keys: tp, pp, dp, cp, ep, etp, zero, pp_layers");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    for (const auto& k : seen)
      if (k == key) DT_INPUT_ERROR("config '", text, "': ", key, " is given twice");
    seen.push_back(key);
    if (key == "pp_layers") {
      std::stringstream parts(value);
      std::string part;
      while (std::getline(parts, part, '/')) {
        const std::int64_t layers = parse_int(key, part, text);
        if (layers < 1 || layers > kMaxLayers)
          DT_INPUT_ERROR("config '", text, "': pp_layers entry ", layers, " is out of range; valid: 1..", kMaxLayers);
        c.pp_layers.push_back(layers);
      }
      if (value.empty() || value.back() == '/' || c.pp_layers.size() > static_cast<std::size_t>(kMaxLayers))
        DT_INPUT_ERROR("config '", text, "': pp_layers=", value,
                       " must be layer counts joined by '/', e.g. 24/23/23/24");
      continue;
    }
    int* field = key == "tp"     ? &c.tp
                 : key == "pp"   ? &c.pp
                 : key == "dp"   ? &c.dp
                 : key == "cp"   ? &c.cp
                 : key == "ep"   ? &c.ep
                 : key == "etp"  ? &c.etp
                 : key == "zero" ? &c.zero
                                 : nullptr;
    if (!field)
      DT_INPUT_ERROR("config '", text, "': unknown key '", key,
                     "'; valid keys: tp, pp, dp, cp, ep, etp, zero, pp_layers");
    const std::int64_t v = parse_int(key, value, text);
    if (key == "zero" ? (v < 0 || v > 3) : (v < 1 || v > (1 << 20)))
      DT_INPUT_ERROR("config '", text, "': ", key, "=", v, " is out of range; valid ",
                     key == "zero" ? "zero: 0, 1, 2, 3" : "values: positive integers");
    *field = static_cast<int>(v);
  }
  const std::int64_t world = std::int64_t{c.tp} * c.cp * c.dp * c.pp;  // each <= 2^20: no overflow
  if (world > kMaxWorldSize)
    DT_INPUT_ERROR("config '", text, "' has tp*cp*dp*pp = ", world, " ranks; the most supported is ", kMaxWorldSize);
  if (!c.pp_layers.empty() && static_cast<int>(c.pp_layers.size()) != c.pp)
    DT_INPUT_ERROR("config '", text, "': pp_layers lists ", c.pp_layers.size(), " stages but pp=", c.pp);
  return c;
}

void ParallelConfig::validate_for(const ModelSpec& m) {
  m.validate();
  require_divides("tp", tp, m.heads, "attention heads");
  if (tp > m.kv_heads) {
    if (tp % m.kv_heads != 0)
      DT_INPUT_ERROR("tp=", tp, " exceeds the ", m.kv_heads,
                     " key/value heads but is not a multiple of them; valid tp: ", divisors_of(m.kv_heads),
                     " or multiples of ", m.kv_heads, " that divide ", m.heads);
  } else {
    require_divides("tp", tp, m.kv_heads, "key/value heads");
  }
  if (m.is_moe()) {
    require_divides("ep", ep, m.experts, "experts");
    require_divides("etp", etp, m.expert_ffn, "expert ffn rows");
    const int dense_ranks = tp * cp * dp;
    if (dense_ranks % (etp * ep) != 0)
      DT_INPUT_ERROR("ep*etp=", ep * etp, " (ep=", ep, ", etp=", etp, ") does not divide tp*cp*dp=", dense_ranks,
                     "; valid ep*etp: ", divisors_of(dense_ranks));
  } else {
    require_divides("tp", tp, m.ffn, "ffn rows");
    if (ep != 1 || etp != 1)
      DT_INPUT_ERROR("ep=", ep, ", etp=", etp, ": model '", m.name, "' has no experts; valid: ep=1, etp=1");
  }
  // Every tensor split along a dimension (MLA heads, shared experts, dense layers of MoE models)
  // must split evenly.
  for (const auto& t : build_tensors(m)) {
    if (t.split != TpSplit::kDim) continue;
    const int parts = t.expert ? etp : tp;
    if (t.shape[t.split_dim] % parts != 0)
      DT_INPUT_ERROR(t.expert ? "etp=" : "tp=", parts, " does not divide dim ", int{t.split_dim}, " (",
                     t.shape[t.split_dim], ") of ", t.name, "; valid: ", divisors_of(t.shape[t.split_dim]));
  }
  if (pp > m.layers) DT_INPUT_ERROR("pp=", pp, " exceeds the model's ", m.layers, " layers; valid pp: 1..", m.layers);
  if (pp_layers.empty()) {
    if (m.layers % pp != 0) {
      std::string example;
      for (int s = 0; s < pp; ++s) {
        if (s) example += '/';
        example += std::to_string(m.layers / pp + (s < m.layers % pp ? 1 : 0));
      }
      DT_INPUT_ERROR("pp=", pp, " does not divide ", m.layers, " layers; give uneven stages as pp_layers=", example,
                     " or choose pp in {", divisors_of(m.layers), "}");
    }
    pp_layers.assign(pp, m.layers / pp);
  } else {
    std::int64_t sum = 0;
    for (auto n : pp_layers) {
      if (n < 1) DT_INPUT_ERROR("pp_layers: every stage needs at least one layer, got ", n);
      sum += n;
    }
    if (sum != m.layers) DT_INPUT_ERROR("pp_layers sum to ", sum, " but the model has ", m.layers, " layers");
  }
}

RankCoords rank_coords(const ParallelConfig& c, int rank) {
  RankCoords r;
  if (rank < 0 || rank >= c.world_size()) return r;
  r.active = true;
  int x = rank;
  r.tp = x % c.tp;
  x /= c.tp;
  r.cp = x % c.cp;
  x /= c.cp;
  r.dp = x % c.dp;
  r.pp = x / c.dp;
  r.dense_shard = r.cp + c.cp * r.dp;
  int in_stage = rank % (c.tp * c.cp * c.dp);
  r.etp = in_stage % c.etp;
  in_stage /= c.etp;
  r.ep = in_stage % c.ep;
  r.edp = in_stage / c.ep;
  return r;
}

int rank_of(const ParallelConfig& c, int tp, int cp, int dp, int pp) {
  return tp + c.tp * (cp + c.cp * (dp + c.dp * pp));
}

std::vector<std::int64_t> stage_layer_offsets(const ParallelConfig& c) {
  DT_CHECK_EQ(static_cast<int>(c.pp_layers.size()), c.pp);
  std::vector<std::int64_t> offsets(1, 0);
  for (auto n : c.pp_layers) offsets.push_back(offsets.back() + n);
  return offsets;
}

}  // namespace dynatrain::vps
