"""Recompute: a block of a spiking network that keeps only its input spikes, packed, for backward.

In BPTT every layer keeps its activations until the backward reaches it: for a deep SNN that is
T times a feed-forward network's memory. A Recompute block runs its module without autograd in
the forward and saves only its input, as bits when the input is spikes (1/32 of float32); the
backward runs the module again, with autograd, from that input and backpropagates through it.
A network of such blocks holds one block's activations at a time (plus every block's packed
input), at the cost of a second forward pass of each block:

    blocks = [spikejit.Recompute(nn.Sequential(conv, bn, spikejit.LIFNode(step_mode="m")))
              for conv, bn in ...]           # inputs: the spikes of the block before
    first = spikejit.Recompute(stem, spikes=False)   # raw data in: saved as it is

The recomputation sees the same inputs, parameters, neuron states and random numbers (dropout) as
the forward, so outputs and gradients are those of the plain module, bit for bit where its ops
are deterministic. It leaves the module as the forward left it: neuron states and buffers (batch
norm running statistics, updated once per step) are restored after it.

Rules, checked: `spikes=True` needs an input of 0/1 values (only `x != 0` is kept; not checked,
like the packed layers); the module returns one tensor; its neurons are multi-step
(step_mode "m"), and the state they start from carries no gradient (reset() them between batches,
as usual): a state carried out of the block is not part of the graph. Outside autograd (no_grad,
nothing requiring a gradient) the module just runs. The backward calls the module from Python,
so torch.compile puts a graph break around a Recompute block (eager mode is what it is for).
"""
from typing import List, Tuple

import torch
from torch import Tensor, nn

from . import ops
from .flexsn import FlexSN
from .neuron import BaseNode

__all__ = ["Recompute"]

_STATE_ATTRIBUTES = {BaseNode: ("v", "v_seq"), FlexSN: ("states",)}


def _neurons(module: nn.Module):
    """(name, module, state attribute names) of every spikejit neuron in `module`."""
    for name, m in module.named_modules():
        for kind, attributes in _STATE_ATTRIBUTES.items():
            if isinstance(m, kind):
                yield name or "module", m, attributes


def _states(module: nn.Module) -> List[Tuple[nn.Module, str, object]]:
    return [(m, a, getattr(m, a)) for _, m, attributes in _neurons(module) for a in attributes]


def _restore(states) -> None:
    for m, attribute, value in states:
        setattr(m, attribute, value)


def _check_neurons(module: nn.Module) -> None:
    for name, m, attributes in _neurons(module):
        if m.step_mode != "m":
            raise ValueError(f"module: Recompute needs multi-step neurons (step_mode='m'), but {name} "
                             f"({type(m).__name__}) has step_mode={m.step_mode!r}: its state would carry the "
                             "gradient from one call to the next, which a recomputed block cannot keep")
        for a in attributes:
            values = getattr(m, a)
            for v in values if isinstance(values, (list, tuple)) else [values]:
                if isinstance(v, Tensor) and v.requires_grad:
                    raise ValueError(f"module: {name}.{a} carries a gradient from an earlier call; a Recompute "
                                     "block starts from states without one (reset() or detach() the neurons "
                                     "between batches)")


class _RngState:
    """The CPU generator and, for a CUDA input, its device's generator: what dropout draws from."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def __enter__(self):
        self.saved = _RngState(self.device)
        self._set(self)

    def __exit__(self, *exc):
        self._set(self.saved)

    def _set(self, state) -> None:
        torch.set_rng_state(state.cpu)
        if state.cuda is not None:
            torch.cuda.set_rng_state(state.cuda, self.device)


class _RecomputeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block, x, *params):
        ctx.block, ctx.shape, ctx.dtype, ctx.params = block, x.shape, x.dtype, params
        ctx.states_before = _states(block.module)
        ctx.rng = _RngState(x.device)
        ctx.save_for_backward(ops.bit_spike_compress(x) if block.spikes else x)
        with torch.no_grad():
            y = block.module(x)
        if not isinstance(y, Tensor):
            raise TypeError(f"module: Recompute expects a module that returns one tensor, got {type(y).__name__}")
        return y

    @staticmethod
    def backward(ctx, grad_y):
        block = ctx.block
        (saved,) = ctx.saved_tensors
        x = ops.bit_spike_decompress(saved, list(ctx.shape), ctx.dtype) if block.spikes else saved.detach()
        x.requires_grad_(ctx.needs_input_grad[1])
        params = list(ctx.params)
        states_after = _states(block.module)
        buffers_after = [b.clone() for b in block.module.buffers()]
        _restore(ctx.states_before)
        try:
            with torch.enable_grad(), ctx.rng:
                y = block.module(x)
            wanted = ([x] if x.requires_grad else []) + params
            grads = list(torch.autograd.grad(y, wanted, grad_y, allow_unused=True)) if wanted else []
        finally:
            # After the gradients: batch norm's backward reads the running statistics it was given.
            _restore(states_after)
            with torch.no_grad():
                for b, value in zip(block.module.buffers(), buffers_after):
                    b.copy_(value)
        grad_x = grads.pop(0) if x.requires_grad else None
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        return (None, grad_x, *grads)


class Recompute(nn.Module):
    """Runs `module` keeping only its input for backward (bit-packed when `spikes`), and runs it
    again in the backward (see the module docstring)."""

    def __init__(self, module: nn.Module, spikes: bool = True):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
        if not isinstance(spikes, bool):
            raise TypeError(f"spikes: expected a bool, got {type(spikes).__name__}")
        self.module = module
        self.spikes = spikes

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a tensor, got {type(x).__name__}")
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not (x.requires_grad or params):
            return self.module(x)
        _check_neurons(self.module)
        return _RecomputeFunction.apply(self, x, *params)

    def extra_repr(self) -> str:
        return f"spikes={self.spikes}"
