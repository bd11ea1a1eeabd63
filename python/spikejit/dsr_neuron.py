"""DSRIFNode and DSRLIFNode: SpikingJelly's neurons for differentiation on spike representation
(Meng et al., CVPR 2022), with its constructor arguments, forward and gradients.

    node = spikejit.DSRIFNode(T=20)               # multi step only: x_seq [T, *S]
    y_seq = node(x_seq)                           # spikes of height v_threshold (learnable)

The forward is an IF (or LIF, v <- beta v + (1 - beta) x with beta = exp(-delta_t / tau)) that
fires v_threshold when v reaches alpha v_threshold and subtracts it (the LIF's output divided by
delta_t): the shipped neuron neurons/dsr.sj, one inference kernel over the T steps, with the
clamped threshold as its parameter. The backward is not backpropagation through the steps but
SpikingJelly's gradient of the spike rate: x's gradient is the rate of the output gradient where
the input's rate lies within (0, v_threshold) (LIF: (0, v_threshold tau / delta_t), over the
time-weighted rates), spread evenly over the T steps; the threshold's is the output gradient's
rate summed where the input's rate is above, times v_threshold_grad_scaling (LIF: and delta_t).
SpikingJelly runs the forward as a torch loop over the steps.
"""
import functools
import math

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .functional import run_neuron, shipped_handle
from ._kernel_calls import check_tensor
from .ops import check_positive_int

__all__ = ["DSRIFNode", "DSRLIFNode"]


@functools.lru_cache(maxsize=64)
def _weights_on(T: int, tau: float, delta_t: float, device: torch.device) -> Tensor:
    """SpikingJelly's weights of the LIF's rates, exp(-(T delta_t - t delta_t) / tau) for t = 1..T,
    on `device`: copied there once per set of options, not at every backward."""
    return torch.tensor([math.exp(-1 / tau * (delta_t * T - t * delta_t)) for t in range(1, T + 1)]).to(device)


def _time_weights(T: int, tau: float, delta_t: float, like: Tensor) -> Tensor:
    """The weights of the rates, [T, 1, ...] against `like`."""
    return _weights_on(T, tau, delta_t, like.device).view(T, *([1] * (like.dim() - 1)))


def _rate(seq: Tensor, weights) -> Tensor:
    """The mean over the steps, or the time-weighted mean (LIF)."""
    if weights is None:
        return seq.mean(0)
    return (weights * seq).sum(0) / weights.sum()


class _DSRFunction(torch.autograd.Function):
    """The neuron's kernel forward, SpikingJelly's rate gradient backward."""

    @staticmethod
    def forward(ctx, x_seq, v_threshold, handle, tau, delta_t, v_threshold_grad_scaling):
        """`tau`: the LIF's (its rates weighted over time), None for the IF."""
        ctx.save_for_backward(x_seq, v_threshold)
        ctx.lif, ctx.tau, ctx.delta_t, ctx.scaling = tau is not None, tau, delta_t, v_threshold_grad_scaling
        outputs, _, _ = run_neuron(handle, 1, 1, [x_seq], [None], [v_threshold], False)
        return outputs[0]

    @staticmethod
    @once_differentiable  # a rate gradient: asking for its derivative is autograd's clear error
    def backward(ctx, grad_output):
        x_seq, v_threshold = ctx.saved_tensors
        T = x_seq.shape[0]
        weights = _time_weights(T, ctx.tau, ctx.delta_t, x_seq) if ctx.lif else None
        input_rate = _rate(x_seq, weights)
        grad_rate = _rate(grad_output, weights) * T
        zero = torch.zeros((), dtype=grad_rate.dtype, device=grad_rate.device)
        if ctx.lif:
            bound = v_threshold / ctx.delta_t * ctx.tau
            passes = (input_rate > 0) & (input_rate < bound)
            input_grad = torch.where(passes, grad_rate / ctx.tau, zero)
            threshold_grad = torch.where(input_rate <= bound, zero, grad_rate).sum() * ctx.delta_t * ctx.scaling
        else:
            outside = (input_rate < 0) | (input_rate > v_threshold)
            input_grad = torch.where(outside, zero, grad_rate)
            threshold_grad = torch.where(input_rate <= v_threshold, zero, grad_rate).sum() * ctx.scaling
        grad_x = (input_grad.unsqueeze(0) / T).expand_as(x_seq)
        return grad_x, threshold_grad, None, None, None, None


def _float_at_least(name: str, value, low: float, strictly: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            value <= low if strictly else value < low):
        raise ValueError(f"{name}: expected a float {'>' if strictly else '>='} {low}, got {value!r}")
    return float(value)


class _DSRNode(nn.Module):
    """The options, the threshold (a Parameter, or a buffer outside the state dict, as in
    SpikingJelly) and the call of the DSR neurons."""

    def __init__(self, T: int, v_threshold: float, alpha: float, v_threshold_training: bool,
                 v_threshold_grad_scaling: float, v_threshold_lower_bound: float, step_mode: str):
        super().__init__()
        check_positive_int("T", T)
        if step_mode != "m":
            raise ValueError(f"step_mode: the DSR neurons run multi step only ('m'), got {step_mode!r}")
        self.v_threshold_lower_bound = _float_at_least("v_threshold_lower_bound", v_threshold_lower_bound, 0.0, True)
        threshold = torch.tensor(_float_at_least("v_threshold", v_threshold, self.v_threshold_lower_bound))
        alpha = _float_at_least("alpha", alpha, 0.0, True)
        if alpha > 1.0:
            raise ValueError(f"alpha: expected a float in (0, 1], got {alpha}")
        self.T, self.alpha, self.step_mode = T, alpha, step_mode
        self.v_threshold_grad_scaling = float(v_threshold_grad_scaling)
        if v_threshold_training:
            self.v_threshold = nn.Parameter(threshold)
        else:
            self.register_buffer("v_threshold", threshold, persistent=False)

    def reset(self) -> None:
        """Nothing to reset: every call starts from v = 0 (SpikingJelly's memory module has no state)."""

    def _constants(self) -> dict:
        """The shipped neuron's constants besides alpha."""
        raise NotImplementedError

    def _tau(self):
        """The LIF's tau, None for the IF."""
        return None

    def forward(self, x_seq: Tensor) -> Tensor:
        check_tensor("x_seq", x_seq)
        if x_seq.dim() < 1 or x_seq.shape[0] != self.T:
            raise ValueError(f"x_seq: expected [T, *S] with T = {self.T} (the neuron's T), got shape "
                             f"{list(x_seq.shape)}")
        constants = self._constants()
        handle = shipped_handle("dsr", dict(alpha=self.alpha, **constants))
        v_threshold = self.v_threshold.clamp(min=self.v_threshold_lower_bound)
        return _DSRFunction.apply(x_seq, v_threshold, handle, self._tau(), constants["delta_t"],
                                  self.v_threshold_grad_scaling)


class DSRIFNode(_DSRNode):
    """The DSR IF neuron (see the module's docstring)."""

    def __init__(self, T: int = 20, v_threshold: float = 6.0, alpha: float = 0.5, v_threshold_training: bool = True,
                 v_threshold_grad_scaling: float = 1.0, v_threshold_lower_bound: float = 0.01, step_mode="m"):
        super().__init__(T, v_threshold, alpha, v_threshold_training, v_threshold_grad_scaling,
                         v_threshold_lower_bound, step_mode)

    def _constants(self) -> dict:
        return dict(leaky=False, delta_t=1.0)

    def extra_repr(self) -> str:
        return f"T={self.T}, alpha={self.alpha}, vth_bound={self.v_threshold_lower_bound}"


class DSRLIFNode(_DSRNode):
    """The DSR LIF neuron (see the module's docstring)."""

    def __init__(self, T: int = 20, v_threshold: float = 1.0, tau: float = 2.0, delta_t: float = 0.05,
                 alpha: float = 0.3, v_threshold_training: bool = True, v_threshold_grad_scaling: float = 1.0,
                 v_threshold_lower_bound: float = 0.1, step_mode="m"):
        super().__init__(T, v_threshold, alpha, v_threshold_training, v_threshold_grad_scaling,
                         v_threshold_lower_bound, step_mode)
        self.tau = _float_at_least("tau", tau, 0.0, True)
        self.delta_t = _float_at_least("delta_t", delta_t, 0.0, True)

    def _constants(self) -> dict:
        beta = math.exp(-self.delta_t / self.tau)  # as SpikingJelly folds it, in float64
        return dict(leaky=True, beta=beta, one_minus_beta=1 - beta, delta_t=self.delta_t)

    def _tau(self):
        return self.tau

    def extra_repr(self) -> str:
        return (f"T={self.T}, tau={self.tau}, dt={self.delta_t}, alpha={self.alpha}, "
                f"vth_bound={self.v_threshold_lower_bound}")
