"""The custom ops of spikejit, registered with torch.library in the namespace `spikejit`.

    spikejit::neuron_inference(handle, inputs, init_states, params, store_state_seqs, final_state,
                               packed_outputs=0, seed=None)
        init_states: [] (every state starts at its declared default) or one tensor per state
        -> [*outputs, *state_seqs (if store_state_seqs), *final_states (if final_state)]
    spikejit::neuron_forward(handle, inputs, init_states, params, store_state_seqs, checkpoint_every=0,
                             packed_outputs=0, pack_spikes=False, seed=None)
        -> [*outputs, *final_states, *state_seqs (if store_state_seqs), *saved]     (has autograd)
        saved: the computed saved values; a saved value that is an input (program.saved_inputs)
        is not written, and autograd passes the input itself to the backward
    spikejit::neuron_backward(handle, seq_shape, dtype, device, saved, params,
                              grad_outputs, grad_final_states, grad_state_seqs, checkpoint_every=0,
                              pack_spikes=False, seed=None)
        -> [*grad_inputs, *grad_initial_states, *grad_params]
    spikejit::spike(x, surrogate, params) -> Heaviside(x), backward grad * surrogate'(x)
    spikejit::bit_spike_compress(s) / spikejit::bit_spike_decompress(c, shape, dtype=None)
    spikejit::pack_spike_rows(s) / spikejit::unpack_spike_rows(packed, shape, dtype=None)

`checkpoint_every` is the save policy of training: 0 saves what the backward needs per step
([T, *S] tensors); k >= 1 saves only one checkpoint per state every k steps ([ceil(T/k), *S],
float32, or float64 for float64 inputs) and the backward recomputes the steps between them from
the inputs: its `saved` is then [*checkpoints, *inputs] (autograd keeps the inputs alive).
`pack_spikes` (per step only) saves spike-valued values as bits, uint8 [T, ceil(N/8)] tensors
(Program.saved_plan(True) says which), choosing what to save with them at 1/16 of a value.

Bit rows: a [T, *S] spike sequence as uint8 [T, ceil(N/8)] (N = prod(S)), neuron n of step t at
bit n % 8 of byte n // 8 of row t; for N % 8 == 0 that is bit_spike_compress of the sequence.
`packed_outputs` (bit i: output i; only outputs in Program.packable_outputs) returns those
outputs as bit rows instead of [T, *S] values; they carry no gradient.

`seed`: for a neuron that draws random numbers (Program.uses_random), an int64 tensor of one
element on the call's device, which the kernels read where it lives; the draws are a function of
(seed, neuron, step, stream), the same on CPU and CUDA. The forwards of such a neuron need one;
its backward needs the forward's own under checkpoints (autograd passes it). Other neurons
ignore it.

`handle` names a program in `spikejit.registry`. Sequences are [T, *S], states and per-neuron
parameters [*S], scalar parameters [] or [1]; every tensor of one call has one dtype and one
device. CPU tensors run on the C++ executor, CUDA tensors on generated kernels launched on the
current stream; nothing synchronises and nothing reads tensor values on the host.
`run_training` / `run_inference` are what the package calls: the ops inside graphs, and the same
implementations without the dispatcher for plain tensors in eager mode.
"""
from typing import List, Optional

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor

from . import _core, _kernel_calls, registry
from ._func_transforms import (KERNELS_FIRST_ORDER, FuncInference, FuncTraining, refuse_second_derivative,
                               transforms_active)
from ._layout import memory_order
from ._kernel_calls import (ActiveReference, check_call, check_strided, check_tensor, current_stream, describe,
                            inference, inference_buffers, keep_for_backward, neurons_of, output_gradients,
                            program_counts, resolve_checkpoint_every, row_bytes, saved_for_backward,
                            seed_for_backward, seed_tensors, split_inference_results, split_training_results,
                            training_call)
from ._surrogate_grads import SURROGATE_GRADIENTS, surrogate_gradient


# ---------------------------------------------------------------------------------------------
# The custom ops (what torch.compile, export and opcheck see)
#
# Their schemas are written out: a list that may be empty (no initial states given, a neuron
# without parameters) is declared optional, `Tensor[]?`, because AOTInductor's proxy executor
# passes an empty tensor list as None (PyTorch 2.11), which a plain `Tensor[]` refuses. Python
# callers pass lists; the implementations read None as [].


def _listed(tensors) -> list:
    """An optional tensor list of the schemas as a list (None: empty)."""
    return [] if tensors is None else tensors


@torch.library.custom_op("spikejit::neuron_inference", mutates_args=(), schema=(
    "(SymInt handle, Tensor[] inputs, Tensor[]? init_states, Tensor[]? params, bool store_state_seqs, "
    "bool final_state, SymInt packed_outputs=0, Tensor? seed=None) -> Tensor[]"))
def neuron_inference(handle: int, inputs: List[Tensor], init_states: Optional[List[Tensor]],
                     params: Optional[List[Tensor]], store_state_seqs: bool, final_state: bool,
                     packed_outputs: int = 0, seed: Optional[Tensor] = None) -> List[Tensor]:
    return inference(handle, inputs, _listed(init_states), _listed(params), store_state_seqs, final_state,
                     packed_outputs, seed)


@neuron_inference.register_fake
def _(handle, inputs, init_states, params, store_state_seqs, final_state, packed_outputs=0, seed=None):
    # A traced graph names the program by its handle and may run where no module registered it
    # (an exported program, after its model is gone or in another process): each fake remembers it.
    registry.remember(handle)
    _, counts = program_counts(handle)
    _, outputs, state_seqs, final_states = inference_buffers(
        counts, inputs, _listed(init_states), _listed(params), store_state_seqs, final_state, packed_outputs, seed)
    return outputs + state_seqs + final_states


def training_forward(handle: int, inputs, init_states, params, store_state_seqs: bool, checkpoint_every: int = 0,
                     packed_outputs: int = 0, pack_spikes: bool = False, seed: Optional[Tensor] = None):
    """[*outputs, *final_states, *state_seqs (if store_state_seqs), *saved]; packed outputs and
    packed saved values are uint8 bit rows."""
    call = training_call(handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
    return call.forward(inputs, init_states, params, seed)


@torch.library.custom_op("spikejit::neuron_forward", mutates_args=(), schema=(
    "(SymInt handle, Tensor[] inputs, Tensor[]? init_states, Tensor[]? params, bool store_state_seqs, "
    "SymInt checkpoint_every=0, SymInt packed_outputs=0, bool pack_spikes=False, Tensor? seed=None) -> Tensor[]"))
def neuron_forward(handle: int, inputs: List[Tensor], init_states: Optional[List[Tensor]],
                   params: Optional[List[Tensor]], store_state_seqs: bool, checkpoint_every: int = 0,
                   packed_outputs: int = 0, pack_spikes: bool = False,
                   seed: Optional[Tensor] = None) -> List[Tensor]:
    return training_forward(handle, inputs, _listed(init_states), _listed(params), store_state_seqs,
                            checkpoint_every, packed_outputs, pack_spikes, seed)


@neuron_forward.register_fake
def _(handle, inputs, init_states, params, store_state_seqs, checkpoint_every=0, packed_outputs=0,
      pack_spikes=False, seed=None):
    registry.remember(handle)
    call = training_call(handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
    _, outputs, final_states, state_seqs, saved = call.forward_buffers(inputs, _listed(init_states),
                                                                       _listed(params), seed)
    return outputs + final_states + state_seqs + saved


def training_backward(handle: int, seq_shape, dtype, device, saved, params, grad_outputs,
                      grad_final_states, grad_state_seqs, checkpoint_every: int = 0, pack_spikes: bool = False,
                      seed: Optional[Tensor] = None):
    """[*grad_inputs, *grad_initial_states, *grad_params]; None gradients count as zeros."""
    call = training_call(handle, False, checkpoint_every, 0, pack_spikes)
    return call.backward(list(seq_shape), dtype, device, saved, params, grad_outputs, grad_final_states,
                         grad_state_seqs, seed=seed)


@torch.library.custom_op("spikejit::neuron_backward", mutates_args=(), schema=(
    "(SymInt handle, SymInt[] seq_shape, ScalarType dtype, Device device, Tensor[]? saved, Tensor[]? params, "
    "Tensor?[] grad_outputs, Tensor?[]? grad_final_states, Tensor?[]? grad_state_seqs, SymInt checkpoint_every=0, "
    "bool pack_spikes=False, Tensor? seed=None) -> Tensor[]"))
def neuron_backward(handle: int, seq_shape: List[int], dtype: torch.dtype, device: torch.device,
                    saved: Optional[List[Tensor]], params: Optional[List[Tensor]],
                    grad_outputs: List[Optional[Tensor]], grad_final_states: Optional[List[Optional[Tensor]]],
                    grad_state_seqs: Optional[List[Optional[Tensor]]], checkpoint_every: int = 0,
                    pack_spikes: bool = False, seed: Optional[Tensor] = None) -> List[Tensor]:
    return training_backward(handle, seq_shape, dtype, device, _listed(saved), _listed(params), grad_outputs,
                             _listed(grad_final_states), _listed(grad_state_seqs), checkpoint_every, pack_spikes,
                             seed)


@neuron_backward.register_fake
def _(handle, seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states, grad_state_seqs,
      checkpoint_every=0, pack_spikes=False, seed=None):
    registry.remember(handle)
    call = training_call(handle, False, checkpoint_every, 0, pack_spikes)
    return call.backward_buffers(list(seq_shape), dtype, device, _listed(saved), _listed(params), grad_outputs,
                                 _listed(grad_final_states), _listed(grad_state_seqs), seed)


def _setup_forward(ctx, inputs, output):
    handle, xs, init_states, params, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes, seed = inputs
    call = training_call(handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
    keep_for_backward(ctx, call, output, xs, _listed(init_states), _listed(params), seed)
    ctx.states_given = len(_listed(init_states)) > 0


def _backward_forward(ctx, grads):
    call = ctx.call
    counts = call.counts
    ns, no, ni = counts.states, counts.outputs, counts.inputs
    saved, params = saved_for_backward(ctx)
    grad_outputs = output_gradients(grads, counts, call.packed_outputs)
    grad_final_states = list(grads[no:no + ns])
    grad_state_seqs = list(grads[no + ns:no + 2 * ns]) if call.store_state_seqs else []
    results = torch.ops.spikejit.neuron_backward(
        call.handle, ctx.seq_shape, ctx.dtype, ctx.device, list(saved), list(params), list(grad_outputs),
        grad_final_states, grad_state_seqs, call.checkpoint_every, call.pack_spikes, seed_for_backward(ctx))
    results = [r if flows else None for r, flows in zip(results, call.gradient_flows)]
    grad_states = results[ni:ni + ns] if ctx.states_given else []
    # The dispatcher drops arguments equal to their defaults (checkpoint_every = 0, ...): one
    # gradient (None) per argument the op was called with.
    return (None, results[:ni], grad_states, results[ni + ns:], None, None, None,
            None, None)[:len(ctx.needs_input_grad)]


torch.library.register_autograd("spikejit::neuron_forward", _backward_forward, setup_context=_setup_forward)
# A gradient of the gradients (create_graph=True, then a second autograd.grad) raises spikejit's
# own message instead of PyTorch's "no autograd formula was registered".
torch.library.register_autograd("spikejit::neuron_backward", refuse_second_derivative)


# ---------------------------------------------------------------------------------------------
# Eager fast path: outside torch.compile / tracing, plain tensors skip the custom-op dispatch
# (its pytree handling of tensor lists costs ~150 us per training call). Same implementations,
# same results; the ops above remain what every graph sees.

_NON_TENSOR_ARGS = 5  # of _Training.forward, before the tensors (the seed counts: it has no gradient)


class _Training(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, carriers, num_inputs, num_states, seed, *tensors):
        inputs = tensors[:num_inputs]
        init_states = tensors[num_inputs:num_inputs + num_states]
        params = tensors[num_inputs + num_states:]
        results = call.forward(inputs, init_states, params, seed)
        # Unused outputs (often the final state) get None, not a tensor of zeros: the kernels
        # read an absent gradient as zero without allocating, filling and reading one. (Packed
        # outputs, uint8, carry no gradient: theirs is None too.)
        ctx.set_materialize_grads(False)
        anchor = inputs[0].new_empty(0)  # last, after any carriers; run_training drops it
        keep_for_backward(ctx, call, results, inputs, init_states, params, seed, anchor)
        ctx.num_states_given = num_states
        ctx.carriers = carriers
        returned = tuple(results[:call.first_saved])
        if carriers:
            returned += tuple(_gradient_carrier(inputs[0]) for _ in range(bin(call.packed_outputs).count("1")))
        return returned + (anchor,)

    @staticmethod
    def backward(ctx, *grads):
        if not torch.is_grad_enabled():
            return _training_backward(ctx, *grads)
        with torch.no_grad():  # create_graph=True: the kernels' gradients have no graph of their own
            results = _training_backward(ctx, *grads)
        return refusing_second_derivatives(results, ctx.saved_tensors[-1], grads)


def _training_backward(ctx, *grads):
    call = ctx.call
    counts = call.counts
    ns, no, ni = counts.states, counts.outputs, counts.inputs
    saved, params = saved_for_backward(ctx)
    grad_outputs = output_gradients(grads, counts, call.packed_outputs)
    if ctx.carriers:  # the packed outputs' gradients, as their carriers received them
        grad_outputs = with_carriers(grad_outputs, grads[call.first_saved:], call.packed_outputs)
    # Only the gradients autograd asks for: none for inputs without requires_grad (e.g. data),
    # none for initial states that were not given.
    needs = ctx.needs_input_grad[_NON_TENSOR_ARGS:]
    given = ctx.num_states_given
    wanted = needs[:ni] + (needs[ni:ni + ns] if given else (False,) * ns) + needs[ni + given:]
    wanted = tuple(w and flows for w, flows in zip(wanted, call.gradient_flows))
    results = call.backward(ctx.seq_shape, ctx.dtype, ctx.device, saved, params, grad_outputs,
                            grads[no:no + ns], grads[no + ns:no + 2 * ns] if call.store_state_seqs else (),
                            wanted, checked=True, seed=seed_for_backward(ctx))
    grad_states = results[ni:ni + ns] if given else []
    return (None,) * _NON_TENSOR_ARGS + (*results[:ni], *grad_states, *results[ni + ns:])


class _SecondDerivativeRefused(torch.autograd.Function):
    """The identity on gradients computed without a graph (by the kernels, or by a Recompute
    block's backward), under create_graph=True, with edges to everything they depend on:
    differentiating them again raises `message`, so a second derivative through them is an
    error, not a silent zero or a silently missing term."""

    @staticmethod
    def forward(num_links, message, *tensors):
        return tuple(g.view_as(g) for g in tensors[num_links:])

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.message = inputs[1]

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def refusing_second_derivatives(results, anchor: Tensor, grads, message: str = KERNELS_FIRST_ORDER):
    """`results` (tensors and None, computed without a graph) behind a _SecondDerivativeRefused
    node linked to `anchor` and to the incoming `grads` that have a graph. The anchor, an empty
    output of the forward, leads back to the forward's inputs, initial states and parameters:
    any path of a second derivative from the results to them passes the refusing node. (Without
    it the results would be fresh leaves, and autograd.grad would leave out their terms.)"""
    links = [anchor, *(g for g in grads if g is not None and g.requires_grad)]
    tensors = [r for r in results if r is not None]
    refused = iter(_SecondDerivativeRefused.apply(len(links), message, *links, *tensors) if tensors else ())
    return tuple(None if r is None else next(refused) for r in results)


def with_carriers(per_output, carriers, packed_outputs: int) -> list:
    """`per_output` (one entry per output) with each packed output's entry replaced by the next of
    `carriers` (what follows the outputs, final states and state sequences with carriers=True)."""
    carried = iter(carriers)
    return [next(carried) if packed_outputs >> i & 1 else v for i, v in enumerate(per_output)]


def _gradient_carrier(x: Tensor) -> Tensor:
    """A stand-in of x's shape and dtype that stores one NaN (any use of its values shows): what a
    packed output's gradient arrives on (see run_training's `carriers`)."""
    return x.new_full((), float("nan")).expand(x.shape)


def _train_in_cpp(call, inputs, init_states, params, seed):
    """[*outputs, *final_states, *state_seqs (if stored)] of a training call run by
    _core.train_eager, after the checks of TrainingCall.forward."""
    check_call(call.counts, inputs, init_states, params, seed)
    return _core.train_eager(call.program, inputs, init_states, params, seed, call.store_state_seqs,
                             call.checkpoint_every, call.pack_spikes, ActiveReference(call.handle))


def is_eager(*groups) -> bool:
    """Plain tensors outside compilation and tracing (then the dispatcher can be skipped). The first
    group's first tensor on the meta device takes the dispatcher too: to the fake implementations,
    which give the results' shapes without running anything."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return False
    if groups[0] and groups[0][0].is_meta:
        return False
    return all(type(t) is Tensor or type(t) is torch.nn.Parameter for tensors in groups for t in tensors)


def run_training(handle: int, inputs, init_states, params, store_state_seqs: bool, checkpoint_every: int = 0,
                 packed_outputs: int = 0, pack_spikes: bool = False, carriers: bool = False, seed=None):
    """The training forward with autograd: [*outputs, *final_states, *state_seqs (if stored)],
    possibly followed by the saved tensors (callers slice by their counts). `seed`: see the ops
    (None for a neuron without random numbers).

    `carriers` (eager only, see is_eager): then follows one gradient carrier per packed output, a
    float stand-in of the output's full shape holding no values, whose gradient the backward
    takes as that output's. A caller that needs an output's gradient but not its values (the
    spikes a recomputed block returns, spikejit.Recompute) saves the full-width write this way."""
    seeds = seed_tensors(seed)
    if is_eager(inputs, init_states, params, seeds):
        call = training_call(handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
        if transforms_active():
            if carriers:
                raise ValueError("carriers: expected False under torch.func transforms, got True")
            return list(FuncTraining.apply(call, len(inputs), len(init_states), *inputs, *init_states, *params,
                                           *seeds))
        inputs, init_states, params, seed = _without_dead_wrappers(inputs, init_states, params, seed)
        if _kernel_calls.CPP_CALLS and not carriers and not packed_outputs:
            return _train_in_cpp(call, inputs, init_states, params, seed)
        results = _bare_apply(call, carriers, len(inputs), len(init_states), seed, *inputs, *init_states, *params)
        return list(results[:-1])  # (without the anchor, see _Training.forward)
    if carriers:
        raise ValueError("carriers: expected False inside torch.compile or a tensor subclass (the custom op "
                         "has no gradient carriers), got True")
    return torch.ops.spikejit.neuron_forward(handle, inputs, init_states, params, store_state_seqs,
                                             checkpoint_every, packed_outputs, pack_spikes, seed)


# _Training.apply without autograd.Function.apply's Python wrapper, whose only work outside
# torch.func transforms is unwrapping tensors left over from a finished transform (a few µs a
# call, where small calls are bound by the host; _without_dead_wrappers does that first).
_bare_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _Training)
_is_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def _without_dead_wrappers(inputs, init_states, params, seed):
    """The arguments of an eager call outside torch.func transforms, each tensor that escaped a
    finished transform (still wrapped, without storage) replaced by the tensor it wraps, as
    autograd.Function.apply does: the kernels read storage."""
    if not any(map(_is_functorch_wrapped, (*inputs, *init_states, *params, *seed_tensors(seed)))):
        return inputs, init_states, params, seed

    def unwrap(tensors):
        return [_unwrap_if_dead(t) for t in tensors]
    return unwrap(inputs), unwrap(init_states), unwrap(params), None if seed is None else _unwrap_if_dead(seed)


_PLAIN_TYPES = (Tensor, torch.nn.Parameter)


def is_plain_eager(inputs, init_states, params) -> bool:
    """Whether a call can go straight to the C++ calls (run_plain): plain tensors (None states
    too), none left over from a finished torch.func transform, inputs[0] contiguous or strided
    but not a permuted dense layout (those run in their memory order, see _layout) and not on the
    meta device (see is_eager); outside torch.compile, tensor subclasses and modes, torch.func
    transforms and forward-mode AD. The layers of run_neuron each ask part of this; asking once
    saves 5-7 µs of a small call, which is bound by the host (docs/benchmarks.md)."""
    if (not _kernel_calls.CPP_CALLS or torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or transforms_active() or _forward_ad._current_level >= 0):
        return False
    for group in (inputs, init_states, params):
        for t in group:
            if t is not None and (type(t) not in _PLAIN_TYPES or _is_functorch_wrapped(t)):
                return False
    x = inputs[0] if len(inputs) > 0 else None
    return (x is not None and x.layout is torch.strided and not x.is_meta
            and (x.is_contiguous() or memory_order(x) is None))


def run_plain(handle: int, num_outputs: int, num_states: int, inputs, init_states, params, store_state_seqs: bool,
              checkpoint_every, seed=None):
    """A call that is_plain_eager, on the states initial_states gave: (outputs, final_states,
    state_seqs or None), through the training forward (with autograd) when a gradient is needed,
    else inference. `checkpoint_every`: checked, "auto" not yet resolved."""
    if torch.is_grad_enabled() and any(t.requires_grad for group in (inputs, init_states, params) for t in group):
        checkpoint_every = resolve_checkpoint_every(checkpoint_every, handle, inputs[0], store_state_seqs, 0, False)
        results = _train_in_cpp(training_call(handle, store_state_seqs, checkpoint_every), inputs, init_states,
                                params, seed)
        return split_training_results(results, num_outputs, num_states, store_state_seqs)
    results = inference(handle, inputs, init_states, params, store_state_seqs, True, 0, seed)
    return split_inference_results(results, num_outputs, num_states, store_state_seqs)


def run_inference(handle: int, inputs, init_states, params, store_state_seqs: bool, final_state: bool,
                  packed_outputs: int = 0, seed=None):
    """Inference (no autograd): [*outputs, *state_seqs (if stored), *final_states (if asked)]."""
    seeds = seed_tensors(seed)
    if is_eager(inputs, init_states, params, seeds):
        if transforms_active():
            _, counts = program_counts(handle)
            results = FuncInference.apply(handle, counts, store_state_seqs, packed_outputs, len(inputs),
                                          len(init_states), *inputs, *init_states, *params, *seeds)
            return list(results if final_state else results[:len(results) - counts.states])
        inputs, init_states, params, seed = _without_dead_wrappers(inputs, init_states, params, seed)
        return inference(handle, inputs, init_states, params, store_state_seqs, final_state, packed_outputs, seed)
    return torch.ops.spikejit.neuron_inference(handle, inputs, init_states, params, store_state_seqs, final_state,
                                               packed_outputs, seed)


# ---------------------------------------------------------------------------------------------
# Spike with a surrogate gradient


def check_surrogate(surrogate: str, params) -> None:
    """ValueError unless `surrogate` is a known snake_case name with its full parameter list."""
    info = SURROGATE_INFO.get(surrogate)
    if info is None:
        known = ", ".join(sorted(SURROGATE_INFO))
        raise ValueError(f"surrogate: expected one of {known}, got {surrogate!r}")
    if len(params) != len(info[1]):
        raise ValueError(f"params: surrogate {surrogate} takes {len(info[1])} parameters {info[1]}, got {len(params)}")


SURROGATE_INFO = {name: (class_name, param_names, defaults)
                  for name, class_name, param_names, defaults in _core.surrogates()}
assert set(SURROGATE_INFO) == set(SURROGATE_GRADIENTS), "a Python gradient for every C++ surrogate"


@torch.library.custom_op("spikejit::spike", mutates_args=())
def spike(x: Tensor, surrogate: str, params: List[float]) -> Tensor:
    check_surrogate(surrogate, params)
    return (x >= 0).to(x.dtype)


@spike.register_fake
def _(x, surrogate, params):
    check_surrogate(surrogate, params)
    return torch.empty_like(x)


def _setup_spike(ctx, inputs, output):
    x, surrogate, params = inputs
    ctx.save_for_backward(x)
    ctx.surrogate = surrogate
    ctx.params = params


def _backward_spike(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * surrogate_gradient(x, ctx.surrogate, ctx.params), None, None


torch.library.register_autograd("spikejit::spike", _backward_spike, setup_context=_setup_spike)


class _EagerSpike(torch.autograd.Function):
    """spikejit::spike outside torch.compile and tracing: the same forward and backward, plus what
    the custom op cannot have: a forward-mode derivative (the surrogate's, as in the backward;
    the op's would silently be zero) and torch.func support (every method is PyTorch ops, so
    vmap rules are generated, and the backward is differentiable again)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, surrogate, params):
        return (x >= 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, ctx.surrogate, ctx.params = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * surrogate_gradient(x, ctx.surrogate, ctx.params), None, None

    @staticmethod
    def jvp(ctx, x_tangent, surrogate_tangent, params_tangent):
        (x,) = ctx.saved_tensors
        return x_tangent * surrogate_gradient(x, ctx.surrogate, ctx.params)


def run_spike(x: Tensor, surrogate: str, params: List[float]) -> Tensor:
    """The spike op, or its eager twin for plain tensors outside compilation and tracing (also
    under torch.func transforms and forward-mode AD, which the op does not support)."""
    check_tensor("x", x)
    if is_eager([x]):
        check_surrogate(surrogate, params)
        return _EagerSpike.apply(x, surrogate, params)
    return torch.ops.spikejit.spike(x, surrogate, params)


# ---------------------------------------------------------------------------------------------
# Bit-spike compression on the C++ kernels: element 8j+i of the flattened input at bit i of byte j
# (LSB first), the last byte zero-padded; any nonzero element counts as a spike (NaN too, -0.0
# not). CPU and CUDA write identical bytes; CUDA kernels run on the current stream.

SPIKE_DTYPE_CODES = {torch.bool: 0, torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4, torch.int64: 5,
                     torch.float16: 6, torch.bfloat16: 7, torch.float32: 8, torch.float64: 9}
_SPIKE_DTYPE_NAMES = ", ".join(str(d).replace("torch.", "") for d in SPIKE_DTYPE_CODES)


def _check_spike_dtype(name: str, dtype) -> None:
    if dtype not in SPIKE_DTYPE_CODES:
        raise TypeError(f"{name}: expected one of {_SPIKE_DTYPE_NAMES}, got {dtype}")


def _spike_spec(t: Tensor):
    return (t.data_ptr(), SPIKE_DTYPE_CODES[t.dtype], list(t.shape))


def _run_bit_kernel(kernel: str, device: torch.device, first: Tensor, second: Tensor) -> None:
    if device.type == "cpu":
        getattr(_core, "cpu_" + kernel)(_spike_spec(first), _spike_spec(second), threads=torch.get_num_threads())
    elif device.type == "cuda":
        stream = current_stream(device)
        getattr(_core, "cuda_" + kernel)(_spike_spec(first), _spike_spec(second), stream=stream, device=device.index)
    else:
        raise ValueError(f"{kernel}: expected a CPU or CUDA tensor, got one on {device}")


def _decompressed(compressed: Tensor, shape, dtype) -> Tensor:
    """Checks the arguments of bit_spike_decompress; returns the (empty) result tensor."""
    check_strided("compressed", compressed)
    dtype = torch.uint8 if dtype is None else dtype
    _check_spike_dtype("dtype", dtype)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape: expected dimensions >= 0, got {list(shape)}")
    n = 1
    for d in shape:
        n *= d
    if compressed.dtype != torch.uint8 or compressed.dim() != 1 or compressed.numel() != (n + 7) // 8:
        raise ValueError(f"compressed: expected uint8[{(n + 7) // 8}] for shape {list(shape)}, got {describe(compressed)}")
    return torch.empty(list(shape), dtype=dtype, device=compressed.device)


def _compress(s: Tensor) -> Tensor:
    check_strided("s", s)
    _check_spike_dtype("s", s.dtype)
    s = s.contiguous()
    packed = torch.empty(((s.numel() + 7) // 8,), dtype=torch.uint8, device=s.device)
    _run_bit_kernel("bit_spike_compress", s.device, s, packed)
    return packed


def _decompress(compressed: Tensor, shape, dtype=None) -> Tensor:
    out = _decompressed(compressed, shape, dtype)
    _run_bit_kernel("bit_spike_decompress", compressed.device, compressed.contiguous(), out)
    return out


def check_positive_int(name: str, value) -> int:
    """An int >= 1 (a count of steps, an order), else a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return value


def shape_argument(name: str, shape) -> List[int]:
    """A shape given as an int or a sequence of ints, as a list (what torch.empty accepts)."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        return [shape]
    if isinstance(shape, (str, bytes, Tensor)) or not isinstance(shape, (list, tuple, torch.Size)) or any(
            isinstance(d, bool) or not isinstance(d, (int, torch.SymInt)) for d in shape):
        raise TypeError(f"{name}: expected a shape (an int or a sequence of ints), got {shape!r}")
    return list(shape)


def compress_spikes(s: Tensor) -> Tensor:
    """bit_spike_compress: the op inside graphs; for plain tensors in eager mode its
    implementation directly (the op's dispatch costs tens of microseconds a call)."""
    check_tensor("s", s)
    return _compress(s) if is_eager([s]) else torch.ops.spikejit.bit_spike_compress(s)


def decompress_spikes(compressed: Tensor, shape, dtype=None) -> Tensor:
    """bit_spike_decompress, as compress_spikes is bit_spike_compress."""
    check_tensor("compressed", compressed)
    shape = shape_argument("shape", shape)
    if is_eager([compressed]):
        return _decompress(compressed, shape, dtype)
    return torch.ops.spikejit.bit_spike_decompress(compressed, shape, dtype)


@torch.library.custom_op("spikejit::bit_spike_compress", mutates_args=())
def bit_spike_compress(s: Tensor) -> Tensor:
    return _compress(s)


@bit_spike_compress.register_fake
def _(s):
    _check_spike_dtype("s", s.dtype)
    return s.new_empty(((s.numel() + 7) // 8,), dtype=torch.uint8)


@torch.library.custom_op("spikejit::bit_spike_decompress", mutates_args=())
def bit_spike_decompress(compressed: Tensor, shape: List[int], dtype: Optional[torch.dtype] = None) -> Tensor:
    return _decompress(compressed, shape, dtype)


@bit_spike_decompress.register_fake
def _(compressed, shape, dtype=None):
    return _decompressed(compressed, shape, dtype)


# ---------------------------------------------------------------------------------------------
# Bit rows: [T, *S] spikes <-> uint8 [T, ceil(N/8)], the layout of packed outputs and packed saved
# values (each step's row padded to whole bytes; for N % 8 == 0, bit_spike_compress itself).


def _check_sequence_shape(name: str, shape) -> None:
    if len(shape) < 1 or any(d < 0 for d in shape):
        raise ValueError(f"{name}: expected a sequence shape [T, *S] with dimensions >= 0, got {list(shape)}")


def _unpacked(packed: Tensor, shape, dtype) -> Tensor:
    """Checks the arguments of unpack_spike_rows; returns the (empty) [T, 8 ceil(N/8)] rows."""
    dtype = torch.uint8 if dtype is None else dtype
    _check_spike_dtype("dtype", dtype)
    _check_sequence_shape("shape", shape)
    rows = [shape[0], row_bytes(neurons_of(shape))]
    if packed.dtype != torch.uint8 or list(packed.shape) != rows:
        raise ValueError(f"packed: expected uint8{rows} ([T, ceil(N/8)] for shape {list(shape)}), got {describe(packed)}")
    return torch.empty([rows[0], 8 * rows[1]], dtype=dtype, device=packed.device)


@torch.library.custom_op("spikejit::pack_spike_rows", mutates_args=())
def pack_spike_rows(s: Tensor) -> Tensor:
    """[T, *S] spikes (nonzero is a spike) -> uint8 [T, ceil(N/8)] bit rows."""
    check_strided("s", s)
    _check_spike_dtype("s", s.dtype)
    _check_sequence_shape("s", list(s.shape))
    steps, n = s.shape[0], neurons_of(list(s.shape))
    rows = s.reshape(steps, n)
    if n % 8:
        rows = torch.cat([rows, rows.new_zeros(steps, 8 - n % 8)], dim=1)
    packed = torch.empty((steps * row_bytes(n),), dtype=torch.uint8, device=s.device)
    _run_bit_kernel("bit_spike_compress", s.device, rows.contiguous().view(-1), packed)
    return packed.view(steps, row_bytes(n))


@pack_spike_rows.register_fake
def _(s):
    _check_spike_dtype("s", s.dtype)
    _check_sequence_shape("s", list(s.shape))
    return s.new_empty((s.shape[0], row_bytes(neurons_of(list(s.shape)))), dtype=torch.uint8)


@torch.library.custom_op("spikejit::unpack_spike_rows", mutates_args=())
def unpack_spike_rows(packed: Tensor, shape: List[int], dtype: Optional[torch.dtype] = None) -> Tensor:
    """uint8 [T, ceil(N/8)] bit rows -> 0/1 spikes of `shape` ([T, *S]) in `dtype` (default uint8)."""
    rows = _unpacked(packed, shape, dtype)
    _run_bit_kernel("bit_spike_decompress", packed.device, packed.contiguous().view(-1), rows.view(-1))
    return rows[:, :neurons_of(shape)].contiguous().view(shape)


@unpack_spike_rows.register_fake
def _(packed, shape, dtype=None):
    _unpacked(packed, shape, dtype)
    return torch.empty(list(shape), dtype=torch.uint8 if dtype is None else dtype, device=packed.device)
