"""Relax (after TVM's lowering passes) -> shapefn bytecode.

Symbolic sizes live in int64 registers: each is read from a parameter's shape
when first needed and reused; shape expressions become ``shape_make`` /
``load_shape``; data-dependent shapes come from ``invoke_shape_func``.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx

from ..builder import FunctionBuilder, Label, Param, ProgramBuilder, Reg
from .schedule import schedule
from .placement import ALLOC_TENSOR, DEVICE, HOST, Placement, is_prim, is_tensor_const, key, place
from .shape_calls import SHAPE_FUNC, VIEW

_ARITH = {tirx.Add: "add", tirx.Sub: "sub", tirx.Mul: "mul", tirx.FloorDiv: "floordiv",
          tirx.FloorMod: "floormod", tirx.Min: "min", tirx.Max: "max", tirx.LT: "lt", tirx.EQ: "eq"}
_KILLS = {"relax.memory.kill_tensor", "relax.memory.kill_storage", "relax.vm.kill_object"}


class CodegenError(NotImplementedError):
    """Relax the shapefn code generator cannot express."""


class _Scope:
    """Caches of values already in registers, visible in nested branches only."""

    def __init__(self, parent: "_Scope | None" = None):
        self.parent = parent
        self.entries: dict = {}

    def get(self, k):
        scope = self
        while scope is not None:
            if k in scope.entries:
                return scope.entries[k]
            scope = scope.parent
        return None

    def put(self, k, value):
        self.entries[k] = value
        return value


class ModuleCodegen:
    def __init__(self, mod: tvm.IRModule, all_host: bool):
        self.mod = mod
        self.all_host = all_host
        self.program = ProgramBuilder()
        self.kernels: set[str] = set()
        self._constants: dict[tuple[int, str], int] = {}

    def run(self) -> ProgramBuilder:
        functions = [(gv, f) for gv, f in self.mod.functions.items() if isinstance(f, relax.Function)]
        functions.sort(key=lambda item: item[0].name_hint != "main")  # main first
        for gv, func in functions:
            _FunctionCodegen(self, gv.name_hint, func).run()
        return self.program

    def constant(self, const: tvm.ir.GenericConst, slot: str) -> int:
        k = (key(const), slot)
        if k not in self._constants:
            self._constants[k] = self.program.constant(const.value.numpy(), slot)
        return self._constants[k]


class _FunctionCodegen:
    def __init__(self, module: ModuleCodegen, name: str, func: relax.Function):
        self.module = module
        self.func = func
        self.placement: Placement = place(func, module.mod, module.all_host)
        self.regs: dict[int, Reg] = {}
        self.holders: dict[int, set[int]] = {}  # register -> vars bound to it
        self.consts: dict[int, tvm.ir.GenericConst] = {}
        self.var_sources: dict[int, tuple[Reg, int, bool]] = {}  # size var -> (reg, axis, reg is a tensor)
        self.scope = _Scope()
        self.fb = module.program.function(name, self._params(func))

    # ---- parameters and size variables -------------------------------------
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
                params.append(Param(p.name, str(ty.dtype), dims,
                                    HOST if self.module.all_host else DEVICE))
            else:
                if isinstance(ty, relax.ShapeType) and ty.values is not None:
                    for axis, d in enumerate(ty.values):
                        if isinstance(d, tirx.Var):
                            self.var_sources.setdefault(key(d), (Reg(i), axis, False))
                params.append(Param(p.name, "int64", [], "any"))
            self.bind(p, Reg(i))
        return params

    def _bind_sizes(self, dims, source: Reg, is_tensor: bool) -> None:
        for axis, d in enumerate(dims):
            if isinstance(d, tirx.Var) and self._cached(("prim", key(d))) is None \
                    and key(d) not in self.var_sources:
                self.var_sources[key(d)] = (source, axis, is_tensor)

    def _cached(self, k):
        return self.scope.get(k)

    def prim(self, expr) -> Reg:
        """An int64 register holding the value of a PrimExpr."""
        if isinstance(expr, int):
            expr = tirx.IntImm("int64", expr)
        k = ("prim", key(expr) if isinstance(expr, tirx.Var) else tvm_ffi.StructuralKey(expr))
        reg = self._cached(k)
        if reg is not None:
            return reg
        fb = self.fb
        if isinstance(expr, tirx.IntImm):
            reg = fb.load_int(int(expr.value))
        elif isinstance(expr, tirx.Var):
            source = self.var_sources.get(key(expr))
            if source is None:
                raise CodegenError(f"size variable '{expr.name}' is used before it is defined")
            reg_, axis, is_tensor = source
            reg = fb.tensor_dim(reg_, axis) if is_tensor else fb.shape_get(reg_, axis)
        elif isinstance(expr, tirx.Cast):
            return self.prim(expr.value)
        elif type(expr) in _ARITH:
            reg = fb.emit(_ARITH[type(expr)], self.prim(expr.a), self.prim(expr.b))
        else:
            raise CodegenError(f"shape expression {expr} ({type(expr).__name__}) is not supported")
        return self.scope.put(k, reg)

    def _shape_of(self, tensor: Reg) -> Reg:
        k = ("shape_of", tensor.index)
        return self._cached(k) or self.scope.put(k, self.fb.shape_of(tensor))

    def shape(self, values) -> Reg:
        values = list(values)
        if all(isinstance(v, tirx.IntImm) for v in values):
            k = ("const_shape", tuple(int(v) for v in values))
            return self._cached(k) or self.scope.put(k, self.fb.load_shape([int(v) for v in values]))
        k = ("shape", tuple(key(v) if isinstance(v, tirx.Var) else tvm_ffi.StructuralKey(v) for v in values))
        cached = self._cached(k)
        if cached is not None:
            return cached
        # Literal dimensions go in the instruction; only computed ones need registers.
        template, regs = [], []
        for v in values:
            if isinstance(v, tirx.IntImm):
                template.append(int(v))
            else:
                regs.append(self.prim(v))
                template.append(-len(regs))
        return self.scope.put(k, self.fb.shape_build(template, regs))

    # ---- operands ------------------------------------------------------------
    def value(self, expr: relax.Expr) -> Reg:
        """A register holding ``expr`` wherever it is."""
        if is_prim(expr):
            return self.prim(expr)
        if isinstance(expr, relax.Var):
            if key(expr) in self.consts:
                return self.tensor(expr, HOST if self.module.all_host else DEVICE)
            reg = self.regs.get(key(expr))
            if reg is None:
                raise CodegenError(f"'{expr.name}' is used before it is defined")
            return reg
        if is_tensor_const(expr):
            return self.tensor(expr, HOST if self.module.all_host else DEVICE)
        if isinstance(expr, relax.ShapeExpr):
            return self.shape(expr.values)
        if isinstance(expr, relax.Tuple):
            return self.fb.make_tuple([self.value(f) for f in expr.fields])
        raise CodegenError(f"operand {type(expr).__name__} is not supported")

    def tensor(self, expr: relax.Expr, slot: str) -> Reg:
        """A register holding tensor ``expr`` on ``slot`` (copied if needed)."""
        if self.module.all_host:
            slot = HOST
        const = expr if is_tensor_const(expr) else self.consts.get(key(expr))
        if const is not None:
            k = ("const", key(const), slot)
            return self._cached(k) or self.scope.put(
                k, self.fb.load_const(self.module.constant(const, slot)))
        reg = self.value(expr)
        if self.module.all_host or self.placement.slot.get(key(expr)) == slot:
            return reg
        k = ("copy", reg.index, slot)
        return self._cached(k) or self.scope.put(k, self.fb.copy(reg, slot))

    # ---- bindings ------------------------------------------------------------
    def run(self) -> None:
        result = self.seq(self.func.body)
        self.fb.ret(result)

    def seq(self, seq: relax.SeqExpr) -> Reg:
        for block in seq.blocks:
            for group in schedule(list(block.bindings)):
                if len(group) == 1:
                    self.binding(group[0])
                else:
                    self.readbacks(group)
        return self.value(seq.body)

    def readbacks(self, group) -> None:
        """Several tensor_to_shape bindings read back in one instruction: one sync."""
        dsts, srcs = [], []
        for binding in group:
            source = binding.value.args[0]
            is_const = is_tensor_const(source) or key(source) in self.consts
            dsts.append(self.fb.reg())
            srcs.append(self.tensor(source, HOST) if is_const else self.value(source))
            self.bind(binding.var, dsts[-1])
        self.fb.readback(dsts, srcs)

    def binding(self, binding) -> None:
        var, value = binding.var, binding.value
        if isinstance(binding, relax.MatchCast):
            reg = self.value(value)
            self.bind(var, reg)
            ty = binding.ty
            if isinstance(ty, relax.TensorType) and ty.shape is not None:
                self._bind_sizes(ty.shape.values, reg, True)
            elif isinstance(ty, relax.ShapeType) and ty.values is not None:
                self._bind_sizes(ty.values, reg, False)
                if all(isinstance(v, tirx.Var) for v in ty.values):
                    # The same shape, asked for later, is this register.
                    self.scope.put(("shape", tuple(key(v) for v in ty.values)), reg)
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

    def branch(self, node: relax.If) -> Reg:
        fb = self.fb
        cond = node.cond
        if is_prim(cond):
            flag = self.prim(cond)
        else:
            flag = fb.reg()
            fb.readback([flag], [self.tensor(cond, HOST)])
        result, otherwise, done = fb.reg(), Label(), Label()
        fb.emit("if", flag, otherwise)
        for body, label in ((node.true_branch, None), (node.false_branch, otherwise)):
            if label is not None:
                fb.place(label)
            outer = self.scope
            self.scope = _Scope(outer)
            fb.move(result, self.seq(body))
            self.scope = outer
            if label is None:
                fb.goto(done)
        fb.place(done)
        return result

    def call(self, binding, call: relax.Call) -> Reg | None:
        op, fb = call.op, self.fb
        if isinstance(op, relax.GlobalVar):
            callee = self.module.mod[op]
            if isinstance(callee, tirx.PrimFunc):
                self.kernel(binding, op.name_hint, call.args)
                return None
            dst = fb.reg()
            fb.emit("call", dst, op.name_hint, [self.value(a) for a in call.args])
            return dst
        if isinstance(op, relax.ExternFunc):
            name = op.global_symbol
            if name == SHAPE_FUNC:
                return self.shape_func(call)
            if name == VIEW:
                return fb.view(self.value(call.args[0]), self.value(call.args[1]))
            if name == "vm.builtin.shape_of":
                return self._shape_of(self.value(call.args[0]))
            self.kernel(binding, name, call.args)
            return None
        name = op.name
        if name == ALLOC_TENSOR:
            shape, dtype = call.args[0], call.args[1]
            slot = self.placement.slot.get(key(binding.var), DEVICE)
            return fb.alloc_tensor(HOST if self.module.all_host else slot, self.value(shape), str(dtype.value))
        if name in _KILLS:
            self.kill(call.args[0])
            return None
        if name == "relax.tensor_to_shape":
            dst = fb.reg()
            source = call.args[0]
            is_const = is_tensor_const(source) or key(source) in self.consts
            fb.readback([dst], [self.tensor(source, HOST) if is_const else self.value(source)])
            return dst
        if name == "relax.shape_of":
            return self._shape_of(self.value(call.args[0]))
        if name == "relax.null_value":
            return fb.reg()
        raise CodegenError(f"op '{name}' was not lowered to kernels (is it supported by TVM's LegalizeOps?)")

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

    def kernel(self, binding, name: str, args) -> None:
        slot = self.placement.kernel_slot.get(key(binding), DEVICE)
        regs = []
        for a in args:
            if (isinstance(a, relax.Var) or is_tensor_const(a)) and isinstance(a.ty, relax.TensorType):
                regs.append(self.tensor(a, slot))
            elif isinstance(a, (relax.Var, relax.ShapeExpr)) or is_prim(a):
                regs.append(self.value(a))
            else:
                raise CodegenError(f"kernel '{name}' argument {type(a).__name__} is not supported")
        self.module.kernels.add(name)
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
        outs = self.fb.shape_func(op_name, inputs, n_out, attrs)
        return outs[0] if n_out == 1 else self.fb.make_tuple(outs)


def _unique(name: str, taken) -> str:
    taken = set(taken)
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate
