#include "testing/fill.h"

#include <cstring>
#include <sstream>

#include "common/error.h"

namespace dynatrain::testing {
namespace {

// Calls run(global_index_of_first, local_offset_of_first, length) for every innermost-dim run
// of segment `seg` (stored dense at seg.offset elements).
template <typename F>
void for_each_run(const vps::TensorSpec& t, const vps::Segment& seg, F&& run) {
  const vps::Box& b = seg.box;
  const int nd = b.ndim;
  if (b.empty()) return;
  vps::Coord gstride{};
  std::int64_t acc = 1;
  for (int d = nd - 1; d >= 0; --d) {
    gstride[d] = acc;
    acc *= t.shape[d];
  }
  const std::int64_t len = b.extent(nd - 1);
  const std::int64_t rows = b.numel() / len;
  vps::Coord c = b.lo;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t g = 0;
    for (int d = 0; d < nd; ++d) g += c[d] * gstride[d];
    run(g, seg.offset + r * len, len);
    for (int d = nd - 2; d >= 0; --d) {
      if (++c[d] < b.hi[d]) break;
      c[d] = b.lo[d];
    }
  }
}

template <typename T>
void fill_typed(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf, std::byte* data) {
  T* out = reinterpret_cast<T*>(data);
  for (const auto& seg : buf.segments) {
    for_each_run(tensors.at(seg.tensor), seg, [&](std::int64_t g, std::int64_t off, std::int64_t n) {
      T* p = out + off;
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(fill_word(seg.tensor, buf.kind, g + i));
    });
  }
}

template <typename T>
std::optional<Mismatch> verify_typed(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf,
                                     const std::byte* data) {
  const T* in = reinterpret_cast<const T*>(data);
  std::optional<Mismatch> bad;
  for (const auto& seg : buf.segments) {
    for_each_run(tensors.at(seg.tensor), seg, [&](std::int64_t g, std::int64_t off, std::int64_t n) {
      if (bad) return;
      const T* p = in + off;
      bool ok = true;
      for (std::int64_t i = 0; i < n; ++i) ok &= p[i] == static_cast<T>(fill_word(seg.tensor, buf.kind, g + i));
      if (ok) return;
      for (std::int64_t i = 0; i < n; ++i) {
        const T want = static_cast<T>(fill_word(seg.tensor, buf.kind, g + i));
        if (p[i] != want) {
          bad = Mismatch{seg.tensor, buf.kind, g + i, want, p[i]};
          return;
        }
      }
    });
    if (bad) break;
  }
  return bad;
}

}  // namespace

void fill_buffer(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf, int elem, std::byte* data) {
  if (elem == 2) return fill_typed<std::uint16_t>(tensors, buf, data);
  DT_CHECK_EQ(elem, 4);
  fill_typed<std::uint32_t>(tensors, buf, data);
}

std::optional<Mismatch> verify_buffer(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf,
                                      int elem, const std::byte* data) {
  if (elem == 2) return verify_typed<std::uint16_t>(tensors, buf, data);
  DT_CHECK_EQ(elem, 4);
  return verify_typed<std::uint32_t>(tensors, buf, data);
}

std::string Mismatch::str(const std::vector<vps::TensorSpec>& tensors) const {
  std::ostringstream os;
  os << (tensor < tensors.size() ? tensors[tensor].name : "tensor " + std::to_string(tensor)) << " "
     << vps::state_kind_name(kind) << " element " << global_index << ": expected 0x" << std::hex << expected
     << ", got 0x" << actual;
  return os.str();
}

}  // namespace dynatrain::testing
