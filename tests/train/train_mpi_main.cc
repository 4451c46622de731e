// Runs train_command under mpirun with a schedule that switches through TP, PP, DP resize (with
// waiting ranks) and back, checking that it completes and writes a CSV with every step.
// Optional arguments MODEL SCHEDULE CSV replace the model, the schedule and the CSV path (the
// vocabulary-padding test: ranks that hold only padding rows of the vocabulary).
#include <cstdio>
#include <fstream>
#include <string>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "job/train_job.h"

int main(int argc, char** argv) {
  using namespace dynatrain;
  comm::MpiSession session(&argc, &argv);
  int rc = 0;
  {
    auto world = comm::MpiTransport::world();
    job::TrainArgs args;
    args.model = "tiny-dense";
    args.steps = 24;
    args.global_batch = 8;
    args.seq = 32;
    args.schedule = "0:tp=2,dp=2;6:pp=2,dp=2;12:dp=1;18:tp=2,pp=2";
    args.csv = "train_mpi_test.csv";
    args.threads = 1;
    if (argc == 4) {
      args.model = argv[1];
      args.schedule = argv[2];
      args.csv = argv[3];
    }
    try {
      rc = job::train_command(args, *world);
    } catch (const Error& e) {
      std::fprintf(stderr, "rank %d: %s\n", world->rank(), e.what());
      return 1;
    }
    if (world->rank() == 0) {
      std::ifstream in(args.csv);
      std::string line;
      int lines = 0;
      while (std::getline(in, line)) ++lines;
      if (lines != 1 + args.steps) {
        std::fprintf(stderr, "CSV has %d lines, want %lld\n", lines, 1 + static_cast<long long>(args.steps));
        rc = 1;
      }
    }
  }
  return rc;
}
