// edm/join_message.h: the join handshake's header and payload survive the wire (a payload of
// any bytes, newlines and NULs included), and a header from another version or with a field
// missing or of the wrong type is refused with a message naming it.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "testing/error_message.h"
#include "edm/join_message.h"

namespace dynatrain::edm {
namespace {

JoinMessage sample() {
  std::string payload = "{\"not\": \"the header\"}\nline two\n";
  payload += std::string("\0\xff\n", 3);
  return JoinMessage{"tp=2,dp=2", "tp=2,pp=3,pp_layers=2/1/1", 7, {0, 3, 2, 1, 5, 6}, payload};
}

// The message of the error `parse_join_message(wire)` throws as E; empty if it throws nothing.
template <class E>
std::string refusal(const std::string& wire) {
  return testing::error_message<E>([&] { parse_join_message(wire); });
}

TEST(JoinMessage, RoundTripsEveryFieldAndAnyPayload) {
  const JoinMessage m = sample();
  const std::string wire = serialize(m);
  EXPECT_EQ(
      wire.substr(0, wire.find('\n')),
      R"({"current":"tp=2,dp=2","ids":[0,3,2,1,5,6],"next":"tp=2,pp=3,pp_layers=2/1/1","next_id":7,"version":1})");
  const JoinMessage back = parse_join_message(wire);
  EXPECT_EQ(back.current, m.current);
  EXPECT_EQ(back.next, m.next);
  EXPECT_EQ(back.next_id, m.next_id);
  EXPECT_EQ(back.ids, m.ids);
  EXPECT_EQ(back.payload, m.payload);
  EXPECT_EQ(parse_join_message(serialize(JoinMessage{"dp=1", "dp=2", 2, {0, 1}, ""})).payload, "");
}

TEST(JoinMessage, AnotherVersionIsRefusedByNumber) {
  const std::string wire = R"({"version":2,"current":"dp=1","next":"dp=2","next_id":2,"ids":[0,1]})"
                           "\n";
  EXPECT_EQ(refusal<InputError>(wire),
            "join message version 2 is not supported; this process reads version 1 (every process of a job "
            "must run the same dynatrain)");
}

TEST(JoinMessage, MalformedHeadersNameTheField) {
  const std::string ok_rest = R"("current":"dp=1","next":"dp=2","next_id":2,"ids":[0,1]})";
  const auto with = [&](const std::string& head) { return "{" + head + ok_rest + "\n"; };
  EXPECT_EQ(refusal<InvariantError>(with(R"("version":1,)")), "");
  const std::pair<std::string, std::string> cases[] = {
      {"dp=1\ndp=2\n2 0 1\n", "its first line (4 bytes) is not a JSON object"},  // the old text format
      {R"({"version":1})", "its first line (13 bytes) is not a JSON object"},    // no newline: no payload
      {with(""), "\"version\" must be an integer"},
      {with(R"("version":"1",)"), "\"version\" must be an integer"},
      {R"({"version":1,"next":"dp=2","next_id":2,"ids":[0,1]})"
       "\n",
       "\"current\" must be a config string"},
      {R"({"version":1,"current":3,"next":"dp=2","next_id":2,"ids":[0,1]})"
       "\n",
       "\"current\" must be a config string"},
      {R"({"version":1,"current":"dp=1","next_id":2,"ids":[0,1]})"
       "\n",
       "\"next\" must be a config string"},
      {R"({"version":1,"current":"dp=1","next":"dp=2","next_id":-2,"ids":[0,1]})"
       "\n",
       "\"next_id\" must be a process id"},
      {R"({"version":1,"current":"dp=1","next":"dp=2","next_id":2.5,"ids":[0,1]})"
       "\n",
       "\"next_id\" must be a process id"},
      {R"({"version":1,"current":"dp=1","next":"dp=2","next_id":2})"
       "\n",
       "\"ids\" must be an array of process ids"},
      {R"({"version":1,"current":"dp=1","next":"dp=2","next_id":2,"ids":[0,"1"]})"
       "\n",
       "\"ids\" must be an array"},
      {R"({"version":1,"current":"dp=1","next":"dp=2","next_id":2,"ids":[0,-1]})"
       "\n",
       "\"ids\" must be an array"},
  };
  for (const auto& [wire, want] : cases) {
    const std::string got = refusal<InvariantError>(wire);
    EXPECT_NE(got.find("malformed join message from rank 0: " + want), std::string::npos) << wire << " -> " << got;
  }
}

}  // namespace
}  // namespace dynatrain::edm
