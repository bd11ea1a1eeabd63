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

The recomputation holds little beyond the gradients it computes: the unpacked input lives only
while a layer needs it (a packed-spike layer, spikejit.packed_spikes, keeps bits), and when the
block returns its last neuron's spikes as they are (an nn.Sequential ending in a neuron, say),
that neuron writes them as bits there, since the backward needs only their gradient; for a
Conv-BN-LIF block that leaves the BN input, the neuron's input and saved values and the two
gradients as the largest tensors alive.

The recomputation sees the same inputs, parameters, neuron states and random numbers (dropout) as
the forward, so outputs and gradients are those of the plain module, bit for bit where its ops
are deterministic. It leaves the module as the forward left it: neuron states and buffers (batch
norm running statistics, updated once per step) are restored after it.

Rules, checked: `spikes=True` needs an input of 0/1 values (only `x != 0` is kept; not checked,
like the packed layers); the module returns one tensor; its neurons are multi-step
(step_mode "m"), and the state they start from carries no gradient (reset() them between batches,
as usual). A state carried out of the block is not part of the graph: a gradient through it (a
loss on a neuron's `v`, or a second call of the block without reset()) raises instead of being
zero; detach() such a state to start from it on purpose (truncated BPTT). Outside autograd (no_grad,
nothing requiring a gradient) the module just runs. The backward calls the module from Python,
so torch.compile puts a graph break around a Recompute block (eager mode is what it is for). Its
gradients have first derivatives only: differentiating them again raises (even inside
spikejit.double_backward()), instead of leaving their terms out.
"""
import weakref
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from . import _kernel_calls, ops
from .flexsn import FlexSN
from .functional import execute_neuron, needs_grad, neuron_call_hook
from .neuron import BaseNode

__all__ = ["Recompute"]

_STATE_ATTRIBUTES = {BaseNode: ("v", "v_seq"), FlexSN: ("states", "state_seqs")}


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


class _GraphlessState(torch.autograd.Function):
    """The identity on a neuron state a Recompute block leaves behind, whose backward raises: the
    block's forward ran without autograd, so a gradient through that state (a loss on it, or the
    block's next call starting from it) would silently be zero."""

    @staticmethod
    def forward(ctx, state, anchor, name):  # anchor: a leaf that requires grad, so the result does
        ctx.name = name
        return state.view_as(state)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"spikejit.Recompute: the neuron state {ctx.name} was computed inside a Recompute "
                           "block, without autograd, so no gradient can flow through it (reset() the "
                           "block's neurons between calls, or detach() the state)")


def _mark_graphless(module: nn.Module) -> None:
    """Puts each tensor state the forward left behind behind a _GraphlessState node; the next call
    of the block then sees a state with a gradient and refuses it (_check_neurons)."""
    anchor = torch.empty(0, requires_grad=True)
    for name, m, attributes in _neurons(module):
        for a in attributes:
            values = getattr(m, a)
            if isinstance(values, Tensor):
                setattr(m, a, _GraphlessState.apply(values, anchor, f"{name}.{a}"))
            elif isinstance(values, (list, tuple)):
                setattr(m, a, type(values)(_GraphlessState.apply(v, anchor, f"{name}.{a}[{i}]")
                                           if isinstance(v, Tensor) else v for i, v in enumerate(values)))


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


class _NeuronCalls:
    """A neuron_call_hook that counts the block's neuron calls. In the forward it remembers the
    last one; in the recomputation (`exit_call` set: the index of the call whose only output the
    block returns) it runs that call with its spikes packed and a gradient carrier in their place:
    the block's spikes are needed there only for their gradient, which arrives from outside."""

    def __init__(self, exit_call=None):
        self.count, self.last, self.exit_call, self.carrier = 0, None, exit_call, None

    def __call__(self, handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                 checkpoint_every, packed_outputs, pack_spikes, seed=None):
        # (A random neuron's seed was drawn before this hook, from the generators the
        # recomputation restores (_RngState): it draws the forward's numbers again.)
        index, self.count = self.count, self.count + 1
        given = [s for s in init_states if s is not None]
        exit_here = (index == self.exit_call and needs_grad(inputs, given, params)
                     and ops.is_eager(inputs, given, params))
        outputs, finals, seqs = execute_neuron(handle, num_outputs, num_states, inputs, init_states, params,
                                               store_state_seqs, checkpoint_every, 1 if exit_here else packed_outputs,
                                               pack_spikes, carriers=exit_here, seed=seed)
        if exit_here:
            self.carrier = outputs[0]
        exitable = num_outputs == 1 and packed_outputs == 0 and _kernel_calls.packable_output(handle, 0)
        self.last = (index, weakref.ref(outputs[0]) if exitable else None)
        return outputs, finals, seqs

    def returned_by_last_call(self, y) -> Optional[int]:
        """The index of the last neuron call if `y` is its only (spike-valued) output, else None."""
        if self.last is None or self.last[1] is None:
            return None
        return self.last[0] if self.last[1]() is y else None


def _call_releasing(module: nn.Module, make_input):
    """module(make_input()); a plain nn.Sequential (its own forward, no hooks) runs layer by layer
    here, since module(x) would hold x (its call's arguments) until the last layer returned."""
    plain = (isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward
             and not (module._forward_hooks or module._forward_pre_hooks))
    if not plain:
        return module(make_input())
    value = make_input()
    for layer in module:
        value = layer(value)
    return value


class _BlockInput(torch.autograd.Function):
    """The block's input spikes unpacked for the recomputation, as a node of its graph rather than a
    leaf held by the backward: the unpacked tensor lives only as long as the layers that read it
    keep it (a packed-spike layer keeps bits), and its gradient is handed to `sink`."""

    @staticmethod
    def forward(ctx, anchor, packed, shape, dtype, sink):
        ctx.sink = sink
        return ops.decompress_spikes(packed, shape, dtype)

    @staticmethod
    def backward(ctx, grad):
        ctx.sink.append(grad)
        return grad.new_zeros(0), None, None, None, None


_FIRST_ORDER = ("spikejit.Recompute: the gradients of a Recompute block have first derivatives only: its backward "
                "runs the block again without a graph of its own, so a second derivative (a gradient of a "
                "gradient) cannot run through it")


class _RecomputeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block, x, *params):
        ctx.block, ctx.shape, ctx.dtype, ctx.params = block, x.shape, x.dtype, params
        ctx.states_before = _states(block.module)
        ctx.rng = _RngState(x.device)
        kept = ops.compress_spikes(x) if block.spikes else x
        calls = _NeuronCalls()
        with torch.no_grad(), neuron_call_hook(calls):
            y = block.module(x)
        if not isinstance(y, Tensor):
            raise TypeError(f"module: Recompute expects a module that returns one tensor, got {type(y).__name__}")
        ctx.exit_call = calls.returned_by_last_call(y)
        # An empty output that leads back to x and the parameters: the gradients of a backward
        # under create_graph=True link to it (ops.refusing_second_derivatives).
        anchor = x.new_empty(0)
        ctx.save_for_backward(kept, anchor)
        return y, anchor

    @staticmethod
    def backward(ctx, grad_y, _):
        block = ctx.block
        saved, anchor = ctx.saved_tensors
        wants_input = ctx.needs_input_grad[1]
        params = list(ctx.params)
        states_after = _states(block.module)
        buffers_after = [b.clone() for b in block.module.buffers()]
        _restore(ctx.states_before)
        calls, sink = _NeuronCalls(ctx.exit_call), []
        try:
            with torch.enable_grad(), ctx.rng, neuron_call_hook(calls):
                # No local keeps the unpacked input: it lives as long as the module needs it.
                if not block.spikes:  # the saved input itself (alive anyway) as the leaf
                    leaf = saved.detach().requires_grad_(wants_input)
                    y = _call_releasing(block.module, lambda: leaf)
                elif wants_input:
                    leaf = torch.empty(0, device=saved.device, requires_grad=True)
                    y = _call_releasing(block.module,
                                        lambda: _BlockInput.apply(leaf, saved, list(ctx.shape), ctx.dtype, sink))
                else:
                    leaf = None
                    y = _call_releasing(block.module,
                                        lambda: ops.decompress_spikes(saved, ctx.shape, ctx.dtype))
            if calls.carrier is not None and y is not calls.carrier:
                raise RuntimeError("module: the recomputation returned another tensor than the forward did (a "
                                   "module must take the same path in both)")
            wanted = ([leaf] if wants_input else []) + params
            grads = list(torch.autograd.grad(y, wanted, grad_y, allow_unused=True)) if wanted else []
        finally:
            # After the gradients: batch norm's backward reads the running statistics it was given.
            _restore(states_after)
            with torch.no_grad():
                for b, value in zip(block.module.buffers(), buffers_after):
                    b.copy_(value)
        grad_x = None
        if wants_input:
            grad_leaf = grads.pop(0)
            grad_x = grad_leaf if not block.spikes else (sink[0] if sink else None)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        if torch.is_grad_enabled():  # create_graph=True: the gradients above have no graph
            grad_x, *grads = ops.refusing_second_derivatives([grad_x, *grads], anchor, [grad_y], _FIRST_ORDER)
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
        _kernel_calls.check_tensor("x", x)
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not (x.requires_grad or params):
            return self.module(x)
        _check_neurons(self.module)
        y, _ = _RecomputeFunction.apply(self, x, *params)
        _mark_graphless(self.module)
        return y

    def extra_repr(self) -> str:
        return f"spikes={self.spikes}"
