"""The benchmarks in tiny configurations: their JSON has every documented key
and the quantities they count (not their times) are right. Each benchmark
also checks its programs' results against numpy as it runs. The copy
elimination benchmark, which runs its programs on a device, runs on sim and
on opencl, where it counts what it counts on sim."""
import json
import subprocess
import sys

import numpy as np
import pytest

import shapefn
from conftest import DEVICES, device_independent
from shapefn.bench import compile_time, copy_elimination, report, roi_slicing, timing, vm_overhead

VM_KEYS = ["shapefn_static_ns_per_op", "shapefn_dynamic_ns_per_op", "relax_static_ns_per_op",
           "relax_dynamic_ns_per_op", "shapefn_mlp_static_us", "shapefn_mlp_dynamic_us", "relax_mlp_static_us",
           "relax_mlp_dynamic_us", "shapefn_call_us", "relax_call_us", "shapefn_call_numpy_us", "relax_call_numpy_us",
           "shape_func_native_ns", "shape_func_native_reshape_ns", "shape_func_tvm_ns", "machine_reference_us"]
OPS = 20


@pytest.fixture(scope="module")
def results():
    """One tiny run of each benchmark, with --cache-flush (shared by the tests)."""
    return {
        "vm_overhead": vm_overhead.measure(num_ops=OPS, repeat=2, flush=True),
        "compile": compile_time.measure(sizes=(100, 200), repeat=1, flush=False),
        "copy_elimination": copy_elimination.measure(num_rois=3, fmap_shape=(2, 4, 16, 16), flush=True),
        "machine": report.machine(),
    }


def test_vm_overhead_keys_and_counts(results):
    r = results["vm_overhead"]
    for section in (r, r["min"], r["cold"], r["cold_min"]):
        for key in VM_KEYS:
            assert section[key] > 0, key
    counts = r["counts"]
    for kind in ("static", "dynamic"):
        chain = counts[f"chain_{kind}"]
        assert chain["kernel_calls"] == OPS  # unfused: one kernel per op
        assert chain["allocations"] == OPS
        assert chain["shape_func_calls"] == 0
        assert counts[f"mlp_{kind}"]["kernel_calls"] == 3  # one fused kernel per layer
    # The dynamic chain reads n from the argument once; the shapes are built once.
    assert counts["chain_dynamic"]["instructions"] > counts["chain_static"]["instructions"]
    assert counts["chain_dynamic"]["instructions"] - counts["chain_static"]["instructions"] <= 2
    assert counts["call"] == {"instructions": 1, "kernel_calls": 0, "shape_func_calls": 0, "allocations": 0}
    for name in ("shape_func_native", "shape_func_native_reshape", "shape_func_tvm"):
        assert counts[name]["shape_func_calls"] == OPS
        assert counts[name]["kernel_calls"] == 0
    assert set(r["paired"]) == set(vm_overhead.PAIRED_RATIOS) and all(v > 0 for v in r["paired"].values())
    assert [what for what, *_ in vm_overhead.targets(r)] == [
        "shapefn dynamic ns per op <= 100", "shapefn dynamic ns per op <= half of Relax's",
        "shapefn dynamic <= 1.1 x shapefn static (ns per op)", "native shape function ns < 50",
        "call from Python us <= Relax's"]


def test_compile_grows_with_the_graph_and_reuses_kernels(results):
    r = results["compile"]
    small, large = r["sizes"]
    assert (small["ops"], large["ops"]) == (100, 200)
    for s in (small, large):
        assert s["seconds"] > 0 and s["kernel_seconds"] > 0
        assert set(s["phases"]) == {"lower_dynamic_ops", "relax_passes", "codegen"}
        assert abs(s["seconds"] - sum(s["phases"].values())) < 1e-9
        assert "LegalizeOps" in s["relax_pass_seconds"]
    # The same kernels at every size (nothing fuses): kernel generation does
    # not grow. (Its reshape to a shape read from a tensor of its input's
    # shape is a view, and that tensor is computed on sizes: no kernel.)
    assert small["kernels"] == large["kernels"] == 11
    # Work in shapefn's own phases and bytecode both grow linearly.
    assert 1.8 <= large["instructions"] / small["instructions"] <= 2.2
    for phase in ("lower_dynamic_ops", "codegen"):
        assert 0.85 <= r["per_op_growth"][f"{phase}_python_calls"] <= 1.15
    assert r["second_compile"]["kernels_from_cache"]
    assert r["second_compile"]["files_written_by_second"] == 0


def test_generated_graph_has_the_ops_asked_for():
    mod = compile_time.generated_graph(200)
    bindings = mod["main"].body.blocks[0].bindings
    assert 195 <= len(bindings) <= 205


MODES = ("per_op", "per_input", "per_input_host_params")


@pytest.mark.parametrize("device", DEVICES)
def test_copy_elimination_cold_figures(results, device):
    r = results["copy_elimination"] if device == "sim" else copy_elimination.measure(
        num_rois=3, fmap_shape=(2, 4, 16, 16), flush=True, device=device)
    assert set(r["cold"]) == set(MODES)
    assert all(r["cold"][mode]["wall_s"] > 0 for mode in r["cold"])
    # per-input copies the 3 x 4 int64 slice bounds of each of the 3 slices, nothing else.
    assert r["per_input"]["d2h_bytes"] == 3 * 3 * 4 * 8
    assert r["per_input_host_params"]["d2h_bytes"] == 0
    assert r["config"]["cache_flush"] is True
    assert r["config"]["device"] == shapefn.device(device).name
    if device != "sim":
        on_sim = results["copy_elimination"]
        for mode in MODES:
            assert device_independent(r[mode]) == device_independent(on_sim[mode]), mode
        assert r["per_op"]["modelled_transfer_s"] == 0  # real copies


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("params", ["device", "host"])
def test_roi_slicing_program_slices_like_numpy(device, params):
    fmap, rois = roi_slicing.make_inputs(4, (2, 3, 12, 10), seed=1)
    exe = roi_slicing.build(len(rois), params, "llvm" if device == "sim" else device)
    got = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)(fmap, rois)
    want = roi_slicing.reference(fmap, rois)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_report_writes_markdown_and_figures(results, tmp_path):
    path = report.write_report(results, tmp_path / "out", "python -m shapefn.bench report out")
    text = path.read_text()
    for figure in ("vm_overhead.png", "compile_time.png", "copy_elimination.png"):
        assert f"]({figure})" in text
        assert (tmp_path / "out" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "out" / "results.json").read_text())["vm_overhead"]["counts"]
    for what, *_ in vm_overhead.targets(results["vm_overhead"]):
        assert what in text
    for what, *_ in vm_overhead.paired_targets(results["vm_overhead"]):
        assert what in text
    assert f"{vm_overhead.machine_slowdown(results['vm_overhead']):.2f}x slower at the median" in text


def test_cache_flush_touches_more_than_the_last_level_cache(monkeypatch):
    monkeypatch.setattr(timing, "_flush_buffer", None)
    timing.flush_caches()
    assert timing._flush_buffer.nbytes >= 2 * timing.last_level_cache_bytes()
    before = int(timing._flush_buffer[0])
    timing.flush_caches()
    assert int(timing._flush_buffer[-1]) == before + 1  # every element written again


def test_copy_elimination_cli_json(capsys):
    copy_elimination.main(["--json", "--cache-flush", "--rois", "2", "--fmap", "1", "2", "8", "8"])
    out = json.loads(capsys.readouterr().out)
    assert out["per_input"]["shape_func_calls"] == 2 and "cold" in out


def test_unknown_benchmark_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "shapefn.bench", "nonsense"], capture_output=True, text=True)
    assert proc.returncode == 2
    for name in ("vm_overhead", "compile", "report", "copy_elimination", "models"):
        assert name in proc.stderr


def test_kernels_json_has_every_key_and_matching_outputs():
    proc = subprocess.run([sys.executable, "-m", "shapefn.bench", "kernels", "--json", "--repeat", "2",
                           "--only", "mobilenetv3_1x1", "box_head_fc7"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert set(data["kernels"]) == {"mobilenetv3_1x1", "box_head_fc7"}
    for name, row in data["kernels"].items():
        for key in ("flops", "shapefn_ms", "onnxruntime_ms", "shapefn_gflops", "onnxruntime_gflops", "ratio"):
            assert row[key] > 0, (name, key)
        assert len(row["ratios"]) == 2
        assert row["max_relative_error"] < 1e-4, name  # checked against onnxruntime before timing
    assert data["kernels"]["box_head_fc7"]["numpy_ms"] > 0
    assert data["kernels"]["box_head_fc7"]["flops"] == 2 * 150 * 1024 * 1024


def test_index_checks_benchmark_compares_checked_and_clamped_builds():
    """The two builds of ``shapefn.bench index_checks`` differ in their checks
    alone: the same answers, sites only in the checked one."""
    from onnx import TensorProto, helper

    from shapefn.bench import index_checks

    table = helper.make_tensor("table", TensorProto.FLOAT, [8, 4], np.arange(32, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed")], "embed",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["n", 4])],
                              initializer=[table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    r = index_checks.measure_model("embed", model, [[np.array([1, 7, -8])]], 2, "host")
    assert r["check_sites"] == 1
    assert {"checked_s", "unchecked_s", "checked_min_s", "unchecked_min_s", "ratio"} <= set(r)
    with index_checks._unchecked():
        exe = shapefn.compile(shapefn.from_onnx(model), "host")
    assert exe._core.check_sites == []
    np.testing.assert_array_equal(shapefn.VirtualMachine(exe, "host")(np.array([9])).numpy(), [[28, 29, 30, 31]])
