"""ActivationAwareIFNode, HalfThresholdIFNode and STBIFNode: SpikingJelly's IF neurons for
ANN-to-SNN conversion, with its constructor arguments and behaviour, on the fused kernels.

    node = spikejit.ActivationAwareIFNode(v_threshold=torch.rand(64) + 0.5, channel_dim=1, step_mode="m")
    s_seq = node(x_seq)                      # x_seq [T, B, 64, H, W]: one threshold per channel
    stbif = spikejit.STBIFNode(q_threshold=0.1, level=16, sym=True, step_mode="m")
    y_seq = stbif(x_seq)                     # signed multiples of q_threshold

ActivationAwareIFNode is IF with a threshold and an offset that are scalars or one value per
channel (`channel_dim` of a step's input; buffers `v_threshold`, `v_offset`): h = v + x fires
when h + offset >= threshold, and a soft reset (v_reset=None, the default) subtracts the
neuron's threshold. It trains with its surrogate like the other neurons; SpikingJelly's kernels
run it for inference only (a per-step torch loop otherwise).

HalfThresholdIFNode is IFNode with a soft reset whose potential starts (and resets) at
v_threshold / 2, which halves the conversion's rounding error; it runs on IF's built-in kernels.

STBIFNode is SpikeZIP's signed, bounded IF: q (0.5 at first) integrates x / q_threshold, emits
+1 when q >= 1 while the count acc_q is below pos_max and -1 when q < 0 while acc_q is above
neg_min; the output is that times q_threshold, and `accumulated` is acc_q q_threshold. It is
inference only: its output does not require a gradient, as SpikingJelly's does not. Its
q_threshold, pos_max and neg_min are buffers passed to the kernels at each call, so changing them
compiles nothing.

The other two are the shipped neurons neurons/activation_aware_if.sj and stbif.sj.
"""
from typing import Optional, Union

import torch
from torch import Tensor

from .functional import check_flag, run_neuron, shipped_handle
from .neuron import BACKENDS, BaseNode, IFNode, initial_state
from ._kernel_calls import check_tensor, scalar_param
from ._stateful_module import StatefulModule

__all__ = ["ActivationAwareIFNode", "HalfThresholdIFNode", "STBIFNode"]


def _scalar_or_vector(name: str, value, positive: bool) -> Tensor:
    """A threshold or an offset as the module keeps it: a float tensor, scalar or 1-D, finite
    (and > 0 when `positive`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Tensor)):
        raise TypeError(f"{name}: expected a float or a tensor, got {type(value).__name__}")
    tensor = torch.as_tensor(value).detach().clone()
    if tensor.dim() > 1:
        raise ValueError(f"{name}: expected a scalar or a 1-D tensor (one value per channel), got shape "
                         f"{list(tensor.shape)}")
    if not torch.is_floating_point(tensor):
        tensor = tensor.float()
    if not bool(torch.isfinite(tensor).all()) or (positive and not bool((tensor > 0).all())):
        raise ValueError(f"{name}: expected {'positive ' if positive else ''}finite values, got {tensor.tolist()}")
    return tensor


class ActivationAwareIFNode(BaseNode):
    """IF with a scalar or per-channel threshold and offset (see the module's docstring)."""

    _OPTIONS = frozenset({"v_reset", "detach_reset", "surrogate_function"})
    _SUBCLASS_OPTIONS = frozenset()
    _TENSOR_OPTIONS = {"v_threshold": True, "v_offset": False}  # name: whether its values must be > 0

    def __init__(self, v_threshold: Union[float, Tensor] = 1.0, v_offset: Union[float, Tensor] = 0.0,
                 channel_dim: int = -1, v_reset: Optional[float] = None, surrogate_function=None,
                 detach_reset: bool = False, step_mode: str = "s", store_v_seq: bool = False,
                 backend: str = "spikejit", checkpoint_every: Union[int, str] = "auto"):
        if isinstance(channel_dim, bool) or not isinstance(channel_dim, int):
            raise TypeError(f"channel_dim: expected an int, got {type(channel_dim).__name__}")
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every)
        self.v_offset = v_offset
        self.channel_dim = channel_dim

    def _checked_option(self, name: str, value):
        if name in self._TENSOR_OPTIONS:
            return _scalar_or_vector(name, value, self._TENSOR_OPTIONS[name])
        return super()._checked_option(name, value)

    def _set_attribute(self, name, value):
        if name in self._TENSOR_OPTIONS:  # a buffer: it follows .to() and is in the state dict
            self.register_buffer(name, self._checked_option(name, value))
        else:
            super()._set_attribute(name, value)

    def _make_handle(self) -> int:
        soft = self.v_reset is None
        return shipped_handle("activation_aware_if", dict(v_reset=0.0 if soft else self.v_reset, soft_reset=soft,
                                                          detach_reset=self.detach_reset), self.surrogate_function)

    def _per_neuron(self, name: str, x_seq: Tensor) -> Tensor:
        """A threshold or an offset over a step's neurons: a scalar everywhere, a vector along
        channel_dim (as SpikingJelly broadcasts it), expanded without a copy."""
        value = getattr(self, name).to(device=x_seq.device, dtype=x_seq.dtype)
        step_shape = x_seq.shape[1:]
        if value.dim() == 1:
            dim = self.channel_dim + len(step_shape) if self.channel_dim < 0 else self.channel_dim
            if not 0 <= dim < len(step_shape):
                raise ValueError(f"channel_dim: expected a dimension of a step's input of shape {list(step_shape)}, "
                                 f"got {self.channel_dim}")
            if value.numel() != step_shape[dim]:
                raise ValueError(f"{name}: expected {step_shape[dim]} values (the channels of dimension {dim} of a "
                                 f"step's input of shape {list(step_shape)}), got {value.numel()}")
            shape = [1] * len(step_shape)
            shape[dim] = value.numel()
            value = value.view(shape)
        return value.expand(step_shape)

    def _params(self, x_seq: Tensor):
        return [self._per_neuron("v_threshold", x_seq), self._per_neuron("v_offset", x_seq)]

    def extra_repr(self) -> str:
        return (f"v_threshold_shape={tuple(self.v_threshold.shape)}, v_offset_shape={tuple(self.v_offset.shape)}, "
                f"channel_dim={self.channel_dim}, v_reset={self.v_reset}, detach_reset={self.detach_reset}, "
                f"step_mode={self.step_mode}, store_v_seq={self.store_v_seq}")


class HalfThresholdIFNode(IFNode):
    """IF with a soft reset, starting at v_threshold / 2 (see the module's docstring)."""

    def __init__(self, v_threshold: float = 1.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, None, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every)

    def _checked_option(self, name: str, value):
        if name == "v_reset" and value is not None:
            raise ValueError(f"v_reset: HalfThresholdIFNode always resets softly, so expected None, got {value!r}")
        value = super()._checked_option(name, value)
        if name == "v_threshold" and not (value > 0 and value != float("inf")):
            raise ValueError(f"v_threshold: expected a finite float > 0, got {value}")
        return value

    def _v_default(self) -> float:
        return self.v_threshold / 2.0

    def _initial_states(self, x_seq: Tensor) -> list:
        # (IF's program starts at 0: v_threshold / 2 is passed as a state tensor)
        return [initial_state(self, self.v, "v", 0.0, x_seq)]


class STBIFNode(StatefulModule):
    """SpikeZIP's signed, bounded IF, inference only (see the module's docstring)."""

    _STATE_NAMES = frozenset({"q", "acc_q", "cur_output"})

    def __init__(self, q_threshold, level: int, sym: bool = False, pos_max=None, neg_min=None, step_mode: str = "s",
                 backend: str = "spikejit"):
        super().__init__()
        if isinstance(level, bool) or not isinstance(level, int) or level < 2:
            raise ValueError(f"level: expected an int >= 2 (the quantizer's levels), got {level!r}")
        if step_mode not in ("s", "m"):
            raise ValueError(f"step_mode: expected 's' or 'm', got {step_mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        self.level = level
        self.sym = check_flag("sym", sym)
        default_max, default_min = (level // 2 - 1, -level // 2) if sym else (level - 1, 0)
        self.register_buffer("q_threshold", self._checked_scalar("q_threshold", q_threshold))
        self.register_buffer("pos_max", self._checked_scalar("pos_max", default_max if pos_max is None else pos_max))
        self.register_buffer("neg_min", self._checked_scalar("neg_min", default_min if neg_min is None else neg_min))
        self.step_mode = step_mode
        self.backend = backend
        self.q = self.acc_q = self.cur_output = None
        self._program_handle = shipped_handle("stbif", {})

    @staticmethod
    def _checked_scalar(name: str, value) -> Tensor:
        if isinstance(value, bool) or not isinstance(value, (int, float, Tensor)):
            raise TypeError(f"{name}: expected a number or a one-element tensor, got {type(value).__name__}")
        tensor = torch.as_tensor(value).detach().clone().float()
        if tensor.numel() != 1:
            raise ValueError(f"{name}: expected one value, got shape {list(tensor.shape)}")
        return tensor.reshape(())

    @classmethod
    def from_quantizer(cls, quantizer) -> "STBIFNode":
        """The node of a trained quantizer with attributes s (the step), sym, pos_max, neg_min and
        optionally level, as SpikingJelly's."""
        pos_max, neg_min = quantizer.pos_max, quantizer.neg_min
        default_level = int(torch.as_tensor(pos_max).item()) - int(torch.as_tensor(neg_min).item()) + 1
        level = int(getattr(quantizer, "level", default_level))
        return cls(quantizer.s, level=level, sym=bool(quantizer.sym), pos_max=pos_max, neg_min=neg_min)

    def reset(self) -> None:
        """Forgets the state: q, acc_q and cur_output back to None (q starts at 0.5 again)."""
        self.q = self.acc_q = self.cur_output = None

    @property
    def accumulated(self) -> Tensor:
        """The output so far, acc_q q_threshold."""
        if self.acc_q is None:
            raise RuntimeError("STBIFNode has no accumulated state before forward")
        return self.acc_q * self.q_threshold.to(dtype=self.acc_q.dtype)

    def _run(self, x_seq: Tensor) -> Tensor:
        check_tensor("x", x_seq)
        states = [self.q, self.acc_q, self.cur_output]
        if not (isinstance(self.q, Tensor) and self.q.shape == x_seq.shape[1:]):
            states = [None, None, None]  # a first call, or inputs of another shape: start again
        states = [None if s is None else s.to(device=x_seq.device, dtype=x_seq.dtype) for s in states]
        params = [scalar_param(getattr(self, name).to(x_seq.device), x_seq.dtype)
                  for name in ("q_threshold", "pos_max", "neg_min")]
        with torch.no_grad():
            outputs, finals, _ = run_neuron(self._program_handle, 1, 3, [x_seq], states, params, False)
        self.q, self.acc_q, self.cur_output = finals
        return outputs[0]

    def forward(self, x: Tensor) -> Tensor:
        if self.step_mode == "m":
            return self._run(x)
        if self.step_mode == "s":
            check_tensor("x", x)
            return self._run(x.unsqueeze(0))[0]
        raise ValueError(f"step_mode: expected 's' or 'm', got {self.step_mode!r}")

    def extra_repr(self) -> str:
        return f"level={self.level}, sym={self.sym}, step_mode={self.step_mode}"
