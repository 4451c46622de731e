// Test hook: kills or stops this process at a named point, so fault tests can hit a step or a
// switch on purpose (tests/reliability/fault_test.sh). Inert unless DT_FAULT is set.
//
//   DT_FAULT=ACTION:RANK:POINT:DELAY_MS     e.g. kill:1:switch:50   stop:2:step:0
//     ACTION  kill (SIGKILL) or stop (SIGSTOP: alive but silent, for the watchdog)
//     RANK    world rank that faults
//     POINT   switch (a layout switch starts) or step (a training step starts)
//     DELAY_MS  how long after the point begins (a thread fires it while the work runs)
// The first time the point is reached on that rank, the fault fires; later points are ignored.
// DT_FAULT_STAMP=FILE: the firing rank writes the Unix time (seconds) into FILE just before.
#pragma once

namespace dynatrain::tools {

void fault_point(const char* point, int rank);

}  // namespace dynatrain::tools
