// Files of a job directory (`train --job DIR`) that other programs read while the job runs:
// written whole or not at all, and read without ever blocking on what a stranger put there.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dynatrain::job {

// Writes `text` to `path` so that a reader sees the old file or the whole new one: a temporary
// name beside it (".NAME.tmp.PID"), fsync (when `durable`), rename over `path`, fsync of the
// directory (when `durable`). Returns false with errno set on failure; never throws.
bool write_file_atomically(const std::string& path, const std::string& text, bool durable);

// Reads `path` when it is a regular file of at most `max_bytes`. A FIFO, device, directory or
// symbolic link is never read (opened O_NONBLOCK | O_NOFOLLOW, checked with fstat): nullopt,
// with `why` set to one line ("not a regular file (a FIFO)", "larger than 65536 bytes", the
// system's reason). Never throws, never blocks.
std::optional<std::string> read_regular_file(const std::string& path, std::size_t max_bytes, std::string& why);

// "a FIFO", "a directory", "a symbolic link", ... for the file type bits of st_mode.
const char* file_kind(unsigned mode);

// This machine's host name ("unknown" when the system gives none).
std::string host_name();

// Seconds since the Unix epoch (wall clock: other machines compare it), and the same instant
// as "2026-12-01T23:50:00.123Z".
double unix_now();
std::string iso_time(double unix_seconds);

}  // namespace dynatrain::job
