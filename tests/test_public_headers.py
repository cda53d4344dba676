"""The installed C++ headers (``shapefn/include``) are the public API only: a
program compiled against them alone loads and runs an executable, and
nothing in them names the VM's private types (the decoded instruction set,
the interpreter's state), which live in ``csrc/vm``."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from shapefn.runtime.builder import Param, ProgramBuilder

SITE = Path(sysconfig.get_path("platlib"))
INCLUDE = SITE / "shapefn" / "include"

CSRC = Path(__file__).resolve().parents[1] / "csrc"

# Names of csrc's private headers and types.
PRIVATE_HEADERS = ("isa.h", "isa.def", "idle_tensors.h", "vm_impl.h", "verifier.h")
PRIVATE_NAMES = ("Instruction", "Opcode", "OpInfo", "OperandSpec", "IdleTensors", "ShapeFuncPlan",
                 "ShapeFuncScratch", "CompiledShapeFunc", "decoded", "scratch_", "frame_")

PROGRAM = r"""
#include <shapefn/shapefn.h>

#include <cstdio>
#include <type_traits>
#include <vector>

static_assert(!std::is_copy_constructible_v<shapefn::Executable>, "an Executable is not copied");
static_assert(std::is_move_constructible_v<shapefn::Executable>, "an Executable can be moved");

int main(int argc, char** argv) {
  try {
    shapefn::Program program = shapefn::LoadProgram(argv[1]);
    const shapefn::Executable& exe = *program.executable;
    std::printf("functions %zu %s\n", exe.functions().size(), exe.functions()[0].name.c_str());
    shapefn::VirtualMachine vm(program.executable, shapefn::MakeDevice("host"), {}, program.kernels);
    std::vector<float> x(3);
    int64_t shape[] = {3};
    DLTensor arg{x.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
    shapefn::Value out = vm.Invoke("main", {shapefn::Value::Tensor(shapefn::BorrowHostTensor(arg))});
    std::printf("shape");
    for (int64_t d : out.shape) std::printf(" %lld", static_cast<long long>(d));
    std::printf("\ninstructions %lld\n", static_cast<long long>(vm.counters().instructions));
    std::printf("%s", exe.Disassemble(true).c_str());
    return 0;
  } catch (const shapefn::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
"""


def compile_command(source: str, output: str) -> list[str]:
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.fail(f"no C++ compiler '{compiler}' (set CXX)")
    return [compiler, "-std=c++17", source, "-o", output, f"-I{INCLUDE}", f"-I{SITE / 'tvm_ffi' / 'include'}",
            f"-L{SITE / 'shapefn'}", "-lshapefn_core", f"-L{SITE / 'tvm_ffi' / 'lib'}", "-ltvm_ffi",
            f"-Wl,-rpath,{SITE / 'shapefn'}:{SITE / 'tvm_ffi' / 'lib'}:{SITE / 'tvm' / 'lib'}"]


def headers() -> list[Path]:
    return sorted(p for p in (INCLUDE / "shapefn").iterdir() if p.is_file())


def test_no_private_header_is_installed():
    installed = {p.name for p in headers()}
    assert "vm.h" in installed and "shapefn.h" in installed
    assert not installed & set(PRIVATE_HEADERS)


@pytest.mark.parametrize("name", PRIVATE_NAMES)
def test_public_headers_do_not_name_private_types(name):
    for path in headers():
        text = re.sub(r"//.*", "", path.read_text())  # comments may point at csrc/vm
        assert not re.search(rf"\b{re.escape(name)}\b", text), f"{path.name} names {name}"


def saved_program(tmp_path: Path) -> Path:
    """``main(x: float32[n])`` returning the shape ``[n, n * n]``."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    n = fb.tensor_dim(fb.args[0], 0)
    fb.ret(fb.shape_make([n, fb.mul(n, n)]))
    path = tmp_path / "program.sfx"
    pb.build().save(path)
    return path


def test_program_against_the_installed_headers_runs(tmp_path):
    (tmp_path / "main.cc").write_text(PROGRAM)
    build = subprocess.run(compile_command("main.cc", "main"), cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run(["./main", str(saved_program(tmp_path))], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["functions 1 main", "shape 3 9", "instructions 4"]
    assert "tensor_dim dst=%1, tensor=%0, axis=0" in proc.stdout


@pytest.mark.parametrize("use", ["shapefn::Opcode op{};", "shapefn::Instruction ins;",
                                 "shapefn::IdleTensors idle;", "sizeof(shapefn::VirtualMachine::Impl);"])
def test_private_types_are_out_of_reach(tmp_path, use):
    (tmp_path / "use.cc").write_text(f"#include <shapefn/shapefn.h>\nint main() {{ {use} return 0; }}\n")
    command = compile_command("use.cc", "use") + ["-fsyntax-only"]
    build = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode != 0
    assert "error" in build.stderr


def test_private_headers_stay_in_their_folder():
    """The core's sources include public headers (``shapefn/...``), the
    shared internal ones (``csrc/internal``) and their own folder's, nothing
    else: a header in another folder is that folder's private business."""
    crossings = []
    for source in sorted(CSRC.rglob("*")):
        if source.suffix not in (".cc", ".h", ".def") or CSRC / "tests" in source.parents:
            continue
        for line in source.read_text().splitlines():
            if not line.startswith('#include "'):
                continue
            name = line.split('"')[1]
            if name.startswith("shapefn/") or (CSRC / "internal" / name).exists() or (source.parent / name).exists():
                continue
            crossings.append(f"{source.relative_to(CSRC)}: {name}")
    assert crossings == []
