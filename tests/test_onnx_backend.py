"""ONNX's own conformance runner (``onnx.backend.test.BackendTest``) over
``shapefn.frontend.onnx.backend``, on ``sim`` and on ``opencl``: a sample of its node
tests, one or a few per operator family (reference inputs and outputs from
the ``onnx`` package, compared with the suite's tolerances)."""
import onnx.backend.test

import shapefn.frontend.onnx.backend
from conftest import opencl

# Node tests, by operator family.
SAMPLE = [
    "test_abs", "test_add_bcast", "test_relu", "test_sigmoid", "test_clip_default_min", "test_where_example",
    "test_concat_3d_axis_negative_1", "test_gather_0", "test_gather_elements_0", "test_gathernd_example_int32",
    "test_slice_neg_steps", "test_reshape_negative_extended_dims", "test_transpose_all_permutations_2",
    "test_nonzero_example", "test_top_k_smallest", "test_argmax_default_axis_example",
    "test_matmul_3d", "test_conv_with_strides_padding", "test_maxpool_2d_pads", "test_softmax_axis_1",
    "test_expand_dim_changed", "test_tile", "test_flatten_axis0", "test_range_int32_type_negative_delta",
    "test_shape_start_1_end_negative_1", "test_constantofshape_int_zeros",
    # shapefn's own converters
    "test_lstm_defaults", "test_qlinearmatmul_2D_int8_float32", "test_dft_axis_opset19", "test_col2im",
    "test_sequence_map_add_2_sequences", "test_maxpool_with_argmax_2d_precomputed_pads",
]



class OpenCLBackend(shapefn.frontend.onnx.backend.ShapefnBackend):
    """ONNX's "CPU" as shapefn's ``opencl`` device."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return super().prepare(model, "opencl" if device == "CPU" else device, **kwargs)


def _sample(backend, prefix: str, mark=None) -> None:
    """The sample's test cases, named ``prefix`` + ONNX's name, into this
    module (ONNX's runner would list every other case as skipped)."""
    runner = onnx.backend.test.BackendTest(backend, __name__)
    for name in SAMPLE:
        runner.include(rf"^{name}_cpu$")
    included = {f"{name}_cpu" for name in SAMPLE}
    for case in runner.test_cases.values():
        for name in [n for n in vars(case) if n.startswith("test_") and n not in included]:
            delattr(case, name)
        case.__name__ = case.__qualname__ = prefix + case.__name__
        globals()[case.__name__] = mark(case) if mark is not None else case


_sample(shapefn.frontend.onnx.backend, "Sim")
_sample(OpenCLBackend, "OpenCL", opencl)
