// What Open MPI allows after one process of a job dies without notice (SIGKILL): a probe, not a
// test. The last rank of MPI_COMM_WORLD kills itself with SIGKILL after a barrier; the survivors
// then try, in order and each under its own deadline:
//   op      a blocking call that involves the dead rank (recv, send of 8 MiB, allreduce, barrier,
//           or none), under MPI_ERRORS_RETURN: does it return an error, hang, or is the job aborted?
//   after   shrink: MPI_Comm_create_group over the survivors, then an allreduce on it;
//           split:  MPI_Comm_split of MPI_COMM_WORLD (the dead rank is a member);
//           spawn:  shrink, then MPI_Comm_spawn of one replacement, MPI_Intercomm_merge, and an
//                   allreduce over survivors + replacement.
// Each step runs on a helper thread (MPI_THREAD_MULTIPLE); a step still blocked at its deadline
// is reported as HANG and left behind, and the next step runs anyway. Every line a survivor prints
// carries the seconds since the kill. Values are checked: allreduce of (rank + 1) must equal the
// sum over the ranks that take part.
//
//   mpirun -np 3 bench_mpi_recovery_probe <op> <after> [deadline_s] [finalize]
//   (op: none|recv|send|allreduce|barrier; after: none|shrink|split|spawn)
//   mpirun -np N bench_mpi_recovery_probe startup   (init, barrier, finalize: a restart's floor)
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

double g_kill_time = 0;  // MPI_Wtime of the kill, as the survivors take it
int g_rank = -1;

double since_kill() { return MPI_Wtime() - g_kill_time; }

void say(const std::string& text) {
  std::printf("[rank %d t=%.3fs] %s\n", g_rank, since_kill(), text.c_str());
  std::fflush(stdout);
}

std::string error_text(int rc) {
  if (rc == MPI_SUCCESS) return "MPI_SUCCESS";
  char text[MPI_MAX_ERROR_STRING];
  int len = 0, cls = 0;
  MPI_Error_class(rc, &cls);
  MPI_Error_string(rc, text, &len);
  return "error class " + std::to_string(cls) + " (" + std::string(text, static_cast<std::size_t>(len)) + ")";
}

// Runs `fn` on a helper thread; prints its MPI return code and time, or HANG at the deadline.
// Returns true when the step returned MPI_SUCCESS.
bool step(const std::string& name, double deadline_s, std::function<int()> fn) {
  auto done = std::make_shared<std::promise<int>>();
  std::future<int> result = done->get_future();
  const double start = MPI_Wtime();
  std::thread([fn, done] { done->set_value(fn()); }).detach();
  if (result.wait_for(std::chrono::duration<double>(deadline_s)) != std::future_status::ready) {
    say(name + ": HANG (still blocked after " + std::to_string(static_cast<int>(deadline_s)) + " s)");
    return false;
  }
  const int rc = result.get();
  char line[64];
  std::snprintf(line, sizeof line, " after %.3f s", MPI_Wtime() - start);
  say(name + ": returned " + error_text(rc) + line);
  return rc == MPI_SUCCESS;
}

int checked_allreduce(MPI_Comm comm, int expect) {
  int rank = 0, sum = 0;
  MPI_Comm_rank(comm, &rank);
  int one = rank + 1;
  const int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
  if (rc == MPI_SUCCESS && sum != expect) {
    say("allreduce value " + std::to_string(sum) + ", expected " + std::to_string(expect));
    return MPI_ERR_OTHER;
  }
  return rc;
}

int triangle(int n) { return n * (n + 1) / 2; }

// A blocking call that involves the dead rank `victim`.
int op_with_dead(const std::string& op, int victim) {
  static std::vector<char> big(8 << 20, 1);  // larger than any eager limit: rendezvous
  char byte = 0;
  if (op == "recv") return MPI_Recv(&byte, 1, MPI_CHAR, victim, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (op == "send") return MPI_Send(big.data(), static_cast<int>(big.size()), MPI_CHAR, victim, 5, MPI_COMM_WORLD);
  if (op == "allreduce") return checked_allreduce(MPI_COMM_WORLD, triangle(victim + 1));
  if (op == "barrier") return MPI_Barrier(MPI_COMM_WORLD);
  return MPI_SUCCESS;
}

// The survivors (every rank but `victim`) as a communicator of their own; MPI_COMM_NULL on failure.
MPI_Comm survivors_comm(int victim, double deadline_s) {
  MPI_Group world_group = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_excl(world_group, 1, &victim, &alive);
  auto comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  const bool ok = step("MPI_Comm_create_group(survivors)", deadline_s,
                       [alive, comm] { return MPI_Comm_create_group(MPI_COMM_WORLD, alive, 77, comm.get()); });
  if (!ok) return MPI_COMM_NULL;
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  step("allreduce on survivors", deadline_s, [comm, victim] { return checked_allreduce(*comm, triangle(victim)); });
  return *comm;
}

void spawn_replacement(MPI_Comm survivors, const char* self, int n_survivors, double deadline_s) {
  auto inter = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  auto merged = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  static char child_arg[] = "child";
  static char* child_argv[] = {child_arg, nullptr};
  if (!step("MPI_Comm_spawn(1 replacement)", deadline_s, [=] {
        return MPI_Comm_spawn(self, child_argv, 1, MPI_INFO_NULL, 0, survivors, inter.get(), MPI_ERRCODES_IGNORE);
      }))
    return;
  MPI_Comm_set_errhandler(*inter, MPI_ERRORS_RETURN);
  if (!step("MPI_Intercomm_merge", deadline_s, [=] { return MPI_Intercomm_merge(*inter, 0, merged.get()); })) return;
  MPI_Comm_set_errhandler(*merged, MPI_ERRORS_RETURN);
  step("allreduce on survivors + replacement", deadline_s,
       [=] { return checked_allreduce(*merged, triangle(n_survivors + 1)); });
}

// The replacement: merge with its parents and take part in their allreduce.
int run_child() {
  MPI_Comm parent = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  int rc = MPI_Intercomm_merge(parent, 1, &merged);
  int size = 0;
  if (rc == MPI_SUCCESS) MPI_Comm_size(merged, &size);
  if (rc == MPI_SUCCESS) rc = checked_allreduce(merged, triangle(size));
  std::printf("[replacement] merged into %d processes, allreduce %s\n", size, error_text(rc).c_str());
  std::fflush(stdout);
  _exit(rc == MPI_SUCCESS ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (argc >= 2 && std::strcmp(argv[1], "child") == 0) return run_child();
  if (argc >= 2 && std::strcmp(argv[1], "startup") == 0) {  // the floor of a restart: launch + init
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
  }
  const std::string op = argc > 1 ? argv[1] : "none", after = argc > 2 ? argv[2] : "none";
  const double deadline = argc > 3 ? std::atof(argv[3]) : 20.0;
  const bool finalize = argc > 4 && std::strcmp(argv[4], "finalize") == 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int victim = size - 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == victim) raise(SIGKILL);
  g_kill_time = MPI_Wtime();
  say("survivor of " + std::to_string(size) + " (thread level " + std::to_string(provided) + "), op " + op + ", then " +
      after);
  for (int s : {1, 3, 6}) {  // does the job's launcher end the survivors?
    while (since_kill() < s) usleep(10000);
    say("still running " + std::to_string(s) + " s after the kill");
  }
  if (op != "none") step(op + " involving the dead rank", deadline, [op, victim] { return op_with_dead(op, victim); });
  if (after == "split") {
    auto comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    step("MPI_Comm_split(MPI_COMM_WORLD)", deadline,
         [comm] { return MPI_Comm_split(MPI_COMM_WORLD, 0, 0, comm.get()); });
  } else if (after == "shrink" || after == "spawn") {
    MPI_Comm survivors = survivors_comm(victim, deadline);
    if (after == "spawn" && survivors != MPI_COMM_NULL) spawn_replacement(survivors, argv[0], size - 1, deadline);
  }
  if (finalize) step("MPI_Finalize", deadline, [] { return MPI_Finalize(); });
  say("done; leaving with _exit(0)");
  _exit(0);
}
