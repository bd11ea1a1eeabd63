"""Surrogate-gradient spike functions with SpikingJelly's names, parameters and defaults.

    spikejit.surrogate.Sigmoid(alpha=4.0)(x)      # Heaviside forward, alpha*sig*(1-sig) backward
    spikejit.surrogate.spike(x, "atan", [2.0])    # the same through the functional form

Inside a FlexSN core these trace to the IR's `spike` op (one `spikejit::spike` node), and so do
SpikingJelly's surrogates called in a core (its modules, Sigmoid()(x), and its functions,
sigmoid.apply(x, 4.0)). The neurons also accept SpikingJelly's own surrogate objects (matched by
exact class name, parameters read from their attributes), names ("sigmoid", "ATan") and None
(Sigmoid(alpha=4)).
"""
import contextlib
import functools
import inspect
import math
import numbers
import sys
import threading
from typing import Sequence, Tuple

import torch
from torch import nn

from . import _core
from .ops import SURROGATE_INFO, run_spike

__all__ = ["SurrogateFunction", "spike", "heaviside", "resolve", "MultiLevelSpikeCount", "multi_level_spike_count"]

_BY_CLASS_NAME = {class_name: name for name, (class_name, _, _) in SURROGATE_INFO.items()}


class SurrogateFunction(nn.Module):
    """Base class: `name` is the snake_case surrogate name, `params` the full parameter list."""

    name = ""
    param_names: Tuple[str, ...] = ()
    defaults: Tuple[float, ...] = ()

    def __init__(self, *args, spiking: bool = True, **kwargs):
        super().__init__()
        if spiking is not True:
            raise ValueError(f"spiking: spikejit surrogates fire Heaviside spikes; spiking={spiking!r} is not supported")
        if len(args) > len(self.param_names):
            raise TypeError(f"{type(self).__name__} takes at most {len(self.param_names)} parameters "
                            f"{self.param_names}, got {len(args)}")
        values = dict(zip(self.param_names, self.defaults))
        values.update(zip(self.param_names, args))
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"{type(self).__name__} got an unexpected parameter {key!r}; "
                                f"it takes {self.param_names}")
            values[key] = value
        for key in self.param_names:
            value = values[key]
            setattr(self, key, float(value) if isinstance(value, torch.Tensor) else _finite_number(key, value))
        self.spiking = True

    @property
    def params(self) -> Tuple[float, ...]:
        return tuple(float(getattr(self, key)) for key in self.param_names)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_spike(x, self.name, list(self.params))

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k in self.param_names)


def _make_class(name: str, class_name: str, param_names, defaults):
    doc = (f"SpikingJelly's {class_name} surrogate: Heaviside forward, {name} gradient; "
           f"parameters {tuple(param_names)} default {tuple(defaults)}.")
    return type(class_name, (SurrogateFunction,), {
        "name": name, "param_names": tuple(param_names), "defaults": tuple(defaults),
        "__doc__": doc, "__module__": __name__,
    })


for _name, _class_name, _param_names, _defaults in _core.surrogates():
    globals()[_class_name] = _make_class(_name, _class_name, _param_names, _defaults)
    __all__.append(_class_name)


def resolve(surrogate_function, argument: str = "surrogate_function") -> Tuple[str, Tuple[float, ...]]:
    """(snake_case name, full parameter tuple) of a surrogate given in any accepted form."""
    if surrogate_function is None:
        return "sigmoid", (4.0,)
    if isinstance(surrogate_function, SurrogateFunction):
        return surrogate_function.name, surrogate_function.params
    if isinstance(surrogate_function, str):
        key = _BY_CLASS_NAME.get(surrogate_function, surrogate_function)
        if key not in SURROGATE_INFO:
            raise ValueError(f"{argument}: unknown surrogate {surrogate_function!r}; known: "
                             f"{', '.join(sorted(_BY_CLASS_NAME))}")
        return key, tuple(SURROGATE_INFO[key][2])
    cls = type(surrogate_function)
    class_name = cls.__name__
    key = _BY_CLASS_NAME.get(class_name)
    if key is None:
        raise ValueError(f"{argument}: unsupported surrogate {class_name}; spikejit supports "
                         f"{', '.join(sorted(_BY_CLASS_NAME))} (spikejit.surrogate or SpikingJelly's classes)")
    # A class of the same name elsewhere may compute another gradient: only SpikingJelly's own.
    if not _is_spikingjelly_surrogate_module(cls.__module__):
        raise ValueError(f"{argument}: unsupported surrogate {cls.__module__}.{class_name}; a class named like "
                         f"SpikingJelly's {class_name} is taken only from SpikingJelly's surrogate module (its "
                         f"gradient is spikejit's {key}); use spikejit.surrogate.{class_name} or SpikingJelly's")
    if getattr(surrogate_function, "spiking", True) is not True:
        raise ValueError(f"{argument}: {class_name}(spiking=False) is not supported; spikejit fires Heaviside spikes")
    _, param_names, defaults = SURROGATE_INFO[key]
    params = []
    for p, default in zip(param_names, defaults):
        value = getattr(surrogate_function, p, default)
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"{argument}: {class_name}.{p} must be a number, got a tensor of shape {list(value.shape)}")
            value = value.item()
        params.append(float(value))
    return key, tuple(params)


def _is_spikingjelly_surrogate_module(module: str) -> bool:
    """Whether `module` is SpikingJelly's surrogate module (spikingjelly.activation_based.surrogate,
    or spikingjelly.clock_driven.surrogate of its older releases)."""
    return module.startswith("spikingjelly.") and module.endswith(".surrogate")


def spike(x: torch.Tensor, surrogate="sigmoid", params: Sequence[float] = None) -> torch.Tensor:
    """Heaviside(x) = (x >= 0) with the surrogate's gradient. `surrogate` is a name (params
    default to SpikingJelly's) or any surrogate object accepted by `resolve`."""
    name, resolved = resolve(surrogate, "surrogate")
    if params is not None:
        if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
            raise TypeError(f"params: expected a sequence of numbers, got {type(params).__name__}")
        resolved = list(resolved)
        if len(params) > len(resolved):
            raise ValueError(f"params: surrogate {name} takes {len(resolved)} parameters, got {len(params)}")
        resolved[:len(params)] = [_finite_number(f"params[{i}]", p) for i, p in enumerate(params)]
    return run_spike(x, name, list(resolved))


_SPIKINGJELLY_SURROGATES = "spikingjelly.activation_based.surrogate"
_SPIKINGJELLY_QUANTIZE = "spikingjelly.activation_based.quantize"
_PATCHING = threading.RLock()
_TRACING = threading.local()  # .depth: how many traces of cores this thread is inside


def _spike_in_traces(function: type, name: str, param_names: Sequence[str], signature: inspect.Signature,
                     *args, **kwargs):
    """SpikingJelly's surrogate function `function` called: spike() with its parameters (read from
    its forward's arguments) in the thread that traces a core, its own `apply` in any other."""
    if not getattr(_TRACING, "depth", 0):
        return super(function, function).apply(*args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    x = next(iter(bound.arguments.values()))
    return run_spike(x, name, [float(bound.arguments[p]) for p in param_names])


def _count_in_traces(function: type, x, max_spike_count, grad_min, grad_max):
    """SpikingJelly's multi-level spike count (I-LIF's firing, an autograd.Function) called:
    multi_level_spike_count's plain ops, which trace, in the thread that traces a core; its own
    `apply` in any other."""
    if not getattr(_TRACING, "depth", 0):
        return super(function, function).apply(x, max_spike_count, grad_min, grad_max)
    return multi_level_spike_count(x, max_spike_count, (grad_min, grad_max))


def _patchable(function) -> bool:
    """Whether `function` is an autograd.Function whose `apply` is torch's (not yet replaced)."""
    return isinstance(function, type) and issubclass(function, torch.autograd.Function) and "apply" not in vars(function)


@contextlib.contextmanager
def spikingjelly_surrogates_as_spike():
    """While a FlexSN core is traced: SpikingJelly's surrogate functions (its autograd.Functions
    `sigmoid`, `atan`, ..., which its surrogate modules call too) fire through spike(), one
    `spikejit::spike` node with their name and parameters; make_fx would record only their
    forward, a Heaviside without the surrogate gradient. Its multi-level spike count (I-LIF's
    firing, also an autograd.Function) runs as multi_level_spike_count's plain ops. Their `apply`
    is replaced for the time (one trace at a time), and only this thread's calls take the
    replacement."""
    module = sys.modules.get(_SPIKINGJELLY_SURROGATES)
    with _PATCHING:
        patched = []
        _TRACING.depth = getattr(_TRACING, "depth", 0) + 1
        try:
            for name, (_, param_names, _) in SURROGATE_INFO.items():
                function = getattr(module, name, None)
                if _patchable(function):
                    signature = inspect.signature(function.forward)
                    if next(iter(signature.parameters), None) == "ctx":  # (forward(ctx, x, ...): older versions)
                        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
                    function.apply = staticmethod(functools.partial(_spike_in_traces, function, name, param_names,
                                                                    signature))
                    patched.append(function)
            count = getattr(sys.modules.get(_SPIKINGJELLY_QUANTIZE), "MultiLevelSpikeCountATGF", None)
            if _patchable(count):
                count.apply = staticmethod(functools.partial(_count_in_traces, count))
                patched.append(count)
            yield
        finally:
            _TRACING.depth -= 1
            for function in patched:
                del function.apply


def _finite_number(name: str, value) -> float:
    """A surrogate parameter as a float: a finite number, as the neurons' programs require."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not torch.compiler.is_compiling() and not math.isfinite(value):  # (symbolic under dynamo)
        raise ValueError(f"{name}: expected a finite number, got {value}")
    return float(value)


def heaviside(x: torch.Tensor) -> torch.Tensor:
    """(x >= 0) in x's dtype, without a gradient."""
    return (x >= 0).to(x.dtype)


class MultiLevelSpikeCount(nn.Module):
    """SpikingJelly's multi-level spike count, the firing of I-LIF (spikejit.ILIFNode):
    round(clamp(x, 0, max_spike_count)) forward (half to even), and a straight-through gradient
    inside `grad_window` (default [0, max_spike_count]), 0 outside. Plain torch ops
    (multi_level_spike_count), so a FlexSN core that calls it traces to the IR."""

    def __init__(self, max_spike_count: int, spiking: bool = True, grad_window=None):
        super().__init__()
        if isinstance(max_spike_count, bool) or not isinstance(max_spike_count, numbers.Integral):
            raise TypeError(f"max_spike_count: expected an int >= 1, got {type(max_spike_count).__name__}")
        if max_spike_count < 1:
            raise ValueError(f"max_spike_count: expected an int >= 1, got {max_spike_count}")
        if spiking is not True:
            raise ValueError(f"spiking: spikejit's MultiLevelSpikeCount fires spike counts; spiking={spiking!r} "
                             "is not supported")
        self.max_spike_count = int(max_spike_count)
        self.grad_min, self.grad_max = _grad_window(grad_window, self.max_spike_count)
        self.spiking = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return multi_level_spike_count(x, self.max_spike_count, (self.grad_min, self.grad_max))

    def extra_repr(self) -> str:
        return f"max_spike_count={self.max_spike_count}, grad_window=({self.grad_min}, {self.grad_max})"


def multi_level_spike_count(x: torch.Tensor, max_spike_count: int, grad_window=None) -> torch.Tensor:
    """round(clamp(x, 0, max_spike_count)), with gradient 1 where grad_min <= x <= grad_max (the
    window, default [0, max_spike_count]) and 0 elsewhere. The gradient rides on x - x.detach(),
    which is exactly 0 for finite x, so the values are the counts themselves."""
    grad_min, grad_max = _grad_window(grad_window, max_spike_count)
    count = torch.clamp(x, 0.0, float(max_spike_count)).round()
    window = ((x >= grad_min) & (x <= grad_max)).to(x.dtype)
    return count + window * (x - x.detach())


def _grad_window(grad_window, max_spike_count) -> Tuple[float, float]:
    if grad_window is None:
        return 0.0, float(max_spike_count)
    if isinstance(grad_window, (str, bytes)) or not isinstance(grad_window, Sequence) or len(grad_window) != 2:
        raise TypeError(f"grad_window: expected None or (grad_min, grad_max), got {grad_window!r}")
    grad_min, grad_max = (_finite_number(f"grad_window[{i}]", v) for i, v in enumerate(grad_window))
    if not grad_min <= grad_max:
        raise ValueError(f"grad_window: expected grad_min <= grad_max, got {tuple(grad_window)}")
    return grad_min, grad_max


def resolve_multi_level(surrogate_function, argument: str = "surrogate_function") -> Tuple[int, float, float]:
    """(max_spike_count, grad_min, grad_max) of spikejit's or SpikingJelly's MultiLevelSpikeCount
    (None: MultiLevelSpikeCount(4)); ValueError for anything else, as SpikingJelly's I-LIF."""
    if surrogate_function is None:
        return 4, 0.0, 4.0
    if type(surrogate_function).__name__ != "MultiLevelSpikeCount":
        raise ValueError(f"{argument}: expected a MultiLevelSpikeCount (spikejit.surrogate's or SpikingJelly's), "
                         f"got {type(surrogate_function).__name__}")
    if getattr(surrogate_function, "spiking", True) is not True:
        raise ValueError(f"{argument}: expected MultiLevelSpikeCount(spiking=True), got spiking=False")
    try:
        count = MultiLevelSpikeCount(getattr(surrogate_function, "max_spike_count", None),
                                     grad_window=(getattr(surrogate_function, "grad_min", None),
                                                  getattr(surrogate_function, "grad_max", None)))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{argument}: {error}") from None
    return count.max_spike_count, count.grad_min, count.grad_max


def text(name: str, params: Sequence[float]) -> str:
    """The surrogate in the neuron text format, e.g. `Sigmoid(alpha = 4.0)`."""
    class_name, param_names, _ = SURROGATE_INFO[name]
    return class_name + "(" + ", ".join(f"{p} = {float(v)!r}" for p, v in zip(param_names, params)) + ")"
