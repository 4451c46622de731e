#include "job/job_events.h"

#include <cstdio>
#include <mutex>

#include "job/job_files.h"

namespace dynatrain::job {

namespace {

struct EventLog {
  std::mutex mu;
  std::FILE* file = nullptr;
  std::string path;
  bool warned = false;
  std::function<void(const nlohmann::json&)> listener;
};

EventLog& log() {
  static EventLog l;
  return l;
}

}  // namespace

void open_event_log(const std::string& dir, std::function<void(const nlohmann::json&)> listener) {
  EventLog& l = log();
  std::lock_guard<std::mutex> g(l.mu);
  if (l.file) std::fclose(l.file);
  l.path = dir + "/events.jsonl";
  l.file = std::fopen(l.path.c_str(), "a");
  l.warned = false;
  l.listener = std::move(listener);
  if (!l.file) {
    std::fprintf(stderr, "warning: cannot append to '%s'; the job goes on without its event log\n", l.path.c_str());
    l.warned = true;
  }
}

void close_event_log() {
  EventLog& l = log();
  std::lock_guard<std::mutex> g(l.mu);
  if (l.file) std::fclose(l.file);
  l.file = nullptr;
  l.listener = nullptr;
}

void record_event(const std::string& event, const nlohmann::json& fields) {
  EventLog& l = log();
  std::function<void(const nlohmann::json&)> listener;
  nlohmann::json line;
  {
    std::lock_guard<std::mutex> g(l.mu);
    if (!l.file) return;
    const double now = unix_now();
    line = {{"v", kEventsVersion}, {"time", iso_time(now)}, {"unix", now}, {"event", event}};
    if (fields.is_object()) line.update(fields);
    const std::string text = line.dump() + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), l.file) == text.size() && std::fflush(l.file) == 0;
    if (!ok && !l.warned) {
      std::fprintf(stderr, "warning: cannot append to '%s'; later events may be missing\n", l.path.c_str());
      l.warned = true;
    }
    listener = l.listener;
  }
  if (listener) listener(line);
}

void record_notice(int rank, double seconds, const std::string& what) {
  record_event("notice", {{"rank", rank}, {"seconds", seconds}, {"what", what}});
}

void record_process_lost(int rank, long pid, const std::string& what) {
  record_event("process_lost", {{"rank", rank}, {"pid", pid}, {"what", what}});
}

void record_recovery(std::int64_t step, const std::string& layout, int processes, const std::string& how) {
  record_event("recovery", {{"step", step}, {"layout", layout}, {"processes", processes}, {"how", how}});
}

}  // namespace dynatrain::job
