"""ILIFNode: SpikingJelly's I-LIF (integer LIF, "Integer-Valued Training and Spike-Driven
Inference Spiking Neural Network", ECCV 2024), with its constructor arguments and behaviour, on
the fused kernels.

    node = spikejit.ILIFNode(tau=4/3, surrogate_function=spikejit.surrogate.MultiLevelSpikeCount(4),
                             step_mode="m")
    c_seq = node(x_seq)            # spike counts in {0, 1, ..., D}

Per step: h = (1 - 1/tau) v + x; c = round(clamp(h / v_threshold, 0, D)); v = h - c v_threshold
(always a soft reset; `detach_reset` cuts c out of the reset's gradient). The gradient of c is
1 / v_threshold where grad_min <= h / v_threshold <= grad_max, else 0 (the surrogate's
rectangular window, straight through). It is the shipped neuron neurons/ilif.sj with the options
as constants, compiled once per set of options and process like the built-ins; everything else
(single and multi step, `v`, `v_seq`, `store_v_seq`, checkpoints) is BaseNode's.
"""
from typing import Union

from . import surrogate as _surrogate
from .functional import shipped_handle
from .neuron import BaseNode

__all__ = ["ILIFNode"]


class ILIFNode(BaseNode):
    """Integer LIF: multi-level spike counts, soft reset (see the module's docstring)."""

    _SUBCLASS_OPTIONS = frozenset({"tau"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 4.0 / 3.0, v_threshold: float = 1.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, None, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau)

    def _checked_option(self, name: str, value):
        if name == "surrogate_function":
            _surrogate.resolve_multi_level(value)
            return _surrogate.MultiLevelSpikeCount(4) if value is None else value
        if name == "v_reset" and value is not None:
            raise ValueError(f"v_reset: ILIFNode always resets softly (v = h - c * v_threshold), so expected None, "
                             f"got {value!r}")
        return super()._checked_option(name, value)

    def _make_handle(self) -> int:
        count, grad_min, grad_max = _surrogate.resolve_multi_level(self.surrogate_function)
        return shipped_handle("ilif", dict(tau=self.tau, v_threshold=self.v_threshold, count=count,
                                           grad_min=grad_min, grad_max=grad_max, detach_reset=self.detach_reset))

    def extra_repr(self) -> str:
        return f"tau={self.tau}, " + super().extra_repr()
