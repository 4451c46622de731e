// Which files of the state's memory copy (job/memory_copy.h) this process wrote, so that the
// `lose` fault (job/fault_injection.h) can take them away with the process, as the loss of its
// node takes its shared memory. No trainer here: fault injection links without one.
#pragma once

#include <set>
#include <string>

namespace dynatrain::job {

// Set by the supervisor for the job it starts: the copy's directory.
constexpr const char* kMemoryCopyDirEnv = "DT_MEMORY_COPY_DIR";

// Records the names this process wrote into the copy's newest step directory (the previous
// call's names stay recorded for the other one).
void note_memory_copy_files(std::set<std::string> names);

// Removes the recorded names from every step directory of $DT_MEMORY_COPY_DIR (none when unset).
void drop_memory_copy_of_this_process();

}  // namespace dynatrain::job
