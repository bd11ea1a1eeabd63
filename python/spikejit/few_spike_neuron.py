"""FewSpikeNode, OutlierAwareThresholdNode and HGNode: SpikingJelly's few-spikes neurons
(FS-neurons, for ANN-to-SNN conversion), with its constructor arguments and behaviour, on one
fused kernel.

    table = spikejit.FewSpikeTable(theta=[1.0, 0.5], h=[1.0, 0.5], d=[1.0, 0.5])
    fs = spikejit.FewSpikeNode(table)            # single step: x -> sum_k d[k] z[k]
    fs.step_mode = "m"                           # x_seq [K, *S] -> the K weighted spikes

The potential starts at the gate (x, or the sum of x_seq over its K steps); at step k it fires
z = spike(v - theta[k]), emits d[k] z and loses h[k] z. The K steps run as the shipped neuron
neurons/few_spike.sj, whose inputs are the table's rows: the same for every neuron (FewSpikeNode,
read in place through a stride of 0), or per neuron (OutlierAwareThresholdNode: the outlier
table where |gate| > split_threshold, on the magnitude, the sign put back; HGNode: the table of
the gate's region). SpikingJelly runs the K steps as a torch loop. A table is spikejit's
FewSpikeTable or SpikingJelly's (anything with 1-D theta, h and d of one length K).
"""
import math
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from .functional import run_neuron, shipped_handle
from ._kernel_calls import check_tensor
from . import surrogate as _surrogate

__all__ = ["FewSpikeTable", "FewSpikeNode", "OutlierAwareThresholdNode", "HGNode"]

STEP_MODES = ("s", "m")


def _table_row(name: str, value, may_be_empty: bool = False) -> Tensor:
    """A table row as a 1-D floating tensor of finite values (SpikingJelly's checks)."""
    row = torch.as_tensor(value)
    if row.dim() != 1 or (row.numel() == 0 and not may_be_empty):
        raise ValueError(f"{name}: expected a non-empty 1-D tensor or sequence, got shape {list(row.shape)}")
    if torch.is_complex(row):
        raise TypeError(f"{name}: expected real values, got {row.dtype}")
    if not torch.is_floating_point(row):
        row = row.to(torch.get_default_dtype())
    if not torch.isfinite(row).all():
        raise ValueError(f"{name}: expected finite values, got {row.tolist()}")
    return row.detach().clone()


class FewSpikeTable:
    """The K steps of a few-spikes neuron: thresholds theta, reset amounts h, output weights d."""

    def __init__(self, theta, h, d):
        self.theta, self.h, self.d = _table_row("theta", theta), _table_row("h", h), _table_row("d", d)
        if not self.theta.shape == self.h.shape == self.d.shape:
            raise ValueError(f"theta, h, d: expected one length, got {self.theta.numel()}, {self.h.numel()}, "
                             f"{self.d.numel()}")

    @property
    def K(self) -> int:
        return self.theta.numel()


def _rows_of(name: str, table, K: Optional[int] = None) -> Tensor:
    """[3, K]: theta, h, d of a FewSpikeTable (spikejit's or SpikingJelly's)."""
    if not all(hasattr(table, row) for row in ("theta", "h", "d")):
        raise TypeError(f"{name}: expected a FewSpikeTable, got {type(table).__name__}")
    rows = FewSpikeTable(table.theta, table.h, table.d)
    if K is not None and rows.K != K:
        raise ValueError(f"{name}: expected a table of K = {K} steps, got {rows.K}")
    return torch.stack([rows.theta, rows.h, rows.d])


class FewSpikeNode(nn.Module):
    """K table steps from the gate (see the module's docstring). Buffers theta, h, d: [K]."""

    def __init__(self, table, surrogate_function=None, step_mode: str = "s"):
        super().__init__()
        theta, h, d = _rows_of("table", table)
        self.register_buffer("theta", theta)
        self.register_buffer("h", h)
        self.register_buffer("d", d)
        self.surrogate_function = surrogate_function
        self.step_mode = step_mode

    def __setattr__(self, name, value):
        if name == "step_mode" and value not in STEP_MODES:
            raise ValueError(f"step_mode: expected 's' or 'm', got {value!r}")
        if name == "surrogate_function":
            _surrogate.resolve(value)
        super().__setattr__(name, value)

    @property
    def K(self) -> int:
        return self.theta.numel()

    def _rows(self, gate: Tensor):
        """(v0, [theta, h, d] as [K, *S] sequences, sign): the potential to start from, the
        table's rows for every neuron, the sign to put back on the output (None: none)."""
        return gate, [row.to(gate).view(-1, *([1] * gate.dim())).expand(-1, *gate.shape)
                      for row in (self.theta, self.h, self.d)], None

    def _weighted_spikes(self, gate: Tensor) -> Tensor:
        """[K, *S]: d[k] z[k] of every step."""
        v0, rows, sign = self._rows(gate)
        handle = shipped_handle("few_spike", {}, self.surrogate_function)
        outputs, _, _ = run_neuron(handle, 1, 1, rows, [v0], [], False)
        return outputs[0] if sign is None else outputs[0] * sign.unsqueeze(0)

    def forward(self, x: Tensor) -> Tensor:
        name = "x_seq" if self.step_mode == "m" else "x"
        check_tensor(name, x)
        if not torch.is_floating_point(x):
            raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
        if self.step_mode == "s":
            y = torch.zeros_like(x)
            for weighted in self._weighted_spikes(x):  # summed in SpikingJelly's order
                y = y + weighted
            return y
        if x.dim() < 1 or x.shape[0] != self.K:
            raise ValueError(f"x_seq: expected [K, *S] with K = {self.K} (the table's steps), got shape "
                             f"{list(x.shape)}")
        return self._weighted_spikes(x.sum(dim=0))

    def extra_repr(self) -> str:
        return f"K={self.K}, step_mode={self.step_mode}"


class OutlierAwareThresholdNode(FewSpikeNode):
    """A FewSpikeNode on |gate| (clamped to clamp_value first, unless None) with `outlier_table`
    where |gate| > split_threshold; the output takes the gate's sign."""

    def __init__(self, table, outlier_table, split_threshold: float, clamp_value: Optional[float] = None,
                 surrogate_function=None, step_mode: str = "s"):
        super().__init__(table, surrogate_function, step_mode)
        theta, h, d = _rows_of("outlier_table", outlier_table, self.K).to(self.theta)
        split_threshold = float(split_threshold)
        if not math.isfinite(split_threshold) or split_threshold < 0:
            raise ValueError(f"split_threshold: expected a finite value >= 0, got {split_threshold}")
        if clamp_value is not None:
            clamp_value = float(clamp_value)
            if not math.isfinite(clamp_value) or clamp_value <= 0 or clamp_value < split_threshold:
                raise ValueError(f"clamp_value: expected None or a finite value > 0 and >= split_threshold "
                                 f"({split_threshold}), got {clamp_value}")
        self.register_buffer("outlier_theta", theta)
        self.register_buffer("outlier_h", h)
        self.register_buffer("outlier_d", d)
        self.split_threshold = split_threshold
        self.clamp_value = clamp_value

    def _rows(self, gate: Tensor):
        if self.clamp_value is not None:
            gate = gate.clamp(min=-self.clamp_value, max=self.clamp_value)
        magnitude = gate.abs()
        inlier = magnitude <= self.split_threshold
        shape = (-1,) + (1,) * gate.dim()
        rows = [torch.where(inlier, row.to(gate).view(shape), outlier.to(gate).view(shape))
                for row, outlier in ((self.theta, self.outlier_theta), (self.h, self.outlier_h),
                                     (self.d, self.outlier_d))]
        return magnitude, rows, torch.sign(gate).detach()

    def extra_repr(self) -> str:
        return super().extra_repr() + f", split_threshold={self.split_threshold}, clamp_value={self.clamp_value}"


class HGNode(FewSpikeNode):
    """A FewSpikeNode whose table is picked per neuron by the gate's region: tables[i] for gates
    in [gate_thresholds[i - 1], gate_thresholds[i]) (torch.bucketize), len(tables) - 1 strictly
    increasing thresholds."""

    def __init__(self, tables: Sequence, gate_thresholds, surrogate_function=None, step_mode: str = "s"):
        if len(tables) == 0:
            raise ValueError("tables: expected at least one FewSpikeTable, got none")
        regions = [_rows_of("tables[0]", tables[0])]
        regions += [_rows_of(f"tables[{i}]", t, regions[0].shape[1]) for i, t in enumerate(tables[1:], start=1)]
        thresholds = _table_row("gate_thresholds", gate_thresholds, may_be_empty=True)
        if thresholds.numel() != len(tables) - 1:
            raise ValueError(f"gate_thresholds: expected len(tables) - 1 = {len(tables) - 1} values, got "
                             f"{thresholds.numel()}")
        if thresholds.numel() > 1 and not torch.all(thresholds[1:] > thresholds[:-1]):
            raise ValueError(f"gate_thresholds: expected strictly increasing values, got {thresholds.tolist()}")
        nn.Module.__init__(self)  # its buffers are SpikingJelly's: the regions' tables, no theta, h, d
        self.surrogate_function = surrogate_function
        self.step_mode = step_mode
        first = regions[0]
        stacked = torch.stack(regions).to(first)  # [R, 3, K]
        self.register_buffer("region_theta", stacked[:, 0])
        self.register_buffer("region_h", stacked[:, 1])
        self.register_buffer("region_d", stacked[:, 2])
        self.register_buffer("gate_thresholds", thresholds.to(first))

    @property
    def K(self) -> int:
        return self.region_theta.shape[1]

    def _rows(self, gate: Tensor):
        region = torch.bucketize(gate.detach(), self.gate_thresholds.to(gate))
        rows = [table.to(gate)[region].movedim(-1, 0) for table in (self.region_theta, self.region_h, self.region_d)]
        return gate, rows, None

    def extra_repr(self) -> str:
        return super().extra_repr() + f", regions={self.region_theta.shape[0]}, gate_thresholds={self.gate_thresholds}"
