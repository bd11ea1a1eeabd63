"""PSN, MaskedPSN and SlidingPSN: SpikingJelly's parallel spiking neurons (Fang et al., NeurIPS
2023), with its constructor arguments, parameters, initialisation and behaviour.

    psn = spikejit.PSN(T=8)                          # H = W X + b for all T steps at once
    s_seq = psn(x_seq)                                # [T, *S] -> [T, *S] spikes
    sliding = spikejit.SlidingPSN(k=2, step_mode="m")  # W: the last k inputs, the same for every t

They have no reset and no recurrence: the potentials of all T steps are one matrix product over
time, H = W X + b with W of [T, T] (PSN: learned; MaskedPSN: learned, masked to the last k steps
as `lambda_` grows to 1; SlidingPSN: k learned weights, shifted along the diagonal), and the
spikes are spike(H) with the surrogate's gradient. The product is PyTorch's (a GEMM, on the
tensor cores of a GPU), the spikes are spikejit's spike op (one fused elementwise kernel, no
graph break under torch.compile). The products are computed as SpikingJelly computes them, so
the spikes are the same bits.

Multi-step mode runs [T, *S]; MaskedPSN (with lambda_ >= 1) and SlidingPSN also run one step at
a time ("s", their default, as in SpikingJelly), keeping the last k inputs in `queue` until
reset(). PSN has no reset, like SpikingJelly's.
"""
import math

import torch
from torch import Tensor, nn

from . import surrogate as _surrogate
from ._kernel_calls import MOVE_THE_MODULE
from ._stateful_module import StatefulModule
from .ops import check_positive_int, check_tensor

__all__ = ["PSN", "MaskedPSN", "SlidingPSN"]

STEP_MODES = ("s", "m")


def _checked_input(name: str, x, weight: Tensor, min_dim: int) -> Tensor:
    """x as a tensor of weight's dtype and device with at least min_dim dimensions."""
    check_tensor(name, x)
    if x.dtype != weight.dtype:
        raise TypeError(f"{name}: expected dtype {weight.dtype} (the neuron's parameters; .to() the neuron), "
                        f"got {x.dtype}")
    if x.device != weight.device:
        raise ValueError(f"{name}: expected a tensor on {weight.device} (the neuron's parameters), got {x.device} "
                         f"{MOVE_THE_MODULE}")
    if x.dim() < min_dim:
        raise ValueError(f"{name}: expected at least {min_dim} dimensions, got shape {list(x.shape)}")
    return x


def _checked_sequence(x_seq, weight: Tensor, T: int) -> Tensor:
    x_seq = _checked_input("x_seq", x_seq, weight, 2)
    if x_seq.shape[0] != T:
        raise ValueError(f"x_seq: expected [T, N, *] with T = {T} (the neuron's T), got shape {list(x_seq.shape)}")
    return x_seq


def _spikes(h: Tensor, surrogate_function) -> Tensor:
    return _surrogate.spike(h, surrogate_function)


def _kaiming_weight(shape) -> Tensor:
    weight = torch.empty(shape)
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    return weight


class PSN(nn.Module):
    """H = W X + b over the T steps (W: [T, T], b: [T, 1], both learned), S = spike(H).
    Multi-step only; x_seq is [T, N, *]."""

    def __init__(self, T: int, surrogate_function=_surrogate.ATan()):
        super().__init__()
        self.T = check_positive_int("T", T)
        _surrogate.resolve(surrogate_function)  # a clear error now rather than at the first call
        self.surrogate_function = surrogate_function
        self.step_mode = "m"
        self.weight = nn.Parameter(_kaiming_weight([T, T]))
        self.bias = nn.Parameter(torch.full([T, 1], -1.0))

    def forward(self, x_seq: Tensor) -> Tensor:
        x_seq = _checked_sequence(x_seq, self.weight, self.T)
        h_seq = torch.addmm(self.bias, self.weight, x_seq.flatten(1))
        return _spikes(h_seq, self.surrogate_function).view(x_seq.shape)

    def extra_repr(self) -> str:
        return f"T={self.T}"


class _QueuedPSN(StatefulModule):
    """The step modes and the queue of the last k inputs of the PSNs that also run step by step."""

    _STATE_NAMES = frozenset({"queue"})

    def __init__(self, k: int, surrogate_function, step_mode: str):
        super().__init__()
        self.k = check_positive_int("k", k)
        _surrogate.resolve(surrogate_function)
        self.surrogate_function = surrogate_function
        self.step_mode = step_mode
        self.queue = []

    def _set_attribute(self, name, value):
        if name == "step_mode" and value not in STEP_MODES:
            raise ValueError(f"step_mode: expected 's' or 'm', got {value!r}")
        super()._set_attribute(name, value)

    def reset(self) -> None:
        self.queue = []

    def _queued(self, x: Tensor) -> list:
        """The queue with x (flattened) appended, its oldest input dropped beyond k."""
        queue = self.queue + [x.flatten()]
        return queue[-self.k:]

    def forward(self, x: Tensor) -> Tensor:
        return self.multi_step_forward(x) if self.step_mode == "m" else self.single_step_forward(x)

    def extra_repr(self) -> str:
        return f"k={self.k}, step_mode={self.step_mode!r}"


class MaskedPSN(_QueuedPSN):
    """H = (W * M_k(lambda_)) X + b, S = spike(H): W [T, T] and b [T, 1] learned; M_k(lambda_) =
    lambda_ * M_k + (1 - lambda_) * J, where M_k keeps the last k steps (M_k[i][j] = 1 for
    j <= i <= j + k - 1) and J is all ones. Set `node.lambda_ = ...` during training to move
    from the full matrix (0) to the masked one (1). Step by step only with lambda_ >= 1, for at
    most T steps between resets."""

    _STATE_NAMES = _QueuedPSN._STATE_NAMES | {"time_step"}

    def __init__(self, k: int, T: int, lambda_init: float = 0.0, surrogate_function=_surrogate.ATan(),
                 step_mode: str = "s"):
        super().__init__(k, surrogate_function, step_mode)
        self.T = check_positive_int("T", T)
        self.register_buffer("_lambda_", torch.as_tensor(float(lambda_init)))
        self.weight = nn.Parameter(_kaiming_weight([T, T]))
        self.bias = nn.Parameter(torch.full([T, 1], -1.0))
        ones = torch.ones([T, T])
        self.register_buffer("mask0", torch.tril(ones) * torch.triu(ones, -(self.k - 1)))
        self.register_buffer("mask1", ones)
        self.time_step = 0

    def reset(self) -> None:
        super().reset()
        self.time_step = 0

    @property
    def lambda_(self) -> Tensor:
        return self._lambda_

    @lambda_.setter
    def lambda_(self, value: float) -> None:
        self._lambda_.fill_(value)

    def masked_weight(self) -> Tensor:
        # lambda_ above 1 counts as 1. At 1 the blend is exactly mask0 (masks hold 0 and 1), so
        # clamping keeps SpikingJelly's values without a branch on a tensor (torch.compile).
        lam = torch.clamp(self._lambda_, max=1.0)
        return (lam * self.mask0 + (1.0 - lam) * self.mask1) * self.weight

    def multi_step_forward(self, x_seq: Tensor) -> Tensor:
        x_seq = _checked_sequence(x_seq, self.weight, self.T)
        h_seq = torch.addmm(self.bias, self.masked_weight(), x_seq.flatten(1))
        return _spikes(h_seq, self.surrogate_function).view(x_seq.shape)

    def single_step_forward(self, x: Tensor) -> Tensor:
        x = _checked_input("x", x, self.weight, 1)
        if self.lambda_ < 1.0:
            raise ValueError(f"MaskedPSN runs step by step only once lambda_ >= 1 (the mask keeps the last "
                             f"{self.k} steps); lambda_ is {float(self.lambda_)}: use step_mode 'm'")
        t = self.time_step
        if t >= self.T:
            raise OverflowError(f"MaskedPSN(T={self.T}) has run {t} steps since its last reset(); "
                                f"step {t + 1} is beyond T")
        queue = self._queued(x)
        weight = self.masked_weight()[t, t + 1 - len(queue):t + 1]
        h = torch.sum(weight.unsqueeze(-1) * torch.stack(queue), 0)
        spike = _spikes(h + self.bias[t], self.surrogate_function)
        self.queue, self.time_step = queue, t + 1
        return spike.view(x.shape)

    def extra_repr(self) -> str:
        return f"T={self.T}, lambda_={float(self._lambda_)}, " + super().extra_repr()


class SlidingPSN(_QueuedPSN):
    """H[t] = sum_i W_i X[t - k + 1 + i] + b, S = spike(H): k learned weights W (initialised to
    (..., 1/4, 1/2, 1) with exp_init, else Kaiming uniform) and a learned scalar b (-1), the
    same for every step; any T."""

    def __init__(self, k: int, exp_init: bool = True, surrogate_function=_surrogate.ATan(),
                 step_mode: str = "s"):
        super().__init__(k, surrogate_function, step_mode)
        if exp_init:
            weight = torch.pow(2.0, torch.arange(1 - self.k, 1, dtype=torch.float32))
        else:
            weight = _kaiming_weight([1, self.k])[0]
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(torch.as_tensor(-1.0))

    def gen_gemm_weight(self, T: int) -> Tensor:
        """The [T, T] matrix of the multi-step product: row i holds W's last min(i + 1, k)
        weights, ending on the diagonal."""
        rows = torch.arange(T, device=self.weight.device).unsqueeze(1)
        lag = rows - torch.arange(T, device=self.weight.device)  # i - j
        taken = (lag >= 0) & (lag < self.k)
        return torch.where(taken, self.weight[(self.k - 1 - lag).clamp(0, self.k - 1)], 0.0)

    def multi_step_forward(self, x_seq: Tensor) -> Tensor:
        x_seq = _checked_input("x_seq", x_seq, self.weight, 2)
        h_seq = torch.addmm(self.bias, self.gen_gemm_weight(x_seq.shape[0]), x_seq.flatten(1))
        return _spikes(h_seq, self.surrogate_function).view(x_seq.shape)

    def single_step_forward(self, x: Tensor) -> Tensor:
        x = _checked_input("x", x, self.weight, 1)
        queue = self._queued(x)
        weight = self.weight[self.k - len(queue):].unsqueeze(-1)
        h = torch.sum(weight * torch.stack(queue), 0)
        spike = _spikes(h + self.bias, self.surrogate_function)
        self.queue = queue
        return spike.view(x.shape)
