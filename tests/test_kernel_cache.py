"""The per-kernel on-disk cache behind shapefn.compile: what a second compile
builds (counted by kernel_cache.stats, never timed), what a changed or
corrupt entry rebuilds, and that results match a fresh build and TVM's
Relax VM."""
import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.s_tir import dlight
from tvm.script import tirx as T

import shapefn
from shapefn.compiler import hand_built as kernels
from shapefn.compiler.machine_code import kernel_cache
from shapefn.compiler.passes.relax_passes import without_fusion


@pytest.fixture
def cache_dir(tmp_path):
    shapefn.set_cache_dir(tmp_path)
    yield tmp_path
    shapefn.set_cache_dir(None)


def chain(last_scale: float = 3.0):
    """A dynamic-batch chain of four distinct elementwise/dense kernels; the
    last one's constant differs with ``last_scale`` (a different kernel)."""
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    w = relax.const(np.random.default_rng(0).standard_normal((8, 8)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        h = bb.emit(relax.op.matmul(x, w))
        h = bb.emit(relax.op.tanh(h))
        h = bb.emit(relax.op.sum(h, axis=[1], keepdims=True))
        h = bb.emit(relax.op.exp(h))
        h = bb.emit(relax.op.multiply(h, relax.const(last_scale, "float32")))
        bb.emit_func_output(h)
    return bb.get()


def relax_vm(mod, *args):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def run(exe, *args):
    return shapefn.VirtualMachine(exe, shapefn.sim(strict=True))(*args).numpy()


def compile_counting(mod, device="sim"):
    """Compiles ``mod`` unfused (one kernel per op, as the tests count them)."""
    before = kernel_cache.stats()
    with without_fusion():
        exe = shapefn.compile(mod, device)
    after = kernel_cache.stats()
    return exe, after.misses - before.misses, after.hits - before.hits


def kernel_entries(cache_dir):
    return sorted((cache_dir / "kernels" / "objects").glob("*.ref"))


def batch_objects(cache_dir):
    return sorted((cache_dir / "kernels" / "objects").glob("*.o"))


def library_entries(cache_dir):
    return sorted((cache_dir / "kernels" / "libraries").glob("*.so"))


def test_second_compile_builds_no_kernel(cache_dir):
    x = np.random.default_rng(1).standard_normal((5, 8)).astype("float32")
    first, built, _ = compile_counting(chain())
    assert built == len(kernel_entries(cache_dir)) > 0
    assert len(batch_objects(cache_dir)) == min(built, len(os.sched_getaffinity(0)))  # one batch per core
    second, rebuilt, reused = compile_counting(chain())
    assert (rebuilt, reused) == (0, built)
    want = relax_vm(chain(), x)
    np.testing.assert_allclose(run(first, x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(run(second, x), run(first, x))


def test_second_compile_without_library_links_cached_objects(cache_dir):
    _, built, _ = compile_counting(chain())
    for library in (cache_dir / "kernels" / "libraries").glob("*.so"):
        library.unlink()
    exe, rebuilt, reused = compile_counting(chain())
    assert (rebuilt, reused) == (0, built)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


def test_module_differing_in_one_kernel_rebuilds_only_it(cache_dir):
    _, built, _ = compile_counting(chain(3.0))
    exe, rebuilt, reused = compile_counting(chain(5.0))
    assert (rebuilt, reused) == (1, built - 1)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(5.0), x), rtol=1e-5, atol=1e-6)


def damaged(data: bytes, damage: str) -> bytes:
    return {"truncate": data[: len(data) // 2],
            "flip": data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:],
            "garbage": b"not an object file"}[damage]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_object_is_rebuilt(cache_dir, damage):
    compile_counting(chain())
    entry = batch_objects(cache_dir)[0]
    members = [ref for ref in kernel_entries(cache_dir) if ref.read_text() == entry.stem]
    data = entry.read_bytes()
    entry.write_bytes(damaged(data, damage))
    for library in (cache_dir / "kernels" / "libraries").glob("*.so"):
        library.unlink()
    exe, rebuilt, _ = compile_counting(chain())
    assert rebuilt == len(members) > 0  # the kernels of that object
    assert not entry.exists() or entry.read_bytes() == data  # the corrupt object removed (or rebuilt the same)
    assert all((ref.parent / f"{ref.read_text()}.o").exists() for ref in kernel_entries(cache_dir))
    x = np.random.default_rng(4).standard_normal((2, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing"])
def test_a_kernel_whose_entry_is_lost_is_rebuilt_and_linked_beside_its_old_batch(cache_dir, damage):
    """The rebuilt kernel's new object and the old one holding its other
    copy go into one library: their symbols differ by batch."""
    _, built, _ = compile_counting(chain())
    assert built > 1
    ref = kernel_entries(cache_dir)[0]
    if damage == "missing":
        ref.unlink()
    else:
        ref.write_bytes(damaged(ref.read_bytes(), damage))
    for library in (cache_dir / "kernels" / "libraries").glob("*.so"):
        library.unlink()
    objects = set(batch_objects(cache_dir))
    exe, rebuilt, reused = compile_counting(chain())
    assert (rebuilt, reused) == (1, built - 1)
    assert len(set(batch_objects(cache_dir)) - objects) == 1
    x = np.random.default_rng(9).standard_normal((3, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


def test_a_kernel_failing_in_a_batch_raises_its_own_error(cache_dir, monkeypatch):
    """When TVM cannot build a batch, the error is that of the kernel that
    fails on its own, not of the batch."""
    build = tvm.tirx.build

    def failing_on_tanh(mod, target):
        if any("T.tanh" in f.script() for f in mod.functions.values()):
            raise RuntimeError(f"cannot build {' '.join(gv.name_hint for gv in mod.functions)}")
        return build(mod, target)

    monkeypatch.setattr(tvm.tirx, "build", failing_on_tanh)
    monkeypatch.setattr(kernel_cache, "_BATCH_KERNELS", 5)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # one batch of all five
    with pytest.raises(RuntimeError, match=r"cannot build \S+$"):
        shapefn.compile(chain(), "sim")


def test_corrupt_library_is_relinked(cache_dir):
    compile_counting(chain())
    (library,) = (cache_dir / "kernels" / "libraries").glob("*.so")
    library.unlink()  # a new file: this process still maps the old one
    library.write_bytes(b"\x7fELF truncated")
    exe, rebuilt, _ = compile_counting(chain())
    assert rebuilt == 0
    x = np.random.default_rng(5).standard_normal((2, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


def test_a_truncated_library_in_the_cache_is_rebuilt_before_it_is_mapped(cache_dir):
    """Truncated in place (a full disk, a killed copy), a library would fault
    the process that maps it (SIGBUS); its digest beside it tells, and every
    later compile rebuilds it. Each compile in a fresh process, as a later
    compile is (and so that none of them has the library mapped while it is
    truncated)."""
    script = ("import numpy as np, shapefn, sys; sys.path.insert(0, 'tests'); from test_kernel_cache import chain; "
              f"shapefn.set_cache_dir({str(cache_dir)!r}); "
              "exe = shapefn.compile(chain(), 'sim'); "
              "print(shapefn.VirtualMachine(exe, 'sim')(np.ones((2, 8), np.float32)).numpy().sum())")

    def compile_elsewhere() -> float:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                              cwd=Path(__file__).parent.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return float(proc.stdout)

    want = compile_elsewhere()
    (library,) = (cache_dir / "kernels" / "libraries").glob("*.so")
    digest = library.parent / (library.name + ".sha256")
    assert digest.read_text() == f"{library.stat().st_size} {hashlib.sha256(library.read_bytes()).hexdigest()}"
    with open(library, "r+b") as f:
        f.truncate(library.stat().st_size // 3)
    for _ in range(2):
        assert compile_elsewhere() == want
    assert digest.read_text() == f"{library.stat().st_size} {hashlib.sha256(library.read_bytes()).hexdigest()}"
    assert want == pytest.approx(float(relax_vm(chain(), np.ones((2, 8), np.float32)).sum()), rel=1e-5)


def test_cached_build_matches_fresh_build_and_saves(cache_dir, tmp_path_factory):
    x = np.random.default_rng(6).standard_normal((7, 8)).astype("float32")
    compile_counting(chain())
    cached, rebuilt, _ = compile_counting(chain())
    assert rebuilt == 0
    shapefn.set_cache_dir(tmp_path_factory.mktemp("fresh"))
    fresh, built, _ = compile_counting(chain())
    assert built > 0
    np.testing.assert_array_equal(run(cached, x), run(fresh, x))
    path = tmp_path_factory.mktemp("saved") / "chain.sfx"
    cached.save(path)
    np.testing.assert_array_equal(run(shapefn.Executable.load(path), x), run(fresh, x))


def test_kernel_reused_under_another_name(cache_dir):
    """A kernel is found by content, not name: here chain's last multiply
    comes second and is named ``multiply1``."""
    compile_counting(chain(3.0))
    objects = len(kernel_entries(cache_dir))
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        h = bb.emit(relax.op.multiply(x, relax.const(3.0, "float32")))  # a new kernel
        h = bb.emit(relax.op.sum(h, axis=[1], keepdims=True))  # chain's sum kernel
        bb.emit_func_output(bb.emit(relax.op.multiply(h, relax.const(3.0, "float32"))))
    mod = bb.get()
    exe, rebuilt, reused = compile_counting(mod)
    assert "multiply1" in exe.kernel_names
    assert (rebuilt, reused) == (1, 2)
    assert len(kernel_entries(cache_dir)) == objects + 1
    a = np.random.default_rng(7).standard_normal((3, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, a), relax_vm(mod, a), rtol=1e-5, atol=1e-5)


def test_pass_options_are_part_of_the_key(cache_dir):
    """Kernels compiled under other TVM pass options (here: no argument
    checks) are other entries, and the workers compiling them see the options."""
    _, built, _ = compile_counting(chain())
    checked, checked_kernels = set(batch_objects(cache_dir)), set(kernel_entries(cache_dir))
    with tvm.transform.PassContext(config={"tirx.disable_assert": True}):
        exe, rebuilt, _ = compile_counting(chain())
    assert rebuilt == built
    unchecked = set(batch_objects(cache_dir)) - checked
    assert len(set(kernel_entries(cache_dir)) - checked_kernels) == built
    assert all(b"Mismatched type on argument" in p.read_bytes() for p in checked)
    assert not any(b"Mismatched type on argument" in p.read_bytes() for p in unchecked)
    x = np.random.default_rng(8).standard_normal((2, 8)).astype("float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


def test_gpu_build_is_one_cached_library(cache_dir):
    """For a GPU target the module is compiled whole (device code cannot be
    carried by objects) and its library cached; the CPU build of the same
    module is other entries."""
    _, built, _ = compile_counting(chain(), "opencl")
    assert built > 0 and not kernel_entries(cache_dir) and not batch_objects(cache_dir)
    assert len(library_entries(cache_dir)) == 1
    exe, rebuilt, reused = compile_counting(chain(), "opencl")
    assert (rebuilt, reused) == (0, built)
    assert exe._library.imports[0].kind == "opencl"
    _, cpu_built, _ = compile_counting(chain())
    assert cpu_built > 0 and len(library_entries(cache_dir)) == 2


def many_sizes():
    """A kernel over a tensor of n0*...*n4 elements: five sizes no dimension
    binds, which TVM passes to the kernel as extra parameters."""
    sizes = [tirx.Var(f"n{i}", "int64") for i in range(5)]
    x = relax.Var("x", relax.TensorType(sizes, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        flat = bb.emit(relax.op.reshape(x, [sizes[0] * sizes[1] * sizes[2] * sizes[3] * sizes[4]]))
        doubled = bb.emit_te(lambda t: te.compute(t.shape, lambda i: t[i] * 2.0, name="doubled"), flat)
        bb.emit_func_output(doubled)
    return bb.get()


_COMPILE_FOR_OPENCL = """
import json, sys, shapefn
sys.path.insert(0, {tests!r})
from test_kernel_cache import many_sizes
from shapefn.compiler.machine_code import kernel_cache
shapefn.set_cache_dir({cache!r})
shapefn.compile(many_sizes(), "opencl")
print(json.dumps(kernel_cache.stats().misses))
"""


def test_a_warm_gpu_compile_in_another_process_builds_nothing(cache_dir):
    """The kernel of ``many_sizes`` takes five extra size parameters; in a
    second process its library (cached whole, keyed by every kernel) is
    found, so those parameters come in the same order in every process."""
    script = _COMPILE_FOR_OPENCL.format(tests=os.path.dirname(__file__), cache=str(cache_dir))
    misses = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        misses.append(json.loads(done.stdout))
    assert misses[0] > 0 and misses[1:] == [0, 0]
    assert len(library_entries(cache_dir)) == 1


def test_size_parameters_are_ordered_by_first_occurrence():
    """The same kernel with its size parameters in two orders becomes one
    kernel, and the call's size arguments move with the parameters."""
    from shapefn.compiler.kernels import te_params
    a, b, c = (tirx.Var(name, "int64") for name in "abc")
    x = te.placeholder((a * b + c,), "float32", name="x")
    y = te.compute((a * b + c,), lambda i: x[i] + 1.0, name="y")
    forward = te.create_prim_func([x, a, b, c, y])
    backward = te.create_prim_func([x, c, b, a, y])
    tensor = relax.Var("t", relax.TensorType([a * b + c], "float32"))
    f1, args1 = te_params.canonical(forward, [tensor, a, b, c])
    f2, args2 = te_params.canonical(backward, [tensor, c, b, a])
    assert tvm_ffi.structural_equal(f1, f2)
    assert [str(arg) for arg in args1] == [str(arg) for arg in args2] == ["t", "a", "b", "c"]
    assert not tvm_ffi.structural_equal(forward, backward)


def test_gpu_library_without_its_runtime_is_cached_and_returned_as_built(cache_dir):
    """No CUDA runtime here: the library is written for a machine that has
    one, and the module as built (inspectable, not runnable) is returned."""
    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is not None:
        pytest.skip("this process has a CUDA runtime")
    exe, built, _ = compile_counting(chain(), "cuda")
    (library,) = library_entries(cache_dir)
    assert built > 0 and exe._library_path == library
    assert [m.kind for m in exe._library.imports] == ["cuda"]


@T.prim_func
def packed_call_in_a_thread(x: T.Buffer((8,), "float32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):  # noqa: B007 (TVMScript: the loop binds the thread axis)
        T.evaluate(T.call_packed("test.host_only", x.data))


def test_gpu_build_failure_names_the_kernel(cache_dir):
    """One kernel TVM cannot build fails the module's build: the error names
    it (found by building each kernel alone), not the others."""
    target = tvm.target.Target("opencl", host="llvm")
    good = tvm.IRModule({"scale": kernels.scale()})
    with target:
        good = dlight.ApplyDefaultSchedule(dlight.gpu.Fallback())(good)
    mod = tvm.IRModule({"bad": packed_call_in_a_thread.with_attr("target", target),
                        "scale": good["scale"].with_attr("target", target)})
    with pytest.raises(RuntimeError, match=r"TVM cannot build kernel\(s\) bad for opencl"):
        kernel_cache.build(mod, target)
    assert not library_entries(cache_dir)


@pytest.mark.parametrize("error", [errno.EROFS, errno.ENOSPC, errno.EACCES], ids=["read-only", "full", "denied"])
def test_a_cache_that_cannot_be_written_is_no_error(cache_dir, monkeypatch, error):
    """A read-only, full or forbidden cache: the compile warns, naming why,
    builds in a directory of its own, and the program runs. (Simulated:
    tests run as root, whom permissions do not stop.)"""
    def refuse(path, write):
        if cache_dir in path.parents:
            raise OSError(error, os.strerror(error), str(path))
        return write_atomically(path, write)

    write_atomically = kernel_cache._write_atomically
    monkeypatch.setattr(kernel_cache, "_write_atomically", refuse)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype("float32")
    with pytest.warns(UserWarning, match=f"kernel cache cannot be written .*{os.strerror(error)}"):
        exe = shapefn.compile(chain(), "sim")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)
    assert library_entries(cache_dir) == []


def test_a_cache_path_that_cannot_be_a_directory_is_no_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    shapefn.set_cache_dir(blocker / "cache")
    try:
        with pytest.warns(UserWarning, match="kernel cache cannot be written"):
            exe = shapefn.compile(chain(), "sim")
    finally:
        shapefn.set_cache_dir(None)
    x = np.ones((2, 8), "float32")
    np.testing.assert_allclose(run(exe, x), relax_vm(chain(), x), rtol=1e-5, atol=1e-6)


_COMPILE_AND_RUN = """
import json, sys, numpy as np, shapefn
sys.path.insert(0, {tests!r})
from test_kernel_cache import chain
shapefn.set_cache_dir({cache!r})
exe = shapefn.compile(chain(), "host")
print(json.dumps(shapefn.VirtualMachine(exe, "host")(np.ones((3, 8), "float32")).numpy().tolist()))
"""


def test_processes_compiling_the_same_model_at_once_share_the_cache(cache_dir):
    """Three processes compile the same model into one empty cache at the
    same time: each succeeds with the same result, and the cache holds one
    entry per kernel (writes are atomic renames)."""
    script = _COMPILE_AND_RUN.format(tests=os.path.dirname(__file__), cache=str(cache_dir))
    processes = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(3)]
    results = [p.communicate(timeout=600) for p in processes]
    for p, (_, err) in zip(processes, results):
        assert p.returncode == 0, err
    assert len({out for out, _ in results}) == 1
    expected = relax_vm(chain(), np.ones((3, 8), "float32"))
    np.testing.assert_allclose(np.array(json.loads(results[0][0])), expected, rtol=1e-5, atol=1e-6)
    assert len(library_entries(cache_dir)) == 1
    assert not [p for p in (cache_dir / "kernels").rglob(".*")]  # (no temporary file left behind)
