"""Fuzzing the executable loader: over 10,000 mutants of two programs that
between them use every instruction, each loaded and, if it loads, run.

Mutants (deterministic seeds): single bit flips with the stale checksum;
one to four bit flips and truncations with the header's size and checksum
recomputed, so the mutation reaches the table reader and the verifier; every
size, count, dtype, device, dimension and register-count field set to
boundary values; every operand word of the code set to out-of-range and to
other valid values by its kind (register, constant, kernel, shape function,
function, jump target, device, dtype, immediate, list length); every opcode
replaced by every other; instructions deleted and duplicated.

What each mutant must do:
* stale checksum, truncation: raise ExecutableFormatError at load;
* an operand or field made out of range (register, table index, jump target,
  device slot, dtype code, symbol, register count): be rejected at load by
  the verifier -- never reach the dispatch loop;
* a change only to names nothing resolves (parameters, symbols, the helper
  function) or to constant data: raise ExecutableFormatError at load, or run
  to numpy's result for the constants it now holds;
* anything else -- a different but possibly valid program -- raise
  ExecutableFormatError at load, or a clear error (ValueError, TypeError,
  IndexError, KeyError, RuntimeError) when the VM is made or run, or return
  well-formed values.
None may crash or hang; under the sanitizer build (tools/sanitize-pytest)
none may cause a sanitizer report. The mutants run in a worker process, so
a crash is reported with the mutant that caused it.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

HEADER_SIZE = 28  # magic[8], version u32, payload size u64, FNV-1a checksum u64
MIN_MUTANTS = 10_000
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
X_TENSORS = np.array([0.5, -1.0, 2.0, 3.5, -4.25], dtype=np.float32)
X_CONTROL = np.array([0.0, 1.5, 0.0, -2.0, 3.0, 0.0, 7.0], dtype=np.float32)
CLEAR_ERRORS = ("FileNotFoundError", "ValueError", "TypeError", "IndexError", "KeyError", "MemoryError",
                "RuntimeError")


# ---------------------------------------------------------------------------
# The two programs and what numpy says they return.

def tensor_program(lib):
    """Kernels, a constant, storage, views, copies, tuples and a call:
    ``main(x) -> (x * 2 on the host, bias * 3, len(x), bias[:2])``."""
    from shapefn import Param, ProgramBuilder

    pb = ProgramBuilder()
    pb.kernel("scale")
    bias = pb.constant(np.array([1.5, -2.25, 3.0, 0.5], dtype=np.float32))
    main = pb.function("main", [Param("x", "float32", ["n"])])
    helper = pb.function("helper", [Param("v", "float32", ["m"], device="any")])
    x, = main.args
    c = main.load_const(bias)
    s = main.shape_of(x)
    main.source = "ONNX node 'double' (Mul)"  # (source marks are mutated too)
    y = main.alloc_tensor("device", s, "float32")
    main.invoke_kernel("scale", [x, main.load_int(2), y])
    main.source = ""
    main.kill(main.check_record("device"))  # (the call's index-check record, as a checked kernel takes it)
    z = main.call("helper", [c])
    n = main.shape_get(s, 0)
    storage = main.alloc_storage("device", main.load_int(64))
    t = main.tensor_in_storage(storage, main.load_int(0), main.load_shape([4]), "float32")
    main.match_shape(t, 1, [0], [-1], [main.load_int(4)])  # (a match_cast's check: t is [4])
    main.invoke_kernel("scale", [c, main.load_int(1), t])
    v = main.view(t, main.load_shape([2]))
    h = main.copy(y, "host")
    main.kill(y)
    z2 = main.get_item(main.make_tuple([h, z]), 1)
    main.ret(main.make_tuple([h, main.move(z2), n, v]))
    m, = helper.args
    out = helper.alloc_tensor("device", helper.shape_of(m), "float32")
    helper.invoke_kernel("scale", [m, helper.load_int(3), out])
    helper.ret(out)
    return pb.build(library=lib)


def tensor_reference(x, constants):
    bias, = constants
    return (x * np.float32(2), bias * np.float32(3), len(x), bias[:2])


def control_program(lib):
    """Shape arithmetic, a loop, a shape function, a slice, a count-sized
    kernel and a readback: ``main(x) -> (x[b:n:s], nonzero(x), sum(range(n)),
    n, min(0, n) == max(0, n), max(0, n))`` with b, s int64 constants."""
    from shapefn import Label, Param, ProgramBuilder

    pb = ProgramBuilder()
    begin_c = pb.constant(np.array([1], dtype=np.int64))
    stride_c = pb.constant(np.array([2], dtype=np.int64))
    main = pb.function("main", [Param("x", "float32", ["n"])])
    x, = main.args
    s = main.shape_of(x)
    n = main.shape_get(s, -1)
    n2 = main.tensor_dim(x, 0)
    numel = main.shape_numel(s)
    i, acc, one = main.load_int(0), main.load_int(0), main.load_int(1)
    top, done = Label(), Label()
    main.place(top)
    main.emit("if", main.lt(i, n), done)
    main.add(acc, acc, i)
    main.add(i, i, one)
    main.goto(top)
    main.place(done)
    three = main.load_int(3)
    q, r = main.floordiv(acc, three), main.floormod(acc, three)
    zero = main.sub(main.add(main.mul(q, three), r), acc)
    low, high = main.min(zero, n), main.max(zero, n)
    same = main.eq(low, high)
    begin, stride = main.load_const(begin_c), main.load_const(stride_c)
    end = main.shape_build([-1], [n])
    out_shape, = main.shape_func("relax.dynamic_strided_slice", [x, begin, end, stride])
    y = main.alloc_tensor("device", out_shape, "float32")
    main.invoke_kernel("strided_slice_1d", [x, begin, stride, y])
    idx = main.alloc_tensor("device", main.shape_make([one, n2]), "int64")
    count = main.alloc_tensor("device", main.load_shape([]), "int64")
    main.invoke_kernel("nonzero_1d", [x, idx, count])
    k = main.reg()
    main.readback([k], [count])
    nz = main.view(idx, main.shape_make([k]))
    main.ret(main.make_tuple([y, nz, acc, numel, same, high]))
    return pb.build(library=lib)


def control_reference(x, constants):
    (b,), (s,) = (int(v) for v in constants[0]), (int(v) for v in constants[1])
    if s == 0:
        return ValueError
    n = len(x)
    return (x[b:n:s], np.nonzero(x)[0].astype(np.int64), n * (n - 1) // 2, n, int(min(0, n) == max(0, n)),
            max(0, n))


PROGRAMS = {"tensors": (tensor_program, tensor_reference, X_TENSORS),
            "control": (control_program, control_reference, X_CONTROL)}
KERNELS = ("scale", "strided_slice_1d", "nonzero_1d")


# ---------------------------------------------------------------------------
# The file format, field by field.

FNV_OFFSET_BASIS, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def with_header(data, checksum: int) -> bytes:
    """``data`` with the header's payload size made to match and ``checksum``."""
    out = bytearray(data)
    out[12:20] = struct.pack("<Q", len(out) - HEADER_SIZE)
    out[20:28] = struct.pack("<Q", checksum)
    return bytes(out)


def with_headers(files: list) -> list:
    """Each file with its header's payload size and FNV-1a checksum made to
    match. The hash runs across all files of one length together, a numpy
    column at a time: a Python loop per byte would take most of the test's time."""
    by_length: dict = {}
    for i, data in enumerate(files):
        by_length.setdefault(len(data), []).append(i)
    out = list(files)
    for n, indices in by_length.items():
        columns = np.frombuffer(b"".join(bytes(files[i]) for i in indices), np.uint8)
        columns = np.ascontiguousarray(columns.reshape(len(indices), n)[:, HEADER_SIZE:].T)
        h = np.full(len(indices), FNV_OFFSET_BASIS, np.uint64)
        for column in columns:
            h ^= column
            h *= np.uint64(FNV_PRIME)
        for i, checksum in zip(indices, h.tolist()):
            out[i] = with_header(files[i], checksum)
    return out


@dataclass
class Field:
    offset: int
    fmt: str    # struct format
    role: str   # length, count, code_length, nbytes, registers, dtype_*, device, dim, param_dim, carried
    value: int
    symbols: int = 0  # a param_dim's function has this many symbols


@dataclass
class Layout:
    fields: list
    free: list       # (start, end) byte ranges nothing resolves: they may change freely
    constants: list  # (start, end, numpy dtype, shape) of each constant's data
    functions: list  # (file offset of the code, code words, register count)
    tables: dict     # table sizes by operand kind: k, s, c, f


def parse(blob: bytes, library_is_free: bool = True) -> Layout:
    fields, free, constants, functions = [], [], [], []
    pos = HEADER_SIZE

    def take(fmt, role=None):
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, blob, pos)
        if role:
            fields.append(Field(pos, fmt, role, value))
        pos += struct.calcsize(fmt)
        return value

    def string(is_free=False):
        nonlocal pos
        n = take("I", "length")
        if is_free:
            free.append((pos, pos + n))
        pos += n
        return blob[pos - n:pos]

    def dtype():
        return take("B", "dtype_code"), take("B", "dtype_bits"), take("H", "dtype_lanes")

    string(library_is_free)  # the kernel library is opened by Executable.load only
    if library_is_free:  # its size and digest, which that load compares with the file's
        free.append((pos, pos + 16))
    pos += 16
    for _ in range(take("I", "count")):  # check sites: what a failed index check names, any text
        string(True)
        string(True)
    tables = {"k": take("I", "count")}
    for _ in range(tables["k"]):
        string()
    tables["s"] = take("I", "count")
    for _ in range(tables["s"]):
        string()
        for _ in range(take("I", "count")):
            take("B")  # a mask flag: any byte is a flag
    for _ in range(take("I", "count")):  # carried shape functions
        take("i", "carried")  # shape function index
        take("i", "carried")  # outputs
        for _ in range(take("I", "count")):
            string()  # signature
            take("i", "carried")  # kernel index
            for _ in range(take("I", "count")):
                take("q", "carried")  # output rank
    for _ in range(take("I", "count")):  # host CPU features
        string()  # host CPU feature
    string()  # device code
    tables["c"] = take("I", "count")
    for _ in range(tables["c"]):
        code, bits, _ = dtype()
        take("i", "device")
        shape = [take("q", "dim") for _ in range(take("I", "count"))]
        nbytes = take("Q", "nbytes")
        constants.append((pos, pos + nbytes, np.dtype(f"{'if'[code // 2]}{bits // 8}"), shape))
        pos += nbytes
    tables["f"] = take("I", "count")
    for _ in range(tables["f"]):
        name = string()
        if name != b"main":  # called by index; only the entry is looked up by name
            free.append((pos - len(name), pos))
        dims = []
        for _ in range(take("I", "count")):
            string(True)
            dtype()
            take("i", "device")
            for _ in range(take("I", "count")):
                dims.append(len(fields))
                take("q", "param_dim")
        symbols = take("I", "count")
        for _ in range(symbols):
            string(True)
        for i in dims:
            fields[i].symbols = symbols
        registers = take("q", "registers")
        n = take("I", "code_length")
        functions.append((pos, [take("q") for _ in range(n)], registers))
        for _ in range(take("I", "count")):  # source marks
            take("q", "mark")  # first instruction
            string(True)  # what the code was generated for: any text
    assert pos == len(blob)
    return Layout(fields, free, constants, functions, tables)


def isa():
    from shapefn import _core

    return _core.isa()


def code_words(words, table):
    """The role of every word of ``words``: ``(index, kind)`` with kind "op",
    an operand kind of isa.def, or "len" for a list's length; and each
    instruction's ``(first word, end word)``."""
    roles, instructions, pc = [], [], 0
    while pc < len(words):
        roles.append((pc, "op"))
        pos = pc + 1
        for kind in table[words[pc]][1]:
            if kind in "RI":
                roles.append((pos, "len"))
                roles.extend((pos + 1 + j, kind) for j in range(words[pos]))
                pos += 1 + words[pos]
            else:
                roles.append((pos, kind))
                pos += 1
        instructions.append((pc, pos))
        pc = pos
    return roles, instructions


# ---------------------------------------------------------------------------
# Mutants.

@dataclass
class Mutant:
    family: str
    what: str
    blob: bytes
    expect: str  # checksum | format | same | any
    stale_header: bool = False  # keep the header as is (else size and checksum are recomputed)


def valid_dtype(code, bits, lanes):
    """Mirror of the verifier's rule (csrc/vm/verifier.cc ValidDType)."""
    return lanes == 1 and ((code in (0, 1, 2) and bits in (8, 16, 32, 64)) or (code, bits) in
                           ((1, 1), (4, 16), (6, 8)))


def encode_dtype(code, bits, lanes=1):
    return code | bits << 8 | lanes << 16


VALID_DTYPES = [encode_dtype(c, b) for c, b in ((0, 8), (0, 32), (0, 64), (1, 8), (1, 1), (2, 16),
                                                   (2, 32), (2, 64), (4, 16), (6, 8))]
BAD_DTYPES = [0, -1, encode_dtype(2, 32, 2), encode_dtype(2, 7), encode_dtype(9, 32), encode_dtype(6, 32),
              1 << 40, INT64_MIN]


def patch(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(blob)
    struct.pack_into("<" + fmt, out, offset, value)
    return bytes(out)


def field_values(f: Field):
    """(new value, expectation) for one table field."""
    v = f.value
    if f.role in ("length", "count", "code_length"):
        return [(n, "any") for n in {0, 1, v - 1, v + 1, v + 8, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF} if n >= 0]
    if f.role == "nbytes":
        return [(n, "format") for n in {0, v - 1, v + 1, 2 * v, 1 << 32, 1 << 63, (1 << 64) - 1} if n >= 0]
    if f.role == "registers":
        return [(v + 1, "same"), (1 << 20, "same")] + [
            (n, "format") for n in (v - 1, 0, -1, (1 << 20) + 1, INT64_MIN, INT64_MAX)]
    if f.role == "dim":  # a constant's: any change contradicts its byte count
        return [(n, "format") for n in {0, 1, v - 1, v + 1, -1, INT64_MIN, INT64_MAX, 1 << 32}]
    if f.role == "param_dim":
        unknown = [-1 - f.symbols, -6 - f.symbols, INT64_MIN]
        return [(n, "format") for n in unknown] + [(n, "any") for n in (0, 1, 5, 7, 1 << 40)]
    if f.role == "carried":  # indices and ranks: the verifier bounds every one
        return [(n, "any") for n in (-1, 0, 1, v + 1, 0x7FFFFFFF, -(1 << 31))]
    if f.role == "mark":  # the verifier bounds and orders every one
        return [(n, "any") for n in (-1, 0, 1, v + 1, INT64_MAX, INT64_MIN)]
    if f.role == "device":
        return [(n, "format") for n in (2, -2, 0x7FFFFFFF, -(1 << 31))] + [(n, "any") for n in (0, 1, -1)]
    return []  # the parts of a dtype change together: see field_mutants


def field_mutants(blob, lay):
    for f in lay.fields:
        for value, expect in field_values(f):
            if value != f.value:
                yield Mutant("field", f"{f.role}@{f.offset}={value}", patch(blob, f.offset, f.fmt, value), expect)
    parts = [f for f in lay.fields if f.role.startswith("dtype_")]
    for code_f, bits_f, lanes_f in zip(parts[0::3], parts[1::3], parts[2::3]):
        old = (code_f.value, bits_f.value, lanes_f.value)
        for new in [(c, old[1], old[2]) for c in (0, 1, 2, 3, 4, 5, 6, 7, 255)] + \
                   [(old[0], b, old[2]) for b in (0, 1, 7, 8, 16, 32, 64, 128, 255)] + \
                   [(old[0], old[1], n) for n in (0, 2, 4, 0xFFFF)]:
            if new == old:
                continue
            out = bytearray(blob)
            struct.pack_into("<BBH", out, code_f.offset, *new)
            yield Mutant("field", f"dtype@{code_f.offset}={new}", bytes(out),
                         "any" if valid_dtype(*new) else "format")


def operand_values(kind, value, lay, registers, instructions, rng):
    """(new value, out of range) for one code word of ``kind``."""
    sizes = {"r": registers, "R": registers, "d": 2, "j": instructions, **lay.tables}
    if kind in sizes:
        size = sizes[kind]
        bad = [-1, size, size + 1, 1 << 31, INT64_MIN, INT64_MAX]
        good = [int(g) for g in rng.permutation(size)[:6] if g != value]
        return [(b, True) for b in bad] + [(g, False) for g in good]
    if kind == "t":
        return [(b, True) for b in BAD_DTYPES] + [(g, False) for g in VALID_DTYPES if g != value]
    if kind == "op":
        n = len(isa())
        return [(b, True) for b in (-1, n, 1 << 32)] + [(o, False) for o in range(n) if o != value]
    if kind == "len":
        return [(n, False) for n in {0, value - 1, value + 1, value + 2, -1, 1 << 31, INT64_MAX, INT64_MIN}
                if n != value]
    # "i" and "I": immediates have no range of their own.
    return [(n, False) for n in {0, 1, -1, value - 1, value + 1, 1 << 40, INT64_MIN, INT64_MAX} if n != value]


def code_mutants(blob, lay, rng):
    table = isa()
    lengths = [f for f in lay.fields if f.role == "code_length"]
    for fn, ((offset, words, registers), length) in enumerate(zip(lay.functions, lengths)):
        roles, instructions = code_words(words, table)
        for index, kind in roles:
            for value, out_of_range in operand_values(kind, words[index], lay, registers, len(instructions), rng):
                yield Mutant("operand", f"func {fn} word {index} ({kind}) {words[index]} -> {value}",
                             patch(blob, offset + 8 * index, "q", value), "format" if out_of_range else "any")
        # Whole instructions deleted and duplicated: a well-formed stream that
        # means something else (missing definitions, shifted jump targets).
        for start, end in instructions:
            for what, new in (("deleted", words[:start] + words[end:]),
                              ("duplicated", words[:end] + words[start:end] + words[end:])):
                out = bytearray(blob[:length.offset]) + struct.pack("<I", len(new))
                out += struct.pack(f"<{len(new)}q", *new) + blob[offset + 8 * len(words):]
                yield Mutant("instruction", f"func {fn} instruction at word {start} {what}", bytes(out), "any")


def flip_mutants(blob, lay, rng, count):
    payload_bits = (len(blob) - HEADER_SIZE) * 8
    changeable = set()
    for start, end in lay.free + [c[:2] for c in lay.constants]:
        changeable.update(range(start, end))
    for _ in range(count):
        bits = np.unique(rng.integers(payload_bits, size=int(rng.integers(1, 5))))
        out = bytearray(blob)
        for b in bits:
            out[HEADER_SIZE + b // 8] ^= 1 << (b % 8)
        touched = {HEADER_SIZE + int(b) // 8 for b in bits}
        yield Mutant("flips", f"bits {sorted(int(b) for b in bits)}", bytes(out),
                     "same" if touched <= changeable else "any")


def stale_flips(blob, rng, count=300):
    for b in rng.choice((len(blob) - HEADER_SIZE) * 8, size=count, replace=False):
        out = bytearray(blob)
        out[HEADER_SIZE + b // 8] ^= 1 << (b % 8)
        # One changed byte always changes an FNV-1a hash: each step is a bijection.
        yield Mutant("stale checksum", f"bit {b}", bytes(out), "checksum", stale_header=True)


def truncations(blob):
    h = FNV_OFFSET_BASIS  # FNV-1a of each prefix, in one pass
    for n in range(HEADER_SIZE, len(blob)):
        yield Mutant("truncated", f"to {n} bytes", with_header(blob[:n], h), "format", stale_header=True)
        h = ((h ^ blob[n]) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF


def mutants(blob: bytes, seed: int, flips: int = 2500) -> list:
    """Every mutant of ``blob``, the same ones on every run."""
    rng = np.random.default_rng(seed)
    lay = parse(blob)
    out = [*stale_flips(blob, rng), *truncations(blob), *field_mutants(blob, lay),
           *code_mutants(blob, lay, rng), *flip_mutants(blob, lay, rng, flips)]
    fix = [m for m in out if not m.stale_header]
    for m, fixed in zip(fix, with_headers([m.blob for m in fix])):
        m.blob = fixed
    return out


# ---------------------------------------------------------------------------
# Running mutants (in the worker process).

def plain(value):
    """A VM result as numpy arrays, ints and tuples (copied to the host)."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value if isinstance(value, int) or value is None else value.numpy()


def same_result(got, want) -> bool:
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(map(same_result, got, want))
    if isinstance(want, np.ndarray):
        return (isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
                and np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))
    return got == want


def attempt(load, make_vm, x):
    """``(outcome, detail)``: outcome "format" (rejected at load), the class
    of a clear error from making or running the VM, or "ran" with the result."""
    import shapefn

    try:
        core = load()
        core.disassemble()
    except shapefn.ExecutableFormatError as e:
        return "format", str(e)
    except FileNotFoundError as e:  # Executable.load: the kernel library it names is not there
        return "FileNotFoundError", str(e)
    except ValueError as e:  # Executable.load: the library there is not the one it was saved with
        return "ValueError", str(e)
    try:
        return "ran", plain(make_vm(core)(x))
    except _REFUSALS as e:
        kind = next(t for t in _REFUSALS if isinstance(e, t))
        return kind.__name__, str(e) or type(e).__name__


# What a mutant that loads may raise when run: clear errors (a size too
# large for the device's memory is a MemoryError naming the bytes).
_REFUSALS = (ValueError, TypeError, IndexError, KeyError, MemoryError, RuntimeError)


def problem(m: Mutant, outcome, detail, reference, x):
    """Why ``outcome`` breaks what mutant ``m`` must do, or None."""
    if outcome != "ran" and not detail:
        return f"{outcome} without a message"
    if m.expect == "checksum":
        return None if outcome == "format" and "checksum" in detail else f"not a checksum error: {outcome}"
    if m.expect == "format":
        return None if outcome == "format" else f"not rejected at load: {outcome} {str(detail)[:200]}"
    if m.expect == "same" and outcome != "format":
        lay = parse(m.blob)
        want = reference(x, [np.frombuffer(m.blob[s:e], dtype).reshape(shape) for s, e, dtype, shape in lay.constants])
        if isinstance(want, type):
            return None if outcome == want.__name__ else f"expected {want.__name__}, got {outcome}"
        return None if outcome == "ran" and same_result(detail, want) else f"wrong result: {outcome} {detail}"
    if outcome in ("format", "ran") + CLEAR_ERRORS:
        return None
    return f"unexpected outcome {outcome}: {detail}"


def worker(library_path: str, out_dir: str) -> None:
    """Runs every mutant; prints ``MUTANT`` before each (so a crash can be
    traced to it), a ``PROBLEM`` line for each broken promise and a final
    ``SUMMARY`` of outcomes by family."""
    import faulthandler
    import os

    import tvm

    import shapefn
    from shapefn import _core

    library = tvm.runtime.load_module(library_path)
    kernel_funcs = {name: library[name] for name in KERNELS}
    device = shapefn.sim(arena_bytes=1 << 26)
    summary: dict = {}

    def run(label, m, load, x, reference):
        print(f"MUTANT {label} {m.family}: {m.what}", flush=True)
        faulthandler.dump_traceback_later(30, exit=True)  # a hang ends the worker
        outcome, detail = attempt(
            load, lambda core: shapefn.VirtualMachine(shapefn.Executable(core, kernel_funcs), device,
                                                      max_instructions=100_000), x)
        faulthandler.cancel_dump_traceback_later()
        counts = summary.setdefault(m.family, {})
        counts[outcome] = counts.get(outcome, 0) + 1
        why = problem(m, outcome, detail, reference, x)
        if why:
            print(f"PROBLEM {label} {m.family}: {m.what}: {why}", flush=True)

    for seed, (name, (build, reference, x)) in enumerate(PROGRAMS.items()):
        blob = build(library)._core.serialize()
        for i, m in enumerate(mutants(blob, seed)):
            run(f"{name}#{i}", m, lambda b=m.blob: _core.Executable.deserialize(b), x, reference)

    # Through the public Executable.load, whose file names its kernel library.
    exe = shapefn.Executable(_core.Executable.deserialize(tensor_program(library)._core.serialize()),
                             kernel_funcs, library)
    exe._library_path = library_path
    path = os.path.join(out_dir, "program.sfx")
    exe.save(path)
    saved = open(path, "rb").read()
    rng = np.random.default_rng(len(PROGRAMS))
    saved_mutants = list(flip_mutants(saved, parse(saved, library_is_free=False), rng, 300))
    for m, fixed in zip(saved_mutants, with_headers([m.blob for m in saved_mutants])):
        m.blob, m.family = fixed, "flips, Executable.load"
    for i, m in enumerate(saved_mutants):
        with open(path, "wb") as f:
            f.write(m.blob)
        run(f"saved#{i}", m, lambda: shapefn.Executable.load(path)._core, X_TENSORS, tensor_reference)
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    worker(*sys.argv[1:])


# ---------------------------------------------------------------------------
# The tests.

def test_mutants_document_their_programs(kernel_lib):
    # The unmutated programs give numpy's answers, so "same result" means something.
    import shapefn

    for name, (build, reference, x) in PROGRAMS.items():
        exe = build(kernel_lib)
        lay = parse(exe._core.serialize())
        consts = [np.frombuffer(exe._core.serialize()[s:e], d).reshape(shape) for s, e, d, shape in lay.constants]
        got = plain(shapefn.VirtualMachine(exe, "sim")(x))
        assert same_result(got, reference(x, consts)), (name, got)
    used = {isa()[w][0] for build, _, _ in PROGRAMS.values()
            for offset, words, _ in parse(build(kernel_lib)._core.serialize()).functions
            for w in (words[s] for s, _ in code_words(words, isa())[1])}
    assert used == {name for name, _ in isa()}, "the programs must use every instruction"


def test_ten_thousand_mutants_load_and_run_safely(kernel_lib, tmp_path):
    library = tmp_path / "kernels.so"
    kernel_lib.export_library(str(library))
    proc = subprocess.run([sys.executable, __file__, str(library), str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    lines = proc.stdout.splitlines()
    summaries = [json.loads(line[len("SUMMARY "):]) for line in lines if line.startswith("SUMMARY ")]
    if proc.returncode != 0 or not summaries:
        last = [line for line in lines if line.startswith("MUTANT ")][-1:]
        raise AssertionError(f"the worker died (status {proc.returncode}) at {last}:\n{proc.stderr[-4000:]}")
    problems = [line for line in lines if line.startswith("PROBLEM ")]
    assert not problems, "\n".join(problems[:40])

    summary = summaries[0]
    print(json.dumps(summary, indent=1))
    assert sum(sum(c.values()) for c in summary.values()) >= MIN_MUTANTS
    # Every family was caught at load sometimes, and random and structured
    # changes also reached the VM and ran: the mutants exercise both.
    for family, counts in summary.items():
        assert counts.get("format", 0) > 0, family
    for family in ("flips", "operand", "instruction", "flips, Executable.load"):
        assert summary[family].get("ran", 0) > 0, family
