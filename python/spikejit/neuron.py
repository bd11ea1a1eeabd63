"""IFNode, LIFNode and ParametricLIFNode with SpikingJelly's constructor arguments and behaviour.

    node = spikejit.LIFNode(tau=2.0, v_reset=None, surrogate_function=spikejit.surrogate.ATan(),
                            step_mode="m", store_v_seq=True)
    s_seq = node(x_seq)          # [T, *S]; node.v is the last state, node.v_seq the whole sequence
    node.reset()

Every step runs the fused kernels. `checkpoint_every` (constructor keyword and attribute) is the
save policy of training: 0 saves per step, k >= 1 saves v only every k steps and recomputes the
steps between in the backward (saved memory O(T/k), plus a reference to x_seq), and the default
"auto" chooses per call (k = 4 where that is faster and keeps no more memory: PLIF, float32, on
CUDA, large calls; see docs/python.md). Hyper-parameters may be changed between calls; the program
for a set of options is built once per process. `backend` is accepted for compatibility with
SpikingJelly ("torch", "cupy", "triton", "inductor") and always means spikejit.
"""
import math
from typing import Optional, Union

import torch
from torch import Tensor, nn

from . import surrogate as _surrogate
from .functional import builtin_handle, check_flag, refuse_stale_state, run_neuron, shipped_handle
from ._kernel_calls import AUTO, check_checkpoint_every, check_tensor, scalar_param
from ._stateful_module import StatefulModule, appended_step

__all__ = ["BaseNode", "IFNode", "LIFNode", "ParametricLIFNode"]

BACKENDS = ("spikejit", "torch", "cupy", "triton", "inductor")


def _check_float(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        expected = "a float or None" if allow_none else "a float"
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    return float(value)


def learnable_scalar(name: str, value, meaning: str, dtype) -> Tensor:
    """A module's learnable scalar (PLIF's w, KLIF's k) as the ops take it, in `dtype`."""
    if not isinstance(value, Tensor) or value.numel() != 1:
        got = "shape " + str(list(value.shape)) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"{name}: expected a one-element tensor ({meaning}), got {got}")
    return scalar_param(value, dtype)


def initial_state(module, value, name: str, default: float, x_seq: Tensor) -> Optional[Tensor]:
    """The state `value` (attribute `name` of `module`) to start from for inputs [T, *S]: None means
    the kernel's default (`default`); a stored state of another shape is dropped, as SpikingJelly
    does."""
    shape = x_seq.shape[1:]
    if isinstance(value, Tensor) and value.shape == shape:
        refuse_stale_state(module)
        return value.to(device=x_seq.device, dtype=x_seq.dtype)
    if isinstance(value, Tensor):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a tensor or a float (the state), got {type(value).__name__}")
    if value == default:
        return None
    refuse_stale_state(module)
    return torch.full(shape, float(value), dtype=x_seq.dtype, device=x_seq.device)


class BaseNode(StatefulModule):
    """Common state handling of the neuron modules: the state `v`, then those in `_MORE_STATES`.

    The program handle is kept in `_program_handle` and rebuilt whenever an option attribute is
    assigned, so that forward only reads an int (a constant for torch.compile). An assignment
    is checked first: a rejected value leaves the option and the program as they were. A
    surrogate changed in place (`node.surrogate_function.alpha = 3`) must be assigned again to
    count. Assigning `store_v_seq` forgets `v_seq`, as SpikingJelly does.
    """

    _STATE_NAMES = frozenset({"v", "v_seq"})
    _MORE_STATES = ()  # the names of the states after v (each also in _STATE_NAMES)
    _BASE_OPTIONS = frozenset({"v_threshold", "v_reset", "detach_reset", "surrogate_function"})
    _SUBCLASS_OPTIONS = frozenset({"tau", "decay_input"})  # what **options may hold
    _OPTIONS = _BASE_OPTIONS | _SUBCLASS_OPTIONS  # the assignments that rebuild the program

    def __init__(self, v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", backend: str = "spikejit",
                 store_v_seq: bool = False, checkpoint_every: Union[int, str] = "auto", **options):
        super().__init__()
        for name in options:
            if name not in self._SUBCLASS_OPTIONS:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {name!r}")
        if step_mode not in ("s", "m"):
            raise ValueError(f"step_mode: expected 's' or 'm', got {step_mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        options = dict(v_threshold=v_threshold, v_reset=v_reset, surrogate_function=surrogate_function,
                       detach_reset=detach_reset, **options)
        for name, value in options.items():
            setattr(self, name, self._checked_option(name, value))
        self.step_mode = step_mode
        self.backend = backend
        self.store_v_seq = check_flag("store_v_seq", store_v_seq)
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.v = self._v_default()
        self.v_seq = None
        for name in self._MORE_STATES:
            setattr(self, name, self._state_default(name))
        self._options_ready = True
        self._refresh_program()

    def _checked_option(self, name: str, value):
        """An option's value as the module keeps it, after its checks (constructor and assignment;
        a subclass with options of its own checks them here)."""
        if name in ("detach_reset", "decay_input"):
            return check_flag(name, value)
        if name == "surrogate_function":
            _surrogate.resolve(value)  # rejects unsupported surrogates now
            return _surrogate.Sigmoid() if value is None else value
        if name == "v_reset":
            return _check_float(name, value, allow_none=True)
        value = _check_float(name, value)
        if name == "tau" and not value > 1.0:
            raise ValueError(f"tau: expected a float > 1, got {value}")
        return value

    def _set_attribute(self, name, value):
        if not self.__dict__.get("_options_ready", False):
            super()._set_attribute(name, value)
        elif name in self._OPTIONS and isinstance(value, nn.Module) and self.__dict__.get("_is_replica", False):
            self._store(name, value)  # DataParallel's copy of an option module: the program stays the original's
        elif name in self._OPTIONS:
            self._assign_option(name, self._checked_option(name, value))
        elif name == "store_v_seq":
            super()._set_attribute(name, check_flag(name, value))
            self.v_seq = None
        else:
            super()._set_attribute(name, value)

    def _assign_option(self, name, value) -> None:
        old = getattr(self, name)
        self._store(name, value)
        try:
            self._refresh_program()
        except BaseException:
            self._store(name, old)
            raise

    def _store(self, name, value) -> None:
        if not isinstance(value, nn.Module) and name in self._modules:  # a surrogate name after a module
            del self._modules[name]
        super()._set_attribute(name, value)

    def _refresh_program(self) -> None:
        self._program_handle = self._make_handle()

    # A handle means a program of this process's registry: a pickled module (torch.save of a whole
    # model, multiprocessing) carries its options and makes the handle again where it is loaded.
    def __getstate__(self):
        state = super().__getstate__()
        del state["_program_handle"]
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._refresh_program()

    # -- state ---------------------------------------------------------------------------------

    def _v_default(self) -> float:
        return 0.0 if self.v_reset is None else self.v_reset

    def _state_default(self, name: str) -> float:
        """The value of a state in _MORE_STATES after reset (and its program's default)."""
        return 0.0

    def reset(self) -> None:
        """Forgets the state: v back to v_reset (0 under soft reset), the other states to their
        defaults, v_seq to None."""
        self.v = self._v_default()
        self.v_seq = None
        for name in self._MORE_STATES:
            setattr(self, name, self._state_default(name))

    def detach(self) -> None:
        """Cuts the state from the autograd graph (truncated BPTT)."""
        for name in ("v", "v_seq") + self._MORE_STATES:
            value = getattr(self, name)
            if isinstance(value, Tensor):
                setattr(self, name, value.detach())

    def _initial_states(self, x_seq: Tensor) -> list:
        """The states a call starts from: v, then those of _MORE_STATES."""
        states = [initial_state(self, self.v, "v", self._v_default(), x_seq)]
        for name in self._MORE_STATES:
            states.append(initial_state(self, getattr(self, name), name, self._state_default(name), x_seq))
        return states

    def _keep_final_states(self, finals) -> None:
        self.v = finals[0]
        if self._MORE_STATES:  # (a small call's host time counts: nothing more for one state)
            for name, value in zip(self._MORE_STATES, finals[1:]):
                setattr(self, name, value)

    def _stores_state_seqs(self) -> bool:
        """Whether a multi-step call keeps its state sequences (_keep_state_seqs): v's with
        store_v_seq."""
        return self.store_v_seq

    def _keep_state_seqs(self, seqs) -> None:
        self.v_seq = seqs[0]

    # -- subclasses ----------------------------------------------------------------------------

    def _make_handle(self) -> int:
        raise NotImplementedError

    def _shipped_handle(self, name: str, **fixed) -> int:
        """The shipped neuron `name` (neurons/<name>.sj) with this module's options as its
        constants: those of its class (_SUBCLASS_OPTIONS, constants of the same names), the
        threshold, the reset (soft_reset, with v_reset = 0, for v_reset=None), the surrogate, and
        the constants `fixed` by the class."""
        soft = self.v_reset is None
        constants = {option: getattr(self, option) for option in self._SUBCLASS_OPTIONS}
        return shipped_handle(name, dict(constants, v_threshold=self.v_threshold, v_reset=0.0 if soft else self.v_reset,
                                         soft_reset=soft, detach_reset=self.detach_reset, **fixed),
                              self.surrogate_function)

    def _params(self, x_seq: Tensor):
        return []

    # -- forward -------------------------------------------------------------------------------

    def _check_input(self, x: Tensor, what: str, min_dim: int) -> None:
        check_tensor(what, x)
        if x.dim() < min_dim:
            raise ValueError(f"{what}: expected at least {min_dim} dimensions, got shape {list(x.shape)}")

    def _run(self, x_seq: Tensor, states: list, store_state_seqs: bool):
        """(outputs, final states, state sequences or None) of the program over x_seq."""
        return run_neuron(self._program_handle, 1, len(states), [x_seq], states, self._params(x_seq),
                          store_state_seqs, self.checkpoint_every)

    def multi_step_forward(self, x_seq: Tensor) -> Tensor:
        self._check_input(x_seq, "x_seq", 1)
        states = self._initial_states(x_seq)
        stores = self._stores_state_seqs()
        outputs, finals, seqs = self._run(x_seq, states, stores)
        self._keep_final_states(finals)
        if stores:
            self._keep_state_seqs(seqs)
        return outputs[0]

    def single_step_forward(self, x: Tensor) -> Tensor:
        self._check_input(x, "x", 0)
        x_seq = x.unsqueeze(0)
        states = self._initial_states(x_seq)
        outputs, finals, _ = self._run(x_seq, states, False)
        self._keep_final_states(finals)
        if self.store_v_seq:
            self.v_seq = appended_step(self.v_seq, self.v.unsqueeze(0))
        return outputs[0][0]

    def forward(self, x: Tensor) -> Tensor:
        if self.step_mode == "m":
            return self.multi_step_forward(x)
        if self.step_mode == "s":
            return self.single_step_forward(x)
        raise ValueError(f"step_mode: expected 's' or 'm', got {self.step_mode!r}")

    def extra_repr(self) -> str:
        return (f"v_threshold={self.v_threshold}, v_reset={self.v_reset}, detach_reset={self.detach_reset}, "
                f"step_mode={self.step_mode}, store_v_seq={self.store_v_seq}"
                + (f", checkpoint_every={self.checkpoint_every}" if self.checkpoint_every != AUTO else ""))


class IFNode(BaseNode):
    """Integrate-and-fire: h = v + x; s = H(h - v_threshold); hard or soft reset."""

    def __init__(self, v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", backend: str = "spikejit",
                 store_v_seq: bool = False, checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every)

    def _make_handle(self) -> int:
        name, params = _surrogate.resolve(self.surrogate_function)
        return builtin_handle("if", self.v_threshold, self.v_reset, self.detach_reset, name, params)


class LIFNode(BaseNode):
    """Leaky integrate-and-fire: h = v + (x - (v - v_reset)) / tau (decay_input) or
    h = v - (v - v_reset) / tau + x."""

    def __init__(self, tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", backend: str = "spikejit", store_v_seq: bool = False,
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, decay_input=decay_input)

    def _make_handle(self) -> int:
        name, params = _surrogate.resolve(self.surrogate_function)
        return builtin_handle("lif", self.v_threshold, self.v_reset, self.detach_reset, name, params,
                              self.decay_input, self.tau)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, decay_input={self.decay_input}, " + super().extra_repr()


class ParametricLIFNode(BaseNode):
    """LIF with a learnable scalar w, 1/tau = sigmoid(w), w initialised to -log(init_tau - 1)."""

    def __init__(self, init_tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", backend: str = "spikejit", store_v_seq: bool = False,
                 checkpoint_every: Union[int, str] = "auto"):
        _check_float("init_tau", init_tau)
        if not init_tau > 1.0:
            raise ValueError(f"init_tau: expected a float > 1, got {init_tau}")
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, decay_input=decay_input)
        self.w = nn.Parameter(torch.as_tensor(-math.log(init_tau - 1.0)))

    def _make_handle(self) -> int:
        name, params = _surrogate.resolve(self.surrogate_function)
        return builtin_handle("plif", self.v_threshold, self.v_reset, self.detach_reset, name, params,
                              self.decay_input)

    def _params(self, x_seq: Tensor):
        return [learnable_scalar("w", self.w, "1/tau = sigmoid(w)", x_seq.dtype)]

    def extra_repr(self) -> str:
        return f"tau={1.0 / self.w.detach().sigmoid().item():.4g}, decay_input={self.decay_input}, " + super().extra_repr()
