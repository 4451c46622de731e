// The join handshake: what world rank 0 tells the processes a grow starts, the first message on
// the merged world. Wire format: one line of JSON (the header), then the payload's bytes as
// they are (any bytes, newlines too):
//   {"version":1,"current":"dp=2","next":"tp=2,dp=2","next_id":4,"ids":[0,1,2,3]}\n<payload>
// Every process of a job runs the same dynatrain, so another version is refused by name rather
// than read as something else.
#pragma once

#include <string>
#include <vector>

#include "edm/communicators.h"

namespace dynatrain::edm {

inline constexpr int kJoinMessageVersion = 1;

struct JoinMessage {
  std::string current;         // config string of the layout the job runs now
  std::string next;            // config string of the layout this prepare switches to
  ProcessId next_id = 0;       // the id the next process started gets (ids are never reused)
  std::vector<ProcessId> ids;  // the process id of every rank of the merged world, by rank
  std::string payload;         // rank 0's payload for the new processes (DeviceManager::prepare)
};

std::string serialize(const JoinMessage& m);
// InputError for another version; InvariantError naming the field for a malformed header.
JoinMessage parse_join_message(const std::string& wire);

}  // namespace dynatrain::edm
