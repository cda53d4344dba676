// shapefn-run's report of a profiled call, in the formats of
// shapefn.ProfileReport (shapefn/runtime/profiler.py) for a process without Python:
// the per-op table, the rows and totals as JSON, the Chrome trace.
#pragma once

#include <string>

#include "shapefn/profiler.h"

namespace shapefn::tools {

// The table of str(ProfileReport): one row per op, longest first, then Sum
// and Total.
std::string ProfileTable(const Profiler& profiler);
// {"rows": [...], "totals": {...}}: ProfileReport.rows, and the times of
// ProfileReport.totals (call_us, timeline_us, ops_us, device_us).
std::string ProfileJson(const Profiler& profiler, const std::string& indent);
// The trace ProfileReport.to_chrome_trace writes.
std::string ChromeTrace(const Profiler& profiler);

}  // namespace shapefn::tools
