// Parallel configurations and the one rank order.
//
// Grammar (docs/config.md): comma-separated key=value, keys tp, pp, dp, cp, ep, etp, zero and
// pp_layers, e.g. "tp=4,pp=2,dp=8" or "tp=2,pp=4,dp=2,pp_layers=24/23/23/24,zero=1".
// Defaults: tp=pp=dp=cp=ep=etp=1, zero=1, pp_layers = an even split.
//
// Rank order (Megatron-core "tp-cp-dp-pp"): tp fastest, then cp, then dp, then pp:
//     rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
// Expert layers decompose the same tp*cp*dp ranks of a stage as etp x ep x edp, etp fastest:
//     rank_in_stage = etp_rank + etp * (ep_rank + ep * edp_rank),  edp = tp*cp*dp / (etp*ep)
// ZeRO shards dense state over the dp x cp group (index cp_rank + cp * dp_rank) and expert
// state over the edp group (index edp_rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vps/model_spec.h"

namespace dynatrain::vps {

// Bounds checked by parse(), so that rank arithmetic in int never overflows and a typo such as
// dp=1048576 is refused instead of exhausting memory.
inline constexpr std::int64_t kMaxWorldSize = 1 << 17;  // 131072 ranks
inline constexpr std::int64_t kMaxLayers = 1 << 20;     // per pp_layers entry

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, etp = 1;
  int zero = 1;                         // 0..3, see layout.h
  std::vector<std::int64_t> pp_layers;  // layers per stage; empty = even split

  int world_size() const { return tp * cp * dp * pp; }
  int edp() const { return tp * cp * dp / (etp * ep); }
  std::string str() const;  // canonical config string; parse(str()) == *this

  // Parses the grammar above; throws InputError naming the bad key or value.
  static ParallelConfig parse(const std::string& text);
  // Throws InputError when the config cannot shard `model`: names the value and what would be
  // valid (e.g. "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8, 16, 32").
  // Fills pp_layers with the even split when it was empty.
  void validate_for(const ModelSpec& model);

  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

// A rank's coordinates in a config. Ranks >= world_size() hold nothing (active == false).
struct RankCoords {
  bool active = false;
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int etp = 0, ep = 0, edp = 0;
  int dense_shard = 0;  // index in the dp x cp group: cp + cp_size * dp
};

RankCoords rank_coords(const ParallelConfig& config, int rank);
// Inverse of rank_coords for the dense decomposition.
int rank_of(const ParallelConfig& config, int tp, int cp, int dp, int pp);

// First layer of each stage plus the total at the end (size pp+1).
std::vector<std::int64_t> stage_layer_offsets(const ParallelConfig& config);

}  // namespace dynatrain::vps
