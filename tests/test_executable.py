"""The executable as a user sees it: built, saved, loaded and run; and the
loader's promise that nothing malformed ever reaches the VM.

Corrupt files are made from a real program: truncated at every length,
single bits flipped (first with the stale checksum, then with the checksum
recomputed so the table reader and the verifier must catch them), and the
format version changed. Corrupt files that still load are run in a
subprocess, so a crash or a hang fails a test instead of killing pytest; on
sim and on a real OpenCL device, where a host read of device memory faults
(sim's memory is host memory). Hand-written code words drive the verifier
through ``from_parts``.
"""
import functools
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import tvm
from test_compile import mlp

import shapefn
from conftest import DEVICES, device_target, opencl
from shapefn import ExecutableFormatError, Param, ProgramBuilder, _core
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

# File header: magic[8], version u32, payload size u64, checksum u64.
HEADER_SIZE = 28
VERSION_FIELD = slice(8, 12)
SIZE_FIELD = slice(12, 20)
CHECKSUM_FIELD = slice(20, 28)

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

ISA = _core.isa()
OP = {name: i for i, (name, _) in enumerate(ISA)}
F32 = _core.encode_dtype("float32")

# The program's constant and the factors its two functions scale by.
BIAS = np.array([1.5, -2.25, 3.0, 0.5], dtype=np.float32)
MAIN_FACTOR = 2
HELPER_FACTOR = 3
X = np.arange(5, dtype=np.float32)

# Outcomes a corrupt executable may have besides loading and running.
ALLOWED_ERRORS = ("ValueError", "TypeError", "IndexError", "KeyError", "RuntimeError")


# ---------------------------------------------------------------------------
# The program: a kernel, a constant, two functions joined by `call`, a tuple.

def build_program(lib) -> shapefn.Executable:
    """``main(x) -> (x * 2, helper(BIAS), len(x))``, ``helper(v) -> v * 3``."""
    pb = ProgramBuilder()
    # Declared before use: build(library=...) looks up only kernels declared
    # by then (names first seen in invoke_kernel are added after the lookup).
    pb.kernel("scale")
    bias = pb.constant(BIAS)

    main = pb.function("main", [Param("x", "float32", ["n"])])
    helper = pb.function("helper", [Param("v", "float32", ["m"])])

    x, = main.args
    c = main.load_const(bias)
    shape = main.shape_of(x)
    y = main.alloc_tensor("device", shape, "float32")
    main.invoke_kernel("scale", [x, main.load_int(MAIN_FACTOR), y])
    z = main.call("helper", [c])
    n = main.shape_get(shape, 0)
    main.ret(main.make_tuple([y, z, n]))

    v, = helper.args
    out = helper.alloc_tensor("device", helper.shape_of(v), "float32")
    helper.invoke_kernel("scale", [v, helper.load_int(HELPER_FACTOR), out])
    helper.ret(out)
    return pb.build(library=lib)


def reference(x, bias=BIAS):
    """What ``main`` computes, by numpy."""
    return x * np.float32(MAIN_FACTOR), bias * np.float32(HELPER_FACTOR), len(x)


def assert_same_result(got, want):
    y, z, n = got
    assert isinstance(y, shapefn.Tensor) and isinstance(z, shapefn.Tensor)
    np.testing.assert_array_equal(y.numpy(), want[0])
    np.testing.assert_array_equal(z.numpy(), want[1])
    assert n == want[2]


@pytest.fixture(scope="module")
def scale_lib():
    return kernels.build({"scale": kernels.scale()})


@pytest.fixture(scope="module")
def program(scale_lib):
    return build_program(scale_lib)


@pytest.fixture(scope="module")
def blob(program):
    return program._core.serialize()


@pytest.fixture(scope="module")
def saved_program(program, tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "program.sfx"
    program.save(path)
    return path


@pytest.fixture(scope="module")
def programs(program, saved_program, tmp_path_factory):
    """``programs(device)``: the program with its kernels built for
    ``device`` ("sim" or "host": the CPU; "opencl") and the file it was
    saved to, once per device."""

    @functools.cache
    def get(device):
        if device in ("sim", "host"):
            return program, saved_program
        target = device_target(device)
        built = build_program(kernels.build({"scale": kernels.scale()}, target))
        path = tmp_path_factory.mktemp(f"saved-{device}") / "program.sfx"
        built.save(path)  # copies the kernel cache's library file
        return built, path

    return get


# ---------------------------------------------------------------------------
# Reading and patching the file format.

def fnv1a_64(data: bytes) -> int:
    h = FNV64_OFFSET_BASIS
    for b in data:
        h = ((h ^ b) * FNV64_PRIME) & _MASK64
    return h


def stored_checksum(blob: bytes) -> int:
    return int.from_bytes(blob[CHECKSUM_FIELD], "little")


def with_header(data, *, version: int | None = None) -> bytes:
    """``data`` with payload size and checksum made to match its payload."""
    out = bytearray(data)
    payload = bytes(out[HEADER_SIZE:])
    out[SIZE_FIELD] = len(payload).to_bytes(8, "little")
    out[CHECKSUM_FIELD] = fnv1a_64(payload).to_bytes(8, "little")
    if version is not None:
        out[VERSION_FIELD] = version.to_bytes(4, "little")
    return bytes(out)


def flip(blob: bytes, offset: int, bit: int) -> bytearray:
    out = bytearray(blob)
    out[offset] ^= 1 << bit
    return out


class _Reader:
    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def skip(self, n: int) -> None:
        self.pos += n

    def string(self) -> bytes:
        n = self.take("I")
        self.pos += n
        return self.data[self.pos - n:self.pos]


def layout(blob: bytes):
    """File offsets of each constant's data, and of each function's code with
    its words: ``([offset], [(name, offset, words)])``."""
    r = _Reader(blob, HEADER_SIZE)
    r.string()  # kernel library
    r.skip(8 + 8)  # its size and digest
    for _ in range(r.take("I")):  # check sites
        r.string()
        r.string()
    for _ in range(r.take("I")):
        r.string()
    for _ in range(r.take("I")):
        r.string()
    for _ in range(r.take("I")):  # carried shape functions
        r.skip(4 + 4)  # index, outputs
        r.skip(r.take("I"))  # mask
        for _ in range(r.take("I")):
            r.string()  # signature
            r.skip(4)  # kernel
            r.skip(8 * r.take("I"))  # output ranks
    for _ in range(r.take("I")):
        r.string()  # host CPU feature
    r.string()  # device code
    constants = []
    for _ in range(r.take("I")):
        r.skip(4 + 4)  # dtype, device
        r.skip(8 * r.take("I"))
        nbytes = r.take("Q")
        constants.append(r.pos)
        r.skip(nbytes)
    functions = []
    for _ in range(r.take("I")):
        name = r.string().decode()
        for _ in range(r.take("I")):
            r.string()
            r.skip(4 + 4)
            r.skip(8 * r.take("I"))
        for _ in range(r.take("I")):
            r.string()
        r.skip(8)  # register count
        n = r.take("I")
        functions.append((name, r.pos, [r.take("q") for _ in range(n)]))
        for _ in range(r.take("I")):  # source marks
            r.skip(8)
            r.string()
    assert r.pos == len(blob)
    return constants, functions


def instruction_starts(code):
    """Word index of each instruction, decoded with the ISA table."""
    starts, pc = [], 0
    while pc < len(code):
        starts.append(pc)
        pos = pc + 1
        for kind in ISA[code[pc]][1]:
            pos += 1 + code[pos] if kind in "RI" else 1
        pc = pos
    return starts


# ---------------------------------------------------------------------------
# 1. Round trip.

@pytest.mark.parametrize("device", ["host", *DEVICES])
def test_save_load_round_trip(programs, device):
    program, saved_program = programs(device)
    assert saved_program.exists()
    assert os.path.exists(str(saved_program) + ".kernels.so")

    loaded = shapefn.Executable.load(saved_program)
    assert loaded.as_text() == program.as_text()
    assert loaded.function_names == ["main", "helper"]
    assert loaded.kernel_names == ["scale"]

    original = shapefn.VirtualMachine(program, device)
    reloaded = shapefn.VirtualMachine(loaded, device)
    for n in (0, 1, 7):
        x = np.linspace(-3, 3, n, dtype=np.float32)
        want = reference(x)
        assert_same_result(original(x), want)
        assert_same_result(reloaded(x), want)
    np.testing.assert_array_equal(reloaded["helper"](BIAS).numpy(), BIAS * HELPER_FACTOR)


def test_serialize_is_stable(blob):
    again = _core.Executable.deserialize(blob).serialize()
    assert again == blob
    assert blob[:8] == b"SHAPEFNX"
    assert int.from_bytes(blob[SIZE_FIELD], "little") == len(blob) - HEADER_SIZE


def test_header_checksum_is_fnv1a_64_of_payload(blob):
    # The header documents an FNV-1a checksum; a reader in another language
    # computes it with the standard 64-bit offset basis.
    assert stored_checksum(blob) == fnv1a_64(blob[HEADER_SIZE:])


# ---------------------------------------------------------------------------
# 2. Truncation and trailing bytes.

def test_every_truncation_is_rejected(blob):
    for n in range(len(blob)):
        with pytest.raises(ExecutableFormatError) as info:
            _core.Executable.deserialize(blob[:n])
        assert info.type is ExecutableFormatError
        assert re.search(r"truncated|magic|too short", str(info.value)), (n, str(info.value))


def test_every_truncation_with_consistent_header_is_rejected(blob):
    # Payload size and checksum patched to match: the table reader must notice.
    for n in range(HEADER_SIZE, len(blob)):
        with pytest.raises(ExecutableFormatError) as info:
            _core.Executable.deserialize(with_header(blob[:n]))
        assert info.type is ExecutableFormatError
        assert str(info.value), n


def test_trailing_bytes_are_rejected(blob):
    with pytest.raises(ExecutableFormatError, match="trailing bytes"):
        _core.Executable.deserialize(blob + b"\0")
    patched = with_header(blob + b"\0" * 8)
    with pytest.raises(ExecutableFormatError, match="trailing bytes after its tables"):
        _core.Executable.deserialize(patched)


# ---------------------------------------------------------------------------
# 3. Bit flips.

def flip_cases(blob, count=300, seed=0):
    rng = np.random.default_rng(seed)
    payload_bits = (len(blob) - HEADER_SIZE) * 8
    picks = rng.choice(payload_bits, size=count, replace=False)
    return [(HEADER_SIZE + int(p) // 8, int(p) % 8) for p in sorted(picks)]


def test_bit_flips_are_caught_by_the_checksum(blob):
    for offset, bit in flip_cases(blob):
        with pytest.raises(ExecutableFormatError, match="checksum mismatch") as info:
            _core.Executable.deserialize(bytes(flip(blob, offset, bit)))
        assert info.type is ExecutableFormatError


def test_header_bit_flips_are_rejected(blob):
    for offset in range(HEADER_SIZE):
        for bit in range(8):
            with pytest.raises(ExecutableFormatError) as info:
                _core.Executable.deserialize(bytes(flip(blob, offset, bit)))
            assert info.type is ExecutableFormatError
            assert re.search(r"magic|version|truncated|checksum", str(info.value))


WORKER = r'''
"""Loads and runs corrupt executables; one JSON line per case on stdout."""
import faulthandler, json, sys
import numpy as np
import tvm
import shapefn
from shapefn import _core

ALLOWED = (ValueError, TypeError, IndexError, KeyError, MemoryError, RuntimeError)


def describe(value):
    if isinstance(value, shapefn.Tensor):
        a = value.numpy()
        return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}
    if isinstance(value, tuple):
        return [describe(v) for v in value]
    return value


spec = json.load(open(sys.argv[1]))
library = tvm.runtime.load_module(spec["library"])
kernel_funcs = {"scale": library["scale"]}
x = np.asarray(spec["x"], dtype=np.float32)
device = shapefn.sim(arena_bytes=1 << 26) if spec["device"] == "sim" else spec["device"]
for index, blob in enumerate(spec["blobs"]):
    faulthandler.dump_traceback_later(spec["timeout_s"], exit=True)
    try:
        core = _core.Executable.deserialize(bytes.fromhex(blob))
    except shapefn.ExecutableFormatError as e:
        record = {"outcome": "format_error", "message": str(e)}
    else:
        try:
            vm = shapefn.VirtualMachine(shapefn.Executable(core, kernel_funcs), device,
                                        max_instructions=100_000)
            record = {"outcome": "ran", "result": describe(vm(x))}
            try:
                record["text"] = core.disassemble()
            except ValueError:  # a name that is not UTF-8
                record["text"] = None
        except ALLOWED as e:
            base = next(t for t in ALLOWED if isinstance(e, t))
            record = {"outcome": base.__name__, "type": type(e).__name__, "message": str(e)}
        except BaseException as e:
            record = {"outcome": "unexpected " + type(e).__name__, "message": str(e)}
    faulthandler.cancel_dump_traceback_later()
    record["case"] = index
    print(json.dumps(record), flush=True)
'''


def run_corrupt(tmp_path, library, blobs, device, timeout_s=3.0, max_failures=4):
    """Loads and runs each blob in a worker subprocess on ``device``, its
    kernels from ``library``. A case that crashes or hangs the worker is
    recorded as such and the worker restarts after it."""
    worker = tmp_path / "corrupt_worker.py"
    worker.write_text(WORKER)
    spec_path = tmp_path / "cases.json"
    records = [None] * len(blobs)
    start, failures = 0, 0
    while start < len(blobs):
        spec_path.write_text(json.dumps({
            "library": str(library), "device": device, "x": X.tolist(), "timeout_s": timeout_s,
            "blobs": [bytes(b).hex() for b in blobs[start:]]}))
        proc = subprocess.run([sys.executable, str(worker), str(spec_path)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        done = 0
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            records[start + record["case"]] = record
            done += 1
        start += done
        if start == len(blobs):
            break
        hung = "Timeout (" in proc.stderr
        records[start] = {"outcome": "hang" if hung else f"crash (exit status {proc.returncode})",
                          "message": proc.stderr[-800:]}
        start += 1
        failures += 1
        if failures >= max_failures:
            for i in range(start, len(blobs)):
                records[i] = {"outcome": "not run", "message": "too many crashes before it"}
            break
    return records


def check_corrupt_records(blob, cases, blobs, records, text):
    """Every case raised a clear error, or ran; one that ran with unchanged
    code must give numpy's answer for its (possibly flipped) constant."""
    (bias_offset,), _ = layout(blob)
    bad = []
    for (offset, bit), data, record in zip(cases, blobs, records):
        outcome = record["outcome"]
        if outcome == "format_error" or outcome in ALLOWED_ERRORS:
            assert "checksum" not in record["message"], "the checksum was not recomputed"
            continue
        if outcome != "ran":
            bad.append(f"byte {offset} bit {bit}: {outcome}: {record['message']}")
            continue
        if record["text"] != text:
            continue  # a different, valid program: it ran without crashing
        bias = np.frombuffer(bytes(data[bias_offset:bias_offset + BIAS.nbytes]), dtype=np.float32)
        y, z, n = record["result"]
        want_y, want_z, want_n = reference(X, bias)
        ok = (np.array_equal(np.array(y["data"], np.float32), want_y)
              and np.array_equal(np.array(z["data"], np.float32), want_z, equal_nan=True)
              and n == want_n)
        if not ok:
            bad.append(f"byte {offset} bit {bit}: same code, wrong result {record['result']}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("device", DEVICES)
def test_bit_flips_with_recomputed_checksum_never_crash(program, programs, device, tmp_path):
    blob = programs(device)[0]._core.serialize()  # records the device its kernels run on
    cases = flip_cases(blob)
    blobs = [with_header(flip(blob, offset, bit)) for offset, bit in cases]
    records = run_corrupt(tmp_path, str(programs(device)[1]) + ".kernels.so", blobs, device)
    check_corrupt_records(blob, cases, blobs, records, program.as_text())
    outcomes = {r["outcome"] for r in records}
    assert "format_error" in outcomes and "ran" in outcomes


@pytest.mark.parametrize("device", DEVICES)
def test_opcode_bit_flips_never_crash_or_hang(program, programs, device, tmp_path):
    # Every single-bit change of every opcode (they fit in 5 bits) with a valid
    # checksum: each new instruction sequence is rejected, fails cleanly, or runs.
    blob = programs(device)[0]._core.serialize()
    cases = []
    for _, code_offset, words in layout(blob)[1]:
        for pc in instruction_starts(words):
            cases.extend((code_offset + 8 * pc, bit) for bit in range(5))
    blobs = [with_header(flip(blob, offset, bit)) for offset, bit in cases]
    records = run_corrupt(tmp_path, str(programs(device)[1]) + ".kernels.so", blobs, device)
    check_corrupt_records(blob, cases, blobs, records, program.as_text())


# ---------------------------------------------------------------------------
# 4. The verifier, through from_parts.

X_PARAM = {"name": "x", "dtype": "float32", "dims": [4], "device": 1}


def function(words, name="main", num_registers=4, params=None, symbols=()):
    return {"name": name, "params": [X_PARAM] if params is None else params,
            "symbols": list(symbols), "num_registers": num_registers, "code": list(words)}


def constant(dtype="float32", shape=(4,), device=1, data=None):
    if data is None:
        data = np.zeros(shape, dtype=dtype).tobytes()
    return {"dtype": dtype, "shape": list(shape), "device": device, "data": data}


def from_parts(functions, constants=(), kernel_names=(), shape_funcs=(), device_code=""):
    return _core.Executable.from_parts(list(functions), list(constants), list(kernel_names),
                                       list(shape_funcs), "", device_code=device_code)


def test_minimal_program_is_accepted():
    exe = shapefn.Executable(from_parts([function([OP["ret"], 0])]))
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(shapefn.VirtualMachine(exe, "host")(x).numpy(), x)


RET = [OP["ret"], 0]
HELPER = function(RET, name="helper", num_registers=1)
ALLOC = [OP["shape_of"], 1, 0, OP["alloc_tensor"], 2]  # + device, shape, dtype
BAD_DTYPES = {"7 bits": 2 | 7 << 8 | 1 << 16, "4 lanes": F32 + (3 << 16), "type code 9": 9 | 32 << 8 | 1 << 16}


def code(*words, **kw):
    """A program whose only function runs ``words``."""
    return dict(functions=[function(words, **kw)])


def program_with(**kw):
    return dict(dict(functions=[function(RET)]), **kw)


REJECTIONS = {
    "register out of range": (code(OP["load_int"], 5, 1, *RET), "load_int uses register %5 of 4"),
    "negative register": (code(OP["move"], 1, -1, *RET), "move uses register %-1 of 4"),
    "register list entry out of range": (code(OP["make_tuple"], 1, 2, 0, 9, *RET),
                                         "make_tuple uses register %9 of 4"),
    "jump target out of range": (code(OP["goto"], 7), "goto refers to instruction #7 of 1"),
    "negative jump target": (code(OP["load_int"], 1, 0, OP["if"], 1, -1, *RET),
                             "instruction 1: if refers to instruction #-1 of 3"),
    "unknown opcode": (code(OP["load_int"], 1, 0, len(ISA), *RET), f"bad opcode {len(ISA)} at word 3"),
    "negative opcode": (code(-1), "bad opcode -1 at word 0"),
    "list length past the end": (code(OP["make_tuple"], 1, 5, 0, *RET),
                                 "bad list length in 'make_tuple' at word 0"),
    "negative list length": (code(*RET, OP["make_tuple"], 1, -1, *RET),
                             "bad list length in 'make_tuple' at word 2"),
    "operand past the end": (code(*RET, OP["load_int"], 1), "truncated 'load_int' at word 2"),
    "constant index out of range": (dict(code(OP["load_const"], 1, 3, *RET), constants=[constant()]),
                                    "load_const refers to constant #3 of 1"),
    "kernel index out of range": (dict(code(OP["invoke_kernel"], 2, 1, 0, *RET), kernel_names=["scale"]),
                                  "invoke_kernel refers to kernel #2 of 1"),
    "shape function index out of range": (code(OP["invoke_shape_func"], 0, 1, 0, 1, 1, 0, *RET),
                                          "invoke_shape_func refers to shape function #0 of 0"),
    "function index out of range": (code(OP["call"], 1, 5, 1, 0, *RET), "call refers to function #5 of 1"),
    "device slot out of range": (code(*ALLOC, 2, 1, F32, *RET), "alloc_tensor refers to device slot #2 of 2"),
    "call with too many arguments": (dict(functions=[function([OP["call"], 1, 1, 2, 0, 0, *RET]), HELPER]),
                                     "call of 'helper' passes 2 arguments, it takes 1"),
    "call with no arguments": (dict(functions=[function([OP["call"], 1, 1, 0, *RET]), HELPER]),
                               "call of 'helper' passes 0 arguments, it takes 1"),
    "runs past its end": (code(OP["load_int"], 1, 3), "function 'main' can run past its end"),
    "runs past its end after a ret": (code(*RET, OP["load_int"], 1, 3), "function 'main' can run past its end"),
    "empty function": (code(), "function 'main' is empty"),
    "duplicate function names": (dict(functions=[function(RET), function(RET)]), "duplicate function 'main'"),
    "constant bytes do not match its shape": (program_with(constants=[constant(shape=(2, 3), data=bytes(20))]),
                                              "constant 0 has 20 bytes, its shape needs 24"),
    "constant with a negative dimension": (program_with(constants=[constant(shape=(-1,), data=b"")]),
                                           "constant 0 has a negative dimension"),
    "constant on an unknown device": (program_with(constants=[constant(device=2)]),
                                      "constant 0 has an invalid device"),
    **{f"dtype code with {name}": (code(*ALLOC, 1, 1, word, *RET), f"invalid dtype code {word}")
       for name, word in BAD_DTYPES.items()},
    "readback with unequal lists": (code(OP["readback"], 1, 1, 0, 0, *RET),
                                    "readback needs as many destinations and forms as sources"),
    "readback with an unknown form": (code(OP["readback"], 1, 1, 1, 0, 1, 2, *RET),
                                      "readback form 2 is neither 0 (values) nor 1 (tensor)"),
    "negative tuple index": (code(OP["make_tuple"], 1, 1, 0, OP["get_item"], 2, 1, -1, *RET),
                             "negative tuple index"),
    "fewer registers than parameters": (code(*RET, num_registers=0),
                                        "function 'main' has 0 registers for 1 parameters"),
    "too many registers": (code(*RET, num_registers=1 << 21), f"function 'main' has {1 << 21} registers"),
    "parameter names an unknown symbol": (code(*RET, symbols=["n"], params=[dict(X_PARAM, dims=[-1, -2])]),
                                          "parameter 'x' names an unknown symbol"),
    "parameter on an unknown device": (code(*RET, params=[dict(X_PARAM, device=-2)]),
                                       "parameter 'x' has an invalid device"),
    "empty kernel name": (program_with(kernel_names=[""]), "kernel name is empty or not UTF-8"),
    "empty shape function name": (program_with(shape_funcs=[("", [False])]),
                                  "shape function name is empty or not UTF-8"),
    "empty shape function mask": (program_with(shape_funcs=[("shapefn.broadcast", [])]),
                                  "the mask of shape function 'shapefn.broadcast' has 0 flags"),
    "unknown device code": (program_with(device_code="tpu"), "unknown device code 'tpu'"),
}


@pytest.mark.parametrize("case", sorted(REJECTIONS))
def test_verifier_rejects(case):
    parts, message = REJECTIONS[case]
    with pytest.raises(ExecutableFormatError, match=re.escape(message)) as info:
        from_parts(**parts)
    assert info.type is ExecutableFormatError


@pytest.mark.parametrize("field, message", [
    ("constant", "constant 0 has an invalid dtype"),
    ("parameter", "function 'main' parameter 'x' has an invalid dtype"),
])
def test_invalid_dtype_in_the_file_is_rejected(field, message):
    # from_parts takes dtypes as names, so a bad dtype code can only come from a file.
    exe = from_parts([function([OP["load_const"], 1, 0, OP["ret"], 1])], [constant()])
    blob = exe.serialize()
    good = struct.pack("<BBH", 2, 32, 1)  # float32
    bad = struct.pack("<BBH", 2, 7, 1)
    # The constant's dtype comes first in the file, the parameter's after it.
    first = blob.index(good, HEADER_SIZE)
    at = first if field == "constant" else blob.index(good, first + 1)
    patched = with_header(blob[:at] + bad + blob[at + 4:])
    with pytest.raises(ExecutableFormatError, match=re.escape(message)):
        _core.Executable.deserialize(patched)


# ---------------------------------------------------------------------------
# 5. Format version.

@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 8, 0xFFFFFFFF])
def test_other_format_version_is_rejected(blob, version):
    patched = with_header(blob, version=version)
    assert stored_checksum(patched) == stored_checksum(blob)
    with pytest.raises(ExecutableFormatError, match=f"format version {version} is not supported") as info:
        _core.Executable.deserialize(patched)
    assert info.type is ExecutableFormatError


# ---------------------------------------------------------------------------
# 6. Loading from disk.

def test_load_of_missing_file_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot open executable") as info:
        shapefn.Executable.load(tmp_path / "missing.sfx")
    assert info.type is ValueError


def test_load_without_its_kernel_library_raises_file_not_found(program, tmp_path):
    path = tmp_path / "program.sfx"
    program.save(path)
    os.remove(str(path) + ".kernels.so")
    with pytest.raises(FileNotFoundError, match=re.escape("program.sfx.kernels.so")):
        shapefn.Executable.load(path)


def test_load_of_truncated_file_raises_format_error(saved_program, tmp_path):
    path = tmp_path / "truncated.sfx"
    path.write_bytes(saved_program.read_bytes()[:-1])
    with pytest.raises(ExecutableFormatError, match="truncated"):
        shapefn.Executable.load(path)


def test_names_that_are_not_utf8_are_rejected_at_load(blob):
    assert blob.count(b"scale") >= 1
    patched = with_header(blob.replace(b"scale", b"sc\xffle"))
    with pytest.raises(ExecutableFormatError, match="not UTF-8"):
        _core.Executable.deserialize(patched)


def test_kernel_library_must_be_a_file_name_beside_the_executable(blob):
    core = _core.Executable.deserialize(blob)
    for bad in ("/usr/lib/libc.so.6", "../elsewhere.so", ".."):
        core.set_kernel_library(bad, "")
        with pytest.raises(ExecutableFormatError, match="file name beside"):
            _core.Executable.deserialize(core.serialize())


# ---------------------------------------------------------------------------
# 7. What the kernels run on.

@pytest.mark.parametrize("device, code", [("sim", "cpu"), ("host", "cpu"), ("cuda", "cuda"),
                                          pytest.param("opencl", "opencl", marks=opencl)])
def test_a_compile_records_what_its_kernels_run_on_and_a_save_keeps_it(device, code, tmp_path):
    exe = shapefn.compile(mlp(tvm.tirx.Var("n", "int64")), device)
    assert exe.device_code == code
    exe.save(tmp_path / "m.sfx")
    assert _core.Executable.load(str(tmp_path / "m.sfx")).device_code == code


def test_a_program_built_by_hand_without_a_library_runs_anywhere():
    exe = shapefn.Executable(from_parts([function([OP["ret"], 0])]))
    assert exe.device_code == ""
    x = np.ones(4, np.float32)
    for device in ("host", "sim", "cpu"):
        np.testing.assert_array_equal(shapefn.VirtualMachine(exe, device)(x).numpy(), x)


@pytest.mark.parametrize("code, device, message", [
    ("cuda", "sim", "compiled for 'cuda' and cannot run on device 'sim', which runs code for the CPU"),
    ("opencl", "host", "compiled for 'opencl' and cannot run on device 'host'"),
    ("cpu", "cpu", None),  # TVM's CPU device runs CPU code
])
def test_a_vm_refuses_a_device_its_kernels_do_not_run_on(code, device, message):
    exe = shapefn.Executable(from_parts([function([OP["ret"], 0])], device_code=code))
    if message is None:
        shapefn.VirtualMachine(exe, device)
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        shapefn.VirtualMachine(exe, device)
