// The state kinds of training and their element sizes: the one table every module reads
// (vps layouts, exec, plan, ckpt, train, tools). A kind's index is its StateKind value; bit k
// of a kind mask is StateKind k.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dynatrain::vps {

enum class StateKind : std::uint8_t { kParam, kGrad, kMaster, kExpAvg, kExpAvgSq };
inline constexpr int kNumStateKinds = 5;

// Bytes per element of each state kind, indexed by StateKind.
using ElemBytes = std::array<int, kNumStateKinds>;

struct StateKindInfo {
  StateKind kind;
  const char* name;      // as in --states, plan JSON, checkpoint names and the Python module
  int mixed_bytes;       // element size in mixed-precision training (Megatron: bf16 weights
                         // and grads, fp32 master weights and Adam moments)
  bool optimizer_state;  // in the "optimizer" set: what a switch must keep (all but grad)
};

inline constexpr std::array<StateKindInfo, kNumStateKinds> kStateKinds{{
    {StateKind::kParam, "param", 2, true},
    {StateKind::kGrad, "grad", 2, false},
    {StateKind::kMaster, "master", 4, true},
    {StateKind::kExpAvg, "exp_avg", 4, true},
    {StateKind::kExpAvgSq, "exp_avg_sq", 4, true},
}};

// The default element sizes (LayoutOptions::elem_bytes): mixed precision, from the table.
constexpr ElemBytes mixed_elem_bytes() {
  ElemBytes e{};
  for (const auto& k : kStateKinds) e[static_cast<int>(k.kind)] = k.mixed_bytes;
  return e;
}
// Every kind fp32 (the reference trainer).
constexpr ElemBytes fp32_elem_bytes() {
  ElemBytes e{};
  for (auto& b : e) b = 4;
  return e;
}
// The reference trainer's --bf16: bf16 weights (param), everything else fp32 -- gradients are
// accumulated and reduced in fp32 (Megatron's main_grad), the master copy and both Adam moments
// are the optimizer's fp32 state.
constexpr ElemBytes bf16_param_elem_bytes() {
  ElemBytes e = fp32_elem_bytes();
  e[static_cast<int>(StateKind::kParam)] = 2;
  return e;
}
constexpr std::uint32_t kind_bit(StateKind kind) { return 1u << static_cast<int>(kind); }

const char* state_kind_name(StateKind kind);
// "18 bytes per parameter (param 2, grad 4, master 4, exp_avg 4, exp_avg_sq 4)": the state one
// parameter costs at these element sizes, every kind held once.
std::string bytes_per_parameter(const ElemBytes& elem);
// Parses "param,master,exp_avg,exp_avg_sq", "all" or "optimizer"; throws InputError otherwise.
// Returned sorted by StateKind, without duplicates.
std::vector<StateKind> parse_state_kinds(const std::string& text);

}  // namespace dynatrain::vps
