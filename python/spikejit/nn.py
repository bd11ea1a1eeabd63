"""Linear and Conv2d layers that save the spikes they receive packed, 1 bit each, for their own
backward.

A layer after a spiking neuron keeps its input for the weight gradient: a float32 spike tensor
costs 32 bits a spike, and in a deep SNN trained with BPTT these inputs are a large part of the
peak memory. These layers compute the same forward and the same gradients, bit for bit, as
nn.Linear / nn.Conv2d, but save `bit_spike_compress(x)` (uint8, 1/32 of float32, 1/16 of
float16) and decompress it into the compute dtype in backward. A large input is decompressed a
chunk of the batch at a time (at most max(16 MiB, the weight's bytes) of it, BACKWARD_CHUNK_BYTES),
the weight gradient summed over the chunks: then equal to nn's within the rounding of that sum.

    fc = spikejit.PackedSpikeLinear(4096, 4096)          # like nn.Linear
    conv = spikejit.PackedSpikeConv2d(64, 128, 3, padding=1)
    model.fc2 = spikejit.packed_spikes(model.fc2)        # an existing layer, parameters shared

The input must be spikes: the packed form keeps only `x != 0`, so any nonzero value comes back as
1 and a non-binary input gets wrong weight gradients. Nothing checks this by default (a check
reads every element and, to raise, would have to synchronise); `check_spikes=True` adds an
asynchronous check for debugging (on CUDA a failure is a device-side assert that ends the
process's CUDA context). Use them only where the input is the output of a neuron (or of an op that
keeps spikes binary, such as max pooling), not after average pooling, dropout or on raw data.

Both layers are torch.library custom ops with fake implementations and registered autograd
(`spikejit::packed_spike_linear`, `spikejit::packed_spike_conv2d`), so torch.compile(fullgraph=True)
sees no graph breaks. Under autocast they cast their operands as autocast casts nn.Linear's and
nn.Conv2d's (and save the spikes packed from the cast input). Without autograd (no_grad, or nothing requiring a gradient) they run the
plain layer and pack nothing.
"""
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import ops  # also registers spikejit::bit_spike_compress / decompress

__all__ = ["PackedSpikeLinear", "PackedSpikeConv2d", "packed_spikes"]


def _needs_autograd(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _check_spikes(x: Tensor) -> None:
    torch._assert_async(((x == 0) | (x == 1)).all(), "x: a packed-spike layer expects spikes (0 or 1)")


def _autocast(x: Tensor, weight: Tensor, bias: Optional[Tensor]):
    """What autocast gives nn.Linear / nn.Conv2d: every operand in the autocast dtype (custom ops
    are not cast by autocast themselves). The casts are differentiable, as autocast's are."""
    device = x.device.type
    if not torch.is_autocast_enabled(device):
        return x, weight, bias
    dtype = torch.get_autocast_dtype(device)
    return x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)


def _packed(x: Tensor, needed: bool) -> Optional[Tensor]:
    return ops.compress_spikes(x) if needed else None


# ---------------------------------------------------------------------------------------------
# Linear: y = x W^T + b, x [*, in]


# The weight gradient is summed over chunks of the batch (rows of a Linear's input, frames of a
# Conv2d's) whose unpacked input is at most this large, or at most as large as the weight (each
# chunk adds a pass over the weight gradient). Unpacking T * B frames at once, with cuDNN's
# workspace for them, was the largest thing alive in the backward of a recomputed conv block
# (spikejit.Recompute).
BACKWARD_CHUNK_BYTES = 16 << 20


def _rows_per_chunk(row_elements: int, dtype: torch.dtype, rows: int, weight: Tensor) -> int:
    """Rows (frames) per backward chunk: within the chunk bytes, and a whole number of packed bytes
    (a chunk starts on a byte of the packed input)."""
    unit = 8 // math.gcd(row_elements, 8)
    limit = max(BACKWARD_CHUNK_BYTES, weight.numel() * weight.element_size())
    fit = limit // max(1, row_elements * (torch.finfo(dtype).bits // 8))
    return min(rows, max(unit, fit // unit * unit))


def _unpacked_rows(packed: Tensor, first: int, count: int, row_shape, dtype) -> Tensor:
    """Rows [first, first + count) of a packed [rows, *row_shape] input, as [count, *row_shape]."""
    row_elements = math.prod(row_shape)
    start, end = first * row_elements, (first + count) * row_elements
    return ops.decompress_spikes(packed[start // 8:(end + 7) // 8], [count, *row_shape], dtype)


@torch.library.custom_op("spikejit::packed_spike_linear", mutates_args=())
def packed_spike_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return F.linear(x, weight, bias)


@packed_spike_linear.register_fake
def _(x, weight, bias):
    return F.linear(x, weight, bias)


def _setup_linear(ctx, inputs, output, anchor=None):
    x, weight, bias = inputs
    packed = _packed(x, ctx.needs_input_grad[1])
    ctx.save_for_backward(packed, weight, *(() if anchor is None else (anchor,)))
    ctx.x_shape = x.shape
    ctx.x_dtype = x.dtype


# The formulas of addmm / mm's backward as autograd runs them for nn.Linear, so that the
# gradients have the same bits.
def _backward_linear(ctx, grad):
    packed, weight = ctx.saved_tensors[:2]
    grad_2d = grad.reshape(-1, weight.shape[0])
    grad_x = grad_weight = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = grad_2d.mm(weight).view(ctx.x_shape)
    if ctx.needs_input_grad[1]:
        rows, features = grad_2d.shape[0], weight.shape[1]
        step = _rows_per_chunk(features, ctx.x_dtype, rows, weight)
        if step >= rows:  # one chunk: the product as autograd computes it
            grad_weight = grad_2d.t().mm(_unpacked_rows(packed, 0, rows, [features], ctx.x_dtype))
        else:  # float32 / float64 summed in place; half precision summed in float32
            wide = weight.dtype in (torch.float32, torch.float64)
            grad_weight = torch.zeros_like(weight, dtype=weight.dtype if wide else torch.float32)
            for first in range(0, rows, step):
                count = min(step, rows - first)
                g, x = grad_2d[first:first + count].t(), _unpacked_rows(packed, first, count, [features], ctx.x_dtype)
                if wide:
                    grad_weight.addmm_(g, x)
                else:
                    grad_weight.add_(g.mm(x))
            grad_weight = grad_weight.to(weight.dtype)
    if ctx.needs_input_grad[2]:
        grad_bias = grad_2d.sum(0)
    return grad_x, grad_weight, grad_bias


torch.library.register_autograd("spikejit::packed_spike_linear", _backward_linear, setup_context=_setup_linear)


# Eager fast paths: outside torch.compile / tracing, plain tensors skip the custom-op dispatch
# (its autograd wrapper costs hundreds of microseconds a call, and a spiking network's step is
# often host-bound). Same setup and backward as the ops; graphs see the ops.
class _EagerLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        y, anchor = F.linear(x, weight, bias), x.new_empty(0)
        _setup_linear(ctx, (x, weight, bias), y, anchor)
        return y, anchor

    @staticmethod
    def backward(ctx, grad, _):
        return _first_order_in_x(ctx, _backward_linear(ctx, grad), grad)


# Under create_graph=True the weight's gradient has no graph back to the input (its spikes were
# saved as bits): a second derivative through it with respect to the input would be silently left
# out, so differentiating it again raises. An empty output (the anchor), saved beside the packed
# spikes, links the gradient to the input.
_PACKED_FIRST_ORDER = ("spikejit packed-spike layers: the weight's gradient has first derivatives only with respect "
                       "to the input (the input was saved as bits), so a second derivative through it cannot run; "
                       "use nn.Linear / nn.Conv2d for second derivatives")


def _first_order_in_x(ctx, grads, grad):
    if not torch.is_grad_enabled() or grads[1] is None:
        return grads
    (grad_weight,) = ops.refusing_second_derivatives([grads[1]], ctx.saved_tensors[2], [grad], _PACKED_FIRST_ORDER)
    return (grads[0], grad_weight, *grads[2:])


def _linear(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    if ops.is_eager([x, weight], [] if bias is None else [bias]):
        return _EagerLinear.apply(x, weight, bias)[0]
    return torch.ops.spikejit.packed_spike_linear(x, weight, bias)


class PackedSpikeLinear(nn.Linear):
    """nn.Linear for spike inputs [*, in_features] that saves them packed for backward."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 check_spikes: bool = False):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.check_spikes = check_spikes

    def forward(self, x: Tensor) -> Tensor:
        if self.check_spikes:
            _check_spikes(x)
        if not _needs_autograd(x, self.weight, self.bias):
            return F.linear(x, self.weight, self.bias)
        return _linear(*_autocast(x, self.weight, self.bias))

    @classmethod
    def from_linear(cls, linear: nn.Linear, check_spikes: bool = False) -> "PackedSpikeLinear":
        """A PackedSpikeLinear that shares `linear`'s weight and bias (no copy)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, device="meta",
                    dtype=linear.weight.dtype, check_spikes=check_spikes)
        layer.weight = linear.weight
        layer.bias = linear.bias
        return layer.train(linear.training)


# ---------------------------------------------------------------------------------------------
# Conv2d on [N, C, H, W] (the module also takes [C, H, W] and SpikingJelly's [T, N, C, H, W])


@torch.library.custom_op("spikejit::packed_spike_conv2d", mutates_args=())
def packed_spike_conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: List[int], padding: List[int],
                        dilation: List[int], groups: int) -> Tensor:
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups)


@packed_spike_conv2d.register_fake
def _(x, weight, bias, stride, padding, dilation, groups):
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups)


def _channels_last(x: Tensor) -> bool:
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _setup_conv(ctx, inputs, output, anchor=None):
    x, weight, bias, stride, padding, dilation, groups = inputs
    # A channels-last input is packed in its own memory order (no copy) and restored in it, so
    # that backward sees the layout autograd would have saved.
    ctx.channels_last = _channels_last(x)
    ordered = x.permute(0, 2, 3, 1) if ctx.channels_last else x
    ctx.save_for_backward(_packed(ordered, ctx.needs_input_grad[1]), weight, *(() if anchor is None else (anchor,)))
    ctx.ordered_shape = list(ordered.shape)
    ctx.x_dtype = x.dtype
    ctx.has_bias = bias is not None
    ctx.conv = (list(stride), list(padding), list(dilation), groups)


# The convolution_backward call autograd makes for nn.Conv2d, on the decompressed input, chunk by
# chunk of frames (the weight and bias gradients summed over the chunks, half precision in float32).
def _backward_conv(ctx, grad):
    packed, weight = ctx.saved_tensors[:2]
    stride, padding, dilation, groups = ctx.conv
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    shape = ctx.ordered_shape if not ctx.channels_last else [ctx.ordered_shape[i] for i in (0, 3, 1, 2)]
    bias_sizes = [weight.shape[0]] if ctx.has_bias else None
    if not need_w:  # only the input's shape is read
        x = grad.new_zeros(()).expand(*shape)
        grad_x, _, grad_b = torch.ops.aten.convolution_backward(
            grad, x, weight, bias_sizes, stride, padding, dilation, False, [0, 0], groups, [need_x, False, need_b])
        return grad_x, None, grad_b if ctx.has_bias else None, None, None, None, None
    frames = shape[0]
    step = _rows_per_chunk(math.prod(shape[1:]), ctx.x_dtype, frames, weight)

    def backward_of(first, count, need_x):
        x = _unpacked_rows(packed, first, count, ctx.ordered_shape[1:], ctx.x_dtype)
        if ctx.channels_last:
            x = x.permute(0, 3, 1, 2)
        return torch.ops.aten.convolution_backward(
            grad[first:first + count], x, weight, bias_sizes, stride, padding, dilation, False, [0, 0], groups,
            [need_x, True, need_b])

    if step >= frames:  # one chunk: the call autograd makes
        grad_x, grad_w, grad_b = backward_of(0, frames, need_x)
        return grad_x, grad_w, grad_b if ctx.has_bias else None, None, None, None, None
    grad_x = None
    if need_x:
        grad_x = torch.empty(shape, dtype=grad.dtype, device=grad.device,
                             memory_format=torch.channels_last if ctx.channels_last else torch.contiguous_format)
    wide = torch.promote_types(weight.dtype, torch.float32)  # half precision: summed in float32
    grad_w = torch.zeros_like(weight, dtype=wide)
    grad_b = torch.zeros(weight.shape[0], dtype=wide, device=weight.device) if need_b else None
    for first in range(0, frames, step):
        count = min(step, frames - first)
        part_x, part_w, part_b = backward_of(first, count, need_x)
        if need_x:
            grad_x[first:first + count].copy_(part_x)
        grad_w.add_(part_w)
        if need_b:
            grad_b.add_(part_b)
    grad_w = grad_w.to(weight.dtype)
    grad_b = grad_b.to(weight.dtype) if need_b else None
    return grad_x, grad_w, grad_b if ctx.has_bias else None, None, None, None, None


torch.library.register_autograd("spikejit::packed_spike_conv2d", _backward_conv, setup_context=_setup_conv)


class _EagerConv(torch.autograd.Function):  # see _EagerLinear
    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation, groups):
        y, anchor = F.conv2d(x, weight, bias, stride, padding, dilation, groups), x.new_empty(0)
        _setup_conv(ctx, (x, weight, bias, stride, padding, dilation, groups), y, anchor)
        return y, anchor

    @staticmethod
    def backward(ctx, grad, _):
        return _first_order_in_x(ctx, _backward_conv(ctx, grad), grad)


def _conv(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride, padding, dilation, groups) -> Tensor:
    if ops.is_eager([x, weight], [] if bias is None else [bias]):
        return _EagerConv.apply(x, weight, bias, stride, padding, dilation, groups)[0]
    return torch.ops.spikejit.packed_spike_conv2d(x, weight, bias, stride, padding, dilation, groups)


def _explicit_padding(conv: nn.Conv2d) -> List[int]:
    if not isinstance(conv.padding, str):
        return list(conv.padding)
    if conv.padding == "valid":
        return [0, 0]
    padding = []
    for k, d in zip(conv.kernel_size, conv.dilation):
        total = d * (k - 1)
        if total % 2:
            raise ValueError(f"padding: 'same' with kernel_size {tuple(conv.kernel_size)} and dilation "
                             f"{tuple(conv.dilation)} pads unevenly, which PackedSpikeConv2d does not support; "
                             "give the padding as numbers")
        padding.append(total // 2)
    return padding


class PackedSpikeConv2d(nn.Conv2d):
    """nn.Conv2d for spike inputs that saves them packed for backward. Takes [N, C, H, W],
    [C, H, W] and (as SpikingJelly's multi-step layers) [T, N, C, H, W]; every padding_mode."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None,
                 check_spikes: bool = False):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.check_spikes = check_spikes
        _explicit_padding(self)  # rejects an uneven 'same' now

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() not in (3, 4, 5):
            raise ValueError(f"x: expected [C, H, W], [N, C, H, W] or [T, N, C, H, W], got shape {list(x.shape)}")
        if self.check_spikes:
            _check_spikes(x)
        if x.dim() != 4:
            leading = x.shape[:-3]
            y = self.forward(x.reshape(-1, *x.shape[-3:]))
            return y.reshape(*leading, *y.shape[1:])
        padding = _explicit_padding(self)
        if self.padding_mode != "zeros":  # as nn.Conv2d: pad first (the padded spikes are spikes)
            x = F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = [0, 0]
        if not _needs_autograd(x, self.weight, self.bias):
            return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)
        x, weight, bias = _autocast(x, self.weight, self.bias)
        return _conv(x, weight, bias, list(self.stride), padding,
                                                      list(self.dilation), self.groups)

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d, check_spikes: bool = False) -> "PackedSpikeConv2d":
        """A PackedSpikeConv2d that shares `conv`'s weight and bias (no copy)."""
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                    conv.dilation, conv.groups, conv.bias is not None, conv.padding_mode, device="meta",
                    dtype=conv.weight.dtype, check_spikes=check_spikes)
        layer.weight = conv.weight
        layer.bias = conv.bias
        return layer.train(conv.training)


def packed_spikes(layer: nn.Module, check_spikes: bool = False) -> nn.Module:
    """The packed-spike version of an nn.Linear or nn.Conv2d (SpikingJelly's layer.Linear /
    layer.Conv2d included), sharing its parameters: `model.fc = spikejit.packed_spikes(model.fc)`."""
    if isinstance(layer, nn.Linear):
        return PackedSpikeLinear.from_linear(layer, check_spikes)
    if isinstance(layer, nn.Conv2d):
        return PackedSpikeConv2d.from_conv2d(layer, check_spikes)
    raise TypeError(f"layer: expected an nn.Linear or nn.Conv2d, got {type(layer).__name__}")
