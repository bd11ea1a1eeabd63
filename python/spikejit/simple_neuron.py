"""SimpleBaseNode, SimpleIFNode and SimpleLIFNode: SpikingJelly's neurons written as their charge
equation, on the fused kernels.

    class QuadraticNode(spikejit.SimpleBaseNode):
        def __init__(self, a=0.2, **kwargs):
            super().__init__(**kwargs)
            self.a = a
        def neuronal_charge(self, x):
            self.v = self.v + self.a * self.v * self.v + x

    node = QuadraticNode(step_mode="m")
    s_seq = node(x_seq)                     # [T, *S]; node.v holds the last v

As in SpikingJelly, a subclass writes neuronal_charge(x), which updates self.v, and may override
neuronal_fire() and neuronal_reset(spike); v carries over from call to call until reset(). Here
that step (charge, fire, reset) is traced into spikejit's IR like a FlexSN core once the
constructor (the subclass's too) has run, and all T steps of a call run in one kernel, trained
with the surrogate's gradient; torch.compile sees one op. The plain numbers the step reads
(self.a, v_threshold, the surrogate's alpha, ...) are compiled into the kernel: assigning an
attribute of the module traces again (or takes the kernel traced for those numbers before, of
the 8 most recently used); a number changed inside a submodule
(`node.surrogate_function.alpha = 3`) counts once the submodule is assigned again. Tensors and
parameters the step reads are the kernel's parameters, read where they live at each call and
learned as in PyTorch. A step the tracer cannot translate raises
UnsupportedCoreError naming the op.

SimpleIFNode and SimpleLIFNode are SpikingJelly's: SimpleLIFNode's charge
v + (v_reset - v + x) / tau rounds differently from LIFNode's, and its v_reset must be a number.
A SpikingJelly surrogate given to the constructor is replaced by spikejit's of the same name and
parameters (the tracer translates those).
"""
from typing import Optional

from torch import Tensor, nn

from . import surrogate as _surrogate
from .flexsn import FlexSN, kernel_params, replicate_kernel
from .functional import check_flag, run_neuron
from ._kernel_calls import check_checkpoint_every, check_tensor
from .neuron import initial_state
from ._stateful_module import StatefulModule

__all__ = ["SimpleBaseNode", "SimpleIFNode", "SimpleLIFNode"]

_PLAIN_NUMBERS = (bool, int, float, type(None))
# Traced steps a module keeps (the most recently traced): a number assigned anew at each epoch (an
# annealed tau) would otherwise keep one kernel per value for the module's life.
_KEPT_KERNELS = 8


def _spikejit_surrogate(surrogate_function) -> _surrogate.SurrogateFunction:
    """spikejit's surrogate module for any accepted form (None: Sigmoid, as SpikingJelly's default)."""
    if surrogate_function is None:
        return _surrogate.Sigmoid()
    if isinstance(surrogate_function, _surrogate.SurrogateFunction):
        return surrogate_function
    _, params = _surrogate.resolve(surrogate_function)  # checks it
    return getattr(_surrogate, type(surrogate_function).__name__)(*params)


def _plain_numbers(module: nn.Module):
    """(name, value) of a module's attributes that are plain numbers, sorted."""
    return tuple(sorted((k, v) for k, v in vars(module).items() if type(v) in _PLAIN_NUMBERS))


class _TracedOnceBuilt(type):
    """Traces a SimpleBaseNode's step once its whole constructor, a subclass's included, has run."""

    def __call__(cls, *args, **kwargs):
        node = super().__call__(*args, **kwargs)
        node._retrace()
        return node


class SimpleBaseNode(StatefulModule, metaclass=_TracedOnceBuilt):
    """SpikingJelly's SimpleBaseNode on spikejit's kernels (see the module's docstring)."""

    _STATE_NAMES = frozenset({"v"})

    def __init__(self, v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", checkpoint_every="auto"):
        super().__init__()
        self.v_threshold = v_threshold
        self.v_reset = v_reset
        self.surrogate_function = _spikejit_surrogate(surrogate_function)
        self.detach_reset = check_flag("detach_reset", detach_reset)
        self.step_mode = step_mode
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.v = 0.0
        # Traced steps by the plain numbers they read, and the one for the numbers now
        # (`_current`, from the end of construction on): outside the module's state (not
        # parameters or submodules of it), traced again after a copy.
        self.__dict__["_kernels"] = {}

    def neuronal_charge(self, x: Tensor) -> None:
        raise NotImplementedError(f"{type(self).__name__}: a SimpleBaseNode writes neuronal_charge(x), which updates "
                                  "self.v")

    def neuronal_fire(self) -> Tensor:
        return self.surrogate_function(self.v - self.v_threshold)

    def neuronal_reset(self, spike: Tensor) -> None:
        spike_d = spike.detach() if self.detach_reset else spike
        if self.v_reset is None:
            self.v = self.v - self.v_threshold * spike_d
        else:
            self.v = spike_d * self.v_reset + (1.0 - spike_d) * self.v

    def reset(self) -> None:
        self.v = 0.0

    def _step(self, x: Tensor, v: Tensor):
        """One step as a FlexSN core: (spike, v) from x and the v before it."""
        held = self.__dict__["v"]
        self.__dict__["v"] = v
        try:
            self.neuronal_charge(x)
            spike = self.neuronal_fire()
            self.neuronal_reset(spike)
            return spike, self.v
        finally:
            self.__dict__["v"] = held

    def _retrace(self) -> None:
        """Makes the traced step for the numbers the module and its submodules hold now current."""
        key = (_plain_numbers(self),) + tuple(_plain_numbers(m) for m in self.children())
        kernel = self._kernels.pop(key, None)
        if kernel is None:
            kernel = FlexSN(self._step, num_inputs=1, num_states=1, num_outputs=1, strict=True)
            if len(self._kernels) == _KEPT_KERNELS:
                del self._kernels[next(iter(self._kernels))]  # the least recently made current
        self._kernels[key] = kernel  # (last: the most recent)
        self.__dict__["_current"] = kernel

    def _set_attribute(self, name, value):
        if name == "surrogate_function":
            value = _spikejit_surrogate(value)
        super()._set_attribute(name, value)
        # (built: an assignment may change what the step reads; not a DataParallel replica's copies)
        if "_current" in self.__dict__ and not self.__dict__.get("_is_replica", False):
            self._retrace()

    def _replicate_for_data_parallel(self):
        replica = super()._replicate_for_data_parallel()
        replicate_kernel(self, replica, self._current)  # (the step's tensors live in this module's tree)
        return replica

    def forward(self, x: Tensor) -> Tensor:
        check_tensor("x", x)
        if self.step_mode == "s":
            return self._multi_step(x.unsqueeze(0))[0]
        if self.step_mode == "m":
            if x.dim() < 1:
                raise ValueError(f"x_seq: expected [T, *S], got shape {list(x.shape)}")
            return self._multi_step(x)
        raise ValueError(f"step_mode: expected 's' or 'm', got {self.step_mode!r}")

    def _multi_step(self, x_seq: Tensor) -> Tensor:
        kernel = self._current
        v = initial_state(self, self.v, "v", 0.0, x_seq)  # (a traced program starts its states at 0)
        outputs, finals, _ = run_neuron(kernel.handle, 1, 1, [x_seq], [v], kernel_params(self, kernel, x_seq), False,
                                        self.checkpoint_every)
        self.v = finals[0]
        return outputs[0]

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_current", None)
        state["_kernels"] = {}
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._retrace()

    def extra_repr(self) -> str:
        return (f"v_threshold={self.v_threshold}, v_reset={self.v_reset}, detach_reset={self.detach_reset}, "
                f"step_mode={self.step_mode}")


class SimpleIFNode(SimpleBaseNode):
    """SpikingJelly's SimpleIFNode: v = v + x."""

    def neuronal_charge(self, x: Tensor) -> None:
        self.v = self.v + x


class SimpleLIFNode(SimpleBaseNode):
    """SpikingJelly's SimpleLIFNode: v = v + (v_reset - v + x) / tau (decay_input), else
    v + (v_reset - v) / tau + x."""

    def __init__(self, tau: float, decay_input: bool, v_threshold: float = 1.0, v_reset: float = 0.0,
                 surrogate_function=None, detach_reset: bool = False, step_mode: str = "s",
                 checkpoint_every="auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, checkpoint_every)
        self.tau = tau
        self.decay_input = check_flag("decay_input", decay_input)

    def neuronal_charge(self, x: Tensor) -> None:
        if self.decay_input:
            self.v = self.v + (self.v_reset - self.v + x) / self.tau
        else:
            self.v = self.v + (self.v_reset - self.v) / self.tau + x

    def extra_repr(self) -> str:
        return f"tau={self.tau}, decay_input={self.decay_input}, " + super().extra_repr()
