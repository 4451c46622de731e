// The scheduler protocol's files, in one process: request files and their queue, answers,
// liveness, status.json, events.jsonl, the versioned hand-overs (leader state, schedule), and
// how JobControl puts requests into a schedule (accepted, superseded, refused).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "job/job_control.h"
#include "job/job_events.h"
#include "job/job_files.h"
#include "job/job_request.h"
#include "job/job_status.h"
#include "job/schedule_tail.h"
#include "job/supervisor_job_dir.h"
#include "job/train_leader.h"

namespace dynatrain::job {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dt_job_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(JobRequestFile, RoundTripsAndRefusesBadInputInOneLine) {
  const JobRequest r{"tp=2,dp=2", 7, "1,3"};
  const JobRequest back = request_from_json(request_to_json(r));
  EXPECT_EQ(back.to, r.to);
  EXPECT_EQ(back.at_step, 7);
  EXPECT_EQ(back.vacate, "1,3");
  const std::string bad_json = message_of([] { request_from_json("{\"version\":1,\n\"to\":"); });
  EXPECT_NE(bad_json.find("malformed request: not JSON"), std::string::npos) << bad_json;
  EXPECT_EQ(bad_json.find('\n'), std::string::npos) << bad_json;
  EXPECT_NE(message_of([] {
              request_from_json(R"({"version":2,"to":"dp=2"})");
            }).find("request version 2 is not supported; this job reads version 1"),
            std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"to":"dp=2"})"); }).find("no integer \"version\""),
            std::string::npos);
  EXPECT_NE(
      message_of([] { request_from_json(R"({"version":1,"to":"dp=2","step":3})"); }).find("unknown field \"step\""),
      std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"to":"tp=x"})"); }).find("tp=x"), std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"to":3})"); }).find("must be strings"),
            std::string::npos);
  // A fractional step is refused, not rounded down to 40.
  EXPECT_NE(message_of([] {
              request_from_json(R"({"version":1,"to":"dp=2","at_step":40.7})");
            }).find("\"at_step\" must be a whole step number, not 40.7"),
            std::string::npos);
  // Lend and reclaim: round trip; no layout of their own, one at a time, whole and positive.
  JobRequest lend;
  lend.lend = 2;
  const JobRequest lent = request_from_json(request_to_json(lend));
  EXPECT_EQ(lent.lend, 2);
  EXPECT_TRUE(lent.to.empty() && !lent.reclaim);
  EXPECT_TRUE(request_from_json(R"({"version":1,"reclaim":true})").reclaim);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"lend":2,"to":"dp=2"})"); }).find("--lend takes no --to"),
            std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"lend":1,"reclaim":true})"); }).find("one request"),
            std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"lend":1.5})"); }).find("whole number of processes"),
            std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"lend":-1})"); }).find("valid: a number of processes"),
            std::string::npos);
  EXPECT_NE(message_of([] { request_from_json(R"({"version":1,"reclaim":1})"); }).find("true or false"),
            std::string::npos);
}

// A fake live job: job.lock naming this process, a fresh heartbeat.
void hold(const TempDir& d) { ASSERT_EQ(hold_job_dir(d.path, false), ""); }

TEST(JobLiveness, NamesWhyThereIsNoLiveJob) {
  TempDir d;
  EXPECT_NE(why_no_live_job(d.path + "/missing").find("does not exist"), std::string::npos);
  put(d.path + "/file", "x");
  EXPECT_NE(why_no_live_job(d.path + "/file").find("is a regular file, not a job directory"), std::string::npos);
  ASSERT_EQ(mkfifo((d.path + "/fifo").c_str(), 0600), 0);
  EXPECT_NE(why_no_live_job(d.path + "/fifo").find("is a FIFO"), std::string::npos);
  EXPECT_NE(why_no_live_job(d.path).find("no job holds it"), std::string::npos);
  hold(d);
  EXPECT_EQ(why_no_live_job(d.path), "");
  EXPECT_NE(hold_job_dir(d.path, false).find("held by another live job"), std::string::npos);
  EXPECT_EQ(hold_job_dir(d.path, true), "");  // a new leader of the same job
  // A pid that is gone (and a heartbeat older than the hand-over grace): dead.
  put(d.path + "/job.lock", R"({"version":1,"pid":999999999,"host":")" + host_name() + R"(","started_unix":1})");
  put(d.path + "/status.json", R"({"version":1,"heartbeat_unix":1})");
  EXPECT_NE(why_no_live_job(d.path).find("process 999999999 on " + host_name() + " is gone"), std::string::npos);
  put(d.path + "/status.json", R"({"version":1,"heartbeat_unix":)" + std::to_string(unix_now()) + "}");
  EXPECT_EQ(why_no_live_job(d.path), "");      // within the hand-over grace: still live for a request
  EXPECT_EQ(hold_job_dir(d.path, false), "");  // but a new job may take a dead process's directory
  // A zombie (a leader that has exited, not yet reaped) is gone: a restarted job takes its
  // directory at once, its heartbeat still fresh.
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_GT(zombie, 0);
  while (slurp("/proc/" + std::to_string(zombie) + "/stat").find(") Z ") == std::string::npos) usleep(1000);
  put(d.path + "/job.lock",
      R"({"version":1,"pid":)" + std::to_string(zombie) + R"(,"host":")" + host_name() + R"(","started_unix":1})");
  EXPECT_EQ(hold_job_dir(d.path, false), "");
  put(d.path + "/job.lock",
      R"({"version":1,"pid":)" + std::to_string(getpid()) + R"(,"host":")" + host_name() + R"(","started_unix":1})");
  EXPECT_NE(hold_job_dir(d.path, false).find("held by another live job"), std::string::npos);  // a running one holds
  waitpid(zombie, nullptr, 0);
  // Another host's pid cannot be checked: the heartbeat decides.
  put(d.path + "/job.lock", R"({"version":1,"pid":1,"host":"elsewhere.invalid","started_unix":1})");
  put(d.path + "/status.json", R"({"version":1,"heartbeat_unix":1})");
  EXPECT_NE(why_no_live_job(d.path, 30).find("heartbeat is"), std::string::npos);
  put(d.path + "/status.json", R"({"version":1,"health":"ended","exit_code":0,"heartbeat_unix":1})");
  EXPECT_NE(why_no_live_job(d.path).find("the job ended (exit code 0)"), std::string::npos);
}

TEST(JobRequestQueue, PlacesInOrderAndTakesEveryEntryOnceWithoutBlocking) {
  TempDir d;
  EXPECT_NE(message_of([&] {
              place_request(d.path, JobRequest{"dp=2", -1, ""});
            }).find("no live job holds"),
            std::string::npos);
  hold(d);
  const std::string a = place_request(d.path, JobRequest{"dp=2", -1, ""});
  const std::string b = place_request(d.path, JobRequest{"tp=2", 5, ""});
  EXPECT_LT(a, b);  // names sort in the order requests were placed
  ASSERT_EQ(mkfifo((d.path + "/requests/zz-fifo.json").c_str(), 0600), 0);  // read, it would block
  put(d.path + "/requests/zz-bad.json", "{\"version\":1,\n\"to\":");
  put(d.path + "/requests/zz-name.txt", "{}");
  put(d.path + "/requests/.tmp-partial", "{");  // a request being written: not taken
  const auto taken = take_requests(d.path);
  ASSERT_EQ(taken.size(), 5u);
  EXPECT_EQ(taken[0].id, a);
  EXPECT_EQ(taken[0].request->to, "dp=2");
  EXPECT_EQ(taken[1].id, b);
  EXPECT_EQ(taken[1].request->at_step, 5);
  EXPECT_EQ(taken[2].id, "zz-bad");
  EXPECT_NE(taken[2].why.find("malformed request: not JSON"), std::string::npos);
  EXPECT_EQ(taken[3].id, "zz-fifo");
  EXPECT_NE(taken[3].why.find("not a regular file (a FIFO)"), std::string::npos);
  EXPECT_NE(taken[4].why.find("is not named ID.json"), std::string::npos);
  for (const auto& t : taken) EXPECT_EQ(t.why.find('\n'), std::string::npos) << t.why;
  EXPECT_TRUE(take_requests(d.path).empty());
  EXPECT_TRUE(fs::exists(d.path + "/requests/.tmp-partial"));
}

TEST(JobAnswers, RoundTrip) {
  TempDir d;
  hold(d);
  EXPECT_FALSE(read_answer(d.path, "r1"));
  write_answer(d.path, Answer{"r1", AnswerState::kCommitted, 9, "tp=2", "", {{"pause_s", 0.25}}});
  const auto a = read_answer(d.path, "r1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->state, AnswerState::kCommitted);
  EXPECT_EQ(a->step, 9);
  EXPECT_EQ(a->to, "tp=2");
  EXPECT_DOUBLE_EQ(a->figures.value("pause_s", 0.0), 0.25);
  put(d.path + "/answers/r2.json", R"({"version":7,"state":"committed"})");
  EXPECT_NE(message_of([&] { read_answer(d.path, "r2"); }).find("answer version 7 is not supported"),
            std::string::npos);
}

TEST(JobEvents, AppendsOneVersionedObjectALine) {
  TempDir d;
  int seen = 0;
  record_event("ignored");  // no log open: nothing happens
  open_event_log(d.path, [&](const nlohmann::json&) { ++seen; });
  record_notice(3, 30, "SIGTERM");
  record_process_lost(1, 4242, "no heartbeat");
  close_event_log();
  record_event("ignored");
  std::ifstream in(d.path + "/events.jsonl");
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(lines[0]["v"], kEventsVersion);
  EXPECT_EQ(lines[0]["event"], "notice");
  EXPECT_EQ(lines[0]["rank"], 3);
  EXPECT_EQ(lines[0]["seconds"], 30);
  EXPECT_EQ(lines[1]["event"], "process_lost");
  EXPECT_EQ(lines[1]["pid"], 4242);
  EXPECT_EQ(lines[1]["time"].get<std::string>().size(), 24u);  // 2026-12-01T23:50:00.123Z
  EXPECT_GE(lines[1]["unix"].get<double>(), lines[0]["unix"].get<double>());
}

TEST(JobStatusFile, IsReplacedWholeWithAHeartbeat) {
  TempDir d;
  {
    StatusFile s(d.path);
    s.update([](nlohmann::json& j) { j["step"] = 4; }, true);
    const auto j = nlohmann::json::parse(slurp(d.path + "/status.json"));
    EXPECT_EQ(j["step"], 4);
    EXPECT_EQ(j["version"], kStatusVersion);
    const double first = j["heartbeat_unix"].get<double>();
    usleep(static_cast<useconds_t>(kHeartbeatS * 1.6e6));  // the heartbeat thread rewrites it
    EXPECT_GT(nlohmann::json::parse(slurp(d.path + "/status.json"))["heartbeat_unix"].get<double>(), first);
  }
  for (const auto& e : fs::directory_iterator(d.path))  // no temporary left behind
    EXPECT_EQ(e.path().filename().string().rfind(".status", 0), std::string::npos) << e.path();
}

// Between two attempts the supervisor holds DIR on a StatusFile: "restarting" with a beating
// heartbeat until a leader's job.lock replaces its own, then silent; destroyed at once; at the
// job's end every accepted request is answered refused.
TEST(JobStatusFile, SupervisorHoldBeatsUntilALeaderTakesOver) {
  TempDir d;
  fs::create_directories(d.path + "/answers");
  fs::create_directories(d.path + "/requests");
  setenv(kSupervisorPidEnv, std::to_string(getpid()).c_str(), 1);
  std::ofstream(d.path + "/status.json") << R"({"version":1,"step":7,"health":"running","exit_code":137,)"
                                         << R"("pending_requests":[{"request":"r1","step":9,"to":"dp=1"}]})";
  const auto status = [&] { return nlohmann::json::parse(slurp(d.path + "/status.json")); };
  auto hold = std::make_unique<SupervisorHold>(d.path);
  EXPECT_TRUE(held_by_supervisor(d.path));
  EXPECT_EQ(status()["health"], "restarting");
  EXPECT_EQ(status()["step"], 7);
  EXPECT_FALSE(status().contains("exit_code"));
  const double first = status()["heartbeat_unix"].get<double>();
  usleep(static_cast<useconds_t>(kHeartbeatS * 1.6e6));
  EXPECT_GT(status()["heartbeat_unix"].get<double>(), first);
  // The attempt's leader (another pid) takes DIR: the hold writes no more.
  std::ofstream(d.path + "/job.lock") << R"({"version":1,"pid":1,"host":")" << host_name() << R"("})";
  usleep(static_cast<useconds_t>(kHeartbeatS * 1.2e6));  // a beat that may have started before
  std::ofstream(d.path + "/status.json") << R"({"version":1,"health":"running","heartbeat_unix":5})";
  usleep(static_cast<useconds_t>(kHeartbeatS * 1.6e6));
  EXPECT_EQ(status()["heartbeat_unix"], 5);
  const auto t0 = std::chrono::steady_clock::now();
  hold.reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.05);
  // The supervisor ends the job: the request the status still holds is answered refused, by name.
  std::ofstream(d.path + "/status.json") << R"({"version":1,"pending_requests":[{"request":"r1"}]})";
  hold = std::make_unique<SupervisorHold>(d.path);
  hold.reset();
  end_supervised_job_dir(d.path, 137, "the job ended with exit 137");
  const auto answer = read_answer(d.path, "r1");
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, AnswerState::kRefused);
  EXPECT_EQ(answer->reason, "the job ended with exit 137");
  EXPECT_EQ(status()["health"], "ended");
  EXPECT_FALSE(fs::exists(d.path + "/job.lock"));
  unsetenv(kSupervisorPidEnv);
}

TEST(JobHandOvers, AreVersionedJson) {
  LeaderState s;
  s.schedule = "x";
  s.control = {{"pending", nlohmann::json::array({{{"step", 5}, {"id", "r"}, {"to", "dp=2"}}})}};
  s.per_layout["dp=2"] = {10, 2, 3};
  const LeaderState back = LeaderState::parse(s.serialize());
  EXPECT_EQ(back.schedule, "x");
  EXPECT_EQ(back.control, s.control);
  EXPECT_EQ(back.per_layout.at("dp=2").steps, 3);
  auto j = nlohmann::json::parse(s.serialize());
  j["version"] = 9;
  EXPECT_NE(message_of([&] { LeaderState::parse(j.dump()); }).find("leader state version 9"), std::string::npos);

  Schedule sched = {{0, vps::ParallelConfig::parse("dp=2")},
                    {4, vps::ParallelConfig::parse("tp=2")},
                    {8, vps::ParallelConfig::parse("dp=1")},
                    {9, vps::ParallelConfig::parse("dp=2")}};
  const std::map<std::int64_t, std::string> vacate = {{4, "all"}, {8, "1,3"}, {9, "keep"}};  // keep: a lend
  const std::string wire = encode_schedule_tail(vps::ParallelConfig::parse("dp=2"), sched, 1, vacate);
  EXPECT_EQ(nlohmann::json::parse(wire).at("vacate"), nlohmann::json::parse(R"({"4":"all","8":[1,3],"9":"keep"})"))
      << wire;
  Schedule got;
  std::map<std::int64_t, std::string> got_vacate;
  decode_schedule_tail(wire, got, got_vacate);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1].first, 4);
  EXPECT_EQ(got[2].second.str(), sched[2].second.str());
  EXPECT_EQ(got_vacate, vacate);
  EXPECT_NE(
      message_of([&] { decode_schedule_tail(R"({"version":1,"schedule":"0:dp=1","vacate":{}})", got, got_vacate); })
          .find("schedule hand-over version 1 is not supported; this process reads version 2 (every process of "
                "a job must run the same dynatrain)"),
      std::string::npos);
  EXPECT_NE(message_of([&] {
              decode_schedule_tail(R"({"version":2,"schedule":"0:dp=1","vacate":{"4":"1,3"}})", got, got_vacate);
            }).find(R"("vacate" of step 4 is "1,3"; valid: "all", "keep" or an array of world ranks)"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              decode_schedule_tail(R"({"version":2,"schedule":"0:dp=1","vacate":{"4":[1,-3]}})", got, got_vacate);
            }).find(R"("vacate" of step 4 is [1,-3])"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_schedule_tail("0:dp=1", got, got_vacate); }).find("malformed schedule hand-over"),
            std::string::npos);
}

// JobControl on a directory this process holds: requests go into the schedule and are answered.
TEST(JobControlRequests, AcceptSupersedeRefuseCommit) {
  TempDir d;
  JobControl c(d.path);
  ASSERT_EQ(c.start({{"steps", 20}}), "");
  Schedule sched = {{0, vps::ParallelConfig::parse("dp=2")}};
  std::map<std::int64_t, std::string> vacate;
  RequestContext ctx{sched, vacate, 1, 2, 20, 3, false, 2, sched[0].second, [](vps::ParallelConfig& cfg) {
                       if (cfg.tp == 3) DT_INPUT_ERROR("tp=3 does not divide 8 attention heads");
                     }};
  const std::string first = place_request(d.path, JobRequest{"tp=2", -1, ""});
  const std::string second = place_request(d.path, JobRequest{"tp=2,zero=0", -1, ""});
  const std::string bad = place_request(d.path, JobRequest{"tp=3", -1, ""});
  const std::string late = place_request(d.path, JobRequest{"dp=1", 25, ""});
  const std::string vac = place_request(d.path, JobRequest{"dp=2", 9, "4"});
  c.take_requests(ctx);
  ASSERT_EQ(sched.size(), 2u);  // both without --at-step land at step + look-ahead = 5
  EXPECT_EQ(sched[1].first, 5);
  EXPECT_EQ(sched[1].second.zero, 0);
  EXPECT_EQ(read_answer(d.path, first)->state, AnswerState::kSuperseded);
  EXPECT_NE(read_answer(d.path, first)->reason.find(second), std::string::npos);
  EXPECT_EQ(read_answer(d.path, second)->state, AnswerState::kAccepted);
  EXPECT_EQ(read_answer(d.path, second)->step, 5);
  EXPECT_EQ(read_answer(d.path, bad)->reason, "tp=3 does not divide 8 attention heads");
  EXPECT_NE(read_answer(d.path, late)->reason.find("at or past --steps 20"), std::string::npos);
  EXPECT_EQ(read_answer(d.path, vac)->reason, "cannot vacate rank 4: valid ranks are 0..1");
  const auto status = nlohmann::json::parse(slurp(d.path + "/status.json"));
  ASSERT_EQ(status["pending_requests"].size(), 1u);
  EXPECT_EQ(status["pending_requests"][0]["request"], second);
  // The hand-over carries the pending request to a new leader, which answers the commit.
  const nlohmann::json handed = c.hand_over();
  c.resign();
  JobControl next(d.path);
  next.take_over(handed, 5);
  next.switch_done(5, {{"from", "dp=2"}, {"to", "tp=2,zero=0"}, {"refused", ""}, {"pause_s", 0.5}});
  const auto done = read_answer(d.path, second);
  EXPECT_EQ(done->state, AnswerState::kCommitted);
  EXPECT_DOUBLE_EQ(done->figures.value("pause_s", 0.0), 0.5);
  const std::string unanswered = place_request(d.path, JobRequest{"dp=2", -1, ""});
  next.end(0, 20);
  EXPECT_NE(read_answer(d.path, unanswered)->reason.find("the job ended after step 19"), std::string::npos);
  EXPECT_NE(why_no_live_job(d.path).find("the job ended (exit code 0)"), std::string::npos);
  EXPECT_FALSE(fs::exists(d.path + "/job.lock"));
  const std::string events = slurp(d.path + "/events.jsonl");
  for (const char* e : {"job_started", "request_accepted", "request_superseded", "request_refused", "leader_moved",
                        "switch_committed", "job_ended"})
    EXPECT_NE(events.find(std::string("\"event\":\"") + e + "\""), std::string::npos) << e;
}

// A lend accepted by one leader and refused at its commit by the next (the hand-over carries it)
// lends nothing: a later --lend is accepted, not refused as "while processes are lent".
TEST(JobControlRequests, PendingLendTravelsWithTheLeaderRole) {
  TempDir d;
  JobControl c(d.path);
  ASSERT_EQ(c.start({{"steps", 20}}), "");
  Schedule sched = {{0, vps::ParallelConfig::parse("dp=4")}};
  std::map<std::int64_t, std::string> vacate;
  RequestContext ctx{sched, vacate, 1, 2, 20, 3, false, 4, sched[0].second, [](vps::ParallelConfig&) {}};
  JobRequest lend;
  lend.lend = 2;
  const std::string first = place_request(d.path, lend);
  c.take_requests(ctx);
  ASSERT_EQ(read_answer(d.path, first)->state, AnswerState::kAccepted);
  EXPECT_EQ(sched.back().second.str(), vps::ParallelConfig::parse("dp=2").str());
  const nlohmann::json handed = c.hand_over();
  c.resign();
  JobControl next(d.path);
  next.take_over(handed, 3);
  next.switch_done(5, {{"from", "dp=4"}, {"to", "dp=2"}, {"refused", "out of memory on rank 1"}, {"pause_s", 0.0}});
  EXPECT_EQ(read_answer(d.path, first)->state, AnswerState::kRefused);
  sched.pop_back();  // the refused switch did not run
  ctx.step = 6;
  const std::string again = place_request(d.path, lend);
  next.take_requests(ctx);
  EXPECT_EQ(read_answer(d.path, again)->state, AnswerState::kAccepted) << read_answer(d.path, again)->reason;
  next.end(0, 20);
}

}  // namespace
}  // namespace dynatrain::job
