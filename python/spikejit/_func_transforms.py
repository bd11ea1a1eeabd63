"""The neuron kernels under torch.func's reverse-mode and batching transforms (grad, vjp, jacrev,
vmap, and their compositions such as per-sample gradients, vmap(grad(...))); forward mode is in
_forward_mode, on the batching rules here.

The transforms need autograd.Functions in their own style (forward without ctx, setup_context)
whose every part can be batched: the training forward, its backward and the inference call are
each one here, with a vmap rule. A rule folds the vmapped dimension into the neuron dimensions,
[T, *S] -> [T, B, *S] and [*S] -> [B, *S], and runs the kernels once; where that cannot express
the batch directly (a scalar parameter batched, or its gradient wanted per batch element) it runs
the neuron with its scalar parameters declared per neuron; bit rows, whose bytes mix neurons of
neighbouring batch elements, run the batch elements one by one. The
eager path (ops._Training) is untouched: these run only while a transform is active.

The seed of a neuron that draws random numbers is the last of a call's tensors (kind SEED). It is
never folded: a folded call draws for each batch element's own neurons anyway. (Drawing it inside
vmap is PyTorch's business: vmap's default randomness="error" refuses the draw.)
"""
import re

import torch

from . import _core, registry
from ._kernel_calls import (inference, keep_for_backward, output_gradients, program_counts, saved_for_backward,
                            seed_for_backward, seed_tensors, training_call)

SEQ, NEURON, SCALAR, SEED = "seq", "neuron", "scalar", "seed"  # how a tensor of a call carries the batch


def transforms_active() -> bool:
    return torch._C._functorch.peek_interpreter_stack() is not None


KERNELS_FIRST_ORDER = ("spikejit's neuron kernels have first derivatives only: a second derivative (a gradient "
                       "of a gradient) cannot run through them. For second and higher derivatives with "
                       "torch.autograd, make the neuron calls inside `with spikejit.double_backward():`")


def refuse_second_derivative(ctx, *grads):
    """The backward of gradients the kernels computed (they have no graph of their own)."""
    raise RuntimeError(KERNELS_FIRST_ORDER)


def _fold(t, dim, kind, batch):
    if t is None or kind == SCALAR:
        return t
    if kind == SEED:  # one seed for the folded call (a batched one: vmap(randomness="different"))
        return t if dim is None else t.select(dim, 0)
    at = 1 if kind == SEQ else 0
    if dim is not None:
        return t.movedim(dim, at)
    return t.unsqueeze(at).expand(*t.shape[:at], batch, *t.shape[at:])


def batched(info, in_dims, tensors, kinds, out_kinds, run, fold: bool, run_per_neuron=None):
    """(results, out_dims) of run(tensors, batch) over a vmapped batch (`tensors` are the call's
    last arguments; `kinds` per tensor, `out_kinds` per result). Folded, run gets the folded
    tensors and the batch size; else (fold=False) one call per element with batch None.

    A scalar parameter cannot hold a value per batch element, nor give a gradient per element.
    Where one is batched, or one's gradient is a result, the call runs as run_per_neuron(tensors,
    batch) when given: the same neuron with its scalar parameters declared per neuron
    (per_neuron_handle), each broadcast over the neurons of its batch element, and each scalar
    result (a gradient) summed over them; else one call per batch element."""
    dims = in_dims[len(in_dims) - len(tensors):]
    scalar_batched = any(d is not None and k == SCALAR for d, k in zip(dims, kinds))
    scalar_results = SCALAR in out_kinds
    if fold and (scalar_batched or scalar_results) and run_per_neuron is not None:
        neurons = _neuron_shape(tensors, dims, kinds)
        spread = [_per_neuron(t, d, neurons, info.batch_size) if k == SCALAR else _fold(t, d, k, info.batch_size)
                  for t, d, k in zip(tensors, dims, kinds)]
        results = run_per_neuron(spread, info.batch_size)
        results = [r.flatten(1).sum(1, keepdim=True) if k == SCALAR and r is not None else r
                   for r, k in zip(results, out_kinds)]  # a scalar's gradient per batch element: [B, 1]
        return tuple(results), tuple(1 if k == SEQ else 0 for k in out_kinds)
    if fold and not scalar_batched and not scalar_results:
        results = run([_fold(t, d, k, info.batch_size) for t, d, k in zip(tensors, dims, kinds)], info.batch_size)
        return tuple(results), tuple(1 if k == SEQ else 0 for k in out_kinds)
    per_element = [run([t if d is None else t.select(d, b) for t, d in zip(tensors, dims)], None)
                   for b in range(info.batch_size)]
    return tuple(torch.stack(rs) for rs in zip(*per_element)), (0,) * len(out_kinds)


def _neuron_shape(tensors, dims, kinds):
    """The neuron shape S of one batch element, from the first sequence ([T, *S] per element)."""
    t, d = next((t, d) for t, d, k in zip(tensors, dims, kinds) if k == SEQ)
    shape = list(t.shape)
    if d is not None:
        del shape[d]
    return shape[1:]


def _per_neuron(t, dim, neurons, batch):
    """A scalar parameter ([1] per batch element) as a folded per-neuron one, [B, *S]."""
    values = t.reshape(1) if dim is None else t.movedim(dim, 0).reshape(batch)
    values = values.expand(batch) if dim is None else values
    return values.reshape(batch, *([1] * len(neurons))).expand(batch, *neurons)


def per_neuron_handle(handle) -> int:
    """The handle of the neuron with its scalar parameters declared per neuron (made once, owned
    by `handle`'s entry): the same step, so the same kernels apart from the parameters' layout."""
    return registry.derived_handle(handle, "scalar params per neuron", _scalar_params_per_neuron)


def _scalar_params_per_neuron(program):
    lines = [re.sub(r"^param (\w+) =", r"param \1[neuron] =", line) for line in program.canonical().splitlines()]
    return _core.Program.from_text("\n".join(lines), f"<{program.name} with parameters per neuron>")


def per_neuron_call(call):
    """The TrainingCall of per_neuron_handle(call.handle) under call's policy, or None where its
    saved values differ from call's (then a backward could not read what call's forward saved)."""
    handle = per_neuron_handle(call.handle)
    promoted = training_call(handle, call.store_state_seqs, call.checkpoint_every, call.packed_outputs,
                             call.pack_spikes)
    same = (call.plan is None and promoted.plan is None) or call.plan == promoted.plan
    return promoted if same and promoted.num_saved == call.num_saved else None


def param_kinds(call_counts):
    return [SCALAR if kind == "scalar" else NEURON for kind in call_counts.params]


def split_seed(tensors, num_before):
    """(tensors, seed or None) of a call's tensors whose seed, when given, follows `num_before` others."""
    if len(tensors) > num_before:
        return tensors[:num_before], tensors[num_before]
    return tensors, None


def seed_kinds(tensors, num_before):
    return [SEED] if len(tensors) > num_before else []


class FuncTraining(torch.autograd.Function):
    """The training forward: (*outputs, *final_states, *state_seqs?, *saved). Tensors: inputs,
    initial states, params, then the seed when there is one."""

    @staticmethod
    def forward(call, num_inputs, num_states, *tensors):
        tensors, seed = split_seed(tensors, num_inputs + num_states + len(call.counts.params))
        inputs = tensors[:num_inputs]
        return tuple(call.forward(inputs, tensors[num_inputs:num_inputs + num_states],
                                  tensors[num_inputs + num_states:], seed))

    @staticmethod
    def setup_context(ctx, inputs, output):
        call, num_inputs, num_states, *tensors = inputs
        tensors, seed = split_seed(tensors, num_inputs + num_states + len(call.counts.params))
        # The saved values stay differentiable outputs (their gradients are never used): then the
        # backward's node depends on them, and a second derivative reaches FuncBackward.backward
        # and raises instead of counting as zero.
        ctx.set_materialize_grads(False)
        keep_for_backward(ctx, call, output, tensors[:num_inputs], tensors[num_inputs:num_inputs + num_states],
                          tensors[num_inputs + num_states:], seed)
        ctx.num_states_given = num_states
        ctx.seed_given = seed is not None

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        counts = call.counts
        no, ns, ni = counts.outputs, counts.states, counts.inputs
        back, params = saved_for_backward(ctx)
        go = list(output_gradients(grads, counts, call.packed_outputs))
        gf = list(grads[no:no + ns])
        gs = list(grads[no + ns:no + 2 * ns]) if call.store_state_seqs else []
        seed = seed_for_backward(ctx)
        results = FuncBackward.apply(call, ctx.seq_shape, ctx.dtype, ctx.device, len(back), len(params), len(go),
                                     len(gf), seed is not None, *back, *params, *go, *gf, *gs,
                                     *seed_tensors(seed))
        results = [r if flows else None for r, flows in zip(results, call.gradient_flows)]
        grad_states = results[ni:ni + ns] if ctx.num_states_given else ()
        return (None, None, None, *results[:ni], *grad_states, *results[ni + ns:],
                *((None,) if ctx.seed_given else ()))

    @staticmethod
    def vmap(info, in_dims, call, num_inputs, num_states, *tensors):
        counts = call.counts
        kinds = [SEQ] * num_inputs + [NEURON] * num_states + param_kinds(counts)
        kinds += seed_kinds(tensors, len(kinds))
        out_kinds = [SEQ] * counts.outputs + [NEURON] * counts.states + [SEQ] * (
            counts.states if call.store_state_seqs else 0) + [SEQ] * call.num_saved
        promoted = per_neuron_call(call) if SCALAR in kinds else None
        return batched(info, in_dims, tensors, kinds, out_kinds,
                       lambda ts, batch: FuncTraining.apply(call, num_inputs, num_states, *ts),
                       fold=not call.packed_outputs and not call.pack_spikes,
                       run_per_neuron=promoted and (lambda ts, batch: FuncTraining.apply(promoted, num_inputs,
                                                                                         num_states, *ts)))


class FuncBackward(torch.autograd.Function):
    """The training backward: (*grad_inputs, *grad_initial_states, *grad_params). Its own
    results are not differentiable again."""

    @staticmethod
    def forward(call, seq_shape, dtype, device, num_back, num_params, num_go, num_gf, has_seed, *tensors):
        seed = tensors[-1] if has_seed else None
        tensors = tensors[:-1] if has_seed else tensors
        back = tensors[:num_back]
        params = tensors[num_back:num_back + num_params]
        grads = tensors[num_back + num_params:]
        return tuple(call.backward(list(seq_shape), dtype, device, list(back), list(params), list(grads[:num_go]),
                                   list(grads[num_go:num_go + num_gf]), list(grads[num_go + num_gf:]),
                                   checked=True, seed=seed))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    backward = staticmethod(refuse_second_derivative)

    @staticmethod
    def vmap(info, in_dims, call, seq_shape, dtype, device, num_back, num_params, num_go, num_gf, has_seed,
             *tensors):
        counts = call.counts
        kinds_of_params = param_kinds(counts)
        num_gs = len(tensors) - num_back - num_params - num_go - num_gf - int(has_seed)
        kinds = [SEQ] * num_back + kinds_of_params + [SEQ] * num_go + [NEURON] * num_gf + [SEQ] * num_gs
        kinds += [SEED] if has_seed else []
        out_kinds = [SEQ] * counts.inputs + [NEURON] * counts.states + kinds_of_params

        def runner(backward_call):
            def run(ts, batch):
                shape = list(seq_shape) if batch is None else [seq_shape[0], batch, *seq_shape[1:]]
                return FuncBackward.apply(backward_call, shape, dtype, device, num_back, num_params, num_go, num_gf,
                                          has_seed, *ts)
            return run

        # A scalar parameter's gradient is one sum over the neurons: per batch element, one sum
        # over that element's neurons (of the gradients per neuron).
        promoted = per_neuron_call(call) if SCALAR in kinds_of_params else None
        # A random neuron's draws follow its neurons' indices, which folding changes: its backward
        # (which recomputes them under checkpoints) folds only where its forward did.
        fold = not call.pack_spikes and not (call.counts.random and call.packed_outputs)
        return batched(info, in_dims, tensors, kinds, out_kinds, runner(call), fold,
                       run_per_neuron=promoted and runner(promoted))


class FuncInference(torch.autograd.Function):
    """Inference (only under no_grad): (*outputs, *state_seqs?, *final_states), not differentiable.
    Tensors: inputs, initial states, params, then the seed when there is one."""

    @staticmethod
    def forward(handle, counts, store_state_seqs, packed_outputs, num_inputs, num_states, *tensors):
        tensors, seed = split_seed(tensors, num_inputs + num_states + len(counts.params))
        return tuple(inference(handle, tensors[:num_inputs], tensors[num_inputs:num_inputs + num_states],
                               tensors[num_inputs + num_states:], store_state_seqs, True, packed_outputs, seed))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(*output)

    @staticmethod
    def vmap(info, in_dims, handle, counts, store_state_seqs, packed_outputs, num_inputs, num_states, *tensors):
        kinds = [SEQ] * num_inputs + [NEURON] * num_states + param_kinds(counts)
        kinds += seed_kinds(tensors, len(kinds))
        out_kinds = [SEQ] * counts.outputs + [SEQ] * (counts.states if store_state_seqs else 0) + \
            [NEURON] * counts.states
        def runner(run_handle):
            run_counts = program_counts(run_handle)[1]
            return lambda ts, batch: FuncInference.apply(run_handle, run_counts, store_state_seqs, packed_outputs,
                                                         num_inputs, num_states, *ts)

        return batched(info, in_dims, tensors, kinds, out_kinds, runner(handle), fold=not packed_outputs,
                       run_per_neuron=runner(per_neuron_handle(handle)) if SCALAR in kinds else None)
