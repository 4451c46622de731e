#include "job/job_request.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>
#include <utility>

#include "common/error.h"
#include "job/job_files.h"
#include "job/job_status.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

namespace {

constexpr std::size_t kMaxRequestBytes = 64 << 10;

// "1764632400123456789-HOST-PID-N": sorts by the time it was placed (19 digits until 2286).
std::string new_request_id() {
  static std::atomic<int> counter{0};
  std::string host = host_name();
  for (char& c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') c = '_';
  const auto ns = static_cast<long long>(unix_now() * 1e9);
  char stamp[24];
  std::snprintf(stamp, sizeof stamp, "%019lld", ns);
  return std::string(stamp) + "-" + host + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

void check_version(const nlohmann::json& j, const char* what) {
  if (!j.is_object()) DT_INPUT_ERROR("malformed ", what, ": not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer())
    DT_INPUT_ERROR("malformed ", what, ": no integer \"version\"");
  const auto v = j["version"].get<long long>();
  if (v != kRequestVersion)
    DT_INPUT_ERROR(what, " version ", v, " is not supported; this job reads version ", kRequestVersion);
}

nlohmann::json parse_one_line(const std::string& text, const char* what) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) DT_INPUT_ERROR("malformed ", what, ": not JSON (", text.size(), " bytes)");
  return j;
}

}  // namespace

void check_request(const JobRequest& r) {
  if (r.lend < 0) DT_INPUT_ERROR("--lend ", r.lend, ": valid: a number of processes >= 1");
  if (r.lend > 0 || r.reclaim) {
    const char* what = r.lend > 0 ? "--lend" : "--reclaim";
    if (r.lend > 0 && r.reclaim) DT_INPUT_ERROR("--lend and --reclaim in one request; place one, then the other");
    if (!r.to.empty() || !r.vacate.empty())
      DT_INPUT_ERROR(what, " takes no --to, --vacate or --migrate (the job chooses the layout: ",
                     r.lend > 0 ? "the same tp, pp and cp on fewer processes" : "the one from before the lend", ")");
  } else if (r.to.empty() && r.vacate != kVacateAll) {
    DT_INPUT_ERROR("a request needs --to CONFIG (or --migrate); or --lend N, --reclaim");
  }
  if (!r.to.empty()) vps::ParallelConfig::parse(r.to);
  if (r.at_step < -1) DT_INPUT_ERROR("--at-step ", r.at_step, " must be a step number (>= 0)");
  if (r.vacate != kVacateAll) parse_rank_list(r.vacate);  // InputError names a bad rank
}

std::string request_to_json(const JobRequest& r) {
  nlohmann::json j = {{"version", kRequestVersion}, {"to", r.to}};
  if (r.at_step >= 0) j["at_step"] = r.at_step;
  if (!r.vacate.empty()) j["vacate"] = r.vacate;
  if (r.lend > 0) j["lend"] = r.lend;
  if (r.reclaim) j["reclaim"] = true;
  return j.dump() + "\n";
}

JobRequest request_from_json(const std::string& text) {
  const auto j = parse_one_line(text, "request");
  check_version(j, "request");
  JobRequest r;
  for (const auto& [key, what] : {std::pair{"at_step", "step number"}, std::pair{"lend", "number of processes"}})
    if (j.contains(key) && !j[key].is_number_integer())  // 40.7 would be read as 40
      DT_INPUT_ERROR("malformed request: \"", key, "\" must be a whole ", what, ", not ", j[key].dump());
  if (j.contains("reclaim") && !j["reclaim"].is_boolean())
    DT_INPUT_ERROR("malformed request: \"reclaim\" must be true or false, not ", j["reclaim"].dump());
  try {
    r.to = j.value("to", std::string());
    r.at_step = j.value("at_step", std::int64_t{-1});
    r.vacate = j.value("vacate", std::string());
    r.lend = j.value("lend", 0);
    r.reclaim = j.value("reclaim", false);
  } catch (const nlohmann::json::exception&) {
    DT_INPUT_ERROR("malformed request: \"to\" and \"vacate\" must be strings, \"at_step\" an integer");
  }
  for (const auto& [key, value] : j.items())
    if (key != "version" && key != "to" && key != "at_step" && key != "vacate" && key != "lend" && key != "reclaim")
      DT_INPUT_ERROR("malformed request: unknown field \"", key,
                     "\"; valid: version, to, at_step, vacate, lend, reclaim");
  check_request(r);
  return r;
}

std::string place_request(const std::string& dir, const JobRequest& r) {
  check_request(r);
  require_live_job(dir);
  const std::string id = new_request_id();
  if (!write_file_atomically(dir + "/requests/" + id + ".json", request_to_json(r), true))
    DT_INPUT_ERROR("cannot place the request in '", dir, "/requests' (", std::strerror(errno), ")");
  return id;
}

std::vector<TakenRequest> take_requests(const std::string& dir) {
  const std::string queue = dir + "/requests";
  std::vector<std::string> names;
  if (DIR* d = ::opendir(queue.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);  // temporary names start with '.'
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<TakenRequest> taken;
  for (const auto& name : names) {
    const std::string path = queue + "/" + name;
    TakenRequest t;
    const bool json_name = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
    t.id = json_name ? name.substr(0, name.size() - 5) : name;
    std::string why;
    const auto text = read_regular_file(path, kMaxRequestBytes, why);
    if (!json_name)
      t.why = "'" + name + "' is not named ID.json (place requests with dynatrain request)";
    else if (!text)
      t.why = "request file '" + name + "' is " + why;
    else {
      try {
        t.request = request_from_json(*text);
      } catch (const InputError& e) {
        t.why = e.what();
      }
    }
    // Removed in every case (a directory too, when empty), so it is answered once.
    if (std::remove(path.c_str()) != 0 && t.why.empty()) continue;  // taken by someone else
    taken.push_back(std::move(t));
  }
  return taken;
}

const char* answer_state_name(AnswerState s) {
  switch (s) {
    case AnswerState::kAccepted: return "accepted";
    case AnswerState::kCommitted: return "committed";
    case AnswerState::kRefused: return "refused";
    case AnswerState::kSuperseded: return "superseded";
  }
  return "?";
}

void write_answer(const std::string& dir, const Answer& a) {
  nlohmann::json j = {{"version", kRequestVersion},
                      {"id", a.id},
                      {"state", answer_state_name(a.state)},
                      {"time", iso_time(unix_now())}};
  if (a.step >= 0) j["step"] = a.step;
  if (!a.to.empty()) j["to"] = a.to;
  if (!a.reason.empty()) j["reason"] = a.reason;
  if (!a.figures.is_null()) j["figures"] = a.figures;
  write_file_atomically(dir + "/answers/" + a.id + ".json", j.dump() + "\n", false);
}

std::optional<Answer> read_answer(const std::string& dir, const std::string& id) {
  std::string why;
  const auto text = read_regular_file(dir + "/answers/" + id + ".json", kMaxRequestBytes, why);
  if (!text) return std::nullopt;
  const auto j = parse_one_line(*text, "answer");
  check_version(j, "answer");
  Answer a;
  a.id = id;
  const std::string state = j.value("state", "");
  if (state == "accepted")
    a.state = AnswerState::kAccepted;
  else if (state == "committed")
    a.state = AnswerState::kCommitted;
  else if (state == "refused")
    a.state = AnswerState::kRefused;
  else if (state == "superseded")
    a.state = AnswerState::kSuperseded;
  else
    DT_INPUT_ERROR("malformed answer '", id, "': unknown state '", state, "'");
  a.step = j.value("step", std::int64_t{-1});
  a.to = j.value("to", "");
  a.reason = j.value("reason", "");
  if (j.contains("figures")) a.figures = j["figures"];
  return a;
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
