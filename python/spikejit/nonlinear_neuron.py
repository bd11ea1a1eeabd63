"""QIFNode, EIFNode and IzhikevichNode: SpikingJelly's nonlinear integrate-and-fire neurons, with
its constructor arguments and behaviour, on the fused kernels.

    node = spikejit.QIFNode(tau=2.0, v_c=0.8, a0=1.0, v_reset=-0.1, step_mode="m")
    s_seq = node(x_seq)

QIF charges h = v + (x + a0 (v - v_rest)(v - v_c)) / tau, EIF h = v + (x + v_rest - v +
delta_T exp((v - theta_rh) / delta_T)) / tau, Izhikevich QIF's charge minus an adaptation current
w, which decays towards a (h - v_rest) with time constant tau_w and jumps by b at each spike; all
then fire and reset like LIFNode (hard reset to v_reset, or soft reset with v_reset=None). They
are the shipped neurons neurons/qif.sj, eif.sj and izhikevich.sj with the options as constants,
compiled once per set of options and process like the built-ins; everything else (single and
multi step, `v`, `v_seq`, `store_v_seq`, `detach_reset`, surrogates, checkpoints) is BaseNode's.
SpikingJelly 2.0 runs these neurons by a torch loop on the CPU and by its own kernels on CUDA.
"""
from typing import Optional, Union

from .neuron import BaseNode

__all__ = ["QIFNode", "EIFNode", "IzhikevichNode"]


def _check_positive(node: BaseNode, *names: str) -> None:
    for name in names:
        if not getattr(node, name) > 0:
            raise ValueError(f"{name}: expected a float > 0, got {getattr(node, name)}")


def _check_order(node: BaseNode) -> None:
    """SpikingJelly's conditions on QIF's and EIF's options under a hard reset: v_threshold >
    v_reset and v_rest >= v_reset."""
    if node.v_reset is not None:
        if not node.v_threshold > node.v_reset:
            raise ValueError(f"v_threshold: expected a float > v_reset = {node.v_reset}, got {node.v_threshold}")
        if not node.v_rest >= node.v_reset:
            raise ValueError(f"v_rest: expected a float >= v_reset = {node.v_reset}, got {node.v_rest}")


class QIFNode(BaseNode):
    """Quadratic integrate-and-fire: h = v + (x + a0 (v - v_rest)(v - v_c)) / tau."""

    _SUBCLASS_OPTIONS = frozenset({"tau", "v_c", "a0", "v_rest"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 2.0, v_c: float = 0.8, a0: float = 1.0, v_threshold: float = 1.0,
                 v_rest: float = 0.0, v_reset: Optional[float] = -0.1, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, v_c=v_c, a0=a0, v_rest=v_rest)

    def _make_handle(self) -> int:
        _check_positive(self, "a0")
        _check_order(self)
        return self._shipped_handle("qif")

    def extra_repr(self) -> str:
        return f"tau={self.tau}, v_c={self.v_c}, a0={self.a0}, v_rest={self.v_rest}, " + super().extra_repr()


class EIFNode(BaseNode):
    """Exponential integrate-and-fire: h = v + (x + v_rest - v + delta_T exp((v - theta_rh) /
    delta_T)) / tau."""

    _SUBCLASS_OPTIONS = frozenset({"tau", "delta_T", "theta_rh", "v_rest"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 2.0, delta_T: float = 1.0, theta_rh: float = 0.8, v_threshold: float = 1.0,
                 v_rest: float = 0.0, v_reset: Optional[float] = -0.1, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, delta_T=delta_T, theta_rh=theta_rh, v_rest=v_rest)

    def _make_handle(self) -> int:
        _check_positive(self, "delta_T")
        _check_order(self)
        return self._shipped_handle("eif")

    def extra_repr(self) -> str:
        return (f"tau={self.tau}, delta_T={self.delta_T}, theta_rh={self.theta_rh}, v_rest={self.v_rest}, "
                + super().extra_repr())


class IzhikevichNode(BaseNode):
    """QIF with an adaptation current w: h = v + (x + a0 (v - v_rest)(v - v_c) - w) / tau, then
    w <- w + (a (h - v_rest) - w) / tau_w + b s. `node.w` is its state (w_rest after reset)."""

    _STATE_NAMES = BaseNode._STATE_NAMES | {"w"}
    _MORE_STATES = ("w",)
    _SUBCLASS_OPTIONS = frozenset({"tau", "v_c", "a0", "v_rest", "w_rest", "tau_w", "a", "b"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 2.0, v_c: float = 0.8, a0: float = 1.0, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, v_rest: float = -0.1, w_rest: float = 0.0, tau_w: float = 2.0,
                 a: float = 0.0, b: float = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, v_c=v_c, a0=a0, v_rest=v_rest, w_rest=w_rest, tau_w=tau_w,
                         a=a, b=b)

    def _make_handle(self) -> int:
        _check_positive(self, "a0", "tau_w")
        return self._shipped_handle("izhikevich")

    def _state_default(self, name: str) -> float:
        return self.w_rest  # (w, after reset)

    def extra_repr(self) -> str:
        return (f"tau={self.tau}, v_c={self.v_c}, a0={self.a0}, v_rest={self.v_rest}, w_rest={self.w_rest}, "
                f"tau_w={self.tau_w}, a={self.a}, b={self.b}, " + super().extra_repr())
