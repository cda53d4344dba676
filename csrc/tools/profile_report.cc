// The table, JSON and Chrome trace of a profiled call for shapefn-run. Each
// mirrors its counterpart in shapefn/runtime/profiler.py (tests/test_runner.py
// compares them): change both together.
#include "profile_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <vector>

#include "json.h"
#include "shapefn/error.h"

namespace shapefn::tools {
namespace {

constexpr int kHostPid = 1, kDevicePid = 2, kTid = 1;

bool IsOp(ProfileCategory c) { return c != ProfileCategory::kCall && c != ProfileCategory::kReadback; }

struct Row {
  const ProfileEvent* first;  // names the op
  int64_t count = 0, sum_ns = 0, min_ns = 0, max_ns = 0, bytes = 0, modelled_ns = 0;
  std::optional<int64_t> device_ns;
};

using Key = std::tuple<ProfileCategory, std::string, std::string, std::string>;
Key KeyOf(const ProfileEvent& e) { return {e.category, e.name, e.device, e.detail}; }

const ProfileEvent& CallOf(const Profiler& p) {
  for (const ProfileEvent& e : p.events()) {
    if (e.category == ProfileCategory::kCall) return e;
  }
  Fail(ErrorKind::kValue, "the profiler holds no finished call");
}

std::vector<Row> Rows(const Profiler& p) {
  std::vector<Row> rows;
  std::map<Key, size_t> index;
  std::map<Key, int64_t> on_device;
  for (const ProfileEvent& e : p.events()) {
    if (e.track == ProfileTrack::kDevice) {
      if (e.time_source == TimeSource::kDevice) on_device[KeyOf(e)] += e.duration_ns;
      continue;
    }
    if (!IsOp(e.category)) continue;
    auto [it, added] = index.emplace(KeyOf(e), rows.size());
    if (added) rows.push_back(Row{&e, 0, 0, e.measured_ns, e.measured_ns});
    Row& r = rows[it->second];
    r.count += 1;
    r.sum_ns += e.measured_ns;
    r.min_ns = std::min(r.min_ns, e.measured_ns);
    r.max_ns = std::max(r.max_ns, e.measured_ns);
    r.bytes += e.bytes;
    r.modelled_ns += e.modelled_ns;
  }
  for (auto& [key, i] : index) {
    auto it = on_device.find(key);
    if (it != on_device.end()) rows[i].device_ns = it->second;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.sum_ns > b.sum_ns; });
  return rows;
}

std::string Fixed(double v, bool thousands = true) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  std::string s = buf;
  if (!thousands) return s;
  size_t digits_end = s.find('.');
  const size_t first = s[0] == '-' ? 1 : 0;
  for (size_t i = digits_end; i > first + 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

std::string Grouped(int64_t v) {
  std::string s = std::to_string(v);
  const size_t first = s[0] == '-' ? 1 : 0;
  for (size_t i = s.size(); i > first + 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

std::string KindOf(const ProfileEvent& e) {
  std::string kind = ProfileCategoryName(e.category);
  return e.detail.empty() ? kind : kind + " (" + e.detail + ")";
}

struct Totals {
  int64_t call_ns = 0, timeline_ns = 0, ops_ns = 0, device_ns = 0, modelled_wait_ns = 0;
};

Totals TotalsOf(const Profiler& p) {
  Totals t;
  const ProfileEvent& call = CallOf(p);
  t.call_ns = call.measured_ns;
  t.timeline_ns = call.duration_ns;
  for (const ProfileEvent& e : p.events()) {
    if (e.time_source == TimeSource::kDevice && e.track == ProfileTrack::kDevice) t.device_ns += e.duration_ns;
    if (e.track != ProfileTrack::kHost || !IsOp(e.category)) continue;
    t.ops_ns += e.measured_ns;
    if (e.category == ProfileCategory::kSync) t.modelled_wait_ns += e.modelled_ns;
  }
  return t;
}

const char* TimingNote(TimeSource source) {
  switch (source) {
    case TimeSource::kMeasured: return "host steady_clock";
    case TimeSource::kModelled:
      return "modelled by the device's cost model (latency + bytes / bandwidth), not measured";
    case TimeSource::kHostCall: return "host-side call that queued the work; device execution is not measured";
    case TimeSource::kDevice: return "execution on the device by its own clock (OpenCL profiling events, CUDA events)";
  }
  return "?";
}

std::string TraceName(const ProfileEvent& e) {
  if (e.category == ProfileCategory::kCopy) return "copy " + e.name;
  if (e.category == ProfileCategory::kShapeFunc || e.category == ProfileCategory::kCompile) {
    return std::string(ProfileCategoryName(e.category)) + " " + e.name;
  }
  return e.name;
}

std::string TraceArgs(const ProfileEvent& e) {
  std::string timing = TimingNote(e.time_source);
  const bool waits = e.category == ProfileCategory::kSync || e.category == ProfileCategory::kReadback ||
                     e.category == ProfileCategory::kCall;
  if (waits && e.modelled_ns != 0) {
    timing = "measured_us on the host steady_clock, plus modelled_us waiting for the device's modelled copies";
  } else if (e.category == ProfileCategory::kCopy && e.track == ProfileTrack::kHost && e.modelled_ns != 0) {
    timing = "host steady_clock for the call; modelled_us is the copy's modelled transfer time on the device";
  }
  std::string args = "{\"device\": " + JsonString(e.device) +
                     ", \"time_source\": " + JsonString(TimeSourceName(e.time_source)) +
                     ", \"timing\": " + JsonString(timing);
  if (!e.detail.empty()) args += ", \"detail\": " + JsonString(e.detail);
  if (e.bytes != 0) args += ", \"bytes\": " + std::to_string(e.bytes);
  if (e.track == ProfileTrack::kHost) args += ", \"measured_us\": " + JsonNumber(Us(e.measured_ns));
  if (e.modelled_ns != 0) args += ", \"modelled_us\": " + JsonNumber(Us(e.modelled_ns));
  if (e.time_source == TimeSource::kDevice) args += ", \"device_us\": " + JsonNumber(Us(e.duration_ns));
  return args + "}";
}

std::string Meta(int pid, const char* name, const std::string& args) {
  return "{\"ph\": \"M\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(kTid) + ", \"name\": \"" +
         name + "\", \"args\": " + args + "}";
}

}  // namespace

std::string ProfileTable(const Profiler& p) {
  const std::vector<std::string> headers = {"Name",     "Duration (us)", "Percent", "On device (us)",
                                            "Device",   "Count",         "Kind",    "Mean (us)",
                                            "Min (us)", "Max (us)",      "Bytes",   "Modelled (us)"};
  const Totals totals = TotalsOf(p);
  const double call_ns = static_cast<double>(std::max<int64_t>(CallOf(p).measured_ns, 1));
  std::vector<std::vector<std::string>> table;
  int64_t count = 0;
  for (const Row& r : Rows(p)) {
    count += r.count;
    table.push_back({r.first->name, Fixed(Us(r.sum_ns)), Fixed(100.0 * static_cast<double>(r.sum_ns) / call_ns, false),
                     r.device_ns ? Fixed(Us(*r.device_ns)) : "", r.first->device, Grouped(r.count), KindOf(*r.first),
                     Fixed(Us(r.sum_ns) / static_cast<double>(r.count)), Fixed(Us(r.min_ns)), Fixed(Us(r.max_ns)),
                     r.bytes != 0 ? Grouped(r.bytes) : "", r.modelled_ns != 0 ? Fixed(Us(r.modelled_ns)) : ""});
  }
  const double call_us = std::max(Us(totals.call_ns), 1e-3);
  std::vector<std::string> rule(headers.size()), sum(headers.size()), total(headers.size());
  rule[0] = "----------";
  sum[0] = "Sum";
  sum[1] = Fixed(Us(totals.ops_ns));
  sum[2] = Fixed(100.0 * Us(totals.ops_ns) / call_us, false);
  sum[3] = totals.device_ns != 0 ? Fixed(Us(totals.device_ns)) : "";
  sum[5] = Grouped(count);
  total[0] = "Total";
  total[1] = Fixed(Us(totals.call_ns));
  total[2] = "100.00";
  total[4] = p.device();
  total[5] = "1";
  total[6] = "call";
  total[11] = totals.modelled_wait_ns != 0 ? Fixed(Us(totals.modelled_wait_ns)) : "";
  table.push_back(rule);
  table.push_back(sum);
  table.push_back(total);
  std::vector<size_t> widths(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    widths[i] = headers[i].size();
    for (const auto& row : table) widths[i] = std::max(widths[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - cells[i].size(), ' ');
      out += (i == 0 ? "" : "  ") + (i == 0 ? cells[i] + pad : pad + cells[i]);
    }
    return out.substr(0, out.find_last_not_of(' ') + 1) + "\n";
  };
  std::string out = line(headers);
  for (const auto& row : table) out += line(row);
  return out;
}

std::string ProfileJson(const Profiler& p, const std::string& indent) {
  const double call_ns = static_cast<double>(std::max<int64_t>(CallOf(p).measured_ns, 1));
  std::ostringstream os;
  os << "{\n" << indent << "  \"rows\": [";
  bool first = true;
  for (const Row& r : Rows(p)) {
    const ProfileEvent& e = *r.first;
    os << (first ? "" : ",") << "\n"
       << indent << "    {\"name\": " << JsonString(e.name)
       << ", \"kind\": " << JsonString(ProfileCategoryName(e.category)) << ", \"detail\": " << JsonString(e.detail)
       << ", \"device\": " << JsonString(e.device) << ", \"count\": " << r.count
       << ", \"duration_us\": " << JsonNumber(Us(r.sum_ns))
       << ", \"mean_us\": " << JsonNumber(Us(r.sum_ns) / static_cast<double>(r.count))
       << ", \"min_us\": " << JsonNumber(Us(r.min_ns)) << ", \"max_us\": " << JsonNumber(Us(r.max_ns))
       << ", \"percent\": " << JsonNumber(100.0 * static_cast<double>(r.sum_ns) / call_ns) << ", \"bytes\": " << r.bytes
       << ", \"modelled_us\": " << JsonNumber(Us(r.modelled_ns))
       << ", \"device_us\": " << (r.device_ns ? JsonNumber(Us(*r.device_ns)) : "null") << "}";
    first = false;
  }
  const Totals t = TotalsOf(p);
  os << "\n"
     << indent << "  ],\n"
     << indent << "  \"totals\": {\"call_us\": " << JsonNumber(Us(t.call_ns))
     << ", \"timeline_us\": " << JsonNumber(Us(t.timeline_ns)) << ", \"ops_us\": " << JsonNumber(Us(t.ops_ns))
     << ", \"device_us\": " << JsonNumber(Us(t.device_ns)) << "}\n"
     << indent << "}";
  return os.str();
}

std::string ChromeTrace(const Profiler& p) {
  std::vector<std::string> trace = {
      Meta(kHostPid, "process_name", "{\"name\": \"host\"}"),
      Meta(kHostPid, "process_sort_index", "{\"sort_index\": 0}"),
      Meta(kHostPid, "thread_name", "{\"name\": \"VM thread\"}"),
  };
  const auto& events = p.events();
  if (std::any_of(events.begin(), events.end(),
                  [](const ProfileEvent& e) { return e.track == ProfileTrack::kDevice; })) {
    trace.push_back(Meta(kDevicePid, "process_name", "{\"name\": " + JsonString("device " + p.device()) + "}"));
    trace.push_back(Meta(kDevicePid, "process_sort_index", "{\"sort_index\": 1}"));
    trace.push_back(Meta(kDevicePid, "thread_name", "{\"name\": \"stream (copies and kernels in issue order)\"}"));
  }
  // The device twin follows the host event that issued it.
  std::map<std::pair<ProfileCategory, std::string>, double> last_issued;
  for (size_t flow_id = 0; flow_id < events.size(); ++flow_id) {
    const ProfileEvent& e = events[flow_id];
    const bool host = e.track == ProfileTrack::kHost;
    const double ts = Us(e.start_ns);
    trace.push_back("{\"ph\": \"X\", \"cat\": " + JsonString(ProfileCategoryName(e.category)) + ", \"name\": " +
                    JsonString(TraceName(e)) + ", \"pid\": " + std::to_string(host ? kHostPid : kDevicePid) +
                    ", \"tid\": " + std::to_string(kTid) + ", \"ts\": " + JsonNumber(ts) +
                    ", \"dur\": " + JsonNumber(Us(e.duration_ns)) + ", \"args\": " + TraceArgs(e) + "}");
    if (host) {
      last_issued[{e.category, e.name}] = ts;
      continue;
    }
    auto issuer = last_issued.find({e.category, e.name});
    if (issuer == last_issued.end()) continue;
    const std::string flow = "\"cat\": \"issue\", \"name\": \"issue\", \"id\": " + std::to_string(flow_id);
    trace.push_back("{" + flow + ", \"ph\": \"s\", \"pid\": " + std::to_string(kHostPid) +
                    ", \"tid\": " + std::to_string(kTid) + ", \"ts\": " + JsonNumber(issuer->second) + "}");
    trace.push_back("{" + flow + ", \"ph\": \"f\", \"bp\": \"e\", \"pid\": " + std::to_string(kDevicePid) +
                    ", \"tid\": " + std::to_string(kTid) + ", \"ts\": " + JsonNumber(ts) + "}");
  }
  std::string out = "{\"traceEvents\": [";
  for (size_t i = 0; i < trace.size(); ++i) out += (i ? ",\n" : "\n") + trace[i];
  out += "\n], \"displayTimeUnit\": \"ns\", \"otherData\": {\"function\": " + JsonString(p.function()) +
         ", \"device\": " + JsonString(p.device()) + "}}\n";
  return out;
}

}  // namespace shapefn::tools
