// The state transition engine: executes one rank's part of a plan on rank-local buffers.
//
//   pack      the pieces for one peer are copied (strided box copy, exec/box_copy.h) into one
//             contiguous staging buffer, chunk by chunk; a chunk goes *direct* instead (sent
//             straight from its source runs, received straight into its destination runs, each
//             side deciding alone) where the transport moves scattered runs for the pair
//             (comm::Transport::runs_direct) and the side's runs average >= 1 KiB, or, without
//             that, when it is one contiguous run (exec/README.md)
//   exchange  in the XOR pairwise order: step s = 1 .. 2^ceil(log2 W) - 1, peer = rank XOR s
//             (peers >= W skipped); pairs are symmetric, each round posts one receive and one
//             send per pair and waits for both, so no round can deadlock; across nodes one
//             pipeline per link class (intra-node, inter-node: LinkOverlap), merged by a key
//             both ranks of a pair share, so every rank still waits in one global order
//   unpack    received bytes are copied into destination buffers; keeps are local copies
//
// Memory: transfers are cut into chunks so that staging never exceeds `mem_budget` / 2; a source
// buffer is given back to the allocator as soon as everything it must send or keep has been
// packed or copied (a large one granule by granule, when the allocator supports page-wise
// memory); a destination buffer is asked for when it is first written (a large one granule by
// granule). The work is processed in "waves" (sets of keys (expert group, state kind, tensor,
// dim-0 slab), agreed by all ranks) so that buffers are consumed and built in the same order on
// every rank. exec/README.md states exactly what is guaranteed about the peak.
//
// run_transition is collective: every rank of `transport` must call it (ranks with empty
// plans too), because the wave boundaries and the processing order are agreed collectively.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "exec/memory_ops.h"
#include "exec/schedule_trace.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::exec {

// The unit of page-wise memory (StateAllocator::commit / decommit).
inline constexpr std::size_t kPageBytes = 4096;

// Under memory budget `mem_budget` the engine handles buffers page by page from this size on
// (where the allocator supports it: StateAllocator::pagewise_min_bytes), whole below it.
inline constexpr std::size_t pagewise_threshold(std::size_t mem_budget) { return mem_budget / 16 + 1; }

// Where state buffers come from and go back to. Every call is accounted by the implementation.
// It is also how the engine copies and zeroes them (MemoryOps: host memcpy / memset by default).
class StateAllocator : public MemoryOps {
 public:
  virtual ~StateAllocator() = default;
  virtual std::byte* allocate(std::size_t bytes) = 0;
  virtual void release(std::byte* data, std::size_t bytes) = 0;
  // Memory for destination buffer `buffer` (`bytes` long), asked for on its first write; the
  // engine never releases it. The default takes it from allocate(). An allocator whose owner
  // keeps each state kind in one arena (the trainer) returns the buffer's place in the new
  // arena (LocalBuffer::arena_offset), so nothing is copied after the switch.
  virtual std::byte* allocate_destination(const vps::LocalBuffer& buffer, std::size_t bytes) {
    (void)buffer;
    return allocate(bytes);
  }

  // ---- page-wise memory (optional) ----
  // An allocator that can give back parts of a block supports these for every block of at
  // least pagewise_min_bytes() (from allocate or reserve). The engine then releases the drained
  // parts of large source buffers page by page and builds large destination buffers in pieces,
  // so that a buffer larger than the budget never needs its source and destination wholly alive
  // (exec/README.md). Offsets are multiples of kPageBytes; a range may end at the block's end.
  // The default (no support) keeps whole-buffer behaviour: the engine never calls these.
  virtual std::size_t pagewise_min_bytes() const { return SIZE_MAX; }
  // True when a source buffer may become a destination buffer as it is (same size), released
  // later with release(): the engine then hands over a buffer whose every byte stays in place
  // (a zero-copy keep) instead of copying it. The default (arenas: destinations must sit in the
  // new arena) says no.
  virtual bool can_adopt() const { return false; }
  // True when move_pages() works on blocks of at least pagewise_min_bytes(): a kept run that
  // sits at a new offset (page-congruent) is then moved by remapping its whole pages instead of
  // copying them (a remapped keep, exec/README.md). The default says no.
  virtual bool can_move_pages() const { return false; }
  // True when the allocator's page-wise blocks sit in 2 MiB pages (PoolAllocator's HugePages):
  // remapping a 4 KiB run would split them, so KeepPath::kAuto moves whole 2 MiB pages only.
  virtual bool huge_pages() const { return false; }
  // Moves the live pages [from_offset, from_offset + bytes) of block `from` to
  // [to_offset, to_offset + bytes) of block `to` (offsets and bytes multiples of kPageBytes;
  // ranges that do not overlap). The target pages must not be live (reserved, never committed);
  // afterwards they are live and hold the source's bytes, and the source pages are gone as by
  // decommit(). No byte is copied. Only called when can_move_pages().
  virtual void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                          std::size_t bytes) {
    (void)from, (void)from_offset, (void)to, (void)to_offset, (void)bytes;
  }
  // Address space for `bytes`; no page is live until commit(). Released with release().
  virtual std::byte* reserve(std::size_t bytes) { return allocate(bytes); }
  // Makes [offset, offset + bytes) of `base` live (contents unspecified).
  virtual void commit(std::byte* base, std::size_t offset, std::size_t bytes) { (void)base, (void)offset, (void)bytes; }
  // Gives back [offset, offset + bytes) of `base`; its contents are lost and it must not be
  // accessed again; the rest of the block stays valid.
  virtual void decommit(std::byte* base, std::size_t offset, std::size_t bytes) {
    (void)base, (void)offset, (void)bytes;
  }
};

class SharedWaveAgreement;  // exec/wave_agreement.h

// Processing order of the waves. kAuto: every rank predicts its peak for both orders (a dry
// run of its own schedule, no communication) and all ranks take the order whose worst rank
// overshoots max(source, destination) the least.
// kBalanced interleaves keys from both ends (exec/wave_agreement.cc: key_sequence) for switches where some
// ranks build their destination at low keys and others at high keys.
enum class WaveOrder : std::uint8_t { kAuto, kAscending, kDescending, kBalanced };

// Link classes (exec/README.md, "Two link classes"): a pair of ranks on one node talks over the
// node's links, a pair on two nodes over the network. kOn runs one pipeline per class, so a
// rank keeps an intra-node and an inter-node round in flight at once; kOff runs one pipeline
// over all rounds (one round at a time with any peer, the next posted ahead). kAuto is kOn when
// the transport's ranks span more than one node (comm::Transport::node_of), else kOff. kOn takes
// the nodes from the transport, or from TransitionOptions::topology when the transport sees a
// single node (to rehearse the schedule on one machine, run-transition --gpus-per-node).
enum class LinkOverlap : std::uint8_t { kAuto, kOff, kOn };
// "auto", "off", "on" (the CLI's --overlap-links); InputError naming the valid values otherwise.
LinkOverlap parse_link_overlap(const std::string& text);

// How kept runs that sit at a new offset are kept (exec/README.md, "Measured path choice"):
// kRemap moves their whole pages by mremap (StateAllocator::move_pages) whatever the run's
// length; kCopy copies them; kAuto remaps only runs at least as long as this machine's measured
// break-even (MachineRates::min_remap_bytes: a remap measured faster than a copy), copies the
// rest; when the allocator's blocks are in huge pages it moves whole 2 MiB pages only (where a
// run's source and destination offsets agree modulo 2 MiB, and one remap call is measured
// cheaper than copying 2 MiB: a remap of 4 KiB runs would split them) and copies the rest.
// Only allocators that can_move_pages() remap at all.
enum class KeepPath : std::uint8_t { kAuto, kRemap, kCopy };
// "auto", "remap", "copy" (the CLI's --keep-path); InputError naming the valid values otherwise.
KeepPath parse_keep_path(const std::string& text);

struct TransitionOptions {
  std::size_t mem_budget = 256ull << 20;  // bytes: staging + wave working set (exec/README.md)
  // Nodes of the ranks for the broadcast cost model (TransitionStats::broadcast_preferred_bytes)
  // and for LinkOverlap::kOn on a transport that sees one node.
  plan::Topology topology{};
  WaveOrder order = WaveOrder::kAuto;
  // State kinds that need not move (bit k = vps::StateKind k): their pieces are not kept, sent
  // or received; their source buffers are released first and their destination buffers are
  // materialised zeroed. At a step boundary gradients hold nothing the next step needs:
  // `zeroed_kinds = kStepBoundaryKinds` (run-transition --at-step-boundary; the trainer's rule).
  std::uint32_t zeroed_kinds = 0;
  // false: the destination buffers of zeroed_kinds are made live but not zeroed (they hold
  // whatever their memory held), for a caller that writes them before any read: the Python job
  // zeroes its grads at the next zero_grad() or grad-enabled forward, out of the switch's pause.
  bool fill_zeroed = true;
  // Receives committed ahead (exec/README.md): where the dry run shows the peak stays within
  // max(source, destination) + mem_budget (or at the peak without), the page-wise destination
  // memory this rank receives into is committed in one step before the exchange (a pool moves
  // its spare pages in with a few mremaps), not chunk by chunk between the receives. Local to a
  // rank: ranks may pass different values.
  bool commit_ahead = true;
  // When set, receives this rank's schedule (exec/schedule_trace.h), recorded by the dry run
  // that precedes the real one: the same code path, so the trace is what the real run does.
  ScheduleTrace* trace = nullptr;
  // Agree and dry-run only (for the simulator, sim/trace.h): no data moves, nothing is
  // allocated or released, `src` may hold nullptr for every buffer and `dst` stays empty.
  bool dry_only = false;
  // Scattered direct transfers: where the transport moves runs straight from buffer to buffer
  // (comm::Transport::runs_direct), chunks whose runs are long enough are neither packed nor
  // unpacked (exec/README.md). Off: only chunks that are one contiguous run go direct. Every
  // rank must pass the same value.
  bool direct_runs = true;
  // When set, the wave agreement is this one object shared by every rank of the switch, all
  // running as threads of one process (sim/trace.h): each rank gives its own per-key stats and
  // takes the one cut computed for all (exec/wave_agreement.h) instead of gathering every
  // rank's stats over the transport. Same functions, same waves; memory and time once, not W times.
  SharedWaveAgreement* shared_waves = nullptr;
  // In place (default off): source and destination layout are the same, every keep of the plan
  // is an identity (same buffer, segment, box), and when the allocator can adopt, every source
  // buffer becomes its destination buffer as it is: keeps copy nothing, sends read from and
  // receives write into that buffer, and no state memory is allocated or released. Every stage
  // of node-level fan-out after the first (job/fanout_switch.h) runs this way.
  bool in_place = false;
  // One pipeline per link class or one for all (LinkOverlap). Every rank must pass the same value.
  LinkOverlap overlap_links = LinkOverlap::kAuto;
  // Rounds a rank keeps in flight per link class (its pipeline's depth); chunks shrink so that
  // staging stays <= mem_budget / 2. 0: kAutoRoundsInFlight: 2 for intra-node pairs (and on one
  // node), 8 for inter-node pairs, where more peers at once keep the network ports busy
  // (exec/README.md). Every rank must pass the same value.
  int rounds_in_flight = 0;
  // Remapped or copied keeps (KeepPath). Local to a rank: ranks may pass different values.
  KeepPath keep_path = KeepPath::kAuto;
  // When set, raised by the bytes of every round finished and every keep done (relaxed), so a
  // watchdog can tell a slow switch from a hung one (job/watchdog.h). Must outlive the call.
  std::atomic<std::uint64_t>* progress = nullptr;
};

inline constexpr int kAutoRoundsInFlight[2] = {2, 8};  // [link class]: intra-node, inter-node
inline constexpr int kMaxRoundsInFlight = 64;

inline constexpr std::uint32_t kStepBoundaryKinds = vps::kind_bit(vps::StateKind::kGrad);

struct TransitionStats {
  double seconds = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0, bytes_kept = 0;
  // Bytes of zeroed kinds (TransitionOptions::zeroed_kinds) that this rank did not send,
  // receive or copy locally, and the destination bytes it materialised zeroed instead.
  std::uint64_t skipped_bytes_sent = 0, skipped_bytes_received = 0, skipped_bytes_kept = 0;
  std::uint64_t zeroed_bytes = 0;
  // Of zeroed_bytes: those zeroed in the source buffer handed over (laid out identically), no
  // memory allocated for them.
  std::uint64_t zeroed_in_place_bytes = 0;
  // With TransitionOptions::fill_zeroed false: the destination bytes of zeroed kinds made live
  // and left unset (zeroed_bytes and zeroed_in_place_bytes are then 0).
  std::uint64_t unset_bytes = 0;
  // Kept bytes that were not copied: source buffers handed over as destination buffers because
  // they hold the identical segments at identical offsets (part of bytes_kept).
  std::uint64_t kept_zero_copy_bytes = 0;
  // Kept bytes moved by remapping whole pages (StateAllocator::move_pages) of runs that sit at a
  // new offset (part of bytes_kept, apart from kept_zero_copy_bytes); the partial pages at the
  // ends of such a run are copied.
  std::uint64_t kept_remapped_bytes = 0;
  std::uint64_t messages = 0;                              // point-to-point messages sent by this rank
  std::uint64_t zero_copy_sends = 0, zero_copy_recvs = 0;  // messages without pack / unpack
  // Of messages: direct sends over runs pairs posted before their round (exec/pipeline.h), so
  // that the receiver reads on without waiting for this rank to post each one.
  std::uint64_t sends_ahead = 0;
  // Bytes of those messages: sent straight from the source buffers (not packed) and received
  // straight into the destination buffers (not unpacked); the rest of bytes_sent / _received
  // went through staging.
  std::uint64_t bytes_sent_direct = 0, bytes_received_direct = 0;
  // TransitionOptions::commit_ahead: the page-wise destination bytes (whole granules) committed
  // before the exchange (0 when not taken), and the allocator commits the run made in all.
  std::uint64_t committed_ahead_bytes = 0, commit_calls = 0;
  std::uint64_t staging_bytes = 0;     // staging actually allocated (<= mem_budget / 2)
  std::uint64_t chunk_bytes = 0;       // chunk capacity used to cut each peer's stream
  std::uint64_t waves = 0;             // number of waves (equal on every rank)
  std::uint64_t granule_bytes = 0;     // unit of page-wise release / build (exec/README.md)
  std::uint64_t pagewise_buffers = 0;  // source + destination buffers handled page-wise
  // Link classes the schedule ran with: 2 when intra-node and inter-node rounds had their own
  // pipelines (LinkOverlap), 1 otherwise. overlapped_rounds: rounds this rank finished while a
  // round of the other class was in flight (0 with one class); it follows from the schedule,
  // not from timing, so the dry run predicts it.
  std::uint64_t link_classes = 1, overlapped_rounds = 0;
  std::uint64_t rounds_in_flight = 2;    // of the slowest class run (inter-node with two classes)
  bool descending = false;               // wave order taken was kDescending
  std::string wave_order = "ascending";  // ascending, descending or balanced
  // Memory accounted by the engine on this rank: state buffers alive + staging.
  std::uint64_t src_bytes = 0, dst_bytes = 0;  // state before and after
  std::uint64_t peak_bytes = 0;                // measured peak
  std::uint64_t predicted_peak_bytes = 0;      // what the dry run predicted (equal to peak)
  // Broadcast: bytes this rank sends to more than one peer (same box), and of those the bytes
  // for which the cost model prefers a broadcast. `path` says what was used and why.
  std::uint64_t fanout_bytes = 0, broadcast_preferred_bytes = 0;
  std::string path = "p2p";
  // Where the time went on this rank (seconds): copies into / out of staging and keeps, waiting
  // for the exchange, asking the allocator (first touch of fresh memory shows up here and in
  // the copies), and the collective agreement on waves and order.
  double pack_seconds = 0, unpack_seconds = 0, keep_seconds = 0, wait_seconds = 0;
  double alloc_seconds = 0, agree_seconds = 0;
  // Dry runs before the real one (the wave order's candidates, then the peak and trace).
  double dry_seconds = 0;
  // What the switch cost the kernel on this rank, process-wide (exec/machine_rates.h:
  // ProcessUsage): system seconds and page faults between its start and its end.
  double system_seconds = 0;
  std::uint64_t page_faults = 0;
  // The keep path taken (KeepPath): "copy", "remap", or "remap runs >= N KiB, copy below
  // (measured)" / "copy (a remap measured slower)" under kAuto; remap_min_bytes is the shortest
  // run remapped (0: none). With kAuto on an allocator that moves pages, the machine's measured
  // warm copy, first write and remap rates it was chosen from (bytes/s; 0: not measured).
  std::string keep_path = "copy";
  std::uint64_t remap_min_bytes = 0;
  bool huge_pages = false;  // the allocator's blocks are in huge pages (StateAllocator::huge_pages)
  double warm_copy_bytes_per_s = 0, fresh_write_bytes_per_s = 0;
  double remap_call_seconds = 0;
};

// The figures of two switches run one after the other as one switch (node-level fan-out folds
// in its stages one after another): bytes, messages, waves and seconds add up; peaks and
// staging are the larger of the two; the state before is the first's and the state after the
// second's; chunk and granule size, wave order, fan-out detection and path are the first's.
TransitionStats sequential_stats(TransitionStats first, const TransitionStats& second);

// Runs `plan` (this rank's part). `src[i]` is the data of src_layout.buffers[i] (nullptr if
// the rank holds none, or for a buffer the plan reads nothing of: a zeroed kind's, or a kind a
// copy does not keep); every one of them is released through `alloc` before return and set to
// nullptr. On return `dst[i]` holds dst_layout.buffers[i], allocated through `alloc` (nullptr
// for buffers of zero elements); padding elements (bytes of no segment) are zero.
// `elem_bytes` gives the element size of each state kind (vps::LayoutOptions::elem_bytes).
// Collective over `transport` (see above). Throws CommError if the transport fails (the state
// is then partly moved and must be rebuilt from elsewhere), InvariantError on a malformed plan.
TransitionStats run_transition(const plan::RankPlan& plan, const vps::RankLayout& src_layout,
                               std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                               std::vector<std::byte*>& dst, const vps::ElemBytes& elem_bytes,
                               comm::Transport& transport, StateAllocator& alloc,
                               const TransitionOptions& options = {});

// The broadcast cost model: a source piece of `bytes` that goes to `receivers` ranks, of which
// `off_node` sit on other nodes than the source. Point-to-point costs `receivers` copies out
// of the source's link for the off-node ones; a pipelined tree broadcast about one copy per
// node. On one node (shared memory) every receiver copies the bytes itself either way, so
// point-to-point, which needs no extra communicator and no extra synchronisation, wins.
bool broadcast_preferred(int receivers, int off_node, std::uint64_t bytes);

}  // namespace dynatrain::exec
