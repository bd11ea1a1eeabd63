"""GatedLIFNode: SpikingJelly's gated LIF (GLIF, "GLIF: A Unified Gated Leaky Integrate-and-Fire
Neuron for Spiking Neural Networks", NeurIPS 2022), with its constructor arguments, parameters
and behaviour, on the fused kernels.

    node = spikejit.GatedLIFNode(T=8, inplane=64)     # one set of gates per channel
    s_seq = node(x_seq)                               # x_seq [8, B, 64, H, W]

Learnable gates alpha, beta, gamma mix the leak of tau with a linear decay, the input's
conductance (one value per step: `conduct` [T, ...]) and a reset that subtracts part of v or a
sub-reset value (see neurons/gated_lif.sj). Every parameter goes through its sigmoid; with
`inplane` they hold one value per channel (dimension 1 of a step's input), else one scalar. The
parameters are those of SpikingJelly's module, by name and shape, so its state dict loads. Multi
step only, over exactly T steps; the spike that gates the reset starts at 0 at every call, and v
carries over until reset(), as there. The sigmoids, the per-channel broadcast and their
gradients run in PyTorch; the T steps in one kernel, which reads the broadcast gates and
conductance where they lie (strided views, no copy to the neurons' shape).
"""
import math
from typing import Optional, Union

import torch
from torch import Tensor, nn

from . import surrogate as _surrogate
from .functional import run_neuron, shipped_handle
from ._kernel_calls import check_checkpoint_every, check_module_tensor, check_tensor
from .neuron import initial_state
from ._stateful_module import StatefulModule

__all__ = ["GatedLIFNode"]

_GATES = ("alpha", "beta", "gamma", "tau", "v_threshold", "linear_decay", "v_subreset")  # the program's order


def _logit(p: float) -> float:
    return -math.log(1 / p - 1)


def _check_fraction(name: str, value, upper: str = "1") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name}: expected a float in (0, {upper}), got {value!r}")
    return float(value)


class GatedLIFNode(StatefulModule):
    """Gated LIF with learnable gates (see the module's docstring)."""

    _STATE_NAMES = frozenset({"v", "u"})

    def __init__(self, T: int, inplane: Optional[int] = None, init_linear_decay: Optional[float] = None,
                 init_v_subreset: Optional[float] = None, init_tau: float = 0.25, init_v_threshold: float = 0.5,
                 init_conduct: float = 0.5, surrogate_function=None, step_mode: str = "m",
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__()
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise ValueError(f"T: expected an int >= 1 (the steps of every call), got {T!r}")
        if inplane is not None and (isinstance(inplane, bool) or not isinstance(inplane, int) or inplane < 1):
            raise ValueError(f"inplane: expected None or an int >= 1 (the channels), got {inplane!r}")
        if step_mode != "m":
            raise ValueError(f"step_mode: GatedLIFNode runs multi step only, so expected 'm', got {step_mode!r}")
        init_tau = _check_fraction("init_tau", init_tau)
        init_v_threshold = _check_fraction("init_v_threshold", init_v_threshold)
        init_conduct = _check_fraction("init_conduct", init_conduct)
        init_linear_decay = _check_fraction("init_linear_decay", init_v_threshold / (T * 2)
                                            if init_linear_decay is None else init_linear_decay)
        init_v_subreset = _check_fraction("init_v_subreset", init_v_threshold
                                          if init_v_subreset is None else init_v_subreset)
        self.T, self.inplane, self.step_mode, self.backend = T, inplane, step_mode, backend
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        shape = () if inplane is None else (inplane,)
        for gate in ("alpha", "beta", "gamma"):  # SpikingJelly: uniform in (-0.1, 0.1)
            setattr(self, gate, nn.Parameter(0.2 * (torch.rand(shape) - 0.5)))
        for name, init in (("tau", init_tau), ("v_threshold", init_v_threshold),
                           ("linear_decay", init_linear_decay), ("v_subreset", init_v_subreset)):
            setattr(self, name, nn.Parameter(torch.full(shape, _logit(init))))
        self.conduct = nn.Parameter(torch.full((T, *shape), _logit(init_conduct)))
        self.surrogate_function = surrogate_function
        self.v = self.u = 0.0

    def _set_attribute(self, name, value):
        if name == "surrogate_function":  # the program has the surrogate in it: made again (cached)
            handle = shipped_handle("gated_lif", {}, _surrogate.Sigmoid() if value is None else value)
            super()._set_attribute("_program_handle", handle)
            value = _surrogate.Sigmoid() if value is None else value
            if not isinstance(value, nn.Module) and name in self._modules:
                del self._modules[name]
        super()._set_attribute(name, value)

    def reset(self) -> None:
        self.v = self.u = 0.0

    def _per_neuron(self, name: str, shape, x_seq: Tensor) -> Tensor:
        """sigmoid(parameter `name`) over `shape` ([*S], or [T, *S] for conduct): a scalar
        everywhere, a vector along the channels (dimension 1 of a step's input)."""
        p = getattr(self, name)
        check_module_tensor(name, p, x_seq)
        value = p.sigmoid().to(x_seq.dtype)
        step_dims = x_seq.dim() - 1
        if self.inplane is None:
            return value.view(*value.shape, *([1] * step_dims)).expand(shape)  # (value: [] or [T])
        if step_dims < 2 or x_seq.shape[2] != self.inplane:
            raise ValueError(f"x_seq: expected [T, N, {self.inplane}, ...] (inplane = {self.inplane} channels at "
                             f"dimension 2), got shape {list(x_seq.shape)}")
        return value.view(*value.shape[:-1], 1, self.inplane, *([1] * (step_dims - 2))).expand(shape)

    def forward(self, x_seq: Tensor) -> Tensor:
        check_tensor("x_seq", x_seq)
        if x_seq.dim() < 1 or x_seq.shape[0] != self.T:
            raise ValueError(f"x_seq: expected [T = {self.T}, *S], got shape {list(x_seq.shape)}")
        step_shape = x_seq.shape[1:]
        params = [self._per_neuron(name, step_shape, x_seq) for name in _GATES]
        conduct = self._per_neuron("conduct", x_seq.shape, x_seq)
        v = initial_state(self, self.v, "v", 0.0, x_seq)
        outputs, finals, _ = run_neuron(self._program_handle, 1, 2, [x_seq, conduct], [v, None],
                                        params, False, self.checkpoint_every)
        self.v = self.u = finals[0]  # (SpikingJelly keeps v in both)
        return outputs[0]

    def extra_repr(self) -> str:
        return f"T={self.T}, inplane={self.inplane}, step_mode={self.step_mode}"
