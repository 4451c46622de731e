#include "job/job_request.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

void write_job_request(const std::string& dir, const JobRequest& r) {
  // InputError names a bad config before anything is written; a migration may keep the layout.
  if (r.to.empty() && r.vacate != kVacateAll) DT_INPUT_ERROR("a request needs --to CONFIG (or --migrate)");
  if (!r.to.empty()) vps::ParallelConfig::parse(r.to);
  if (r.at_step < -1) DT_INPUT_ERROR("--at-step ", r.at_step, " must be a step number (>= 0)");
  if (r.vacate != kVacateAll) parse_rank_list(r.vacate);  // InputError names a bad rank
  const std::string tmp = dir + "/.request." + std::to_string(getpid()), final_path = dir + "/request";
  {
    std::ofstream out(tmp);
    if (!out) DT_INPUT_ERROR("cannot write to job directory '", dir, "' (does it exist?)");
    out << "to=" << r.to << '\n';
    if (r.at_step >= 0) out << "at_step=" << r.at_step << '\n';
    if (!r.vacate.empty()) out << "vacate=" << r.vacate << '\n';
    if (!out.flush()) DT_INPUT_ERROR("cannot write to job directory '", dir, "'");
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    DT_INPUT_ERROR("cannot place the request in job directory '", dir, "'");
}

std::optional<JobRequest> take_job_request(const std::string& dir) {
  const std::string path = dir + "/request";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  in.close();
  std::remove(path.c_str());
  JobRequest r;
  std::string line;
  bool ok = true;
  while (std::getline(text, line)) {
    if (line.rfind("to=", 0) == 0) r.to = line.substr(3);
    else if (line.rfind("at_step=", 0) == 0) {
      try {
        r.at_step = std::stoll(line.substr(8));
      } catch (const std::exception&) {
        ok = false;
      }
    } else if (line.rfind("vacate=", 0) == 0) {
      r.vacate = line.substr(7);
    } else if (!line.empty()) {
      ok = false;
    }
  }
  if (!ok || (r.to.empty() && r.vacate != kVacateAll)) r = JobRequest{"malformed request file: " + text.str(), -1, {}};
  return r;
}

std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 0)
      DT_INPUT_ERROR("'", item, "' in rank list '", text, "' is not a rank (a non-negative integer)");
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
constexpr int kTagJobHeader = 211, kTagJobBody = 212;
}

void send_job_sync(comm::Transport& world, int to, const JobSync& msg, const std::string& body) {
  DT_CHECK_EQ(msg.body_bytes, body.size());
  world.isend(&msg, sizeof(msg), to, kTagJobHeader)->wait();
  if (!body.empty()) world.isend(body.data(), body.size(), to, kTagJobBody)->wait();
}

JobSync receive_job_sync(comm::Transport& world, std::string& body, bool sleep_poll) {
  JobSync msg;
  auto req = world.irecv(&msg, sizeof(msg), 0, kTagJobHeader);
  if (sleep_poll)
    while (!req->test()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  else
    req->wait();
  body.assign(msg.body_bytes, '\0');
  if (!body.empty()) world.irecv(body.data(), body.size(), 0, kTagJobBody)->wait();
  return msg;
}

}  // namespace dynatrain::job
