"""``shapefn.compile(..., progress=...)``: the phases and a bar over the
kernels built on stderr when asked (True, or "auto" on a terminal), nothing
otherwise."""
import pytest
from tvm.script import ir as I
from tvm.script import relax as R

import shapefn


@I.ir_module
class Program:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")):
        return R.nonzero(R.greater(R.multiply(x, R.const(3.0, "float32")), R.const(0.0, "float32")))


def test_progress_shows_every_phase_and_the_kernels_built(tmp_path, capfd):
    shapefn.set_cache_dir(tmp_path)  # (an empty cache: every kernel is built)
    try:
        shapefn.compile(Program, "host", progress=True)
    finally:
        shapefn.set_cache_dir(None)
    err = capfd.readouterr().err
    for phase in ("lowering data-dependent ops", "TVM's Relax passes", "placement and bytecode",
                  "scheduling kernels", "building kernels"):
        assert f"shapefn.compile: {phase}" in err
    assert "kernels built" in err and ("kernel/s" in err or "s/kernel" in err)


@pytest.mark.parametrize("setting", [False, "auto"])
def test_quiet_unless_asked_or_on_a_terminal(tmp_path, capfd, setting):
    shapefn.set_cache_dir(tmp_path)
    try:
        shapefn.compile(Program, "host", progress=setting)  # (pytest's stderr is not a terminal)
    finally:
        shapefn.set_cache_dir(None)
    assert capfd.readouterr().err == ""


def test_a_bad_setting_is_refused():
    with pytest.raises(ValueError, match="progress must be True, False or 'auto'"):
        shapefn.compile(Program, "host", progress="loud")
