"""Second and higher derivatives through the neuron kernels: `with spikejit.double_backward():`.

A neuron call's usual backward runs the kernels of its backward step, whose results have no graph
of their own, so a gradient of those gradients is refused. Calls made inside
`with spikejit.double_backward():` (the forward pass; the backward may run anywhere) take this path
instead. The forward runs the inference kernels and keeps the call's inputs, initial states and
parameters. The backward runs the neuron's adjoint neuron (_core.Program.adjoint: the backward step
as a neuron of its own) with its steps last to first (the kernels' `reverse`, no copies) over the
call's inputs, the states before each step (recomputed by a forward call) and the incoming
gradients. Both are calls of this same kind, so under create_graph=True the gradients have a
graph of kernel calls whose own backward is the adjoint neuron's adjoint, run first to last, and
so on, to any order.

The second derivatives are those of a plain PyTorch loop over the steps in which each spike is
an autograd function with the surrogate's derivative as its backward (written with
differentiable ops): the surrogate's second derivative where the gradient depends on the
potential, and the surrogate's derivative for a spike recomputed inside the backward.

Costs: the call keeps its inputs instead of the usual saved values, and a backward runs the
forward again. First derivatives equal the usual path's up to rounding (a scalar parameter's
gradient is summed over the neurons in another order). A neuron that draws random numbers draws
the call's numbers at every order (the adjoint neurons have its streams and take its seed).
Eager mode only; refused under torch.compile and torch.func transforms, for packed outputs and
packed saved spikes.
"""
import contextlib
import threading

import torch

from . import registry
from ._func_transforms import transforms_active
from ._kernel_calls import (ActiveReference, differentiable_results, inference, initial_states, program_counts,
                            requiring_grad, split_inference_results)

__all__ = ["double_backward"]

_mode = threading.local()
# How many threads are inside the mode now: every neuron call asks enabled(), and a module global
# answers that faster than the thread-local state (which it reads only while some thread is in).
_threads_inside = 0
_count_lock = threading.Lock()


class double_backward(contextlib.ContextDecorator):
    """Neuron calls made inside `with spikejit.double_backward():` (or in a function decorated with
    `@spikejit.double_backward()`) can be differentiated more than once (create_graph=True, then a
    gradient of the gradients). See the module's docstring."""

    def __init__(self):
        self._previous = []  # a stack: the same object may be entered again while inside

    def __enter__(self):
        global _threads_inside
        previous = enabled()
        self._previous.append(previous)
        if not previous:
            with _count_lock:
                _threads_inside += 1
        _mode.on = True
        return self

    def __exit__(self, *exc):
        global _threads_inside
        _mode.on = previous = self._previous.pop()
        if not previous:
            with _count_lock:
                _threads_inside -= 1


def enabled() -> bool:
    """Whether this thread is inside `with spikejit.double_backward():`."""
    return _threads_inside > 0 and getattr(_mode, "on", False)


def run(handle: int, num_outputs: int, num_states: int, inputs, init_states, params, store_state_seqs: bool,
        packed_outputs, pack_spikes, seed):
    """spikejit.functional.run_neuron's (outputs, final_states, state_seqs or None) for a call that
    needs gradients inside double_backward()."""
    _check_call(packed_outputs, pack_spikes)
    x = inputs[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 1:  # (the kernels' own checks word the rest)
        raise ValueError(f"inputs[0]: expected a sequence [T, *S], got {x!r}")
    states = initial_states(handle, init_states, x, every=True)
    results = call(handle, list(inputs), states, list(params), bool(store_state_seqs), seed=seed)
    return split_inference_results(results, num_outputs, num_states, bool(store_state_seqs))


def _check_call(packed_outputs, pack_spikes) -> None:
    name = "spikejit.double_backward()"
    if torch.compiler.is_compiling():
        raise RuntimeError(f"{name} is for eager mode: under torch.compile a neuron call has first derivatives only")
    if transforms_active():
        raise RuntimeError(f"{name} works with torch.autograd (create_graph=True), not under torch.func transforms")
    if type(packed_outputs) is not int or packed_outputs != 0:
        raise ValueError(f"packed_outputs: expected 0 inside {name} (bit rows carry no gradient), got "
                         f"{packed_outputs!r}")
    if pack_spikes is not False:
        raise ValueError(f"pack_spikes: expected False inside {name} (it saves the inputs, not spikes), got "
                         f"{pack_spikes!r}")


def call(handle: int, inputs, init_states, params, store_state_seqs: bool, reverse: bool = False, seed=None):
    """[*outputs, *state_seqs (if store_state_seqs), *final_states] of the neuron (its steps last to
    first when `reverse`), differentiable any number of times where a gradient is needed; every
    initial state given. `seed`: the call's, for a neuron that draws (the same numbers at every
    order: the adjoint neurons draw the forward's)."""
    tensors = (*inputs, *init_states, *params)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(_Differentiable.apply(handle, store_state_seqs, reverse, seed, len(inputs), len(init_states),
                                          *tensors))
    return inference(handle, inputs, init_states, params, store_state_seqs, True, seed=seed, reverse=reverse)


def adjoint_handle_of(handle: int) -> int:
    """The handle of the neuron's adjoint neuron, made once, owned by `handle`'s entry."""
    return registry.derived_handle(handle, "adjoint", lambda program: program.adjoint())


class _Differentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, handle, store_state_seqs, reverse, seed, num_inputs, num_states, *tensors):
        ni, ns = num_inputs, num_states
        results = inference(handle, list(tensors[:ni]), list(tensors[ni:ni + ns]), list(tensors[ni + ns:]),
                            store_state_seqs, True, seed=seed, reverse=reverse)
        ctx.save_for_backward(*tensors)
        ctx.handle, ctx.store_state_seqs, ctx.reverse, ctx.seed = handle, store_state_seqs, reverse, seed
        ctx.num_inputs, ctx.num_states = ni, ns
        ctx.active_reference = ActiveReference(handle)  # the kernels stay registered for the backward
        ctx.set_materialize_grads(False)
        _, counts = program_counts(handle)
        requiring = requiring_grad(counts, tensors[:ni], tensors[ni:ni + ns], tensors[ni + ns:])
        differentiable = differentiable_results(registry.program(handle), requiring, tensors[0].shape[0],
                                                store_state_seqs, seqs_first=True)
        ctx.mark_non_differentiable(*(r for r, d in zip(results, differentiable) if not d))
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        results = gradients(ctx.handle, ctx.store_state_seqs, ctx.reverse, ctx.seed, ctx.num_inputs, ctx.num_states,
                            ctx.saved_tensors, grads)
        flows = registry.program(ctx.handle).differentiable_arguments  # (None where PyTorch gives None)
        return (None,) * 6 + tuple(g if f else None for g, f in zip(results, flows))


def gradients(handle: int, store_state_seqs: bool, reverse: bool, seed, num_inputs: int, num_states: int, tensors,
              grads):
    """The gradients of a call's inputs, initial states and parameters (`tensors`) from those of its
    results (`grads`, None: zero), by the adjoint neuron, whose steps run in the opposite order to
    the call's; with a graph under create_graph=True."""
    _, counts = program_counts(handle)
    ni, ns, no = num_inputs, num_states, counts.outputs
    inputs, init_states, params = tensors[:ni], tensors[ni:ni + ns], tensors[ni + ns:]
    grad_outputs = grads[:no]
    grad_seqs = grads[no:no + ns] if store_state_seqs else (None,) * ns
    grad_finals = grads[len(grads) - ns:] if ns else ()
    x = inputs[0]
    steps = x.shape[0]
    # The states before each step: the initial ones, then the states after the step that ran before.
    seqs = call(handle, list(inputs), list(init_states), list(params), True, reverse, seed)[no:no + ns]
    if reverse:
        before = [torch.cat((seq[1:], s0.unsqueeze(0))) if steps else seq for s0, seq in zip(init_states, seqs)]
    else:
        before = [torch.cat((s0.unsqueeze(0), seq))[:steps] for s0, seq in zip(init_states, seqs)]
    zero = x.new_zeros(()).expand(x.shape)  # an absent gradient (read in place, not copied)
    sequences = [*inputs, *before, *(zero if g is None else g for g in (*grad_outputs, *grad_seqs))]
    states = [torch.zeros_like(s0) if g is None else g for g, s0 in zip(grad_finals, init_states)]
    states += [x.new_zeros(x.shape[1:]) for _ in params]
    results = call(adjoint_handle_of(handle), sequences, states, list(params), False, not reverse, seed)
    finals = results[len(results) - ns - len(params):]
    grad_params = [acc if kind == "per_neuron" else acc.sum().reshape(p.shape)
                   for acc, p, kind in zip(finals[ns:], params, counts.params)]
    return list(results[:ni]) + list(finals[:ns]) + grad_params
