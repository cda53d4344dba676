"""What one VM call spent its time on: ``vm.profile(*args)`` returns a
:class:`ProfileReport`.

Times are the host's ``steady_clock``. On the simulated device a copy's
device time and a sync's wait for it come from the sim's cost model
(``latency + bytes / bandwidth``), and say so (``time_source="modelled"``).
On a device with a timer, each kernel call and copy on the device track has
its execution time by the device's own clock (``time_source="device"``,
the ``device_us`` of the rows): OpenCL's profiling events, or the CUDA events
of TVM's timer (``runtime.timer.cuda``). Only profiled calls are timed so; the
times are read after the call's work is issued, so profiling adds no sync to
the call, and the call's event on the timeline lasts until its device work
ends. On other devices whose kernels are not CPU code a kernel call or a copy
returns once the work is queued: its time is that host-side call
(``time_source="host_call"``), and only syncs measure real device time.
"""
from __future__ import annotations

import json
import os
from collections import namedtuple

# One recorded event (see csrc/include/shapefn/profiler.h). Times in ns from
# the start of the call, on the trace timeline: host wall-clock time plus the
# modelled waits of earlier syncs.
ProfileEvent = namedtuple("ProfileEvent", [
    "category", "track", "time_source", "name", "device", "detail",
    "start_ns", "duration_ns", "measured_ns", "modelled_ns", "bytes",
])

# The ops a table row aggregates: they do not overlap, so their times add up.
# (A readback's span holds its copies and sync; the call holds everything.)
_OP_CATEGORIES = ("kernel", "shape_func", "compile", "copy", "sync", "alloc")

_HOST_PID, _DEVICE_PID, _TID = 1, 2, 1

_TIME_SOURCE_NOTES = {
    "measured": "host steady_clock",
    "modelled": "modelled by the device's cost model (latency + bytes / bandwidth), not measured",
    "host_call": "host-side call that queued the work; device execution is not measured",
    "device": "execution on the device by its own clock (OpenCL profiling events, CUDA events)",
}


class ProfileReport:
    """The events, per-op rows, totals and counters of one profiled call.

    ``str(report)`` is a table in the style of TVM's profiler;
    ``report.to_json()`` the same as JSON; ``report.to_chrome_trace(path)``
    writes a Chrome trace (open it in https://ui.perfetto.dev or
    chrome://tracing). ``report.outputs`` is what the call returned.
    """

    def __init__(self, function: str, device: str, events, counters: dict, *, outputs=None,
                 configuration: dict | None = None):
        self.function = function
        self.device = device
        self.events = [e if isinstance(e, ProfileEvent) else ProfileEvent(*e) for e in events]
        self.counters = dict(counters)
        self.outputs = outputs
        self.configuration = {"function": function, "device": device, **(configuration or {})}
        self.configuration["timing"] = "; ".join(
            f"{source}: {_TIME_SOURCE_NOTES[source]}"
            for source in _TIME_SOURCE_NOTES if any(e.time_source == source for e in self.events))

    @classmethod
    def _from_profiler(cls, profiler, outputs, configuration: dict) -> ProfileReport:
        """From a finished ``_core.Profiler``."""
        return cls(profiler.function, profiler.device, profiler.events(), profiler.counters(),
                   outputs=outputs, configuration=configuration)

    # ----- aggregation -------------------------------------------------------

    @property
    def call(self) -> ProfileEvent:
        """The event spanning the whole call."""
        return next(e for e in self.events if e.category == "call")

    @property
    def rows(self) -> list[dict]:
        """One row per op (category, name, device, detail), longest first:
        ``count``, measured ``duration_us`` (sum), ``mean_us``, ``min_us``,
        ``max_us``, ``percent`` of the call, ``bytes``, ``modelled_us``, and
        ``device_us``, the ops' execution time by the device's clock (None
        where the device did not time them)."""
        groups: dict[tuple, list[ProfileEvent]] = {}
        on_device: dict[tuple, list[int]] = {}
        for e in self.events:
            key = (e.category, e.name, e.device, e.detail)
            if e.track == "host" and e.category in _OP_CATEGORIES:
                groups.setdefault(key, []).append(e)
            elif e.time_source == "device":
                on_device.setdefault(key, []).append(e.duration_ns)
        call_ns = max(self.call.measured_ns, 1)
        rows = []
        for key, events in groups.items():
            category, name, device, detail = key
            measured = [e.measured_ns for e in events]
            rows.append({
                "name": name, "kind": category, "detail": detail, "device": device,
                "count": len(events),
                "duration_us": sum(measured) / 1e3,
                "mean_us": sum(measured) / len(measured) / 1e3,
                "min_us": min(measured) / 1e3,
                "max_us": max(measured) / 1e3,
                "percent": 100.0 * sum(measured) / call_ns,
                "bytes": sum(e.bytes for e in events),
                "modelled_us": sum(e.modelled_ns for e in events) / 1e3,
                "device_us": sum(on_device[key]) / 1e3 if key in on_device else None,
            })
        rows.sort(key=lambda r: r["duration_us"], reverse=True)
        return rows

    @property
    def totals(self) -> dict:
        """Totals over the call, counted from its events: bytes and copies
        each way, syncs, kernel and shape-function calls, allocations (from
        the pool or the device), readbacks; the call's measured time, the
        modelled time of its transfers and of its waits for them; the
        device's execution time of its kernels and copies where it timed them."""
        host = [e for e in self.events if e.track == "host"]

        def of(category, name=None, detail=None):
            return [e for e in host if e.category == category and (name is None or e.name == name)
                    and (detail is None or e.detail == detail)]

        call = self.call
        return {
            "call_us": call.measured_ns / 1e3,
            "timeline_us": call.duration_ns / 1e3,
            "ops_us": sum(e.measured_ns for e in host if e.category in _OP_CATEGORIES) / 1e3,
            "modelled_transfer_us": sum(e.modelled_ns for e in of("copy")) / 1e3,
            "modelled_wait_us": sum(e.modelled_ns for e in of("sync")) / 1e3,
            "device_us": sum(e.duration_ns for e in self.events if e.time_source == "device") / 1e3,
            "h2d_copies": len(of("copy", "h2d")),
            "h2d_bytes": sum(e.bytes for e in of("copy", "h2d")),
            "d2h_copies": len(of("copy", "d2h")),
            "d2h_bytes": sum(e.bytes for e in of("copy", "d2h")),
            "syncs": len(of("sync")),
            "kernel_calls": len(of("kernel")),
            "shape_func_calls": len(of("shape_func")),
            "allocations": len(of("alloc")),
            "pool_allocations": len(of("alloc", detail="pool")),
            "device_allocations": len(of("alloc", detail="device")),
            "readbacks": len(of("readback")),
            "readback_bytes": sum(e.bytes for e in of("readback")),
        }

    # ----- output ------------------------------------------------------------

    def __str__(self) -> str:
        headers = ["Name", "Duration (us)", "Percent", "On device (us)", "Device", "Count", "Kind", "Mean (us)",
                   "Min (us)", "Max (us)", "Bytes", "Modelled (us)"]
        table = []
        for r in self.rows:
            kind = f"{r['kind']} ({r['detail']})" if r["detail"] else r["kind"]
            table.append([r["name"], f"{r['duration_us']:,.2f}", f"{r['percent']:.2f}",
                          "" if r["device_us"] is None else f"{r['device_us']:,.2f}", r["device"],
                          f"{r['count']:,}", kind, f"{r['mean_us']:,.2f}", f"{r['min_us']:,.2f}",
                          f"{r['max_us']:,.2f}", f"{r['bytes']:,}" if r["bytes"] else "",
                          f"{r['modelled_us']:,.2f}" if r["modelled_us"] else ""])
        totals = self.totals
        call_us = max(totals["call_us"], 1e-3)
        table.append(["----------"] + [""] * (len(headers) - 1))
        table.append(["Sum", f"{totals['ops_us']:,.2f}", f"{100 * totals['ops_us'] / call_us:.2f}",
                      f"{totals['device_us']:,.2f}" if totals["device_us"] else "", "",
                      f"{sum(r['count'] for r in self.rows):,}"] + [""] * (len(headers) - 6))
        table.append(["Total", f"{totals['call_us']:,.2f}", "100.00", "", self.device, "1", "call"]
                     + [""] * 4 + [f"{totals['modelled_wait_us']:,.2f}" if totals["modelled_wait_us"] else ""])
        widths = [max(len(headers[i]), *(len(row[i]) for row in table)) for i in range(len(headers))]

        def line(cells):
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        out = [line(headers)] + [line(row) for row in table]
        out += ["", "Sum adds the ops; the rest of Total is the interpreter (and the profiler's own "
                    "recording) between them.",
                "On device: the ops' execution time by the device's own clock, where the device timed them.",
                "Modelled: a copy's modelled transfer time; a sync's (and the call's) modelled wait for the device."]
        out += ["", "Configuration", "-------------"]
        out += [f"{k}: {v}" for k, v in self.configuration.items()]
        out += ["", "Counters", "--------"]
        out += [f"{k}: {v:,}" if isinstance(v, int) else f"{k}: {v:.9g}" for k, v in self.counters.items()]
        return "\n".join(out) + "\n"

    def to_json(self) -> str:
        """The rows, totals, counters and configuration as a JSON string."""
        return json.dumps({"function": self.function, "device": self.device,
                           "configuration": self.configuration, "rows": self.rows,
                           "totals": self.totals, "counters": self.counters}, indent=1)

    def to_chrome_trace(self, path: str | os.PathLike) -> None:
        """Writes the events in Chrome's trace-event JSON format: the host
        (the VM thread) and the device's stream are separate processes;
        arrows lead from the host call that issued device work to that work."""
        with open(path, "w") as f:
            json.dump(self._chrome_trace(), f)

    def _chrome_trace(self) -> dict:
        trace = [
            _meta(_HOST_PID, "process_name", {"name": "host"}),
            _meta(_HOST_PID, "process_sort_index", {"sort_index": 0}),
            _meta(_HOST_PID, "thread_name", {"name": "VM thread"}),
        ]
        if any(e.track == "device" for e in self.events):
            trace += [
                _meta(_DEVICE_PID, "process_name", {"name": f"device {self.device}"}),
                _meta(_DEVICE_PID, "process_sort_index", {"sort_index": 1}),
                _meta(_DEVICE_PID, "thread_name", {"name": "stream (copies and kernels in issue order)"}),
            ]
        last_issued: dict[tuple, dict] = {}
        for flow_id, e in enumerate(self.events):
            event = {
                "ph": "X", "cat": e.category, "name": _trace_name(e),
                "pid": _HOST_PID if e.track == "host" else _DEVICE_PID, "tid": _TID,
                "ts": e.start_ns / 1e3, "dur": e.duration_ns / 1e3,
                "args": _trace_args(e),
            }
            trace.append(event)
            if e.track == "host":
                last_issued[(e.category, e.name)] = event
                continue
            # The device twin follows the host event that issued it.
            issuer = last_issued.get((e.category, e.name))
            if issuer is not None:
                flow = {"cat": "issue", "name": "issue", "id": flow_id}
                trace.append({**flow, "ph": "s", "pid": _HOST_PID, "tid": _TID, "ts": issuer["ts"]})
                trace.append({**flow, "ph": "f", "bp": "e", "pid": _DEVICE_PID, "tid": _TID, "ts": event["ts"]})
        return {"traceEvents": trace, "displayTimeUnit": "ns",
                "otherData": {k: str(v) for k, v in self.configuration.items()}}

    def __repr__(self) -> str:
        t = self.totals
        return (f"<shapefn.ProfileReport {self.function} on {self.device}: {t['call_us']:,.1f} us, "
                f"{t['kernel_calls']} kernel calls, {t['d2h_bytes']:,} bytes d2h, {t['syncs']} syncs>")


def _meta(pid: int, name: str, args: dict) -> dict:
    return {"ph": "M", "pid": pid, "tid": _TID, "name": name, "args": args}


def _trace_name(e: ProfileEvent) -> str:
    if e.category == "copy":
        return f"copy {e.name}"
    if e.category in ("shape_func", "compile"):
        return f"{e.category} {e.name}"
    return e.name


def _trace_args(e: ProfileEvent) -> dict:
    timing = _TIME_SOURCE_NOTES[e.time_source]
    if e.category in ("sync", "readback", "call") and e.modelled_ns:
        timing = "measured_us on the host steady_clock, plus modelled_us waiting for the device's modelled copies"
    elif e.category == "copy" and e.track == "host" and e.modelled_ns:
        timing = "host steady_clock for the call; modelled_us is the copy's modelled transfer time on the device"
    args = {"device": e.device, "time_source": e.time_source, "timing": timing}
    if e.detail:
        args["detail"] = e.detail
    if e.bytes:
        args["bytes"] = e.bytes
    if e.track == "host":
        args["measured_us"] = e.measured_ns / 1e3
    if e.modelled_ns:
        args["modelled_us"] = e.modelled_ns / 1e3
    if e.time_source == "device":
        args["device_us"] = e.duration_ns / 1e3
    return args
