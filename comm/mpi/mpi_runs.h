// The runs protocol of the Open MPI backend: one scattered message (runs of a buffer) between two
// processes of one node, moved buffer to buffer by cross-memory attach (cma_copy.h), with MPI
// carrying only descriptors and answers on the transport's private runs communicator.
//
// One runs message, for a pair with runs_direct():
//   1. the sender posts a descriptor (its pid, then (address, length) of each run) on 4*tag;
//   2. the receiver, inside a wait, takes it and either reads the runs straight out of the
//      sender's memory into its own (process_vm_readv) and answers 0 on 4*tag+1, or, when the
//      sender's runs are far more scattered than its own (sender_should_write), answers 2 and
//      posts its own descriptor on 4*tag+3 (answer 1: the sizes differ);
//   3. after answer 2 the sender, inside a wait, writes its runs into the receiver's
//      (process_vm_writev) and reports 0 on 4*tag+2 (1: it failed), which completes the receive.
// Invariants:
//  * The sender's runs stay untouched, and the receiver's unwritten by anyone else, until the
//    request completes.
//  * Any runs wait (send or receive) progresses every posted runs request of the transport
//    (RunsProgress), oldest first per (peer, tag), as MPI progresses every posted request in any
//    wait: a request never needs its peer to wait on that very request.
//  * A size mismatch is CommError on the receive, and on the send; a lost peer is PeerLostError
//    as thrown by copy_remote_runs. Destroying an unfinished request waits for it quietly.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm {

namespace detail {
struct RunsProgress;  // every posted runs request of one transport (mpi_runs.cc)
}

namespace mpi_detail {

// The largest MPI tag the protocol uses: runs go direct only where MPI_TAG_UB is at least this.
constexpr int kMaxProtocolTag = 4 * kMaxTag + 3;

std::shared_ptr<detail::RunsProgress> make_runs_progress();

// Posts the sender's half of a runs message on `comm` (the runs communicator).
std::unique_ptr<Request> post_runs_send(const void* base, const std::vector<ByteRun>& runs, int peer, int tag,
                                        MPI_Comm comm, std::shared_ptr<detail::RunsProgress> progress,
                                        std::string where);
// Posts the receiver's half; nothing moves until a wait or test.
std::unique_ptr<Request> post_runs_recv(void* base, std::vector<ByteRun> runs, int peer, int tag, MPI_Comm comm,
                                        std::shared_ptr<detail::RunsProgress> progress, std::string where);

}  // namespace mpi_detail
}  // namespace dynatrain::comm
