"""Bytecode family: allocation — alloc_storage, alloc_tensor,
tensor_in_storage, view — on the host and on sim, with the allocations
counter, the devices results land on, and the errors of sizes that do not fit."""
import numpy as np
import pytest
from bytecode import lines, program, rejected, run

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

X = ("x", "float32", ["n"])


@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("slot", ["host", "device"])
def test_alloc_tensor_places_shape_and_dtype(device, slot):
    pb, fb = program([X])
    fb.ret(fb.alloc_tensor(slot, fb.load_shape([2, 3]), "int16"))
    tensor, counters = run(pb, np.zeros(1, np.float32), device=device)
    assert tensor.shape == (2, 3) and tensor.dtype == "int16"
    assert tensor.device == ("host" if slot == "host" else device)
    assert counters["allocations"] == (2 if device == "sim" else 1)  # sim: the argument's upload too
    int16 = 0 | 16 << 8 | 1 << 16  # dtype words: code | bits << 8 | lanes << 16
    assert lines(pb.build())[1] == f"alloc_tensor dst=%2, device=@{slot}, shape=%1, dtype=dtype:{int16}"


def test_tensors_in_one_storage_share_its_bytes():
    pb, fb = program([X])
    storage = fb.alloc_storage("host", fb.load_int(64))
    a = fb.tensor_in_storage(storage, fb.load_int(0), fb.load_shape([4]), "float32")
    b = fb.tensor_in_storage(storage, fb.load_int(32), fb.load_shape([2, 2]), "int32")
    whole = fb.view(storage, fb.load_shape([16]))
    fb.ret(fb.make_tuple([storage, a, b, whole]))
    (storage, a, b, whole), counters = run(pb, np.zeros(1, np.float32))
    assert storage.shape == (64,) and storage.dtype == "uint8"
    assert a.shape == (4,) and a.dtype == "float32" and b.shape == (2, 2) and b.dtype == "int32"
    assert whole.shape == (16,) and whole.dtype == "uint8"
    assert counters["allocations"] == 1  # the storage; tensors in it and views allocate nothing


def test_view_reinterprets_a_prefix():
    pb, fb = program([("x", "float32", [2, 3])])
    fb.ret(fb.view(fb.args[0], fb.load_shape([4])))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    view, _ = run(pb, data)
    np.testing.assert_array_equal(view.numpy(), data.reshape(-1)[:4])


@pytest.mark.parametrize("build, error, message", [
    (lambda fb: fb.alloc_storage("host", fb.load_int(-1)), ValueError, "alloc_storage of negative size -1"),
    (lambda fb: fb.tensor_in_storage(fb.alloc_storage("host", fb.load_int(8)), fb.load_int(4), fb.load_shape([2]),
                                     "float32"), ValueError, "tensor_in_storage: 8 bytes at offset 4 do not fit"),
    (lambda fb: fb.view(fb.args[0], fb.load_shape([2])), ValueError, "view: the new shape needs more bytes"),
    (lambda fb: fb.alloc_tensor("host", fb.load_int(3), "float32"), TypeError, "alloc_tensor expects a shape, got int"),
])
def test_allocation_errors(build, error, message):
    pb, fb = program([("x", "float32", [1])])
    fb.ret(build(fb))
    with pytest.raises(error, match=message):
        run(pb, np.zeros(1, np.float32))


def test_alloc_on_an_unknown_device_slot_is_rejected():
    pb, fb = program([X])
    fb.ret(fb.alloc_tensor(2, fb.load_shape([1]), "float32"))
    rejected(pb, "alloc_tensor refers to device slot #2 of 2 (operand 'device')")
