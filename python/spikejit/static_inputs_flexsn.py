"""StaticInputsFlexSN: FlexSN with SpikingJelly 2.0's constructor, whose core takes tensors the module holds.

    tau = nn.Parameter(torch.tensor(2.0))
    def core(x, v, tau):                 # (*inputs, *states, *static_inputs) -> (*outputs, *next_states)
        h = v + (x - v) / tau
        s = surrogate.Sigmoid(alpha=4.0)(h - 1.0)      # spikejit's or SpikingJelly's surrogate
        return s, h * (1.0 - s)
    node = spikejit.StaticInputsFlexSN(core, num_states=1, static_inputs=(tau,))

SpikingJelly 2.0 gave its FlexSN the constructor (core, num_states, static_inputs, step_mode,
store_state_seqs) in place of the reference's (core, num_inputs, num_states, num_outputs, ...)
that spikejit.FlexSN keeps. The core's last arguments are the static inputs: tensors the module
registers (Parameters as parameters, other tensors as buffers), named `_static_input_{i}` as
SpikingJelly names them, so its state dicts load. The number of step inputs comes from the core's
positional parameters, the number of outputs from one call with one-element tensors.

Everything else is spikejit.FlexSN: the core is compiled into the same kernels (or run as an eager
scan, with a warning, when it cannot be), the static inputs become its parameters (one-element
tensors scalars, others per-neuron tensors that broadcast to the shape of one step), read at each
call and given gradients. `spikejit.from_spikingjelly` converts SpikingJelly's FlexSN into this.
"""
import functools
import inspect
from typing import Callable, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .flexsn import FlexSN
from ._stateful_module import StatefulModule

__all__ = ["StaticInputsFlexSN"]


def _static_inputs(values) -> Tuple[Tensor, ...]:
    if isinstance(values, Tensor) or not isinstance(values, (tuple, list)):
        raise TypeError(f"static_inputs: expected a tuple of tensors, got {type(values).__name__}")
    for i, value in enumerate(values):
        if not isinstance(value, Tensor):
            raise TypeError(f"static_inputs[{i}]: expected a tensor, got {type(value).__name__}")
    return tuple(values)


def _step_input_count(core: Callable, num_states: int, num_static: int) -> int:
    """The core's positional parameters less its states and static inputs (as SpikingJelly counts)."""
    try:
        parameters = inspect.signature(core).parameters.values()
    except (TypeError, ValueError):
        raise TypeError(f"core: expected a callable with a signature to count its inputs from, got "
                        f"{type(core).__name__}") from None
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        raise TypeError("core: expected named positional parameters (inputs, states, static inputs), got *args")
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)
    count = positional - num_states - num_static
    if count < 1:
        raise ValueError(f"core: expected at least one step input besides {num_states} state(s) and {num_static} "
                         f"static input(s), got {positional} positional parameters")
    return count


def _output_count(core: Callable, num_inputs: int, num_states: int, static_inputs: Sequence[Tensor]) -> int:
    """The number of outputs: the core's results less its next states, from one call with
    one-element tensors like the static inputs (float32 on the CPU without them)."""
    like = static_inputs[0] if static_inputs else torch.zeros(())
    unit = torch.zeros(1, dtype=like.dtype, device=like.device)
    with torch.no_grad():
        try:
            results = core(*[unit] * (num_inputs + num_states), *static_inputs)
        except Exception as error:
            raise RuntimeError(f"core: failed on one-element tensors, the call that counts its outputs: "
                               f"{type(error).__name__}: {error}") from error
    count = len(results) if isinstance(results, (tuple, list)) else 1
    if count < num_states:
        raise ValueError(f"core: expected its outputs, then {num_states} next state(s), got {count} value(s)")
    return count - num_states


def _with_static_inputs(core: Callable, module: "StaticInputsFlexSN", *args):
    """One step: the core of inputs and states, then the module's static inputs as they are now."""
    return core(*args, *module.static_inputs)


class StaticInputsFlexSN(FlexSN):
    """A neuron from a one-step core with SpikingJelly 2.0's FlexSN constructor; see the module
    docstring. `backend`, `strict`, `checkpoint_every` and `pack_spikes` are spikejit.FlexSN's;
    `step_core` is the core as given (`core` is it with the static inputs bound)."""

    def __init__(self, core: Callable, num_states: int, static_inputs: Sequence[Tensor] = (), step_mode: str = "m",
                 store_state_seqs: bool = False, backend: str = "spikejit", strict: bool = False,
                 checkpoint_every: Union[int, str] = "auto", pack_spikes: bool = False):
        if not callable(core):
            raise TypeError(f"core: expected a callable, got {type(core).__name__}")
        if isinstance(num_states, bool) or not isinstance(num_states, int) or num_states < 0:
            raise ValueError(f"num_states: expected an int >= 0, got {num_states!r}")
        static_inputs = _static_inputs(static_inputs)
        num_inputs = _step_input_count(core, num_states, len(static_inputs))
        num_outputs = _output_count(core, num_inputs, num_states, static_inputs)
        # FlexSN traces the core at construction, so the tensors it reads are registered first.
        StatefulModule.__init__(self)
        self._static_input_names = tuple(f"_static_input_{i}" for i in range(len(static_inputs)))
        for name, tensor in zip(self._static_input_names, static_inputs):
            if isinstance(tensor, nn.Parameter):
                self.register_parameter(name, tensor)
            else:
                self.register_buffer(name, tensor)
        self.step_core = core
        step = functools.partial(_with_static_inputs, core, self)
        step.__name__ = getattr(core, "__name__", type(core).__name__)  # (the compiled neuron's name)
        super().__init__(step, num_inputs, num_states, num_outputs,
                         step_mode=step_mode, backend=backend, store_state_seqs=store_state_seqs, strict=strict,
                         checkpoint_every=checkpoint_every, pack_spikes=pack_spikes)

    @property
    def static_inputs(self) -> Tuple[Tensor, ...]:
        return tuple(getattr(self, name) for name in self._static_input_names)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_static_inputs={len(self._static_input_names)}"
