"""ComplementaryLIFNode: SpikingJelly's CLIF ("CLIF: Complementary Leaky Integrate-and-Fire
Neuron for Spiking Neural Networks", ICML 2024), with its constructor arguments and behaviour, on
the fused kernels.

    node = spikejit.ComplementaryLIFNode(tau=2.0, step_mode="m", store_state_seqs=True)
    s_seq = node(x_seq)
    v_seq, m_seq = node.state_seqs

Per step, with a complementary potential m beside v: h = v - v / tau + x; s = spike(h -
v_threshold); m = m sigmoid(h / tau) + s; v = h - s (v_threshold + sigmoid(m)). The surrogate
defaults to Rect(alpha=1) as there; the reset is always CLIF's own (no v_reset, no
detach_reset). It is the shipped neuron neurons/clif.sj with the options as constants, compiled
once per set of options and process like the built-ins; single and multi step, checkpoints and
the state handling are BaseNode's, with `m` a second state and `state_seqs` ([v_seq, m_seq], multi step
with store_state_seqs) in place of v_seq. SpikingJelly runs it as one fused kernel per step on
CUDA and a per-step torch loop elsewhere.
"""
from typing import Union

from torch import Tensor

from . import surrogate as _surrogate
from .functional import check_flag, shipped_handle
from .neuron import BaseNode

__all__ = ["ComplementaryLIFNode"]


class ComplementaryLIFNode(BaseNode):
    """CLIF: LIF with a complementary potential m that raises the reset after recent spikes (see
    the module's docstring)."""

    _STATE_NAMES = BaseNode._STATE_NAMES | {"m", "state_seqs"}
    _SUBCLASS_OPTIONS = frozenset({"tau"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 2.0, v_threshold: float = 1.0, surrogate_function=None, step_mode: str = "s",
                 store_state_seqs: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, None, surrogate_function, False, step_mode, backend, False, checkpoint_every,
                         tau=tau)
        self.m = 0.0
        self.store_state_seqs = store_state_seqs  # (checked, and state_seqs set to None: _set_attribute)

    def _checked_option(self, name: str, value):
        if name == "surrogate_function" and value is None:
            return _surrogate.Rect(alpha=1.0)
        for fixed, allowed in (("v_reset", None), ("detach_reset", False)):
            if name == fixed and value is not allowed:
                raise ValueError(f"{name}: ComplementaryLIFNode resets by v_threshold + sigmoid(m), so expected "
                                 f"{allowed}, got {value!r}")
        return super()._checked_option(name, value)

    def _set_attribute(self, name, value):
        if name == "store_state_seqs" and self.__dict__.get("_options_ready", False):
            super()._set_attribute(name, check_flag(name, value))
            self.state_seqs = None  # (as SpikingJelly's setter)
        else:
            super()._set_attribute(name, value)

    def _make_handle(self) -> int:
        return shipped_handle("clif", dict(tau=self.tau, v_threshold=self.v_threshold), self.surrogate_function)

    def _initial_states(self, x_seq: Tensor) -> list:
        return super()._initial_states(x_seq) + [self._initial_state(self.m, "m", 0.0, x_seq)]

    def _keep_final_states(self, finals) -> None:
        self.v, self.m = finals

    def _stores_state_seqs(self) -> bool:
        return self.store_state_seqs

    def _keep_state_seqs(self, seqs) -> None:
        self.state_seqs = list(seqs)

    def reset(self) -> None:
        """Forgets the state: v and m back to 0, state_seqs (and v_seq) to None."""
        super().reset()
        self.m = 0.0
        self.state_seqs = None

    def detach(self) -> None:
        super().detach()
        if isinstance(self.m, Tensor):
            self.m = self.m.detach()
        if self.state_seqs is not None:
            self.state_seqs = [seq.detach() for seq in self.state_seqs]

    def extra_repr(self) -> str:
        return f"tau={self.tau}, store_state_seqs={self.store_state_seqs}, " + super().extra_repr()
