// Output files of the CLI (--json, --csv): checked before any work, and every write checked.
//
// A command checks each output path when it starts (check_output_path: it leaves nothing behind), so a
// typo fails in one line before any planning, allocation or training. Writes go through streams
// whose state is checked after the last write (check_written), so a full disk (/dev/full) or a
// write error ends the command with exit 2 instead of a truncated file and exit 0.
#pragma once

#include <ostream>
#include <string>

namespace dynatrain {

// Throws InputError ("cannot write <what> file '<path>': <reason>") unless `path` names an
// existing file (not a directory) this process may write, or a new file in an existing directory
// it may write: created and removed at once, since root's access() passes where creating fails
// (/proc, a read-only mount). An empty path (no output asked for) passes.
void check_output_path(const std::string& what, const std::string& path);

// Whether two non-empty paths name one file: the same path once made absolute and normal
// (symbolic links resolved as far as they exist), or two names of one existing file.
bool names_one_file(const std::string& a, const std::string& b);

// Flushes `out` and throws InputError naming the file and the system's reason when any write to
// it failed (the stream's failbit or badbit).
void check_written(std::ostream& out, const std::string& what, const std::string& path);

// Writes `text` to `path` (truncating it) and checks every byte arrived (check_written).
void write_output_file(const std::string& what, const std::string& path, const std::string& text);

}  // namespace dynatrain
