"""Code generation: Relax (after TVM's lowering passes) -> shapefn bytecode.

It decides nothing about where values live or in which order readbacks
run: it emits what the placement pass (``placement.py``) and the readback
scheduling pass (``readback_order.py``) decided, inserting copies where a tensor
is read on another slot than its own (``copies.py``).

Symbolic sizes and shapes live in int64 registers (``size_registers.py``);
data-dependent shapes come from ``invoke_shape_func``.

Relax has no loops; loops (ONNX ``Loop``) are recursive functions. A call of
a function to itself in tail position becomes a jump back to its first
instruction after the arguments are moved into the parameter registers, so
a loop of any trip count runs in one frame (TVM's Relax VM recurses on the
native stack instead).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import tvm
from tvm import relax, tirx

from ...runtime.builder import Label, Param, ProgramBuilder, Reg
from ..passes import index_checks
from ..passes.copies import ConstantTable, Copies
from ..passes.placement import ALLOC_TENSOR, HOST, ModulePlacement, Placement, is_prim, is_tensor_const, key
from ..passes.readback_order import KILLS, ReadbackOrder
from ..shape_calls import SHAPE_FUNC, TO_HOST, VIEW
from ..shape_funcs import registry, te_shape_func
from . import sources
from .register_cache import RegisterCache
from .size_registers import CodegenError, SizeRegisters

__all__ = ["CodegenError", "GeneratedProgram", "generate"]


@dataclass
class GeneratedProgram:
    """Code generation's output: the ``program`` (to build into an
    executable), ``kernels`` mapping each kernel name the program invokes to
    its PrimFunc's name in the module, and ``host_kernels``, the names
    invoked on the host."""

    program: ProgramBuilder
    kernels: dict[str, str] = field(default_factory=dict)
    host_kernels: set[str] = field(default_factory=set)
    #: Shape functions written in Python, as host kernels the executable
    #: carries (by kernel name): built into its library with the rest.
    shape_func_kernels: dict[str, tirx.PrimFunc] = field(default_factory=dict)


def generate(mod: tvm.IRModule, placement: ModulePlacement, readbacks: ReadbackOrder,
             separate_host_kernels: bool = False) -> GeneratedProgram:
    """Bytecode for every Relax function of ``mod`` (``main`` first).

    With ``separate_host_kernels`` (a GPU target: a kernel's host and device
    builds differ), a PrimFunc invoked on the host is named apart from its
    device build (``<name>_host``), so one library can hold both."""
    return _ModuleCodegen(mod, placement, readbacks, separate_host_kernels).run()


class _ModuleCodegen:
    def __init__(self, mod: tvm.IRModule, placement: ModulePlacement, readbacks: ReadbackOrder,
                 separate_host_kernels: bool):
        self.mod = mod
        self.placement = placement
        self.readbacks = readbacks
        self.separate_host_kernels = separate_host_kernels
        self.out = GeneratedProgram(ProgramBuilder())
        self.program = self.out.program
        self.constants = ConstantTable(self.program)
        self._host_names: dict[str, str] = {}
        self._carried: set[tuple[str, str]] = set()  # (op, signature) compiled ahead
        self._checks: dict[str, list[str]] = {}  # PrimFunc name -> what it checks

    def run(self) -> GeneratedProgram:
        functions = [(gv, f) for gv, f in self.mod.functions.items() if isinstance(f, relax.Function)]
        functions.sort(key=lambda item: item[0].name_hint != "main")  # main first
        # Every function is declared before any is emitted: a call names its
        # callee's index, which must be the callee's place in the program.
        codegens = [_FunctionCodegen(self, gv, func) for gv, func in functions]
        for codegen in codegens:
            codegen.run()
        return self.out

    def kernel_name(self, func_name: str, slot: str) -> str:
        """The name under which the program invokes PrimFunc ``func_name`` on ``slot``."""
        name = func_name
        if slot == HOST and self.separate_host_kernels:
            if func_name not in self._host_names:
                taken = {gv.name_hint for gv in self.mod.functions} | set(self._host_names.values())
                self._host_names[func_name] = _unique(f"{func_name}_host", taken)
            name = self._host_names[func_name]
        self.out.kernels[name] = func_name
        if slot == HOST:
            self.out.host_kernels.add(name)
        return name

    def checks_of(self, func_name: str) -> list[str]:
        """What PrimFunc ``func_name`` checks (``index_checks.checks_of``)."""
        if func_name not in self._checks:
            self._checks[func_name] = index_checks.checks_of(self.mod[func_name])
        return self._checks[func_name]

    def carry_shape_func(self, op_name: str, args) -> None:
        """Compiles the shape function of ``op_name`` ahead for the signature
        of ``args`` when it is written in Python, so that the executable
        carries it: runs without the registration, in any process."""
        registered = registry.python_shape_func(op_name)
        signature = _signature(args)
        if registered is None or signature is None or (op_name, signature) in self._carried:
            return
        func, mask = registered
        prim_func, out_ndims = te_shape_func.shape_func_prim_func(op_name, func, mask, signature)
        taken = {gv.name_hint for gv in self.mod.functions} | set(self.out.shape_func_kernels)
        name = _unique("shape_func_" + re.sub(r"\W", "_", op_name), taken)
        self._carried.add((op_name, signature))
        self.out.shape_func_kernels[name] = prim_func
        self.out.host_kernels.add(name)
        self.program.carry_shape_func(op_name, mask, signature, name, out_ndims)


class _FunctionCodegen:
    def __init__(self, module: _ModuleCodegen, gv: relax.GlobalVar, func: relax.Function):
        name = gv.name_hint
        self.module = module
        self.gv = gv
        self.func = func
        self.placement: Placement = module.placement[name]
        self.regs: dict[int, Reg] = {}
        self.holders: dict[int, set[int]] = {}  # register -> vars bound to it
        self.consts: dict[int, tvm.ir.GenericConst] = {}
        self.var_sources: dict[int, tuple[Reg, int, bool]] = {}  # size var -> (reg, axis, reg is a tensor)
        self.cache = RegisterCache()
        self.fb = module.program.function(name, self._params(func))
        self.sizes = SizeRegisters(self.fb, self.cache, self.var_sources)
        self.copies = Copies(self.fb, module.constants, self.cache)
        self.start = Label()  # where a self tail call jumps to
        self.fb.place(self.start)

    # ---- parameters --------------------------------------------------------
    def _params(self, func: relax.Function) -> list[Param]:
        params, symbols = [], {}
        for i, p in enumerate(func.params):
            ty = p.ty
            if isinstance(ty, relax.TensorType) and ty.shape is not None and ty.dtype is not None:
                dims = []
                for axis, d in enumerate(ty.shape.values):
                    if isinstance(d, tirx.IntImm):
                        dims.append(int(d))
                    elif isinstance(d, tirx.Var):
                        name = symbols.setdefault(key(d), _unique(d.name, symbols.values()))
                        dims.append(name)
                        self.var_sources.setdefault(key(d), (Reg(i), axis, True))
                    else:
                        raise CodegenError(f"parameter '{p.name}' has a computed dimension {d}")
                slot = self.module.placement.param_slot(self.gv.name_hint, i)
                params.append(Param(p.name, str(ty.dtype), dims, slot))
            else:
                if isinstance(ty, relax.ShapeType) and ty.values is not None:
                    for axis, d in enumerate(ty.values):
                        if isinstance(d, tirx.Var):
                            self.var_sources.setdefault(key(d), (Reg(i), axis, False))
                if isinstance(ty, tvm.ir.PrimType):
                    # A scalar parameter is itself a symbolic variable (R.Prim("int64")).
                    self.cache.put(("prim", key(p)), Reg(i))
                params.append(Param(p.name, "int64", [], "any"))
            self.bind(p, Reg(i))
        return params

    # ---- operands ------------------------------------------------------------
    def value(self, expr: relax.Expr) -> Reg:
        """A register holding ``expr`` wherever it is."""
        if is_prim(expr):
            return self.sizes.prim(expr)
        if isinstance(expr, relax.Var):
            if key(expr) in self.consts:
                return self.tensor(expr, self.placement.policy.compute)
            reg = self.regs.get(key(expr))
            if reg is None:
                raise CodegenError(f"'{expr.name}' is used before it is defined")
            return reg
        if is_tensor_const(expr):
            return self.tensor(expr, self.placement.policy.compute)
        if isinstance(expr, relax.ShapeExpr):
            return self.sizes.shape(expr.values)
        if isinstance(expr, relax.Tuple):
            return self.fb.make_tuple([self.value(f) for f in expr.fields])
        raise CodegenError(f"operand {type(expr).__name__} is not supported")

    def tensor(self, expr: relax.Expr, slot: str) -> Reg:
        """A register holding tensor ``expr`` on ``slot`` (copied if needed)."""
        const = expr if is_tensor_const(expr) else self.consts.get(key(expr))
        if const is not None:
            return self.copies.constant(const, slot)
        return self.copies.to_slot(self.value(expr), self.placement.var_slot(expr), slot)

    # ---- bindings ------------------------------------------------------------
    def run(self) -> None:
        result = self.seq(self.func.body, tail=True)
        if result is not None:
            self.fb.ret(result)

    def seq(self, seq: relax.SeqExpr, tail: bool = False) -> Reg | None:
        """Emits a sequence and returns the register of its value, or None
        if it ends in a self tail call (a jump: no value comes back here)."""
        blocks = [self.module.readbacks[block] for block in seq.blocks]
        tail_binding = self._tail_binding(blocks, seq.body) if tail else None
        jumped = False
        for groups in blocks:
            for group in groups:
                self._enter(group[0])
                if len(group) > 1:
                    self.readbacks(group)
                elif group[0] is tail_binding:
                    jumped = self.tail_binding(group[0])
                elif jumped and self._kills_parameter(group[0]):
                    continue  # the parameter registers already hold the next iteration's values
                else:
                    self.binding(group[0])
        if jumped:
            self.fb.goto(self.start)  # after the kills that followed the call
            return None
        return self.value(seq.body)

    def _enter(self, binding) -> None:
        """The instructions of ``binding`` are for its source, if it has one."""
        value = binding.value
        if isinstance(value, relax.Call):
            source = sources.source_of(value)
            if source is not None:
                self.fb.source = source

    def _tail_binding(self, blocks, result) -> relax.Binding | None:
        """The binding in tail position of a sequence whose value is
        ``result``: a self call or an If, followed only by kills and aliases
        of the result."""
        if not isinstance(result, relax.Var):
            return None
        results = {key(result)}
        for groups in reversed(blocks):
            for group in reversed(groups):
                if len(group) > 1:
                    return None
                binding = group[0]
                value = binding.value
                if _is_kill(value) and key(value.args[0]) not in results:
                    continue
                if key(binding.var) not in results or isinstance(binding, relax.MatchCast):
                    return None
                if isinstance(value, relax.Var):
                    results.add(key(value))
                    continue
                is_self_call = isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) \
                    and value.op.name_hint == self.gv.name_hint
                return binding if is_self_call or isinstance(value, relax.If) else None
        return None

    def tail_binding(self, binding) -> bool:
        """Emits a binding in tail position; True if every path through it
        ends in a jump back to the function start."""
        if isinstance(binding.value, relax.If):
            reg = self.branch(binding.value, tail=True)
            self.bind(binding.var, reg if reg is not None else self.fb.reg())
            return reg is None
        self.tail_call(binding.value.args)
        self.bind(binding.var, self.fb.reg())  # never written: the aliases after it are not emitted
        return True

    def tail_call(self, args) -> None:
        """A self call in tail position: the arguments move into the
        parameter registers (execution then restarts at the first
        instruction, in the same frame, see ``seq``). Arguments that are themselves
        parameter registers are staged first, so no move reads a parameter
        another move already overwrote."""
        fb = self.fb
        sources = self.call_args(self.gv.name_hint, self.func, args)
        n_params = len(self.func.params)
        staged = []
        for k, src in enumerate(sources):
            if src.index < n_params and src.index != k:
                temp = fb.reg()
                fb.move(temp, src)
                sources[k] = temp
                staged.append(temp)
        for k, src in enumerate(sources):
            if src.index != k:
                fb.move(Reg(k), src)
        for temp in staged:
            fb.kill(temp)

    def _kills_parameter(self, binding) -> bool:
        value = binding.value
        if not _is_kill(value):
            return False
        reg = self.regs.get(key(value.args[0]))
        return reg is not None and reg.index < len(self.func.params)

    def readbacks(self, group) -> None:
        """Readbacks (``tensor_to_shape``: values; ``TO_HOST``: a tensor) in
        one instruction: one sync."""
        dsts, srcs, tensors = [], [], []
        for binding in group:
            source = binding.value.args[0]
            is_const = is_tensor_const(source) or key(source) in self.consts
            dsts.append(self.fb.reg())
            srcs.append(self.tensor(source, HOST) if is_const else self.value(source))
            tensors.append(isinstance(binding.value.op, relax.ExternFunc))
            self.bind(binding.var, dsts[-1])
        self.fb.readback(dsts, srcs, tensors)

    def binding(self, binding) -> None:
        var, value = binding.var, binding.value
        if isinstance(binding, relax.MatchCast):
            reg = self.value(value)
            self.bind(var, reg)
            ty = binding.ty
            if isinstance(ty, relax.TensorType) and ty.shape is not None:
                self.sizes.match(ty.shape.values, value.ty, reg)
                self.sizes.bind_sizes(ty.shape.values, reg, True)
            elif isinstance(ty, relax.ShapeType) and ty.values is not None:
                self.sizes.match(ty.values, value.ty, reg)
                self.sizes.bind_sizes(ty.values, reg, False)
                if all(isinstance(v, tirx.Var) for v in ty.values):
                    # The same shape, asked for later, is this register.
                    self.cache.put(("shape", tuple(key(v) for v in ty.values)), reg)
            return
        if is_tensor_const(value):
            self.consts[key(var)] = value
            return
        if isinstance(value, relax.Var) and not is_prim(value):
            if key(value) in self.consts:
                self.consts[key(var)] = self.consts[key(value)]
            else:
                self.bind(var, self.value(value))
            return
        if isinstance(value, relax.If):
            self.bind(var, self.branch(value))
            return
        if isinstance(value, relax.TupleGetItem):
            self.bind(var, self.fb.get_item(self.value(value.tuple_value), value.index))
            return
        if isinstance(value, relax.Call):
            reg = self.call(binding, value)
            if reg is not None:
                self.bind(var, reg)
            return
        self.bind(var, self.value(value))

    def branch(self, node: relax.If, tail: bool = False) -> Reg | None:
        """Emits an If; returns its result register, or None when both arms
        end in a self tail call."""
        fb = self.fb
        cond = node.cond
        if is_prim(cond):
            flag = self.sizes.prim(cond)
        else:
            flag = fb.reg()
            fb.readback([flag], [self.tensor(cond, HOST)])
        result, otherwise, done = fb.reg(), Label(), Label()
        fb.emit("if", flag, otherwise)
        source = fb.source
        returns = False
        for body, label in ((node.true_branch, None), (node.false_branch, otherwise)):
            if label is not None:
                fb.place(label)
            fb.source = source
            with self.cache.branch():
                value = self.seq(body, tail)
            if value is None:
                continue
            returns = True
            fb.move(result, value)
            if label is None:
                fb.goto(done)
        fb.place(done)
        fb.source = source
        return result if returns else None

    def call(self, binding, call: relax.Call) -> Reg | None:
        op, fb = call.op, self.fb
        if isinstance(op, relax.GlobalVar):
            callee = self.module.mod[op]
            if isinstance(callee, tirx.PrimFunc):
                self.kernel(binding, op.name_hint, call.args, prim_func=True)
                return None
            dst = fb.reg()
            fb.emit("call", dst, op.name_hint, self.call_args(op.name_hint, callee, call.args))
            return dst
        if isinstance(op, relax.ExternFunc):
            name = op.global_symbol
            if name == SHAPE_FUNC:
                return self.shape_func(call)
            if name == VIEW:
                return fb.view(self.value(call.args[0]), self.value(call.args[1]))
            if name == TO_HOST:
                self.readbacks([binding])
                return None
            if name == "vm.builtin.shape_of":
                return self.sizes.shape_of(self.value(call.args[0]))
            self.kernel(binding, name, call.args)
            return None
        name = op.name
        if name == ALLOC_TENSOR:
            shape, dtype = call.args[0], call.args[1]
            slot = self.placement.var_slot(binding.var, self.placement.policy.compute)
            return fb.alloc_tensor(slot, self.value(shape), str(dtype.value))
        if name in KILLS:
            self.kill(call.args[0])
            return None
        if name == "relax.tensor_to_shape":
            self.readbacks([binding])
            return None
        if name == "relax.shape_of":
            return self.sizes.shape_of(self.value(call.args[0]))
        if name == "relax.null_value":
            return fb.reg()
        raise CodegenError(f"op '{name}' was not lowered to kernels (is it supported by TVM's LegalizeOps?)")

    def call_args(self, name: str, callee: relax.Function, args) -> list[Reg]:
        """Registers of a call's arguments; tensors go where the callee
        expects its tensor parameters (the execution device, or the host
        for host parameters, which ``host_params`` reads back before the call)."""
        regs = []
        for i, (param, arg) in enumerate(zip(callee.params, args)):
            if isinstance(param.ty, relax.TensorType) and (isinstance(arg, relax.Var) or is_tensor_const(arg)):
                regs.append(self.tensor(arg, self.module.placement.param_slot(name, i)))
            else:
                regs.append(self.value(arg))
        return regs

    def bind(self, var, reg: Reg) -> None:
        self.regs[key(var)] = reg
        self.holders.setdefault(reg.index, set()).add(key(var))

    def kill(self, var) -> None:
        """Frees a value after its last use — unless another var bound to the
        same register (a match_cast or alias of it) still lives: TVM's
        KillAfterLastUse sees those as separate objects."""
        reg = self.regs.get(key(var))
        if reg is None:
            return
        holders = self.holders.get(reg.index, set())
        holders.discard(key(var))
        if not holders:
            self.fb.kill(reg)

    def kernel(self, binding, name: str, args, prim_func: bool = False) -> None:
        """Invokes kernel ``name`` (a PrimFunc of the module, or a tvm-ffi global function)."""
        slot = self.placement.kernel(binding)
        regs = []
        for a in args:
            if (isinstance(a, relax.Var) or is_tensor_const(a)) and isinstance(a.ty, relax.TensorType):
                regs.append(self.tensor(a, slot))
            elif isinstance(a, (relax.Var, relax.ShapeExpr)) or is_prim(a):
                regs.append(self.value(a))
            else:
                raise CodegenError(f"kernel '{name}' argument {type(a).__name__} is not supported")
        if prim_func:
            whats = self.module.checks_of(name)
            if whats:  # its check record and site follow its own arguments (index_checks.materialize)
                regs.append(self.fb.check_record(slot))
                regs.append(self.fb.load_int(self.module.program.check_sites(self.fb.source, whats)))
            name = self.module.kernel_name(name, slot)
        self.fb.invoke_kernel(self.module.program.kernel(name), regs)

    def shape_func(self, call: relax.Call) -> Reg:
        op_name = call.args[0].value
        attrs = [int(v) for v in call.args[1].values]
        inputs = []
        for a in call.args[2:]:
            if is_tensor_const(a) or (isinstance(a, relax.Var) and key(a) in self.consts):
                inputs.append(self.tensor(a, HOST))
            else:
                inputs.append(self.value(a))
        ty = call.ty
        n_out = len(ty.fields) if isinstance(ty, relax.TupleType) else 1
        self.module.carry_shape_func(op_name, call.args[2:])
        outs = self.fb.shape_func(op_name, inputs, n_out, attrs)
        return outs[0] if n_out == 1 else self.fb.make_tuple(outs)


def _signature(args) -> str | None:
    """The input signature the VM will see for shape-function inputs
    ``args`` ("float32:4,int64:1": dtype and rank, shapes as int64 vectors,
    ints as int64 scalars), or None where a rank is unknown."""
    items = []
    for arg in args:
        ty = arg.ty
        if isinstance(ty, relax.TensorType) and ty.ndim >= 0:
            items.append(f"{ty.dtype}:{ty.ndim}")
        elif isinstance(ty, relax.ShapeType):
            items.append("int64:1")
        elif isinstance(ty, tvm.ir.PrimType) and str(ty.dtype).startswith(("int", "uint")):
            items.append("int64:0")
        else:
            return None
    return ",".join(items)


def _is_kill(value) -> bool:
    return isinstance(value, relax.Call) and getattr(value.op, "name", None) in KILLS


def _unique(name: str, taken) -> str:
    taken = set(taken)
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate
