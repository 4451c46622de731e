#include "tests/comm/transport_cases.h"

#include "tests/comm/transport_cases_support.h"

namespace dynatrain::comm::testing {

const std::vector<CommCase>& transport_cases() {
  static const std::vector<CommCase> cases = [] {
    std::vector<CommCase> all;
    add_point_to_point_cases(all);
    add_collective_cases(all);
    add_error_cases(all);
    add_runs_cases(all);
    return all;
  }();
  return cases;
}

}  // namespace dynatrain::comm::testing
