"""TernaryIFNode and TernaryLIFNode: SpikingJelly's ternary spiking neurons, with its constructor
arguments and behaviour, on the fused kernels.

    node = spikejit.TernaryLIFNode(tau=2.0, step_mode="m")
    s_seq = node(x_seq)          # spikes in {-1, 0, +1}

They charge like IFNode and LIFNode, fire +1 at h >= v_threshold and -1 at h <= -v_threshold (each
through the surrogate), and reset: a soft reset (v_reset=None) subtracts s v_threshold; a hard
reset, to a v_reset strictly between the thresholds, follows either threshold's event. Both are
the shipped neuron neurons/ternary.sj with the options as constants; SpikingJelly 2.0 runs them by
a per-step torch loop.
"""
from typing import Optional, Union

from .neuron import BaseNode

__all__ = ["TernaryIFNode", "TernaryLIFNode"]


def _check_thresholds(node: BaseNode) -> None:
    """SpikingJelly's conditions: v_threshold > 0, and a hard reset strictly between -v_threshold
    and v_threshold."""
    if not node.v_threshold > 0:
        raise ValueError(f"v_threshold: expected a float > 0, got {node.v_threshold}")
    if node.v_reset is not None and not -node.v_threshold < node.v_reset < node.v_threshold:
        raise ValueError(f"v_reset: expected a float strictly between -v_threshold and v_threshold = "
                         f"{node.v_threshold}, got {node.v_reset}")


class TernaryIFNode(BaseNode):
    """IF with spikes in {-1, 0, +1} (see the module's docstring)."""

    _SUBCLASS_OPTIONS = frozenset()
    _OPTIONS = BaseNode._BASE_OPTIONS

    def __init__(self, v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every)

    def _make_handle(self) -> int:
        _check_thresholds(self)
        return self._shipped_handle("ternary", leaky=False)


class TernaryLIFNode(BaseNode):
    """LIF with spikes in {-1, 0, +1} (see the module's docstring)."""

    def __init__(self, tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, decay_input=decay_input)

    def _make_handle(self) -> int:
        _check_thresholds(self)
        return self._shipped_handle("ternary")

    def extra_repr(self) -> str:
        return f"tau={self.tau}, decay_input={self.decay_input}, " + super().extra_repr()
