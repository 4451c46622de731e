// Checkpoints: save in one layout, load into others (other process counts, ZeRO stages, tp, pp,
// ep), every destination byte checked against the content oracle; the pointer protocol; and
// truncated or corrupted files refused with a clear error. (The export: hf_export_test.cc.)
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "ckpt/safetensors.h"
#include "common/error.h"
#include "testing/fill.h"
#include "tests/ckpt/ckpt_fixture.h"

namespace dynatrain::ckpt {
namespace {

namespace fs = std::filesystem;

// Loads every rank of `dst` from the latest checkpoint of `dir` and checks every segment byte.
// Returns the bytes read in place (no staging copy); `read` (if given) gets the file bytes read.
std::uint64_t expect_loads_exactly(const std::string& dir, const vps::Layout& dst, std::uint64_t* read = nullptr,
                                   const LoadOptions& options = {}) {
  const Checkpoint c = open_latest(dir, dst.tensors(), dst.model().name);
  std::uint64_t loaded = 0, expected = 0, in_place = 0;
  for (int r = 0; r < dst.config().world_size(); ++r) {
    OwnedArenas a = allocate(dst, r);
    const LoadStats stats = load_rank(c, dst, r, a.view(), options);
    loaded += stats.bytes_loaded;
    in_place += stats.bytes_in_place;
    if (read) *read += stats.bytes_read;
    for (const auto& b : dst.rank_layout(r).buffers) {
      const int elem = dst.options().elem_bytes[static_cast<int>(b.kind)];
      for (const auto& s : b.segments) expected += static_cast<std::uint64_t>(s.box.numel() * elem);
      const auto bad = testing::verify_buffer(dst.tensors(), b, elem,
                                              a.kind[static_cast<int>(b.kind)].data() + b.arena_offset * elem);
      EXPECT_FALSE(bad) << dst.config().str() << " rank " << r << ": " << bad->str(dst.tensors());
    }
  }
  EXPECT_EQ(loaded, expected);  // every destination byte written exactly once
  return in_place;
}

// Bytes of every segment of every rank of `l` (what a load into it writes).
std::int64_t state_bytes_of(const vps::Layout& l) {
  std::int64_t n = 0;
  for (int r = 0; r < l.config().world_size(); ++r)
    for (const auto& b : l.rank_layout(r).buffers)
      for (const auto& s : b.segments) n += s.box.numel() * l.options().elem_bytes[static_cast<int>(b.kind)];
  return n;
}

TEST(Checkpoint, LoadsIntoOtherLayoutsAndProcessCounts) {
  const std::string dir = fresh_dir("layouts");
  save_filled(dir, 5, layout("tiny-moe", "tp=2,pp=2,dp=2,ep=2,zero=1"));  // 8 files
  for (const char* to : {"tp=2,pp=2,dp=2,ep=2,zero=1" /* the same: entries read in place */, "tp=1", "tp=4,dp=1",
                         "tp=1,pp=4,dp=3,ep=3,zero=1" /* invalid: skipped */, "tp=2,pp=1,dp=3,ep=2,zero=0",
                         "tp=1,pp=2,dp=4,ep=4,zero=1", "dp=6,ep=8,zero=1"}) {
    SCOPED_TRACE(to);
    auto c = vps::ParallelConfig::parse(to);
    try {
      c.validate_for(vps::model_from_name("tiny-moe"));
    } catch (const InputError&) {
      continue;
    }
    const std::uint64_t in_place = expect_loads_exactly(dir, layout("tiny-moe", to));
    if (std::string(to) == "tp=2,pp=2,dp=2,ep=2,zero=1") {
      EXPECT_GT(in_place, 0u);
    }
  }
  // Dense model with GQA replication (tp > kv heads) on both sides.
  const std::string dense = fresh_dir("dense");
  save_filled(dense, 1, layout("tiny-dense", "tp=8,dp=1,zero=1"));
  expect_loads_exactly(dense, layout("tiny-dense", "tp=2,pp=2,dp=3,zero=1"));
  expect_loads_exactly(dense, layout("tiny-dense", "tp=1"));
}

// Chunked checksums let a rank read only the rows of an entry it needs: into a finer tp split,
// column-parallel entries are read once over all ranks, not once per rank. Every byte is still
// right, and a flipped byte in a chunk that is read is refused.
TEST(Checkpoint, PartialReadsReadOnlyTheChunksTheyNeedAndVerifyThem) {
  const auto from = layout("tiny-dense", "tp=1,zero=0");
  const auto to = layout("tiny-dense", "tp=4,dp=1,zero=0");
  const std::string whole = fresh_dir("whole"), partial = fresh_dir("partial");
  save_filled(whole, 1, from, std::uint64_t{1} << 40);  // one chunk an entry: whole reads
  save_filled(partial, 1, from, 256);
  std::uint64_t read_whole = 0, read_partial = 0;
  expect_loads_exactly(whole, to, &read_whole);
  // Pieces contiguous in the entry and at their destination are read straight into place, the
  // chunk margins around them into scratch, and every chunk is checked.
  EXPECT_GT(expect_loads_exactly(partial, to, &read_partial), 0u);
  EXPECT_LT(read_partial * 4, read_whole * 3) << read_partial << " vs " << read_whole;  // 0.73 here
  expect_loads_exactly(partial, layout("tiny-dense", "tp=2,pp=2,dp=1,zero=1"));         // ZeRO shards, pp

  // Flip one byte of rank 0's data at several places (in-place reads, their margins, staged
  // reads): a load that reads that chunk is refused each time.
  const std::string file = partial + "/step-00000001/" + rank_file_name(0);
  const auto size = fs::file_size(file);
  auto flip = [&](std::uint64_t at) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&byte, 1);
  };
  const Checkpoint c = open_latest(partial, to.model());
  for (const std::uint64_t at : {size / 3, size / 2, size / 2 + 300, size - 10}) {
    SCOPED_TRACE(at);
    flip(at);
    int refused = 0;
    for (int r = 0; r < to.config().world_size(); ++r) {
      OwnedArenas a = allocate(to, r);
      try {
        load_rank(c, to, r, a.view());
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("fails its checksum: corrupted"), std::string::npos) << e.what();
        ++refused;
      }
    }
    EXPECT_GE(refused, 1);
    flip(at);  // restored: the next place is the only bad byte
  }
  EXPECT_EQ(expect_loads_exactly(partial, to), expect_loads_exactly(partial, to));
}

// Into a coarser tp split, a row-parallel weight's column block is contiguous in its entry but
// one run per row at its destination: it is read straight into those rows (preadv) when they
// are wide enough, else staged and copied. Every byte lands right both ways, and a flipped byte
// in a piece read into place is refused.
TEST(Checkpoint, PiecesStridedAtTheirDestinationAreReadIntoPlace) {
  const auto from = layout("tiny-dense", "tp=4,dp=1,zero=0");
  const auto to = layout("tiny-dense", "tp=1,zero=0");
  const std::string dir = fresh_dir("scatter");
  save_filled(dir, 1, from, 256);
  LoadOptions scatter, stage;
  scatter.min_scatter_run_bytes = 1;  // tiny-dense's rows are narrow: read them into place anyway
  stage.min_scatter_run_bytes = std::uint64_t{1} << 40;
  const std::uint64_t loaded = static_cast<std::uint64_t>(state_bytes_of(to));
  EXPECT_EQ(expect_loads_exactly(dir, to, nullptr, scatter), loaded);  // every byte in place
  EXPECT_LT(expect_loads_exactly(dir, to, nullptr, stage), loaded);    // the row-parallel ones staged

  const std::string file = dir + "/step-00000001/" + rank_file_name(2);
  const auto size = fs::file_size(file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&byte, 1);
  }
  const Checkpoint c = open_latest(dir, to.model());
  for (const LoadOptions& o : {scatter, stage}) {
    OwnedArenas a = allocate(to, 0);
    try {
      load_rank(c, to, 0, a.view(), o);
      ADD_FAILURE() << "a flipped byte was not refused";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("fails its checksum: corrupted"), std::string::npos) << e.what();
    }
  }
}

// checksum() takes XXH3's AVX2 build where the CPU has it (ckpt/checksum_avx2.h): its values are
// the library's XXH3-64 at every length (XXH3 has paths for 0, 1-3, 4-8, 9-16, 17-128, 129-240
// bytes and longer), whole and in parts.
TEST(Checkpoint, ChecksumIsTheLibrarysXxh3AtEveryLength) {
  std::vector<std::byte> bytes((1 << 20) + 7);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  for (std::size_t n : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 65536, 1 << 20, (1 << 20) + 7}) {
    EXPECT_EQ(checksum(bytes.data() + 1, n - (n > 0)), XXH3_64bits(bytes.data() + 1, n - (n > 0))) << n;
    EXPECT_EQ(checksum_of_parts({{bytes.data(), n / 3}, {bytes.data() + n / 3, n - n / 3}}),
              XXH3_64bits(bytes.data(), n))
        << n;
  }
}

TEST(Checkpoint, ChecksumOfPartsEqualsChecksumOfTheWhole) {
  std::vector<std::byte> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 3);
  const std::uint64_t whole = checksum(bytes.data(), bytes.size());
  EXPECT_EQ(checksum_of_parts({{bytes.data(), 1}, {bytes.data() + 1, 600}, {bytes.data() + 601, 399}}), whole);
  EXPECT_EQ(checksum_of_parts({{bytes.data(), 0}, {bytes.data(), 1000}, {bytes.data(), 0}}), whole);
  EXPECT_NE(checksum_of_parts({{bytes.data(), 600}, {bytes.data() + 601, 399}}), whole);
}

// Splits on dim 1 (row-parallel weights: attention output, fc2) are read in part too: with
// chunks as small as a column block and no merging, a load into tp=4 from tp=1 reads exactly the
// bytes it loads; with the default rule (gaps under 1 MiB are read) it reads those rows whole,
// in fewer calls. Every destination byte is checked both ways.
TEST(Checkpoint, PartialReadsOfDimOneSplitsReadColumnBlocksOrWholeRowsByTheGapRule) {
  const auto from = layout("tiny-dense", "tp=1,zero=0");
  const auto to = layout("tiny-dense", "tp=4,dp=1,zero=0");
  const std::string dir = fresh_dir("dim1");
  save_filled(dir, 1, from, 32);  // a tp=4 column block of a bf16 row is 32 bytes, of fp32 64
  std::uint64_t expected = 0;
  for (int r = 0; r < to.config().world_size(); ++r)
    for (const auto& b : to.rank_layout(r).buffers)
      for (const auto& s : b.segments)
        expected += static_cast<std::uint64_t>(s.box.numel()) * to.options().elem_bytes[static_cast<int>(b.kind)];
  LoadOptions blocks;
  blocks.merge_gap_bytes = 0;
  std::uint64_t read_blocks = 0, read_rows = 0;
  expect_loads_exactly(dir, to, &read_blocks, blocks);
  expect_loads_exactly(dir, to, &read_rows);
  EXPECT_EQ(read_blocks, expected);  // not one byte more than loaded
  // Whole rows: each of the 4 ranks reads every row-parallel entry whole.
  EXPECT_GT(read_rows, expected + expected / 10) << read_rows << " vs " << expected;

  // The call counts follow the rule: one read per row of each needed column block without
  // merging, one per entry with it.
  const Checkpoint c = open_latest(dir, to.model());
  OwnedArenas a = allocate(to, 1), b = allocate(to, 1);
  const LoadStats per_block = load_rank(c, to, 1, a.view(), blocks), merged = load_rank(c, to, 1, b.view());
  EXPECT_GT(per_block.read_calls, merged.read_calls * 10) << per_block.read_calls << " vs " << merged.read_calls;
  EXPECT_EQ(a.kind, b.kind);
}

TEST(Checkpoint, RandomLayoutPairsLoadExactly) {
  const char* configs[] = {"tp=1",
                           "tp=2",
                           "tp=4,dp=1",
                           "tp=2,pp=2",
                           "pp=2,dp=3,zero=0",
                           "tp=2,dp=2,zero=1",
                           "tp=1,pp=4,dp=1",
                           "dp=4,ep=4",
                           "tp=2,dp=2,ep=2,zero=1",
                           "tp=2,pp=2,ep=2,etp=2",
                           "dp=3,ep=1,zero=1",
                           "tp=4,pp=2,ep=4,etp=1,zero=1"};
  std::mt19937 rng(7);
  int trials = 0;
  for (int attempt = 0; attempt < 400 && trials < 24; ++attempt) {
    const int which = static_cast<int>(rng() % 3);
    const vps::ModelSpec m = which == 0   ? vps::model_from_name("tiny-moe")
                             : which == 1 ? vps::model_from_name("tiny-dense")
                                          : tiny_deepseek();
    auto a = vps::ParallelConfig::parse(configs[rng() % std::size(configs)]);
    auto b = vps::ParallelConfig::parse(configs[rng() % std::size(configs)]);
    try {
      a.validate_for(m);
      b.validate_for(m);
    } catch (const InputError&) {
      continue;
    }
    SCOPED_TRACE(m.name + ": " + a.str() + " -> " + b.str());
    const std::string dir = fresh_dir("random");
    save_filled(dir, 1, vps::Layout(m, a, options()));
    expect_loads_exactly(dir, vps::Layout(m, b, options()));
    ++trials;
  }
  EXPECT_GE(trials, 20);
}

TEST(Checkpoint, PointerSwitchKeepsTheLastCompleteCheckpoint) {
  const std::string dir = fresh_dir("pointer");
  const auto a = layout("tiny-dense", "tp=2,dp=2");
  save_filled(dir, 1, a);
  save_filled(dir, 2, a);
  EXPECT_EQ(open_latest(dir, a.model()).step, 2);
  EXPECT_TRUE(fs::exists(dir + "/step-00000001"));  // the previous one is kept
  // A save that dies before its commit leaves the latest untouched.
  fs::create_directories(dir + "/step-00000003");
  OwnedArenas arenas = filled(a, 0);
  write_rank_file(dir + "/step-00000003", a, 0, a.options().kinds, arenas.view());
  EXPECT_EQ(open_latest(dir, a.model()).step, 2);
  expect_loads_exactly(dir, layout("tiny-dense", "tp=1"));
  save_filled(dir, 4, a);
  EXPECT_EQ(open_latest(dir, a.model()).step, 4);
  EXPECT_TRUE(fs::exists(dir + "/step-00000002"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000001"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000003"));
}

std::string load_error(const std::string& dir, const std::string& model = "tiny-dense") {
  try {
    const auto dst = layout(model, "tp=1");
    const Checkpoint c = open_latest(dir, dst.model());
    OwnedArenas a = allocate(dst, 0);
    load_rank(c, dst, 0, a.view());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void patch_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(Checkpoint, RefusesTruncatedAndCorruptedFiles) {
  const auto a = layout("tiny-dense", "tp=2");
  const std::string dir = fresh_dir("corrupt");
  save_filled(dir, 7, a);
  const std::string file = dir + "/step-00000007/rank-00001.safetensors";
  EXPECT_EQ(load_error(dir), "");
  EXPECT_NE(load_error(dir, "tiny-moe").find("differs"), std::string::npos);
  // The same layout reads entries straight into place: a bad byte is still caught.
  auto same_layout_error = [&] {
    try {
      const Checkpoint c = open_latest(dir, a.model());
      OwnedArenas arenas = allocate(a, 1);
      load_rank(c, a, 1, arenas.view());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(same_layout_error(), "");

  const auto size = fs::file_size(file);
  patch_byte(file, size - 3);  // a data byte
  EXPECT_NE(load_error(dir).find("fails its checksum: corrupted"), std::string::npos) << load_error(dir);
  EXPECT_NE(same_layout_error().find("fails its checksum: corrupted"), std::string::npos) << same_layout_error();
  patch_byte(file, size - 3);  // restored
  EXPECT_EQ(load_error(dir), "");
  patch_byte(file, 20);  // a header byte
  EXPECT_NE(load_error(dir).find("corrupted"), std::string::npos) << load_error(dir);
  patch_byte(file, 20);
  fs::resize_file(file, size - 100);
  EXPECT_NE(load_error(dir).find("truncated"), std::string::npos) << load_error(dir);
  fs::resize_file(file, 4);
  EXPECT_NE(load_error(dir).find("truncated"), std::string::npos) << load_error(dir);
  fs::remove(file);
  EXPECT_NE(load_error(dir).find("rank-00001.safetensors"), std::string::npos) << load_error(dir);
  std::ofstream(dir + "/step-00000007/index.json") << "{\"format\": ";
  EXPECT_NE(load_error(dir).find("index"), std::string::npos) << load_error(dir);
  std::ofstream(dir + "/latest") << "../../etc\n";
  EXPECT_NE(load_error(dir).find("corrupted"), std::string::npos) << load_error(dir);
  fs::remove(dir + "/latest");
  EXPECT_NE(load_error(dir).find("no complete checkpoint"), std::string::npos) << load_error(dir);
}

// A layout of the caller's own tensors (the Python module's user models) loads through the
// same planner: the saved layout is rebuilt from the same tensor list (Layout::relaid).
TEST(Checkpoint, LoadsLayoutsOfTheCallersOwnTensors) {
  vps::ModelSpec spec;
  spec.name = "own";
  spec.layers = 2;
  spec.vocab_divisible_by = 8;
  using vps::Stage;
  using vps::TpSplit;
  std::vector<vps::TensorSpec> tensors{
      {.name = "embed", .shape = {100, 16}, .split = TpSplit::kVocab, .stage = Stage::kPre}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "l" + std::to_string(l);
    tensors.push_back({.name = p + ".up", .shape = {32, 16}, .split = TpSplit::kDim, .layer = l});
    tensors.push_back({.name = p + ".down", .shape = {16, 32}, .split = TpSplit::kDim, .split_dim = 1, .layer = l});
  }
  tensors.push_back({.name = "head", .shape = {100, 16}, .stage = Stage::kPost});
  auto own = [&](const char* config) {
    return vps::Layout(tensors, spec, vps::ParallelConfig::parse(config), options());
  };
  const std::string dir = fresh_dir("own");
  save_filled(dir, 2, own("tp=2,pp=2,dp=2,zero=1"));
  for (const char* to : {"tp=1", "dp=3,zero=1", "tp=4,zero=0", "pp=2,dp=2,zero=3"}) {
    SCOPED_TRACE(to);
    expect_loads_exactly(dir, own(to));
  }
  tensors[3].shape = {16, 64};
  try {
    open_latest(dir, tensors, "own");
    ADD_FAILURE() << "another tensor list was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("differs from 'own' at tensor 3"), std::string::npos) << e.what();
  }
}

std::string error_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, SavingIntoAnotherModelsDirectoryIsRefused) {
  const std::string dir = fresh_dir("target");
  const auto a = layout("tiny-dense", "tp=2");
  EXPECT_EQ(error_of([&] { check_save_target(dir, 1, a); }), "");  // no directory yet
  save_filled(dir, 1, a);
  EXPECT_EQ(error_of([&] { check_save_target(dir, 2, layout("tiny-dense", "dp=3")); }), "");
  EXPECT_NE(error_of([&] { check_save_target(dir, 1, a); }).find("already holds step 1 as its latest"),
            std::string::npos);
  const std::string other = error_of([&] { check_save_target(dir, 2, layout("tiny-moe", "tp=1")); });
  EXPECT_NE(other.find("was saved for model 'tiny-dense', which differs from 'tiny-moe'"), std::string::npos) << other;
  EXPECT_NE(other.find("save into another directory"), std::string::npos) << other;
  std::ofstream(dir + "/step-00000001/index.json") << "{";
  EXPECT_NE(error_of([&] { check_save_target(dir, 2, a); }).find("is corrupted"), std::string::npos);
}

TEST(Checkpoint, AttachmentsAreCheckedLikeRankFiles) {
  const std::string dir = fresh_dir("attachments");
  const auto a = layout("tiny-dense", "tp=2");
  const std::string content(100000, 'x');
  save_filled(dir, 4, a, kChecksumChunkBytes, {{"state.pkl", content}, {"empty", ""}});
  const Checkpoint c = open_latest(dir, a.model());
  ASSERT_EQ(c.attachments.size(), 2u);
  EXPECT_EQ(read_attachment(c.step_dir, c.attachments, "state.pkl"), content);
  EXPECT_EQ(read_attachment(c.step_dir, c.attachments, "empty"), "");
  auto read_error = [&](const std::string& name) {
    return error_of([&] { read_attachment(c.step_dir, c.attachments, name); });
  };
  EXPECT_NE(read_error("other").find("has no attachment 'other'"), std::string::npos);
  const std::string path = c.step_dir + "/state.pkl";
  patch_byte(path, 500);
  EXPECT_NE(read_error("state.pkl").find("'" + path + "' fails its checksum: corrupted"), std::string::npos);
  patch_byte(path, 500);
  EXPECT_EQ(read_error("state.pkl"), "");
  fs::resize_file(path, 99);
  EXPECT_NE(read_error("state.pkl").find("truncated"), std::string::npos);
  fs::remove(path);
  EXPECT_NE(read_error("state.pkl").find("is missing"), std::string::npos);
  for (const char* bad : {"index.json", "a/b", "rank-00000.safetensors", "", "x.tmp"})
    EXPECT_NE(error_of([&] {
                save_filled(dir, 5, a, kChecksumChunkBytes, {{bad, "x"}});
              }).find("not a plain file name"),
              std::string::npos)
        << bad;
  EXPECT_EQ(open_latest(dir, a.model()).step, 4);  // none of those was published
}

TEST(Checkpoint, RankFilesAreSafetensorsRecordingTheBoxes) {
  const auto a = layout("tiny-dense", "tp=2,zero=1,dp=2");
  const std::string dir = fresh_dir("format");
  save_filled(dir, 3, a);
  File f = File::open_read(dir + "/step-00000003/rank-00001.safetensors");
  const StHeader h = read_header(f.fd(), f.size(), f.path());
  std::size_t segments = 0;
  for (const auto& b : a.rank_layout(1).buffers) segments += b.segments.size();
  EXPECT_EQ(h.entries.size(), segments);
  EXPECT_EQ(h.metadata.at("config"), a.config().str());
  bool found = false;  // tp rank 1 holds the second half of fc2's columns: box [0,64)x[64,128)
  for (const auto& e : h.entries) found = found || e.name == "param/layers.0.mlp.fc2.weight/0,64-64,128";
  EXPECT_TRUE(found);
}

// index.json carries its own checksum (ckpt/index.h): any edited value is refused naming the
// index; an index written before checksums (no index_version, no checksum) still opens.
TEST(Checkpoint, AnEditedIndexIsRefused) {
  const std::string dir = fresh_dir("index-sum");
  const auto a = layout("tiny-dense", "tp=2");
  save_filled(dir, 8, a);
  const std::string path = dir + "/step-00000008/index.json";
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const nlohmann::json saved = nlohmann::json::parse(text);
  EXPECT_EQ(saved.at("index_version"), 2);
  EXPECT_EQ(open_latest(dir, a.model()).step, 8);
  auto write = [&](const nlohmann::json& j) { std::ofstream(path) << j.dump(1); };
  auto refusal = [&] { return error_of([&] { open_latest(dir, a.model()); }); };
  nlohmann::json j = saved;
  j["step"] = 9;  // one flipped bit: 8 -> 9
  write(j);
  EXPECT_EQ(refusal(), "checkpoint index '" + path + "' fails its checksum: edited or damaged");
  j = saved;
  j["trainer"]["data_position"] = 12345;
  write(j);
  EXPECT_EQ(refusal(), "checkpoint index '" + path + "' fails its checksum: edited or damaged");
  j = saved;
  j.erase("checksum");
  write(j);
  EXPECT_NE(refusal().find("has no checksum (its index_version needs one)"), std::string::npos) << refusal();
  j.erase("index_version");  // as written before checksums: read unchecked
  write(j);
  EXPECT_EQ(refusal(), "");
  write(saved);  // whitespace is not part of the checksum: the same values read back
  EXPECT_EQ(refusal(), "");
}

// verify() reads every byte (a load into one layout may read only some entries of a file).
TEST(Checkpoint, VerifyReadsEveryByteAndNamesTheFile) {
  const std::string dir = fresh_dir("verify");
  const auto a = layout("tiny-dense", "tp=2");
  save_filled(dir, 4, a);
  save_filled(dir, 8, a);
  EXPECT_EQ(step_dirs(dir), (std::vector<std::string>{"step-00000004", "step-00000008"}));
  EXPECT_EQ(error_of([&] { verify(open_latest(dir, a.model())); }), "");
  const std::string file = dir + "/step-00000008/rank-00001.safetensors";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 3));
  f.put('\x7f');
  f.close();
  const std::string why = error_of([&] { verify(open_latest(dir, a.model())); });
  EXPECT_NE(why.find("checkpoint file '" + file + "': entry '"), std::string::npos) << why;
  EXPECT_NE(why.find("fails its checksum: corrupted"), std::string::npos) << why;
  point_latest(dir, "step-00000004");
  EXPECT_EQ(latest_step_name(dir), "step-00000004");
  EXPECT_EQ(error_of([&] { verify(open_latest(dir, a.model())); }), "");
}

// An entry of at least 4 MiB is checksummed and written a group of chunks at a time (ckpt/save.cc):
// with chunks that do not divide the group, and a last group and chunk shorter than the others,
// every chunk's checksum is still that of its own bytes, and a flipped byte anywhere is found.
TEST(Checkpoint, LargeEntriesWrittenInGroupsOfChunksVerifyAndLoadExactly) {
  vps::ModelSpec spec;
  spec.name = "large";
  spec.layers = 1;
  std::vector<vps::TensorSpec> tensors{{.name = "big", .shape = {1201, 1024}, .layer = 0},
                                       {.name = "small", .shape = {8, 8}, .layer = 0}};
  vps::LayoutOptions big_buckets = options();
  big_buckets.bucket_elems = 2 << 20;  // the big tensor one segment of its bucket
  const vps::Layout one(tensors, spec, vps::ParallelConfig::parse("tp=1"), big_buckets);
  const std::string dir = fresh_dir("large");
  save_filled(dir, 2, one, 100000);  // groups of 10 chunks (1,000,000 bytes); the entry: 4,919,296
  EXPECT_EQ(error_of([&] { verify(open_latest(dir, tensors, "large")); }), "");
  expect_loads_exactly(dir, vps::Layout(tensors, spec, vps::ParallelConfig::parse("dp=2,zero=1"), big_buckets));
  const std::string file = dir + "/step-00000002/rank-00000.safetensors";
  for (const std::uint64_t back : {std::uint64_t{3}, std::uint64_t{2500000}}) {  // the last chunk; one mid-entry
    save_filled(dir, 2, one, 100000);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(file) - back));
    const char was = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - back));
    f.put(static_cast<char>(was ^ 0x10));
    f.close();
    const std::string why = error_of([&] { verify(open_latest(dir, tensors, "large")); });
    EXPECT_NE(why.find("fails its checksum: corrupted"), std::string::npos) << back << ": " << why;
  }
}

}  // namespace
}  // namespace dynatrain::ckpt
