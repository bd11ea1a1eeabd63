"""SpikingJelly's LIF variants with its constructor arguments and behaviour, on the fused kernels:
ComplementaryLIFNode (CLIF, ICML 2024), KLIFNode (KLIF, a learnable scale k), CUBALIFNode
(current-based LIF, a synaptic current c) and LIAFNode (LIF with an analog output act(h)).

    node = spikejit.ComplementaryLIFNode(tau=2.0, step_mode="m", store_state_seqs=True)
    s_seq = node(x_seq)
    v_seq, m_seq = node.state_seqs

CLIF, per step, with a complementary potential m beside v: h = v - v / tau + x; s = spike(h -
v_threshold); m = m sigmoid(h / tau) + s; v = h - s (v_threshold + sigmoid(m)). The surrogate
defaults to Rect(alpha=1) as there; the reset is always CLIF's own (no v_reset, no
detach_reset). `m` is a second state and `state_seqs` ([v_seq, m_seq], multi step with
store_state_seqs) stands in place of v_seq. SpikingJelly runs it as one fused kernel per step on
CUDA and a per-step torch loop elsewhere.

KLIF charges like LIFNode, then fires on f = relu(k h) with k a learnable scalar (`node.k`, 1
at first); the reset acts on f, or with scale_reset on f / k (a soft reset then subtracts
v_threshold / k). CUBA LIF: c = c c_decay + x, h = v v_decay + c, then LIFNode's reset; `c` is
a second state. SpikingJelly 2.0 runs both by a per-step torch loop.

LIAF charges and resets like LIFNode, but outputs act(h), or act(h - v_threshold) with
threshold_related, in place of its spikes. `act` is any function FlexSN can trace (torch ops,
torch.nn activations, modules with parameters, which then learn); the step with it is traced
into a program like a FlexSN core, and one that cannot be traced is an UnsupportedCoreError
naming the op.

CLIF, KLIF and CUBA LIF are shipped neurons (neurons/clif.sj, klif.sj, cubalif.sj) with the
options as constants, compiled once per set of options and process like the built-ins; single and
multi step, checkpoints and the state handling are BaseNode's for all four.
"""
from typing import Optional, Union

import torch
from torch import Tensor, nn

from . import surrogate as _surrogate
from .flexsn import FlexSN, kernel_params, replicate_kernel
from .functional import check_flag, shipped_handle
from .neuron import BaseNode, LIFNode, learnable_scalar

__all__ = ["ComplementaryLIFNode", "KLIFNode", "CUBALIFNode", "LIAFNode"]


class ComplementaryLIFNode(BaseNode):
    """CLIF: LIF with a complementary potential m that raises the reset after recent spikes (see
    the module's docstring)."""

    _STATE_NAMES = BaseNode._STATE_NAMES | {"m", "state_seqs"}
    _MORE_STATES = ("m",)
    _SUBCLASS_OPTIONS = frozenset({"tau"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, tau: float = 2.0, v_threshold: float = 1.0, surrogate_function=None, step_mode: str = "s",
                 store_state_seqs: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, None, surrogate_function, False, step_mode, backend, False, checkpoint_every,
                         tau=tau)
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

    def _stores_state_seqs(self) -> bool:
        return self.store_state_seqs

    def _keep_state_seqs(self, seqs) -> None:
        self.state_seqs = list(seqs)

    def reset(self) -> None:
        """Forgets the state: v and m back to 0, state_seqs (and v_seq) to None."""
        super().reset()
        self.state_seqs = None

    def detach(self) -> None:
        super().detach()
        if self.state_seqs is not None:
            self.state_seqs = [seq.detach() for seq in self.state_seqs]

    def extra_repr(self) -> str:
        return f"tau={self.tau}, store_state_seqs={self.store_state_seqs}, " + super().extra_repr()


class KLIFNode(BaseNode):
    """KLIF: LIF firing on relu(k h) with a learnable scalar k (see the module's docstring)."""

    _SUBCLASS_OPTIONS = frozenset({"tau", "decay_input", "scale_reset"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, scale_reset: bool = False, tau: float = 2.0, decay_input: bool = True,
                 v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, decay_input=decay_input, scale_reset=scale_reset)
        self.k = nn.Parameter(torch.as_tensor(1.0))

    def _checked_option(self, name: str, value):
        if name == "scale_reset":
            return check_flag(name, value)
        return super()._checked_option(name, value)

    def _make_handle(self) -> int:
        return self._shipped_handle("klif")

    def _params(self, x_seq: Tensor):
        return [learnable_scalar("k", self.k, "f = relu(k h)", x_seq.dtype)]

    def extra_repr(self) -> str:
        return (f"scale_reset={self.scale_reset}, tau={self.tau}, decay_input={self.decay_input}, "
                + super().extra_repr())


class CUBALIFNode(BaseNode):
    """Current-based LIF: a synaptic current c = c c_decay + x charges v = v v_decay + c.
    `node.c` is its state (0 after reset)."""

    _STATE_NAMES = BaseNode._STATE_NAMES | {"c"}
    _MORE_STATES = ("c",)
    _SUBCLASS_OPTIONS = frozenset({"c_decay", "v_decay"})
    _OPTIONS = BaseNode._BASE_OPTIONS | _SUBCLASS_OPTIONS

    def __init__(self, c_decay: float = 0.5, v_decay: float = 0.75, v_threshold: float = 0.5,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, c_decay=c_decay, v_decay=v_decay)

    def _checked_option(self, name: str, value):
        if name == "surrogate_function" and value is None:
            return _surrogate.Rect(alpha=1.0)
        return super()._checked_option(name, value)

    def _make_handle(self) -> int:
        return self._shipped_handle("cubalif")

    def extra_repr(self) -> str:
        return f"c_decay={self.c_decay}, v_decay={self.v_decay}, " + super().extra_repr()


def _liaf_step(act, threshold_related: bool, tau: float, decay_input: bool, v_threshold: float,
               v_reset: Optional[float], surrogate_function, detach_reset: bool):
    """LIAF's step as a FlexSN core (x, v) -> (y, v), SpikingJelly's arithmetic."""
    reset_value = 0.0 if v_reset is None else v_reset

    def step(x, v):
        h = v + (x - (v - reset_value)) / tau if decay_input else v - (v - reset_value) / tau + x
        y = act(h - v_threshold if threshold_related else h)
        s = _surrogate.spike(h - v_threshold, surrogate_function)
        if detach_reset:
            s = s.detach()
        return y, (h - s * v_threshold if v_reset is None else s * v_reset + (1.0 - s) * h)

    return step


class LIAFNode(LIFNode):
    """LIAF: LIFNode with an analog output act(h) (see the module's docstring)."""

    _OPTIONS = LIFNode._OPTIONS | {"act", "threshold_related"}

    def __init__(self, act, threshold_related: bool, *args, **kwargs):
        super().__init__(*args, **kwargs)  # (no program yet: it needs act)
        for name, value in (("act", act), ("threshold_related", threshold_related)):
            self._store(name, self._checked_option(name, value))
        self._refresh_program()

    def _checked_option(self, name: str, value):
        if name == "act":
            if not callable(value):
                raise TypeError(f"act: expected a callable (the output's activation), got {type(value).__name__}")
            return value
        if name == "threshold_related":
            return check_flag(name, value)
        return super()._checked_option(name, value)

    def _make_handle(self) -> Optional[int]:
        act, threshold_related = getattr(self, "act", None), getattr(self, "threshold_related", None)
        if act is None or threshold_related is None:  # (LIFNode's constructor, before LIAF's options)
            return None
        self._kernel = FlexSN(_liaf_step(act, threshold_related, self.tau, self.decay_input, self.v_threshold,
                                         self.v_reset, self.surrogate_function, self.detach_reset),
                              num_inputs=1, num_states=1, num_outputs=1, strict=True)
        return self._kernel.handle

    def _params(self, x_seq: Tensor):
        return kernel_params(self, self._kernel, x_seq)

    def _replicate_for_data_parallel(self):
        replica = super()._replicate_for_data_parallel()
        replicate_kernel(self, replica, self._kernel)  # (act's tensors live in this module's tree, not the kernel's)
        return replica

    def _run(self, x_seq: Tensor, states: list, store_state_seqs: bool):
        if states[0] is None and self._v_default() != 0.0:  # (a traced program starts its states at 0)
            states = [torch.full(x_seq.shape[1:], self._v_default(), dtype=x_seq.dtype, device=x_seq.device)]
        return super()._run(x_seq, states, store_state_seqs)

    # The traced step closes over the options: a pickled module traces it again where it is loaded.
    def __getstate__(self):
        state = super().__getstate__()
        state["_modules"] = {name: m for name, m in state["_modules"].items() if name != "_kernel"}
        return state

    def extra_repr(self) -> str:
        return f"threshold_related={self.threshold_related}, " + super().extra_repr()
