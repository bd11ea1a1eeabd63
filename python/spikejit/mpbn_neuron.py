"""MPBNLIFNode: SpikingJelly's LIF with membrane-potential batch normalization ("Membrane Potential
Batch Normalization for Spiking Neural Networks", ICCV 2023), with its threshold re-parameterization
and test-time adaptation ("Threshold Modulation for Online Test-Time Adaptation of Spiking Neural
Networks", 2025): its constructor arguments, parameters, state dict and behaviour.

    node = spikejit.MPBNLIFNode(out_channels=64, step_mode="m")   # after a Conv2d with 64 channels
    s_seq = node(x_seq)                          # x_seq [T, B, 64, H, W]
    node.eval(); node.re_parameterize_v_threshold()   # fold the batch norm into the thresholds

Each step charges v like LIFNode (h = v + (x - (v - v_reset)) / tau, or v - (v - v_reset) / tau + x
without decay_input), passes h through a batch norm over the channels (`vbn`, BatchNorm1d after
`out_features`, BatchNorm2d after `out_channels`; none with mpbn=False), fires at the threshold
(v_threshold; exp(a) per channel with learnable_vth; after re_parameterize_v_threshold the batch
norm folded into a threshold per channel, (v_threshold - beta) sqrt(sigma2 + eps) / gamma + mu)
and resets like LIFNode (a soft reset subtracts v_threshold). With normalize_residual, a neuron
that did not fire keeps (h - mu) / sqrt(sigma2 + eps) gamma + beta.

Two ways to run, chosen per call:
- a step that needs statistics over the batch (training with the batch norm; test-time adaptation:
  training after the fold, whose statistics follow each step's batch) is not one neuron's step,
  so these run as SpikingJelly runs them, a PyTorch loop over the steps (the same operators, the
  same results); the running statistics are updated as there;
- every other step is one neuron's: the T steps run as one kernel of the shipped neuron
  neurons/mpbn_lif.sj, with the batch norm of evaluation as an affine map per channel (scale =
  weight / sqrt(running_var + eps), shift = bias - running_mean scale: F.batch_norm's values to
  rounding) and the thresholds and the statistics of normalize_residual as parameters per channel.
  This is inference after training, the folded network, and training without a batch norm.
"""
import itertools
from typing import Optional, Union

import torch
from torch import Tensor, nn
import torch.nn.functional as F

from . import surrogate as _surrogate
from ._kernel_calls import check_module_tensor
from .functional import check_flag, run_neuron, shipped_handle
from .neuron import BaseNode, _check_float

__all__ = ["MPBNLIFNode"]


def _per_channel(value, x: Tensor) -> Tensor:
    """A float, a scalar tensor or one value per channel (dimension 1 of a step's input), over a
    step's neurons (a float is filled on x's device: no copy from the host)."""
    step_shape = x.shape[1:]
    if not isinstance(value, Tensor):
        return x.new_full((), value).expand(step_shape)
    value = value.to(dtype=x.dtype, device=x.device)
    if value.dim() == 1:
        value = value.view(1, -1, *([1] * (len(step_shape) - 2)))
    return value.expand(step_shape)


class MPBNLIFNode(BaseNode):
    """LIF with membrane-potential batch normalization (see the module's docstring)."""

    _SUBCLASS_OPTIONS = frozenset({"tau", "decay_input"})

    def __init__(self, tau: float = 2.0, decay_input: bool = False, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                 step_mode: str = "s", store_v_seq: bool = False, mpbn: bool = True,
                 out_features: Optional[int] = None, out_channels: Optional[int] = None,
                 learnable_vth: bool = False, bn_momentum: float = 0.1, bn_decay_momentum: float = 0.94,
                 bn_min_momentum: float = 0.005, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(v_threshold, v_reset, surrogate_function, detach_reset, step_mode, backend, store_v_seq,
                         checkpoint_every, tau=tau, decay_input=decay_input)
        if (out_features is None) == (out_channels is None):
            raise ValueError(f"out_features, out_channels: expected exactly one of them, got {out_features!r} and "
                             f"{out_channels!r}")
        features = out_channels if out_channels is not None else out_features
        if isinstance(features, bool) or not isinstance(features, int) or features < 1:
            name = "out_channels" if out_channels is not None else "out_features"
            raise ValueError(f"{name}: expected an int >= 1 (the channels), got {features!r}")
        if check_flag("mpbn", mpbn):
            self.vbn = nn.BatchNorm2d(features) if out_channels is not None else nn.BatchNorm1d(features)
        else:
            self.vbn = nn.Identity()
        self.register_buffer("mu", None)
        self.register_buffer("sigma2", None)
        self.gamma = self.beta = self.eps = None
        self.fold_bn = self.normalize_residual = self.running_stats = False
        self.bn_momentum = _check_float("bn_momentum", bn_momentum)
        self.bn_decay_momentum = _check_float("bn_decay_momentum", bn_decay_momentum)
        self.bn_min_momentum = _check_float("bn_min_momentum", bn_min_momentum)
        self.learnable_vth = check_flag("learnable_vth", learnable_vth)
        if self.learnable_vth:  # the threshold exp(a) stays positive
            self.a = nn.Parameter(torch.zeros(features))

    def _checked_option(self, name: str, value):
        if name == "v_threshold" and isinstance(value, Tensor):  # exp(a) after a fold of a learned one
            if value.dim() != 1:
                raise ValueError(f"v_threshold: expected a float or a 1-D tensor (one per channel), got shape "
                                 f"{list(value.shape)}")
            return value
        return super()._checked_option(name, value)

    def re_parameterize_v_threshold(self, normalize_residual: bool = False, running_stats: bool = False) -> None:
        """Folds the batch norm into a threshold per channel (its running statistics become mu and
        sigma2, its weight and bias gamma and beta); a learned threshold becomes v_threshold.
        With running_stats, training after the fold (test-time adaptation) moves mu and sigma2
        towards each step's batch statistics by bn_momentum, which decays by bn_decay_momentum
        down to bn_min_momentum; without, they are each step's batch statistics."""
        if isinstance(self.vbn, nn.Identity):
            return
        self.fold_bn = True
        if self.learnable_vth:
            self.v_threshold = torch.exp(self.a.detach())
            del self.a
            self.learnable_vth = False
        self.normalize_residual = check_flag("normalize_residual", normalize_residual)
        self.running_stats = check_flag("running_stats", running_stats)
        self.mu, self.sigma2 = self.vbn.running_mean, self.vbn.running_var
        self.gamma, self.beta, self.eps = self.vbn.weight, self.vbn.bias, self.vbn.eps
        self.vbn = nn.Identity()

    # -- the kernel of one neuron's step ------------------------------------------------------

    def _make_handle(self) -> int:
        return self._kernel_handle(batch_norm=False, normalize_residual=False)

    def _kernel_handle(self, batch_norm: bool, normalize_residual: bool) -> int:
        soft = self.v_reset is None
        return shipped_handle("mpbn_lif", dict(tau=self.tau, decay_input=self.decay_input,
                                               v_reset=0.0 if soft else self.v_reset, soft_reset=soft,
                                               detach_reset=self.detach_reset, batch_norm=batch_norm,
                                               normalize_residual=normalize_residual), self.surrogate_function)

    def _threshold(self, mu, sigma2):
        """The firing threshold: folded, exp(a), or v_threshold (SpikingJelly's expressions)."""
        if self.fold_bn and not self.learnable_vth:
            return (self.v_threshold - self.beta) * torch.sqrt(sigma2 + self.eps) / self.gamma + mu
        if self.learnable_vth:
            return torch.exp(self.a)
        return self.v_threshold

    def _check_channels(self, x_seq: Tensor) -> None:
        features = next((t.numel() for t in (getattr(self.vbn, "running_mean", None), self.mu,
                                             getattr(self, "a", None)) if isinstance(t, Tensor)), None)
        if features is not None and (x_seq.dim() < 3 or x_seq.shape[2] != features):
            name = "x_seq" if self.step_mode == "m" else "x"
            raise ValueError(f"{name}: expected steps of shape [B, {features}, ...] ({features} channels at "
                             f"dimension 1), got shape {list(x_seq.shape[1:])}")

    def _params(self, x_seq: Tensor):
        """scale, shift, threshold, reset_threshold, res_mu, res_sigma, res_gamma, res_beta."""
        bn = self.vbn
        if isinstance(bn, nn.Identity):
            scale, shift = 1.0, 0.0
        else:  # evaluation: the running statistics
            scale = 1 / torch.sqrt(bn.running_var + bn.eps)
            if bn.weight is not None:
                scale = scale * bn.weight
            shift = -bn.running_mean * scale if bn.bias is None else bn.bias - bn.running_mean * scale
        residual = (0.0, 1.0, 1.0, 0.0)
        if self.normalize_residual:
            residual = (self.mu, torch.sqrt(self.sigma2 + self.eps), self.gamma, self.beta)
        values = (scale, shift, self._threshold(self.mu, self.sigma2), self.v_threshold) + residual
        return [_per_channel(value, x_seq) for value in values]

    # -- the steps with statistics over the batch ---------------------------------------------

    def _needs_batch_statistics(self, x_seq: Tensor) -> bool:
        if not isinstance(self.vbn, nn.Identity) and (self.training or self.vbn.running_mean is None):
            return True
        return (self.fold_bn and not self.learnable_vth and self.training
                and not (x_seq.dim() == 3 and x_seq.shape[1] == 1))

    def _statistics(self) -> dict:
        """Copies of what the steps update, kept back after the call (SpikingJelly's order)."""
        bn = None if isinstance(self.vbn, nn.Identity) else self.vbn

        def copy(t):
            return None if t is None else t.clone()

        return {"running_mean": copy(getattr(bn, "running_mean", None)),
                "running_var": copy(getattr(bn, "running_var", None)),
                "num_batches_tracked": copy(getattr(bn, "num_batches_tracked", None)),
                "mu": self.mu, "sigma2": self.sigma2, "bn_momentum": self.bn_momentum}

    def _keep_statistics(self, stats: dict) -> None:
        if not isinstance(self.vbn, nn.Identity):
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                if getattr(self.vbn, name) is not None:
                    getattr(self.vbn, name).copy_(stats[name])
        elif self.fold_bn and not self.learnable_vth:
            self.mu, self.sigma2, self.bn_momentum = stats["mu"], stats["sigma2"], stats["bn_momentum"]

    def _step(self, x: Tensor, v: Tensor, stats: dict):
        """One step as SpikingJelly's: (spike, v)."""
        reset_value = 0.0 if self.v_reset is None else self.v_reset
        if self.decay_input:
            v = v + (x - (v - reset_value)) / self.tau
        else:
            v = v - (v - reset_value) / self.tau + x
        bn = self.vbn
        if not isinstance(bn, nn.Identity):
            factor = 0.0 if bn.momentum is None else bn.momentum
            if self.training and stats["num_batches_tracked"] is not None:
                stats["num_batches_tracked"].add_(1)
                if bn.momentum is None:
                    factor = 1.0 / float(stats["num_batches_tracked"])
            v = F.batch_norm(v, stats["running_mean"], stats["running_var"], bn.weight, bn.bias,
                             self.training or stats["running_mean"] is None, factor, bn.eps)
        mu, sigma2 = stats["mu"], stats["sigma2"]
        if self.fold_bn and not self.learnable_vth and self.training and not (v.dim() == 2 and v.shape[0] == 1):
            dims = 0 if v.dim() == 2 else (0, 2, 3)
            batch_mu = torch.mean(v, dim=dims).detach()
            batch_sigma2 = torch.var(v, dim=dims, unbiased=True).detach()
            if self.running_stats:
                momentum = stats["bn_momentum"]
                mu = mu.detach() * (1 - momentum) + batch_mu * momentum
                sigma2 = sigma2.detach() * (1 - momentum) + batch_sigma2 * momentum
                stats["bn_momentum"] = max(momentum * self.bn_decay_momentum, self.bn_min_momentum)
            else:
                mu, sigma2 = batch_mu, batch_sigma2
            stats["mu"], stats["sigma2"] = mu, sigma2
        feature_shape = (1, -1) if v.dim() == 2 else (1, -1, 1, 1)
        threshold = self._threshold(mu, sigma2)
        if self.fold_bn or self.learnable_vth:
            threshold = threshold.view(feature_shape)
        diff = v - threshold
        spike = _surrogate.spike(diff, self.surrogate_function)
        if self.normalize_residual:
            mask = diff <= 0
            sigma = torch.sqrt(sigma2 + self.eps).view(feature_shape).expand_as(mask)
            residual = ((v[mask] - mu.view(feature_shape).expand_as(mask)[mask]) / sigma[mask]
                        * self.gamma.view(feature_shape).expand_as(mask)[mask]
                        + self.beta.view(feature_shape).expand_as(mask)[mask])
            v = v.masked_scatter(mask, residual)
        reset_spike = spike.detach() if self.detach_reset else spike
        if self.v_reset is None:
            v = v - reset_spike * self.v_threshold
        else:
            v = reset_spike * self.v_reset + (1.0 - reset_spike) * v
        return spike, v

    def _run_steps(self, x_seq: Tensor, states: list, store_state_seqs: bool):
        v = states[0] if states[0] is not None else torch.full_like(x_seq[0], self._v_default())
        stats = self._statistics()
        spikes, potentials = [], []
        for x in x_seq:
            spike, v = self._step(x, v, stats)
            spikes.append(spike)
            potentials.append(v)
        if self.training:
            self._keep_statistics(stats)
        return [torch.stack(spikes)], [v], [torch.stack(potentials)] if store_state_seqs else None

    def _check_device(self, x_seq: Tensor) -> None:
        """Every parameter and buffer on x_seq's device (the steps mix them with x)."""
        for name, t in itertools.chain(self.named_parameters(), self.named_buffers()):
            check_module_tensor(name, t, x_seq)

    def _run(self, x_seq: Tensor, states: list, store_state_seqs: bool):
        self._check_device(x_seq)
        self._check_channels(x_seq)
        if self._needs_batch_statistics(x_seq):
            return self._run_steps(x_seq, states, store_state_seqs)
        handle = self._kernel_handle(not isinstance(self.vbn, nn.Identity), self.normalize_residual)
        return run_neuron(handle, 1, 1, [x_seq], states, self._params(x_seq), store_state_seqs,
                          self.checkpoint_every)

    def extra_repr(self) -> str:
        return (f"tau={self.tau}, decay_input={self.decay_input}, learnable_vth={self.learnable_vth}, "
                f"fold_bn={self.fold_bn}, " + super().extra_repr())
