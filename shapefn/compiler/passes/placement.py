"""Placement: which tensors live on the host and which on the device.

Tensor compute goes to the device. Integer (or tiny) work whose inputs are
all already on the host (``shape_of`` turned into tensors, constants, and
what is computed from them) stays on the host, so that values a shape
function reads never cross from the device. A value the device produced is
read back only where a shape function needs it.

A kernel written for GPU threads runs on the device whatever its inputs,
unless it has a host form (shapefn's GPU kernel forms name their CPU forms,
``target_schedule.host_form``).

Where tensor compute goes is a policy (``PlacementPolicy``): ``ON_DEVICE``
for a device, ``ALL_ON_HOST`` when the host is the device (nothing is ever
copied then). ``place_module`` runs the pass over every Relax function of a
module; code generation reads its result and decides nothing itself.

Runs on Relax after TVM's ``CallTIRRewrite``: kernels are calls of PrimFuncs
with explicit output tensors allocated just before.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ...runtime import device_kinds
from ...runtime.devices import EXECUTION_SLOT, HOST_SLOT
from ..schedules.target_schedule import host_form
from ..shape_calls import TO_HOST, VIEW

# Placement gives each binding a device slot by name, which codegen passes to the builder.
HOST, DEVICE = HOST_SLOT, EXECUTION_SLOT
ALLOC_TENSOR = "relax.builtin.alloc_tensor"


def key(obj) -> int:
    """Identity of an IR node (its C handle), usable as a dict key."""
    return obj.__chandle__()


def is_tensor_const(expr) -> bool:
    """A Relax tensor constant (in TVM 0.27 a GenericConst holding a tensor)."""
    return isinstance(expr, tvm.ir.GenericConst) and isinstance(expr.ty, relax.TensorType)


def is_prim(expr) -> bool:
    """A scalar PrimExpr used as a Relax value (Relax's PrimValue)."""
    return isinstance(getattr(expr, "ty", None), tvm.ir.PrimType)


# Float scalars computed from shapes (scale factors, padding of an image to a
# stride) stay on the host with the integers they come from.
SMALL_ELEMENTS = 64


def is_small_tensor(ty) -> bool:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    numel = 1
    for d in ty.shape.values:
        if not isinstance(d, tvm.tirx.IntImm):
            return False
        numel *= int(d)
    return numel <= SMALL_ELEMENTS


def is_integer_tensor(ty) -> bool:
    if not isinstance(ty, relax.TensorType) or ty.dtype is None:
        return False
    dtype = str(ty.dtype)
    return dtype.startswith("int") or dtype.startswith("uint") or dtype == "bool"


@dataclass(frozen=True)
class PlacementPolicy:
    """Where work goes: ``compute`` is the slot of tensor compute, of
    constants and of parameters (but host parameters); integer work on host
    values stays on the host under any policy. With ``compute`` on the host,
    every value is on the host and nothing is copied."""

    compute: str

    @property
    def all_on_host(self) -> bool:
        return self.compute == HOST


ON_DEVICE = PlacementPolicy(DEVICE)
ALL_ON_HOST = PlacementPolicy(HOST)


def policy_for(device: str) -> PlacementPolicy:
    """The policy for a VM on ``device``: a kind that keeps everything on
    the host (``host``, ``runtime/device_kinds.py``) runs everything there."""
    return ALL_ON_HOST if device_kinds.kind_of(device).all_on_host else ON_DEVICE


@dataclass
class Placement:
    """Slot of each tensor-valued var and of each kernel call binding of one
    function. A var the pass did not place (a call's result, a tuple item)
    is on the host under a policy that puts everything there, else unknown."""

    policy: PlacementPolicy = ON_DEVICE
    slot: dict[int, str] = field(default_factory=dict)
    kernel_slot: dict[int, str] = field(default_factory=dict)

    def var_slot(self, var, default: str | None = None) -> str | None:
        """Where ``var`` lives; ``default`` if the pass did not place it."""
        if self.policy.all_on_host:
            return HOST
        return self.slot.get(key(var), default)

    def kernel(self, binding) -> str:
        """Where the kernel call ``binding`` runs."""
        return self.kernel_slot.get(key(binding), self.policy.compute)


@dataclass
class ModulePlacement:
    """The placement of every Relax function of a module (by name) and where
    each function takes its tensor parameters."""

    policy: PlacementPolicy
    functions: dict[str, Placement]
    host_params: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def __getitem__(self, func_name: str) -> Placement:
        return self.functions[func_name]

    def param_slot(self, func_name: str, index: int) -> str:
        """Where function ``func_name`` takes its tensor parameter ``index``."""
        if index in self.host_params.get(func_name, ()):
            return HOST
        return self.policy.compute


def place_module(mod: tvm.IRModule, policy: PlacementPolicy,
                 host_params: Mapping[str, frozenset[int]] | None = None) -> ModulePlacement:
    """The placement pass: every Relax function of ``mod`` placed under
    ``policy``, with the host parameters ``host_params.plan`` chose."""
    host_params = dict(host_params or {})
    functions = {gv.name_hint: place(func, mod, policy, host_params.get(gv.name_hint, frozenset()))
                 for gv, func in mod.functions.items() if isinstance(func, relax.Function)}
    return ModulePlacement(policy, functions, host_params)


def all_bindings(expr: relax.Expr):
    """Every binding of a function body, including those inside If branches,
    in order."""
    if isinstance(expr, relax.SeqExpr):
        for block in expr.blocks:
            for binding in block.bindings:
                yield binding
                value = binding.value
                if isinstance(value, relax.If):
                    yield from all_bindings(value.true_branch)
                    yield from all_bindings(value.false_branch)


def place(func: relax.Function, mod: tvm.IRModule, policy: PlacementPolicy = ON_DEVICE,
          host_params: frozenset[int] = frozenset()) -> Placement:
    """Places ``func``'s tensors under ``policy``; the parameters at
    ``host_params`` are on the host (``host_params.py``), the others where
    the policy puts compute."""
    p = Placement(policy)
    for i, param in enumerate(func.params):
        if isinstance(param.ty, relax.TensorType):
            p.slot[key(param)] = HOST if i in host_params else policy.compute
    allocated: set[int] = set()
    written: set[int] = set()
    constants: set[int] = set()
    host_build: dict[str, bool] = {}  # PrimFunc name -> has a host form

    def has_host_build(callee: relax.GlobalVar) -> bool:
        if callee.name_hint not in host_build:
            host_build[callee.name_hint] = host_form(mod[callee]) is not None
        return host_build[callee.name_hint]

    for binding in all_bindings(func.body):
        var, value = binding.var, binding.value
        if is_tensor_const(value):
            constants.add(key(var))
            continue
        if isinstance(value, relax.Var):
            if key(value) in p.slot:
                p.slot[key(var)] = p.slot[key(value)]
            if key(value) in constants:
                constants.add(key(var))
            continue
        if isinstance(binding, relax.MatchCast):
            continue
        if not isinstance(value, relax.Call):
            continue
        op = value.op
        if isinstance(op, tvm.ir.Op) and op.name == ALLOC_TENSOR:
            allocated.add(key(var))
            continue
        if isinstance(op, relax.ExternFunc) and op.global_symbol == TO_HOST:
            p.slot[key(var)] = HOST
            continue
        if isinstance(op, relax.ExternFunc) and op.global_symbol == VIEW:
            source = value.args[0]
            if key(source) in p.slot:
                p.slot[key(var)] = p.slot[key(source)]
            continue
        is_prim_func = isinstance(op, relax.GlobalVar) and isinstance(mod[op], tvm.tirx.PrimFunc)
        is_user_kernel = isinstance(op, relax.ExternFunc) and not op.global_symbol.startswith(("shapefn.", "vm."))
        if not (is_prim_func or is_user_kernel):
            continue
        outputs = [a for a in value.args
                   if isinstance(a, relax.Var) and key(a) in allocated and key(a) not in written]
        output_keys = {key(o) for o in outputs}
        inputs = [a for a in value.args if (isinstance(a, relax.Var) or is_tensor_const(a))
                  and key(a) not in output_keys and isinstance(a.ty, relax.TensorType)]
        on_host = policy.all_on_host or (
            is_prim_func and outputs
            and all(is_integer_tensor(o.ty) or is_small_tensor(o.ty) for o in outputs)
            and all(is_tensor_const(a) or key(a) in constants or p.slot.get(key(a)) == HOST
                    for a in inputs)
            and has_host_build(op))
        slot = HOST if on_host else DEVICE
        p.kernel_slot[key(binding)] = slot
        for o in outputs:
            written.add(key(o))
            p.slot[key(o)] = slot
    return p
