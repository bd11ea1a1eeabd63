"""The derivative g'(x) of every surrogate, in PyTorch, keyed by the surrogate's snake_case name.

These are SpikingJelly's surrogate gradients (reference section 2.2). They give the backward of
the `spikejit::spike` op outside the fused kernels (eager cores, scans, gradcheck); the kernels
use the C++ definitions, and the tests check that both agree.
"""
import math

import torch


def _sigmoid(x, alpha):
    s = torch.sigmoid(alpha * x)
    return alpha * s * (1.0 - s)


def _atan(x, alpha):
    return (alpha / 2.0) / (1.0 + (math.pi / 2.0 * alpha * x) ** 2)


def _piecewise_quadratic(x, alpha):
    return torch.where(x.abs() <= 1.0 / alpha, alpha - alpha * alpha * x.abs(), torch.zeros_like(x))


def _piecewise_exp(x, alpha):
    return alpha / 2.0 * torch.exp(-alpha * x.abs())


def _soft_sign(x, alpha):
    return 1.0 / (2.0 * alpha * (1.0 / alpha + x.abs()) ** 2)


def _super_spike(x, alpha):
    return alpha / (x.abs() + 1.0) ** 2


def _nonzero_sign_log_abs(x, alpha):
    return 1.0 / (1.0 / alpha + x.abs())


def _erf(x, alpha):
    return alpha / math.sqrt(math.pi) * torch.exp(-((alpha * x) ** 2))


def _piecewise_leaky_relu(x, w, c):
    return torch.where(x.abs() < w, torch.full_like(x, 1.0 / (2.0 * w)), torch.full_like(x, c))


def _squarewave_fourier_series(x, n, T_period):
    omega = 2.0 * math.pi / T_period
    total = torch.zeros_like(x)
    for i in range(1, int(n)):
        total = total + torch.cos((2 * i - 1) * omega * x)
    return total * (4.0 / T_period)


def _s2nn(x, alpha, beta):
    s = torch.sigmoid(alpha * x)
    # x + 1 is clamped only where the branch is not taken, so no inf/nan leaks into where().
    return torch.where(x < 0, alpha * s * (1.0 - s), beta / (x.clamp(min=0.0) + 1.0))


def _q_pseudo_spike(x, alpha):
    return (1.0 + 2.0 / (alpha - 1.0) * x.abs()) ** (-alpha)


def _leaky_k_relu(x, leak, k):
    return torch.where(x >= 0, torch.full_like(x, k), torch.full_like(x, leak))


def _fake_numerical_gradient(x, alpha):
    inverse = 1.0 / x.abs()  # inf at 0, where the min gives alpha
    return torch.clamp(inverse, max=alpha)


def _log_tailed_relu(x, alpha):
    one = torch.ones_like(x)
    return torch.where(x > 1, 1.0 / x.clamp(min=1.0), torch.where(x <= 0, one * alpha, one))


def _deterministic_pass(x):
    return torch.ones_like(x)


def _rect(x, alpha):
    return torch.where(x.abs() < 0.5 / alpha, torch.full_like(x, alpha), torch.zeros_like(x))


SURROGATE_GRADIENTS = {
    "sigmoid": _sigmoid,
    "atan": _atan,
    "piecewise_quadratic": _piecewise_quadratic,
    "piecewise_exp": _piecewise_exp,
    "soft_sign": _soft_sign,
    "super_spike": _super_spike,
    "nonzero_sign_log_abs": _nonzero_sign_log_abs,
    "erf": _erf,
    "piecewise_leaky_relu": _piecewise_leaky_relu,
    "squarewave_fourier_series": _squarewave_fourier_series,
    "s2nn": _s2nn,
    "q_pseudo_spike": _q_pseudo_spike,
    "leaky_k_relu": _leaky_k_relu,
    "fake_numerical_gradient": _fake_numerical_gradient,
    "log_tailed_relu": _log_tailed_relu,
    "deterministic_pass": _deterministic_pass,
    "rect": _rect,
}


def surrogate_gradient(x: torch.Tensor, name: str, params) -> torch.Tensor:
    """g'(x) of surrogate `name` with its full parameter list."""
    return SURROGATE_GRADIENTS[name](x, *params)
