// Device memory behind the seam (exec/cuda/): the caching pool, copies, and the strided copy
// kernels, every element checked against a pure function of its global index. Needs a CUDA
// device: every test skips (GTEST_SKIP) where there is none, so the suite passes everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "exec/box_copy.h"
#include "exec/cuda/cuda_memory.h"
#include "tests/exec/box_cases.h"

namespace dynatrain::exec::cuda {
namespace {

using test::BoxCase;
using test::expect_copied;
using test::filled;

class CudaMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    mem_ = std::make_unique<CudaMemory>(0);
  }
  // A device copy of `host`.
  std::byte* upload(const std::vector<std::byte>& host) {
    std::byte* d = mem_->allocate(host.size());
    mem_->copy(d, host.data(), host.size());
    return d;
  }
  std::vector<std::byte> download(const std::byte* d, std::size_t bytes) {
    std::vector<std::byte> host(bytes);
    mem_->copy(host.data(), d, bytes);
    mem_->synchronize();
    return host;
  }
  std::unique_ptr<CudaMemory> mem_;
};

TEST_F(CudaMemoryTest, PoolCopiesZeroesAndAccounts) {
  std::vector<std::byte> host(3 << 20);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = test::content(static_cast<std::int64_t>(i), 0);
  std::byte* d = upload(host);
  EXPECT_EQ(mem_->live_bytes(), host.size());
  mem_->zero(d + 100, 1000);
  std::memset(host.data() + 100, 0, 1000);
  EXPECT_EQ(download(d, host.size()), host);
  EXPECT_THROW(mem_->release(d, host.size() + 1), InvariantError);
  mem_->release(d, host.size());
  EXPECT_EQ(mem_->live_bytes(), 0u);
  std::byte* again = mem_->allocate(1 << 20);  // from the pool's cache
  mem_->release(again, 1 << 20);
  EXPECT_EQ(mem_->peak_live(), host.size());
  EXPECT_THROW(mem_->allocate(0), InvariantError);
  mem_->trim();
}

// Random boxes (1-4 dims, odd element sizes, misaligned storages): copy_box through the device
// memory's MemoryOps launches the kernel; the result must equal the element map exactly.
TEST_F(CudaMemoryTest, StridedKernelCopiesEveryElementOfRandomBoxes) {
  std::mt19937 rng(3);
  const std::size_t elems[] = {1, 2, 4, 8, 12, 16};
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t elem = elems[trial % 6];
    const std::size_t pad = trial % 5 == 0 ? 1 : 0;
    const BoxCase bc = test::random_box_case(rng, 1 + trial % 4, trial % 2 ? 9 : 300);
    if (bc.q.empty() || bc.src.numel() > (1 << 20) || bc.dst.numel() > (1 << 20)) continue;
    const auto src = filled(bc.src, bc.global, elem, pad);
    const std::vector<std::byte> blank(pad + static_cast<std::size_t>(bc.dst.numel()) * elem, std::byte{0xEE});
    std::byte* ds = upload(src);
    std::byte* dd = upload(blank);
    copy_box(bc.q, ds + pad, bc.src, dd + pad, bc.dst, elem, *mem_);
    expect_copied(download(dd, blank.size()), pad, bc.dst, bc.q, bc.global, elem, "device copy_box");
    mem_->release(ds, src.size());
    mem_->release(dd, blank.size());
  }
}

// Pack a flat range of a strided box into a contiguous device buffer and unpack it into another
// storage: what the engine does for a chunk it sends, on the device.
TEST_F(CudaMemoryTest, PackAndUnpackRangesOnTheDevice) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const BoxCase bc = test::random_box_case(rng, 1 + trial % 4, 40);
    if (bc.q.empty() || bc.src.numel() > (1 << 20)) continue;
    const std::size_t elem = 4;
    const std::int64_t n = bc.q.numel();
    const std::int64_t a = 0, z = n;  // the whole box: the union of its flat sub-ranges
    const auto src = filled(bc.src, bc.global, elem, 0);
    const std::vector<std::byte> blank(static_cast<std::size_t>(bc.dst.numel()) * elem, std::byte{0xEE});
    std::byte* ds = upload(src);
    std::byte* dd = upload(blank);
    std::byte* packed = mem_->allocate(static_cast<std::size_t>(n) * elem);
    const std::int64_t cut = n / 3;  // two ranges, the first ending inside a row
    std::size_t at = pack_range(bc.q, a, cut, ds, bc.src, packed, elem, *mem_);
    at += pack_range(bc.q, cut, z, ds, bc.src, packed + at, elem, *mem_);
    ASSERT_EQ(at, static_cast<std::size_t>(n) * elem);
    std::size_t back = unpack_range(bc.q, a, cut, packed, dd, bc.dst, elem, *mem_);
    back += unpack_range(bc.q, cut, z, packed + back, dd, bc.dst, elem, *mem_);
    ASSERT_EQ(back, at);
    expect_copied(download(dd, blank.size()), 0, bc.dst, bc.q, bc.global, elem, "device pack + unpack");
    mem_->release(packed, static_cast<std::size_t>(n) * elem);
    mem_->release(ds, src.size());
    mem_->release(dd, blank.size());
  }
}

// A switch on one device: a [rows, cols] matrix held as two column halves (tp=2) becomes two row
// halves; each row half is one kept quarter and one quarter from the other half, both strided
// copies (rows of 8 KiB: the row-wise kernel). Every destination element checked.
TEST_F(CudaMemoryTest, ColumnHalvesToRowHalves) {
  const std::int64_t rows = 512, cols = 4096;
  const vps::Box global = test::box({0, 0}, {rows, cols});
  const vps::Box col_half[2] = {test::box({0, 0}, {rows, cols / 2}), test::box({0, cols / 2}, {rows, cols})};
  const vps::Box row_half[2] = {test::box({0, 0}, {rows / 2, cols}), test::box({rows / 2, 0}, {rows, cols})};
  std::byte* src[2];
  std::byte* dst[2];
  std::vector<std::byte> src_host[2];
  const std::size_t half_bytes = static_cast<std::size_t>(rows * cols / 2) * 4;
  for (int r = 0; r < 2; ++r) {
    src_host[r] = filled(col_half[r], global, 4, 0);
    src[r] = upload(src_host[r]);
    dst[r] = mem_->allocate(half_bytes);
  }
  for (int r = 0; r < 2; ++r)
    for (int from = 0; from < 2; ++from)
      copy_box(vps::intersect(col_half[from], row_half[r]), src[from], col_half[from], dst[r], row_half[r], 4, *mem_);
  for (int r = 0; r < 2; ++r) {
    expect_copied(download(dst[r], half_bytes), 0, row_half[r], row_half[r], global, 4, "switch");
    mem_->release(src[r], half_bytes);
    mem_->release(dst[r], half_bytes);
  }
}

TEST(CudaDevice, RejectsADeviceThatDoesNotExist) {
  EXPECT_THROW(CudaMemory{device_count()}, InputError);
  EXPECT_THROW(CudaMemory{-1}, InputError);
}

}  // namespace
}  // namespace dynatrain::exec::cuda
