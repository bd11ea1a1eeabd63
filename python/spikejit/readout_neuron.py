"""NonSpikingIFNode and NonSpikingLIFNode: SpikingJelly's non-spiking readouts, with its
constructor arguments and behaviour, on the fused kernels.

    readout = spikejit.NonSpikingLIFNode(tau=2.0, decode="max-mem")
    scores = readout(x_seq)      # x_seq [T, *S] -> [*S]: the largest membrane potential

The potential starts at 0 at every call and charges without firing: v = v + x (IF), v = v + (x -
v) / tau (LIF). `decode` turns the potentials [T, *S] into the output as SpikingJelly does:
"max-mem" (the largest over time), "max-abs-mem" (the one of largest magnitude, with its sign),
"mean-mem", "last_mem", or None for the list of the T potentials; any other value is a
ValueError. `node.v` is the last potential. They are the shipped neuron neurons/nonspiking.sj;
SpikingJelly runs them by a per-step torch loop.
"""
from typing import Optional

from torch import Tensor

from .functional import run_neuron, shipped_handle
from ._kernel_calls import check_tensor
from ._stateful_module import StatefulModule

__all__ = ["NonSpikingIFNode", "NonSpikingLIFNode"]

DECODES = (None, "max-mem", "max-abs-mem", "mean-mem", "last_mem")


def _decoded(v_seq: Tensor, decode: Optional[str]):
    if decode == "max-mem":
        return v_seq.max(0).values
    if decode == "max-abs-mem":
        high, low = v_seq.max(0).values, v_seq.min(0).values
        return high * (high.abs() > low.abs()) + low * (high.abs() <= low.abs())
    if decode == "mean-mem":
        return v_seq.mean(0)
    if decode == "last_mem":
        return v_seq[-1]
    return list(v_seq.unbind(0))


class _NonSpikingNode(StatefulModule):
    """A readout over [T, *S] inputs (multi step only, as SpikingJelly's)."""

    _STATE_NAMES = frozenset({"v"})

    def __init__(self, decode: Optional[str]):
        super().__init__()
        self.decode = decode
        self.step_mode = "m"
        self.v = 0.0

    def _set_attribute(self, name, value):
        if name == "decode" and value not in DECODES:
            raise ValueError(f"decode: expected one of {DECODES}, got {value!r}")
        super()._set_attribute(name, value)

    def _handle(self) -> int:
        raise NotImplementedError

    def reset(self) -> None:
        self.v = 0.0

    def forward(self, x_seq: Tensor):
        check_tensor("x_seq", x_seq)
        if x_seq.dim() < 1:
            raise ValueError(f"x_seq: expected at least 1 dimension [T, *S], got shape {list(x_seq.shape)}")
        outputs, finals, _ = run_neuron(self._handle(), 1, 1, [x_seq], [None], [], False)
        self.v = finals[0]
        return _decoded(outputs[0], self.decode)

    def extra_repr(self) -> str:
        return f"decode={self.decode!r}"


class NonSpikingIFNode(_NonSpikingNode):
    """A readout charging v = v + x (see the module's docstring)."""

    def __init__(self, decode: Optional[str] = None):
        super().__init__(decode)
        self._program_handle = shipped_handle("nonspiking", dict(leaky=False))

    def _handle(self) -> int:
        return self._program_handle


class NonSpikingLIFNode(_NonSpikingNode):
    """A readout charging v = v + (x - v) / tau (see the module's docstring)."""

    def __init__(self, tau: float = 2.0, decode: Optional[str] = None):
        super().__init__(decode)
        self.tau = tau

    def _set_attribute(self, name, value):
        if name == "tau":  # the program bakes tau in: made again (cached per value) on assignment
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"tau: expected a float > 0, got {value!r}")
            super()._set_attribute("_program_handle", shipped_handle("nonspiking", dict(tau=float(value))))
            value = float(value)
        super()._set_attribute(name, value)

    def _handle(self) -> int:
        return self._program_handle

    def extra_repr(self) -> str:
        return f"tau={self.tau}, " + super().extra_repr()
