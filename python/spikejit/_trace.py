"""Translation of a traced one-step core (an ATen FX graph from make_fx) into the neuron text
format. Covers the reference's op table (section 4.2) plus more elementwise math; in-place ops
are traced as their out-of-place forms, and an op without a rule is traced as PyTorch's
decomposition of it where there is one (softplus, gelu, hardtanh, lerp, ...). Anything else
raises UnsupportedOp naming the op.

Random draws (rand_like, randn_like, bernoulli, uniform_, normal_, ...) become the IR's
`uniform()`, one stream per textual occurrence, so each traced draw is its own stream. They are
per neuron and per step in the kernels, so only a draw with one value per neuron translates: its
traced shape must be the neuron shape of the examples (RANDOM_OPS, _check_draw)."""
import copy
import functools
import math
import operator
import re
import types
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from . import surrogate as _surrogate
from .ops import SURROGATE_INFO

FLOAT, BOOL = "float", "bool"


class UnsupportedOp(Exception):
    """The core uses something the IR cannot express; `op` names it."""

    def __init__(self, op: str, detail: str = ""):
        super().__init__(f"{op}{': ' + detail if detail else ''}")
        self.op = op


class Value:
    """An expression in the text format with its IR type."""

    __slots__ = ("text", "type")

    def __init__(self, text: str, type_: str):
        self.text = text
        self.type = type_


def literal(number) -> Value:
    if isinstance(number, bool):
        return Value("true" if number else "false", BOOL)
    if not isinstance(number, (int, float)):
        raise UnsupportedOp("literal", f"a {type(number).__name__} argument")
    x = float(number)
    if math.isnan(x):
        return Value("(0.0 / 0.0)", FLOAT)
    if math.isinf(x):
        return Value("(1.0 / 0.0)" if x > 0 else "(-1.0 / 0.0)", FLOAT)
    return Value(repr(x) if x >= 0 else f"({x!r})", FLOAT)


def _value(v) -> Value:
    return v if isinstance(v, Value) else literal(v)


def as_float(v) -> str:
    """`v` (a Value or a Python number) as a Float expression."""
    v = _value(v)
    return f"float({v.text})" if v.type == BOOL else v.text


def as_bool(v) -> str:
    """`v` (a Value or a Python number) as a Bool expression."""
    v = _value(v)
    return f"bool({v.text})" if v.type == FLOAT else v.text


def _f(text: str) -> Value:
    return Value(text, FLOAT)


def _b(text: str) -> Value:
    return Value(text, BOOL)


# ---- op rules: (args as Values or Python objects, kwargs) -> Value ------------------------------

def _alpha(kwargs, b: Value) -> str:
    alpha = kwargs.get("alpha", 1)
    return as_float(b) if alpha == 1 else f"({literal(alpha).text} * {as_float(b)})"


def _binary(symbol):
    return lambda a, b, **kw: _f(f"({as_float(a)} {symbol} {as_float(b)})")


def _call(name, result=FLOAT):
    def rule(*args, **kw):
        return Value(f"{name}({', '.join(as_float(a) for a in args)})", result)
    return rule


def _compare(symbol):
    return lambda a, b, **kw: _b(f"({as_float(a)} {symbol} {as_float(b)})")


def _logic(symbol):
    return lambda a, b, **kw: _b(f"({as_bool(a)} {symbol} {as_bool(b)})")


def _bitwise(symbol):
    def rule(a, b, **kw):
        a, b = _value(a), _value(b)
        if a.type != BOOL or b.type != BOOL:
            raise UnsupportedOp(f"bitwise {symbol}", "on non-boolean values")
        return _b(f"({a.text} {symbol} {b.text})")
    return rule


def _bitwise_not(a, **kw):
    a = _value(a)
    if a.type != BOOL:
        raise UnsupportedOp("bitwise_not", "on non-boolean values")
    return _b(f"(not {a.text})")


def _xor(a, b, **kw):
    return _b(f"(({as_bool(a)} or {as_bool(b)}) and not ({as_bool(a)} and {as_bool(b)}))")


def _bitwise_xor(a, b, **kw):
    a, b = _value(a), _value(b)
    if a.type != BOOL or b.type != BOOL:
        raise UnsupportedOp("bitwise xor", "on non-boolean values")
    return _xor(a, b)


def _where(c, a, b, **kw):
    a, b = _value(a), _value(b)
    if a.type == BOOL and b.type == BOOL:
        return _b(f"where({as_bool(c)}, {a.text}, {b.text})")
    return _f(f"where({as_bool(c)}, {as_float(a)}, {as_float(b)})")


def _clamp(a, lo=None, hi=None, **kw):
    lo = kw.get("min", lo)
    hi = kw.get("max", hi)
    text = as_float(a)
    if lo is not None and hi is not None:
        return _f(f"clamp({text}, {as_float(lo)}, {as_float(hi)})")
    if lo is not None:
        return _f(f"max({text}, {as_float(lo)})")
    if hi is not None:
        return _f(f"min({text}, {as_float(hi)})")
    return _f(text)


def _div_mode(a, b, rounding_mode=None, **kw):
    rounding_mode = kw.get("rounding_mode", rounding_mode)
    q = f"({as_float(a)} / {as_float(b)})"
    if rounding_mode is None:
        return _f(q)
    if rounding_mode == "floor":
        return _f(f"floor({q})")
    if rounding_mode == "trunc":
        return _f(f"where({q} < 0, ceil({q}), floor({q}))")
    raise UnsupportedOp("div", f"rounding_mode={rounding_mode!r}")


def _remainder(a, b, **kw):
    # Python/torch remainder: the result takes the sign of the divisor (fmod's that of the
    # dividend), so a nonzero fmod of the other sign moves by one divisor.
    r, d = f"fmod({as_float(a)}, {as_float(b)})", as_float(b)
    return _f(f"where(({r} < 0 and {d} > 0) or ({r} > 0 and {d} < 0), {r} + {d}, {r})")


def _signbit_text(t: str) -> str:
    # -0.0 has its sign bit set (1 / -0.0 is -inf); a NaN's sign bit is read as clear.
    return f"(({t} < 0) or ({t} == 0 and (1.0 / {t}) < 0))"


def _signbit(a, **kw):
    return _b(_signbit_text(as_float(a)))


def _copysign(a, b, **kw):
    # torch's gradient: to a, +-1 by the signs (0 at a = 0, as abs gives); to b, none.
    t = as_float(a)
    return _f(f"where({_signbit_text(as_float(b))}, -abs({t}), abs({t}))")


def _nan_ignoring(symbol):
    """fmax / fmin: the other operand where one is NaN. torch's gradient goes wholly to `a` on a
    tie (maximum and minimum split it), which this choice of branch gives."""
    def rule(a, b, **kw):
        x, y = as_float(a), as_float(b)
        return _f(f"where(({x} {symbol} {y}) or ({y} != {y}), {x}, {y})")
    return rule


def _trunc(a, **kw):
    t = as_float(a)
    return _f(f"where({t} < 0, ceil({t}), floor({t}))")


def _round(a, decimals=0, **kw):
    decimals = kw.get("decimals", decimals)
    if decimals == 0:
        return _f(f"round({as_float(a)})")
    # ATen's rounding to decimals: by a power of ten, scaled up or down by its sign.
    scale = literal(10.0 ** abs(decimals)).text
    if decimals > 0:
        return _f(f"(round({as_float(a)} * {scale}) / {scale})")
    return _f(f"(round({as_float(a)} / {scale}) * {scale})")


def _to_copy(a, **kw):
    a = _value(a)
    dtype = kw.get("dtype")
    if dtype is None:
        return a
    if dtype == torch.bool:
        return _b(as_bool(a))
    if dtype.is_floating_point:
        return _f(as_float(a))
    raise UnsupportedOp("_to_copy", f"to {dtype}")


def _identity(a, *rest, **kw):
    return _value(a)


def _copy(destination, source, **kw):
    """dst.copy_(src), functionalized: src's values in dst's type."""
    if _value(destination).type == BOOL:
        return _b(as_bool(source))
    return _f(as_float(source))


def _detach(a, **kw):
    a = _value(a)
    return a if a.type == BOOL else _f(f"detach({a.text})")


def _fill(value_index):
    def rule(*args, **kw):
        value = kw.get("fill_value", args[value_index] if len(args) > value_index else None)
        return value if isinstance(value, Value) else literal(value)
    return rule


def _constant(number):
    return lambda *args, **kw: literal(number)


def _masked_fill(a, mask, value, **kw):
    return _where(mask, value, a)


def _heaviside(x, values, **kw):
    t = as_float(x)
    return _f(f"where({t} > 0, 1.0, where({t} == 0, {as_float(values)}, 0.0))")


def _leaky_relu(x, slope=0.01, **kw):
    t = as_float(x)
    return _f(f"where({t} > 0, {t}, {t} * {as_float(slope)})")


def _pow_scalar_base(base, exponent, **kw):
    return _f(f"pow({as_float(base)}, {as_float(exponent)})")


def _isnan(a, **kw):
    t = as_float(a)
    return _b(f"({t} != {t})")


def _isinf(a, **kw):
    return _b(f"(abs({as_float(a)}) == (1.0 / 0.0))")


# ---- random draws: one uniform() per stream; a normal one by Box-Muller from two streams -------

UNIFORM = "uniform()"
# 1 - u is in (0, 1] (u has 24 random bits, so 1 - u is exact in float32): the log is finite.
NORMAL = "(sqrt((-2.0) * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()))"


def _no_generator(op: str, kw) -> None:
    if kw.get("generator") is not None:
        raise UnsupportedOp(op, "a torch.Generator argument (the kernels draw from their own seed)")


def _shifted(base: str, low, scale) -> Value:
    """low + scale * base, leaving out a shift of 0 and a scale of 1."""
    text = base if _value(scale).text == "1.0" else f"({as_float(scale)} * {base})"
    return _f(text if _value(low).text == "0.0" else f"({as_float(low)} + {text})")


def _rand(*args, **kw):
    _no_generator("rand", kw)
    return _f(UNIFORM)


def _randn(*args, **kw):
    _no_generator("randn", kw)
    return _f(NORMAL)


def _uniform(a, low=0.0, high=1.0, **kw):
    _no_generator("uniform", kw)
    low, high = kw.get("from", low), kw.get("to", high)
    numbers = not isinstance(low, Value) and not isinstance(high, Value)
    return _shifted(UNIFORM, low, literal(high - low) if numbers else _f(f"({as_float(high)} - {as_float(low)})"))


def _normal_like(a, mean=0.0, std=1.0, **kw):
    _no_generator("normal", kw)
    return _shifted(NORMAL, kw.get("mean", mean), kw.get("std", std))


def _normal(mean, std=1.0, **kw):
    _no_generator("normal", kw)
    return _shifted(NORMAL, mean, kw.get("std", std))


def _bernoulli(p, **kw):
    _no_generator("bernoulli", kw)
    return _b(f"({UNIFORM} < {as_float(p)})")


def _bernoulli_p(a, p=0.5, **kw):
    _no_generator("bernoulli", kw)
    return _b(f"({UNIFORM} < {as_float(kw.get('p', p))})")


RANDOM_RULES: Dict[str, Callable] = {
    "aten.rand_like.default": _rand, "aten.rand.default": _rand,
    "aten.randn_like.default": _randn, "aten.randn.default": _randn,
    "aten.uniform.default": _uniform,                    # empty_like(x).uniform_(a, b), functionalized
    "aten.normal_functional.default": _normal_like,      # empty_like(x).normal_(mean, std), functionalized
    "aten.normal.Tensor_float": _normal, "aten.normal.float_Tensor": _normal, "aten.normal.Tensor_Tensor": _normal,
    "aten.bernoulli.default": _bernoulli,                # torch.bernoulli(p)
    "aten.bernoulli.p": _bernoulli_p, "aten.bernoulli.Tensor": _bernoulli_p,   # torch.bernoulli(x, p), x.bernoulli_(p)
}
RANDOM_OPS = frozenset(RANDOM_RULES)


def _spike(x, name, params, **kw):
    if name not in SURROGATE_INFO:
        raise UnsupportedOp("spikejit.spike", f"unknown surrogate {name!r}")
    return _f(f"spike({as_float(x)}, {_surrogate.text(name, params)})")


RULES: Dict[str, Callable] = {
    # arithmetic
    "aten.add.Tensor": lambda a, b, **kw: _f(f"({as_float(a)} + {_alpha(kw, b)})"),
    "aten.add.Scalar": lambda a, b, **kw: _f(f"({as_float(a)} + {_alpha(kw, b)})"),
    "aten.sub.Tensor": lambda a, b, **kw: _f(f"({as_float(a)} - {_alpha(kw, b)})"),
    "aten.sub.Scalar": lambda a, b, **kw: _f(f"({as_float(a)} - {_alpha(kw, b)})"),
    "aten.rsub.Scalar": lambda a, b, **kw: _f(f"({as_float(b)} - {_alpha(kw, a)})"),
    "aten.rsub.Tensor": lambda a, b, **kw: _f(f"({as_float(b)} - {_alpha(kw, a)})"),
    "aten.mul.Tensor": _binary("*"), "aten.mul.Scalar": _binary("*"),
    "aten.div.Tensor": _binary("/"), "aten.div.Scalar": _binary("/"),
    "aten.div.Tensor_mode": _div_mode, "aten.div.Scalar_mode": _div_mode,
    "aten.neg.default": lambda a, **kw: _f(f"(-{as_float(a)})"),
    "aten.reciprocal.default": _call("reciprocal"),
    "aten.fmod.Tensor": _call("fmod"), "aten.fmod.Scalar": _call("fmod"),
    "aten.remainder.Tensor": _remainder, "aten.remainder.Scalar": _remainder,
    "aten.pow.Tensor_Scalar": _call("pow"), "aten.pow.Tensor_Tensor": _call("pow"),
    "aten.pow.Scalar": _pow_scalar_base,
    "aten.minimum.default": _call("min"), "aten.maximum.default": _call("max"),
    "aten.fmax.default": _nan_ignoring(">="), "aten.fmin.default": _nan_ignoring("<="),
    "aten.copysign.Tensor": _copysign, "aten.copysign.Scalar": _copysign,
    "aten.signbit.default": _signbit,
    "aten.clamp.default": _clamp, "aten.clamp.Tensor": _clamp,
    "aten.clamp_min.default": lambda a, lo, **kw: _clamp(a, lo, None),
    "aten.clamp_min.Tensor": lambda a, lo, **kw: _clamp(a, lo, None),
    "aten.clamp_max.default": lambda a, hi, **kw: _clamp(a, None, hi),
    "aten.clamp_max.Tensor": lambda a, hi, **kw: _clamp(a, None, hi),
    # transcendentals and friends
    **{f"aten.{op}.default": _call(op) for op in
       ("exp", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "erf", "abs", "relu",
        "sign", "floor", "ceil")},
    **{f"aten.{op}.default": _call(op) for op in
       ("log1p", "expm1", "exp2", "log10", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh",
        "atanh", "erfc", "erfinv", "atan2", "hypot")},
    "aten.sgn.default": _call("sign"),
    "aten.special_ndtri.default": _call("ndtri"),
    "aten.round.default": _round, "aten.round.decimals": _round,
    "aten.trunc.default": _trunc,
    "aten.leaky_relu.default": _leaky_relu,
    "aten.heaviside.default": _heaviside,
    # comparisons and logic
    **{f"aten.{op}.{overload}": _compare(symbol)
       for op, symbol in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))
       for overload in ("Tensor", "Scalar")},
    "aten.isnan.default": _isnan, "aten.isinf.default": _isinf,
    "aten.logical_and.default": _logic("and"), "aten.logical_or.default": _logic("or"),
    "aten.logical_not.default": lambda a, **kw: _b(f"(not {as_bool(a)})"),
    "aten.logical_xor.default": _xor,
    "aten.bitwise_and.Tensor": _bitwise("and"), "aten.bitwise_or.Tensor": _bitwise("or"),
    "aten.bitwise_xor.Tensor": _bitwise_xor,
    "aten.bitwise_not.default": _bitwise_not,
    # selection
    "aten.where.self": _where,  # (its overloads with numbers are composite: traced as this one)
    "aten.masked_fill.Scalar": _masked_fill, "aten.masked_fill.Tensor": _masked_fill,
    # backward helpers
    "aten.sigmoid_backward.default": lambda g, y, **kw: _f(f"({as_float(g)} * {as_float(y)} * (1 - {as_float(y)}))"),
    "aten.tanh_backward.default": lambda g, y, **kw: _f(f"({as_float(g)} * (1 - {as_float(y)} * {as_float(y)}))"),
    "aten.threshold_backward.default": lambda g, x, thr, **kw: _f(f"where({as_float(x)} > {as_float(thr)}, {as_float(g)}, 0.0)"),
    # types, copies, constants
    "aten._to_copy.default": _to_copy,
    "aten.clone.default": _identity, "aten.alias.default": _identity,
    "aten.copy.default": _copy,
    # one value per neuron: broadcasting a value to the neuron shape leaves it as it is
    "aten.expand.default": _identity,
    "aten.lift_fresh_copy.default": _identity,
    "aten.detach.default": _detach,
    "aten.scalar_tensor.default": _fill(0),
    "aten.zeros_like.default": _constant(0.0), "aten.ones_like.default": _constant(1.0),
    "aten.full_like.default": _fill(1),
    "aten.new_zeros.default": _constant(0.0), "aten.new_ones.default": _constant(1.0),
    "aten.new_full.default": _fill(2),
    "aten.zeros.default": _constant(0.0), "aten.ones.default": _constant(1.0),
    "aten.full.default": _fill(1),
    # what a random fill overwrites (torch.empty_like(x).uniform_()): its values are never read
    "aten.empty_like.default": _constant(0.0), "aten.empty.memory_format": _constant(0.0),
    # random draws
    **RANDOM_RULES,
    # spiking
    "spikejit.spike.default": _spike,
}


# ---- tensors the core closes over -------------------------------------------------------------

class TensorSource:
    """Where a tensor the core closes over lives, so that each call reads it again: a module's
    parameter or buffer (functional_call, parametrizations and reassignment then take effect),
    an object's attribute, a closure cell, a global. A tensor found only inside a container or a
    partial's arguments is kept as it was (`owner` None)."""

    __slots__ = ("tensor", "owner", "name")

    def __init__(self, tensor: Tensor, owner=None, name: Optional[str] = None):
        self.tensor, self.owner, self.name = tensor, owner, name

    def get(self):
        if self.owner is None:
            return self.tensor
        if isinstance(self.owner, dict):  # a module's globals
            return self.owner.get(self.name)
        return getattr(self.owner, self.name, None)

    def __deepcopy__(self, memo):
        # A closure cell or a global is shared by a copied core (functions are not copied): the
        # copy keeps a copy of the tensor as it is now instead.
        tensor = copy.deepcopy(self.tensor, memo)
        if self.owner is None or isinstance(self.owner, (dict, types.CellType)):
            return TensorSource(tensor)
        return TensorSource(tensor, copy.deepcopy(self.owner, memo), self.name)

    def describe(self) -> str:
        if self.owner is None:
            return "a tensor the core closes over"
        return f"{'global' if isinstance(self.owner, dict) else type(self.owner).__name__} {self.name!r}"


class _Reach:
    """The tensors a callable reaches (`sources`: where they live): module parameters and buffers,
    tensor attributes, closure cells, default arguments, functools.partial arguments, bound
    `self`, referenced globals."""

    def __init__(self, core):
        self.sources: List[TensorSource] = []
        self._seen = {}  # id -> object, held: the lists built on the way must not free their ids
        self._visit(core, 0)

    def _visit(self, obj, depth: int) -> None:
        if depth > 4 or id(obj) in self._seen:
            return
        self._seen[id(obj)] = obj
        if isinstance(obj, Tensor):
            self.sources.append(TensorSource(obj))
            return
        if isinstance(obj, torch.nn.Module):
            for module in obj.modules():
                for table in (module._parameters, module._buffers):
                    self.sources.extend(TensorSource(t, module, name) for name, t in table.items() if t is not None)
            self._visit_attributes(obj, depth)
            return
        if isinstance(obj, (list, tuple)):
            for item in obj:
                self._visit(item, depth + 1)
            return
        if isinstance(obj, dict):
            for item in obj.values():
                self._visit(item, depth + 1)
            return
        if isinstance(obj, functools.partial):
            self._visit(obj.func, depth + 1)
            self._visit(list(obj.args) + list(obj.keywords.values()), depth + 1)
            return
        if hasattr(obj, "__self__") and hasattr(obj, "__func__"):
            self._visit(obj.__self__, depth + 1)
            self._visit(obj.__func__, depth + 1)
            return
        code = getattr(obj, "__code__", None)
        if code is not None:
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if isinstance(contents, Tensor):
                    self.sources.append(TensorSource(contents, cell, "cell_contents"))
                else:
                    self._visit(contents, depth + 1)
            self._visit(list(getattr(obj, "__defaults__", None) or ())
                        + list((getattr(obj, "__kwdefaults__", None) or {}).values()), depth + 1)
            globals_ = getattr(obj, "__globals__", {})
            for name in code.co_names:
                value = globals_.get(name)
                if isinstance(value, Tensor):
                    self.sources.append(TensorSource(value, globals_, name))
                elif isinstance(value, torch.nn.Module):
                    self._visit(value, depth + 1)
            return
        if callable(obj) and hasattr(obj, "__dict__"):
            self._visit(type(obj).__call__, depth + 1)
            self._visit_attributes(obj, depth, also=(torch.nn.Module,))

    def _visit_attributes(self, obj, depth: int, also=()) -> None:
        """The tensors among an object's own attributes, and what its containers (and `also`) hold."""
        for name, value in vars(obj).items():
            if isinstance(value, Tensor):
                self.sources.append(TensorSource(value, obj, name))
            elif isinstance(value, (list, tuple) + also):
                self._visit(value, depth + 1)


def captured_sources(core) -> List[TensorSource]:
    """Where the tensors `core` can reach live (see _Reach)."""
    return _Reach(core).sources


def captured_tensors(core) -> List[Tensor]:
    """The tensors `core` can reach, as they are now."""
    return [source.tensor for source in captured_sources(core)]


def _same_storage(a: Tensor, b: Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            and a.stride() == b.stride() and a.data_ptr() == b.data_ptr())


def _live_source(constant: Tensor, candidates: Sequence[TensorSource]) -> Optional[TensorSource]:
    for c in candidates:
        if c.tensor is constant:
            return c
    for c in candidates:
        if _same_storage(c.tensor, constant):
            return c
    return None


# ---- translation -----------------------------------------------------------------------------

class Traced:
    """A translated core: its text, and where the tensors bound to its IR parameters live, in order."""

    def __init__(self, text: str, params: List[TensorSource], param_kinds: List[str]):
        self.text = text
        self.params = params
        self.param_kinds = param_kinds


def _safe_name(core) -> str:
    name = getattr(core, "__name__", None) or type(core).__name__
    name = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_") or "core"
    return "flexsn_" + name


def _returned(gm) -> list:
    """The values the traced step returns (nodes, or constants)."""
    returned = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(returned) if isinstance(returned, (tuple, list)) else [returned]


def _needed(gm) -> set:
    """The nodes the results depend on: only those are translated (make_fx keeps dead autograd
    nodes, and functionalization the copies back into arguments the core mutated)."""
    needed, stack = set(), [r for r in _returned(gm) if isinstance(r, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    return needed


# Ops that only add or remove dims of size 1 (unsqueeze, select of such a dim, a stack of one
# tensor, ...) leave every neuron's value where it was. They are told apart by the traced shapes,
# which needs example inputs whose own dims are all larger than 1 (the one-element default
# examples are not: there `x[0]` could be the first neuron as well as the only step).
UNIT_VIEW_OPS = frozenset({
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.select.int",
    "aten.stack.default", "aten.cat.default", "aten.unbind.int", "aten.view.default", "aten._unsafe_view.default",
    "aten.reshape.default", "<built-in function getitem>"})


def _without_unit_dims(shape) -> List[int]:
    return [d for d in shape if d != 1]


def _unit_view(node, values, neuron_shape):
    """The value(s) a view op of UNIT_VIEW_OPS passes on: its operand's (for unbind a list of one,
    for getitem that list's item), when the op only adds or removes dims of size 1."""
    target = str(node.target)
    if node.target is operator.getitem:  # (an item of unbind's list)
        return values[node.args[0]][node.args[1]]
    if 1 in neuron_shape:
        raise UnsupportedOp(target, f"a view of the values with example inputs of shape {list(neuron_shape)}: their "
                            f"dims of size 1 cannot be told from added ones; pass example_inputs without them")
    source = node.args[0]
    if isinstance(source, (list, tuple)):  # stack, cat
        if len(source) != 1:
            raise UnsupportedOp(target, f"a {target.split('.')[1]} of {len(source)} tensors: one value per neuron "
                                "cannot hold several")
        source = source[0]
    results = node.meta["val"]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    before = _without_unit_dims(source.meta["val"].shape)
    if len(results) != 1 or _without_unit_dims(results[0].shape) != before:
        raise UnsupportedOp(target, f"a view from shape {list(source.meta['val'].shape)} to "
                            f"{[list(r.shape) for r in results]}: only dims of size 1 may come or go")
    return [values[source]] if target == "aten.unbind.int" else values[source]


def _unruled(gm, needed) -> list:
    """The ops of needed nodes that have no rule, in graph order."""
    ops = []
    for node in gm.graph.nodes:
        if node in needed and node.op == "call_function" and str(node.target) not in RULES \
                and str(node.target) not in UNIT_VIEW_OPS and node.target not in ops:
            ops.append(node.target)
    return ops


def _without_functional_form(error: Exception) -> list:
    """The overloads PyTorch can decompose of the in-place op that functionalization rejected in
    `error` ("... has alias annotations: aten::square_(Tensor(a!) self) ..."); [] if none."""
    from torch._decomp import decomposition_table
    match = re.search(r"alias annotations: aten::(\w+)\(", str(error))
    packet = getattr(torch.ops.aten, match.group(1), None) if match else None
    if packet is None:
        return []
    return [op for op in (getattr(packet, name) for name in packet.overloads()) if op in decomposition_table]


def _make_graph(step: Callable, example_inputs: Sequence[Tensor], table: dict, functional: bool):
    from torch._decomp import decomposition_table
    from torch.fx.experimental.proxy_tensor import make_fx

    def trace(f, decompositions):
        return make_fx(f, decomposition_table=decompositions, tracing_mode="real")(*example_inputs)

    # In-place ops without a functional form that functionalization knows (square_,
    # float_power_): traced decomposed first (into out-of-place ops and copy_), then functionalized.
    decomposed_first = {}
    with torch.no_grad():
        while True:
            try:
                if not functional:
                    return trace(step, table)
                if not decomposed_first:
                    return trace(torch.func.functionalize(step), table)
                return trace(torch.func.functionalize(trace(step, {**table, **decomposed_first})), table)
            except UnsupportedOp:
                raise
            except Exception as e:  # tracing itself failed: data-dependent control flow, ...
                ops = [op for op in _without_functional_form(e) if op not in decomposed_first] if functional else []
                if not ops:
                    raise UnsupportedOp("tracing", f"{type(e).__name__}: {e}") from e
                decomposed_first.update({op: decomposition_table[op] for op in ops})


def _depends_on_arguments(node, memo: dict) -> bool:
    """Whether a node's value depends on the core's arguments (placeholders)."""
    if node not in memo:
        memo[node] = False  # (an FX graph has no cycles; this only stops revisiting)
        memo[node] = node.op == "placeholder" or any(_depends_on_arguments(n, memo) for n in node.all_input_nodes)
    return memo[node]


def _neuron_shape(example_inputs, returned) -> torch.Size:
    """The shape of one step's values: that of the examples, broadcast with the traced results
    (a per-neuron parameter makes the results wider than one-element examples)."""
    shapes = [e.shape for e in example_inputs]
    shapes += [r.meta["val"].shape for r in returned
               if isinstance(r, torch.fx.Node) and isinstance(r.meta.get("val"), Tensor)]
    return torch.broadcast_shapes(*shapes) if shapes else torch.Size([1])


def _check_draw(node, neuron_shape, memo: dict) -> None:
    """UnsupportedOp unless the random draw `node` has one value per neuron: the kernels draw per
    neuron, so a draw shared by neurons (torch.rand(1), a draw shaped like a scalar parameter)
    must not silently become independent draws. Its traced shape must be the neuron shape; when
    that has one element (the default examples), only a draw shaped like something computed from
    the arguments (rand_like(x)) is known to follow the neurons."""
    value = node.meta.get("val")
    shape = list(value.shape) if isinstance(value, Tensor) else None
    expected = list(neuron_shape)
    if shape != expected:
        raise UnsupportedOp(str(node.target), f"a random draw of shape {shape}, but the neurons have shape {expected} "
                            f"(the example inputs'): the kernels draw one value per neuron and step, so a draw "
                            f"shared by several neurons cannot be translated; draw like an argument "
                            f"(torch.rand_like(x))")
    if math.prod(expected) == 1 and not _depends_on_arguments(node, memo):
        raise UnsupportedOp(str(node.target), f"a random draw of shape {shape} that is not shaped like an argument: "
                            f"with one-element examples it cannot be told from one value shared by all neurons; "
                            f"draw like an argument (torch.rand_like(x)) or pass example_inputs of the neuron shape")


def _mutates(gm) -> bool:
    return any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
               for n in gm.graph.nodes)


def trace_graph(step: Callable, example_inputs: Sequence[Tensor]):
    """make_fx of `step`, functionalized when it has in-place ops (they become their out-of-place
    forms; not always, as functionalization cannot trace an autograd.Function), each op without a
    rule traced as PyTorch's decomposition of it where that leaves only ops with rules or with
    decompositions of their own (which are tried next). An op whose decomposition would bring an
    op that has neither stays, so that an error names the op the core used."""
    from torch._decomp import decomposition_table

    table, refused = {}, set()
    gm = _make_graph(step, example_inputs, table, False)
    functional = _mutates(gm)
    if functional:
        gm = _make_graph(step, example_inputs, table, True)
    while True:
        unruled = _unruled(gm, _needed(gm))
        op = next((op for op in unruled if op in decomposition_table and op not in table and op not in refused),
                  None)
        if op is None:
            return gm
        trial = _make_graph(step, example_inputs, {**table, op: decomposition_table[op]}, functional)
        if any(o not in unruled and o not in decomposition_table for o in _unruled(trial, _needed(trial))):
            refused.add(op)
            continue
        table[op] = decomposition_table[op]
        gm = trial


def trace_core(core: Callable, num_inputs: int, num_states: int, num_outputs: int,
               example_inputs: Sequence[Tensor]) -> Traced:
    def step(*args):  # make_fx reads the signature; bound methods and partials need a plain one
        return core(*args)

    with _surrogate.spikingjelly_surrogates_as_spike():
        gm = trace_graph(step, example_inputs)
    candidates = captured_sources(core)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != num_inputs + num_states:
        raise ValueError(f"core: expected {num_inputs + num_states} arguments, traced {len(placeholders)}")
    returned = _returned(gm)
    if len(returned) != num_outputs + num_states:
        raise ValueError(f"core: expected {num_outputs} outputs and {num_states} next states "
                         f"({num_outputs + num_states} values), got {len(returned)}")
    needed = _needed(gm)
    neuron_shape = _neuron_shape(example_inputs, returned)
    dependence: Dict[torch.fx.Node, bool] = {}

    values: Dict[torch.fx.Node, Value] = {}
    body: List[str] = []
    param_decls: List[str] = []
    params: List[TensorSource] = []
    param_kinds: List[str] = []
    param_of: Dict[int, str] = {}

    for i, node in enumerate(placeholders):
        values[node] = _f(f"x{i}" if i < num_inputs else f"v{i - num_inputs}")

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return values[a]
        if isinstance(a, (list, tuple)):
            return [arg(x) for x in a]
        return a

    for node in gm.graph.nodes:
        if node not in needed or node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr":
            constant = getattr(gm, node.target)
            if not isinstance(constant, Tensor) or not constant.dtype.is_floating_point:
                raise UnsupportedOp("get_attr", f"a captured {getattr(constant, 'dtype', type(constant))} value")
            live = _live_source(constant, candidates)
            if live is None and constant.numel() == 1:
                values[node] = literal(constant.item())  # a constant created inside the core
                continue
            source = live if live is not None else TensorSource(constant)
            tensor = source.tensor
            key = id(tensor)
            if key not in param_of:
                name = f"p{len(params)}"
                param_of[key] = name
                params.append(source)
                if tensor.numel() == 1:
                    param_kinds.append("scalar")
                    init = float(tensor.detach().item())
                    param_decls.append(f"param {name} = {init if math.isfinite(init) else 0.0!r}")
                else:
                    param_kinds.append("per_neuron")
                    param_decls.append(f"param {name}[neuron] = 0.0")
            values[node] = _f(param_of[key])
            continue
        if node.op != "call_function":
            raise UnsupportedOp(f"{node.op} {node.target}")
        target = str(node.target)
        if target in UNIT_VIEW_OPS:
            values[node] = _unit_view(node, values, neuron_shape)
            continue
        rule = RULES.get(target)
        if rule is None:
            raise UnsupportedOp(target, "not supported (docs/user-guide.md lists the ops FlexSN compiles)")
        if target in RANDOM_OPS:
            _check_draw(node, neuron_shape, dependence)
        value = rule(*arg(node.args), **{k: arg(v) for k, v in node.kwargs.items()})
        name = f"t{len(body)}"
        body.append(f"{name} = {value.text}")
        values[node] = Value(name, value.type)

    results = []
    for i, r in enumerate(returned):
        if not isinstance(r, torch.fx.Node):  # (runs eagerly no better: not a fallback)
            raise TypeError(f"core: expected tensors (outputs, then next states), got {type(r).__name__} "
                            f"as value {i}")
        body.append(f"r{i} = {as_float(values[r])}")
        results.append(f"r{i}")

    lines = [f"neuron {_safe_name(core)}"]
    lines += [f"input x{i}" for i in range(num_inputs)]
    lines += [f"state v{j} = 0" for j in range(num_states)]
    lines += param_decls
    lines += [f"output y{i}" for i in range(num_outputs)]
    lines += body
    lines += [f"y{i} = {results[i]}" for i in range(num_outputs)]
    lines += [f"v{j} = {results[num_outputs + j]}" for j in range(num_states)]
    return Traced("\n".join(lines) + "\n", params, param_kinds)
