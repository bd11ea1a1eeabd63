"""RAFNode: SpikingJelly's resonate-and-fire neuron, with its constructor arguments and behaviour,
on the fused kernels.

    node = spikejit.RAFNode(b=-0.2, omega=1.0, dt=1.0, step_mode="m")
    s_seq = node(x_seq)          # node.v, node.u: the oscillator's two coordinates

Per step the oscillator (u, v) is rotated by omega dt and damped by exp(b dt), x drives u, and v
fires and resets like LIFNode's (hard reset to v_reset, or soft with v_reset=None). It is the
shipped neuron neurons/raf.sj with the options as constants (exp, cos and sin of them folded
once, as SpikingJelly computes them in Python); SpikingJelly 2.0 runs it by a per-step torch loop.
"""
from typing import Optional, Union

from .neuron import BaseNode

__all__ = ["RAFNode"]


class RAFNode(BaseNode):
    """Resonate-and-fire: a damped oscillator driven by x, firing on v (see the module's
    docstring)."""

    _STATE_NAMES = BaseNode._STATE_NAMES | {"u"}
    _MORE_STATES = ("u",)
    _SUBCLASS_OPTIONS = frozenset({"b", "omega", "dt"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS
    _SIGNS = {"b": (-1, "< 0"), "omega": (1, "> 0"), "dt": (1, "> 0")}  # SpikingJelly's conditions

    def __init__(self, b: float = -0.2, omega: float = 1.0, dt: float = 1.0, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, b=b, omega=omega, dt=dt)

    def _checked_option(self, name: str, value):
        value = super()._checked_option(name, value)
        if name in self._SIGNS:
            sign, condition = self._SIGNS[name]
            if not value * sign > 0:
                raise ValueError(f"{name}: expected a float {condition}, got {value}")
        return value

    def _make_handle(self) -> int:
        return self._shipped_handle("raf")

    def extra_repr(self) -> str:
        return f"b={self.b}, omega={self.omega}, dt={self.dt}, " + super().extra_repr()
