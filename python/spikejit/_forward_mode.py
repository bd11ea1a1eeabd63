"""Forward-mode derivatives through the neuron kernels: torch.func.jvp and jacfwd (with vmap on
either side) and torch.autograd.forward_ad's dual tensors.

A call with tangents runs the neuron's tangent neuron (_core.Program.tangent: the step, then the
tangents of its outputs and next states), made once per neuron and owned by its registry entry.
Dual tensors take one pass of it, which gives the results and their tangents. Under torch.func
the call is FuncTangent, whose forward gives the results from the neuron's own inference kernels
(an autograd.Function must, before it sees the tangents) and whose jvp runs the tangent neuron.
Gradients through such a call, and transforms of both modes at once, are refused: the tangent
kernels' results have no gradient.

A neuron that draws random numbers has the same uniform() streams in its tangent neuron, so both
passes of a call take the call's one seed and draw the same numbers (the draws have no tangent).
"""
import torch
import torch.autograd.forward_ad as _forward_ad
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

from . import registry
from ._func_transforms import (NEURON, SCALAR, SEQ, FuncInference, batched, param_kinds, per_neuron_handle,
                               seed_kinds, split_seed, transforms_active)
from ._kernel_calls import inference, initial_states, program_counts, seed_tensors, split_inference_results


def has_tangents(*groups) -> bool:
    """Whether the call takes forward-mode derivatives: under torch.func, when a jvp transform is
    active at any level (jvp, jacfwd, with vmap inside or outside); else when a tensor of the
    groups (None: absent) carries a torch.autograd.forward_ad tangent. (The ordinary paths would
    hand on no tangent: the inference path; or a zero one: the op's.)"""
    if transforms_active():
        return jvp_transform_active()
    return _forward_ad._current_level >= 0 and any(t is not None and _forward_ad.unpack_dual(t).tangent is not None
                                                   for tensors in groups for t in tensors)


def run_with_tangents(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                      packed_outputs, seed=None):
    """spikejit.functional.run_neuron for a call that takes forward-mode derivatives: (outputs,
    final states, state sequences or None), with their tangents. `seed`: that of a neuron with
    random numbers (None otherwise), for both the neuron and its tangent neuron."""
    if packed_outputs:
        raise ValueError(f"packed_outputs: expected 0 for inputs with forward-mode tangents (bit rows carry no "
                         f"derivative), got {packed_outputs}")
    init_states = initial_states(handle, init_states, inputs[0])
    tangent_handle = tangent_handle_of(handle)
    tensors = [*inputs, *init_states, *params]
    wants_gradient = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if transforms_active() or wants_gradient:  # FuncTangent refuses the gradient
        results = FuncTangent.apply(handle, tangent_handle, bool(store_state_seqs), len(inputs), len(init_states),
                                    *tensors, *seed_tensors(seed))
    else:
        duals = [_forward_ad.unpack_dual(t) for t in tensors]
        primal, tangent = run_tangent_neuron(tangent_handle, bool(store_state_seqs), len(inputs), len(init_states),
                                             [d.primal for d in duals], [d.tangent for d in duals], seed)
        results = [_forward_ad.make_dual(p, d) for p, d in zip(primal, tangent)]
    return split_inference_results(results, num_outputs, num_states, store_state_seqs)


def jvp_transform_active() -> bool:
    """Whether a torch.func forward-mode transform (jvp, jacfwd) is active at any level. Raises
    when a reverse-mode one (grad, vjp, jacrev) is active too: the tangent kernels' results have
    no gradient, and it would silently be zero (jacrev(jacfwd(f)))."""
    kinds = {level.key() for level in retrieve_all_functorch_interpreters()}
    if TransformType.Jvp not in kinds:
        return False
    if TransformType.Grad in kinds:
        refuse_reverse_of_forward_mode(None)
    return True


def refuse_reverse_of_forward_mode(ctx, *grads):
    """The backward of a call with forward-mode tangents."""
    raise RuntimeError("spikejit's neuron kernels take forward-mode derivatives (tangents) or reverse-mode ones "
                       "(gradients), not both through one call: a call whose inputs carry tangents gives no "
                       "gradient")


def tangent_handle_of(handle) -> int:
    """The handle of the neuron's tangent neuron (forward mode), made once, owned by `handle`'s entry."""
    return registry.derived_handle(handle, "tangent", lambda program: program.tangent())


def run_tangent_neuron(tangent_handle, store_state_seqs, num_inputs, num_states, primals, tangents, seed=None):
    """The tangent neuron's inference on a call's tensors (`primals`: inputs, initial states,
    parameters) and their tangents (None: zero): (primal results, tangent results), each
    [*outputs, *state_seqs?, *final_states] like the neuron's own inference. `seed`: the primal
    call's (a random neuron's tangent neuron draws the same numbers from it)."""
    primals = list(primals)
    tangents = [torch.zeros_like(p) if d is None else d for p, d in zip(primals, tangents)]
    ni, ns = num_inputs, num_states
    tensors = [group[begin:end] for begin, end in ((0, ni), (ni, ni + ns), (ni + ns, len(primals)))
               for group in (primals, tangents)]  # each group's primals, then their tangents
    inputs, states, params = tensors[0] + tensors[1], tensors[2] + tensors[3], tensors[4] + tensors[5]
    _, counts = program_counts(tangent_handle)
    if transforms_active():  # batched tangents (jacfwd, vmap around jvp): through the vmap rule
        results = FuncInference.apply(tangent_handle, counts, store_state_seqs, 0, len(inputs), len(states),
                                      *inputs, *states, *params, *seed_tensors(seed))
    else:
        results = inference(tangent_handle, inputs, states, params, store_state_seqs, True, seed=seed)
    # Each group of results (outputs, state sequences, final states) holds its primal half, then
    # its tangent half.
    no, nst = counts.outputs // 2, counts.states // 2
    groups = [(0, no)] + ([(2 * no, nst)] if store_state_seqs else []) + [(len(results) - 2 * nst, nst)]
    return ([r for start, n in groups for r in results[start:start + n]],
            [r for start, n in groups for r in results[start + n:start + 2 * n]])


class FuncTangent(torch.autograd.Function):
    """Inference with forward-mode derivatives: (*outputs, *state_seqs?, *final_states) from the
    neuron's inference kernels, and in jvp their tangents from the inference of its tangent neuron
    (_core.Program.tangent: the step again, then the tangents), which takes each input, state and
    parameter followed by its tangent. Its gradients are refused (refuse_reverse_of_forward_mode)."""

    @staticmethod
    def forward(handle, tangent_handle, store_state_seqs, num_inputs, num_states, *tensors):
        tensors, seed = _split_seed(handle, num_inputs, num_states, tensors)
        return tuple(inference(handle, tensors[:num_inputs], tensors[num_inputs:num_inputs + num_states],
                               tensors[num_inputs + num_states:], store_state_seqs, True, seed=seed))

    @staticmethod
    def setup_context(ctx, inputs, output):
        handle, ctx.tangent_handle, ctx.store_state_seqs, ctx.num_inputs, ctx.num_states, *tensors = inputs
        ctx.num_tensors = len(_split_seed(handle, ctx.num_inputs, ctx.num_states, tensors)[0])
        ctx.save_for_forward(*tensors)

    @staticmethod
    def jvp(ctx, *tangents):
        tensors, seed = split_seed(ctx.saved_tensors, ctx.num_tensors)
        return tuple(run_tangent_neuron(ctx.tangent_handle, ctx.store_state_seqs, ctx.num_inputs, ctx.num_states,
                                        tensors, tangents[5:5 + ctx.num_tensors], seed)[1])

    backward = staticmethod(refuse_reverse_of_forward_mode)

    @staticmethod
    def vmap(info, in_dims, handle, tangent_handle, store_state_seqs, num_inputs, num_states, *tensors):
        _, counts = program_counts(handle)
        kinds = [SEQ] * num_inputs + [NEURON] * num_states + param_kinds(counts)
        kinds += seed_kinds(tensors, len(kinds))
        out_kinds = [SEQ] * counts.outputs + [SEQ] * (counts.states if store_state_seqs else 0) + \
            [NEURON] * counts.states

        def runner(run_handle, run_tangent_handle):
            return lambda ts, batch: FuncTangent.apply(run_handle, run_tangent_handle, store_state_seqs, num_inputs,
                                                       num_states, *ts)

        per_neuron = None
        if SCALAR in kinds:
            promoted = per_neuron_handle(handle)
            per_neuron = runner(promoted, tangent_handle_of(promoted))
        return batched(info, in_dims, tensors, kinds, out_kinds, runner(handle, tangent_handle), fold=True,
                       run_per_neuron=per_neuron)


def _split_seed(handle, num_inputs, num_states, tensors):
    """(inputs, states and params, seed or None) of FuncTangent's tensors."""
    return split_seed(tensors, num_inputs + num_states + len(program_counts(handle)[1].params))
