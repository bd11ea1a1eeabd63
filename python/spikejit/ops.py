"""The custom ops of spikejit, registered with torch.library in the namespace `spikejit`.

    spikejit::neuron_inference(handle, inputs, init_states, params, store_state_seqs, final_state,
                               packed_outputs=0)
        init_states: [] (every state starts at its declared default) or one tensor per state
        -> [*outputs, *state_seqs (if store_state_seqs), *final_states (if final_state)]
    spikejit::neuron_forward(handle, inputs, init_states, params, store_state_seqs, checkpoint_every=0,
                             packed_outputs=0, pack_spikes=False)
        -> [*outputs, *final_states, *state_seqs (if store_state_seqs), *saved]     (has autograd)
        saved: the computed saved values; a saved value that is an input (program.saved_inputs)
        is not written, and autograd passes the input itself to the backward
    spikejit::neuron_backward(handle, seq_shape, dtype, device, saved, params,
                              grad_outputs, grad_final_states, grad_state_seqs, checkpoint_every=0,
                              pack_spikes=False)
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

`handle` names a program in `spikejit.registry`. Sequences are [T, *S], states and per-neuron
parameters [*S], scalar parameters [] or [1]; every tensor of one call has one dtype and one
device. CPU tensors run on the C++ executor, CUDA tensors on generated kernels launched on the
current stream; nothing synchronises and nothing reads tensor values on the host.
`run_training` / `run_inference` are what the package calls: the ops inside graphs, and the same
implementations without the dispatcher for plain tensors in eager mode.
"""
from typing import List, Optional

import torch
from torch import Tensor

from . import _core, registry
from ._surrogate_grads import SURROGATE_GRADIENTS, surrogate_gradient

DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


class _Counts:
    """The declaration counts of a program, read once per handle (hot path)."""

    __slots__ = ("inputs", "states", "outputs", "params", "state_defaults", "packable", "plans")

    def __init__(self, program):
        self.inputs = program.num_inputs
        self.states = program.num_states
        self.outputs = program.num_outputs
        self.params = [kind for _, kind, _ in program.params]
        self.state_defaults = program.state_defaults
        self.packable = program.packable_outputs
        self.plans = {}  # pack_spikes -> [(input or -1, packed)], on first training use (autodiff)


def _counts(handle: int):
    program, cache = registry.program_and_cache(handle)
    counts = cache.get("counts")
    if counts is None:
        counts = cache["counts"] = _Counts(program)
    return program, counts


def initial_states(handle: int, states, x_seq: Tensor) -> List[Tensor]:
    """The `init_states` argument of the ops from a list with None for "the default": [] when
    every entry is None, else one tensor per state (defaults filled in)."""
    if all(s is None for s in states):
        return []
    if all(s is not None for s in states):
        return list(states)
    _, counts = _counts(handle)
    if len(states) != counts.states:
        raise ValueError(f"init_states: expected {counts.states} entries, got {len(states)}")
    shape = x_seq.shape[1:]
    return [torch.full(shape, counts.state_defaults[j], dtype=x_seq.dtype, device=x_seq.device) if s is None else s
            for j, s in enumerate(states)]


def check_checkpoint_every(checkpoint_every) -> int:
    """The save policy as an int: 0 (per step) or a checkpoint interval 1..MAX_CHECKPOINT_EVERY."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
        raise TypeError(f"checkpoint_every: expected an int (0: save per step, k >= 1: checkpoints every k steps), "
                        f"got {type(checkpoint_every).__name__}")
    if not 0 <= checkpoint_every <= _core.MAX_CHECKPOINT_EVERY:
        raise ValueError(f"checkpoint_every: expected 0 (save per step) or a checkpoint interval from 1 to "
                         f"{_core.MAX_CHECKPOINT_EVERY}, got {checkpoint_every}")
    return checkpoint_every


def check_pack_spikes(pack_spikes, checkpoint_every: int = 0) -> bool:
    """The pack_spikes policy as a bool (per step only: not with checkpoints)."""
    if not isinstance(pack_spikes, bool):
        raise TypeError(f"pack_spikes: expected a bool, got {type(pack_spikes).__name__}")
    if pack_spikes and checkpoint_every:
        raise ValueError(f"pack_spikes: expected False with checkpoints (packed spikes are a per-step policy), "
                         f"got True with checkpoint_every = {checkpoint_every}")
    return pack_spikes


def _plan(program, counts, pack_spikes: bool):
    """Per saved value of the policy: (the input it is or -1, saved as bits)."""
    plan = counts.plans.get(pack_spikes)
    if plan is None:
        plan = counts.plans[pack_spikes] = program.saved_plan(pack_spikes)
    return plan


def _num_saved(program, counts, pack_spikes: bool = False) -> int:
    """How many tensors the backward reads per step (saved inputs included)."""
    return len(_plan(program, counts, pack_spikes))


def backward_saved(handle: int, saved, inputs, pack_spikes: bool = False) -> List[Tensor]:
    """neuron_backward's per-step `saved` from neuron_forward's `saved` and the forward's inputs."""
    program, counts = _counts(handle)
    return _all_saved(_plan(program, counts, pack_spikes), saved, inputs)


def _all_saved(plan, computed, inputs):
    """The backward's per-step `saved` list: the forward's computed saved values, with each saved
    input (see Program.saved_inputs) taken from `inputs`."""
    rest = iter(computed)
    return [inputs[j] if j >= 0 else next(rest) for j, _ in plan]


def _row_bytes(neurons):
    return (neurons + 7) // 8


def _neurons(seq_shape):
    n = 1
    for d in seq_shape[1:]:
        n = n * d
    return n


def check_packed_outputs(counts, packed_outputs) -> int:
    """The `packed_outputs` bit mask, checked: bits of outputs that are spike-valued only."""
    if isinstance(packed_outputs, bool) or not isinstance(packed_outputs, int) or packed_outputs < 0:
        raise TypeError(f"packed_outputs: expected a bit mask (an int >= 0; bit i: output i), got {packed_outputs!r}")
    if packed_outputs >> counts.outputs:
        raise ValueError(f"packed_outputs: expected bits of the {counts.outputs} outputs, got {packed_outputs:#x}")
    for i in range(counts.outputs):
        if packed_outputs >> i & 1 and not counts.packable[i]:
            raise ValueError(f"packed_outputs: output {i} is not spike-valued (spike(), a comparison, float(bool), "
                             f"0/1 products: see Program.packable_outputs), so it cannot be packed")
    return packed_outputs


def packable_output(handle: int, i: int) -> bool:
    """Whether output i of the program is spike-valued (may be returned as bit rows)."""
    return bool(_counts(handle)[1].packable[i])


def _describe(t: Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} on {t.device}"


def _check_call(counts, inputs, init_states, params):
    """Validates counts, shapes, dtypes and devices; returns (seq_shape, neuron_shape)."""
    if counts.inputs == 0:
        raise ValueError("handle: spikejit ops need a neuron with at least one input (it gives T and S)")
    if len(inputs) != counts.inputs:
        raise ValueError(f"inputs: expected {counts.inputs} tensors, got {len(inputs)}")
    if len(init_states) not in (0, counts.states):
        raise ValueError(f"init_states: expected 0 or {counts.states} entries, got {len(init_states)}")
    if len(params) != len(counts.params):
        raise ValueError(f"params: expected {len(counts.params)} tensors, got {len(params)}")
    x = inputs[0]
    if x.dim() < 1:
        raise ValueError(f"inputs[0]: expected a sequence [T, *S], got {_describe(x)}")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"inputs[0]: expected float32, float64, float16 or bfloat16, got {_describe(x)}")
    if x.dtype == torch.float64 and x.device.type != "cpu":
        raise TypeError(f"inputs[0]: float64 runs on the CPU only; on {x.device.type} expected float32, "
                        f"float16 or bfloat16, got {_describe(x)}")
    seq_shape = list(x.shape)
    neuron_shape = seq_shape[1:]

    def same(t, name, shape):
        if t.dtype != x.dtype:
            raise TypeError(f"{name}: expected dtype {x.dtype} (that of inputs[0]), got {_describe(t)}")
        if t.device != x.device:
            raise ValueError(f"{name}: expected a tensor on {x.device} (that of inputs[0]), got {_describe(t)}")
        if shape is not None and list(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {_describe(t)}")

    for i, t in enumerate(inputs[1:], 1):
        same(t, f"inputs[{i}]", seq_shape)
    for i, t in enumerate(init_states):
        if t is not None:
            same(t, f"init_states[{i}]", neuron_shape)
    for i, (t, kind) in enumerate(zip(params, counts.params)):
        same(t, f"params[{i}]", neuron_shape if kind == "per_neuron" else None)
        if kind == "scalar" and (t.dim() > 1 or t.numel() != 1):
            raise ValueError(f"params[{i}]: expected a scalar parameter of shape [] or [1], got {_describe(t)}")
    return seq_shape, neuron_shape


def _specs(tensors):
    """(data_ptr, dtype code, shape, strides; [] when contiguous) per tensor, None when absent."""
    return [None if t is None else
            (t.data_ptr(), DTYPE_CODES[t.dtype], list(t.shape), [] if t.is_contiguous() else list(t.stride()))
            for t in tensors]


def _packed_specs(tensors):
    """(data_ptr, shape, strides) per bit-row tensor, None when absent."""
    return [None if t is None else (t.data_ptr(), list(t.shape), [] if t.is_contiguous() else list(t.stride()))
            for t in tensors]


def _split_by_mask(tensors, packed):
    """(full-width entries, bit-row entries) of a list whose entries `packed[i]` are bit rows."""
    if not any(packed):
        return list(tensors), []
    return ([None if p else t for t, p in zip(tensors, packed)], [t if p else None for t, p in zip(tensors, packed)])


def _contiguous(tensors):
    return [t if t is None or t.is_contiguous() else t.contiguous() for t in tensors]


def _reads_in_place(g: Tensor) -> bool:
    """Whether the backward kernels read this [T, *S] gradient as it is: stride 0 over T and/or
    over every dimension of S, the rest row-major (SequenceLayout in spikejit/buffers.h). That is
    the expanded gradient of `y.sum()`, which then needs no [T, *S] copy."""
    st, shape = g.stride(), g.shape
    if all(s == 0 or d == 1 for s, d in zip(st[1:], shape[1:])):
        return shape[0] == 1 or st[0] in (0, 1)
    return st[0] == 0 and g[0].is_contiguous()


def _sequence_grads(grads):
    return [g if g is None or g.is_contiguous() or _reads_in_place(g) else g.contiguous() for g in grads]


def _current_stream(device) -> int:
    """The raw CUstream of `device`'s current stream. (What torch.cuda.current_stream(device)
    .cuda_stream returns, without building a Stream object: tens of microseconds per training
    step at small sizes, where the host is the limit. Inductor's generated code uses the same call.)"""
    return torch._C._cuda_getCurrentRawStream(device.index)


def _launch_forward(program, device, seq_shape, inputs, init_states, params, outputs, state_seqs,
                    final_states, saved, checkpoint_every=0, packed_outputs=(), packed_saved=(), pack_spikes=False):
    """`inputs`, `init_states` and `params` must stay referenced by the caller until this returns
    (the kernels read them through raw pointers)."""
    args = (program, seq_shape[0], seq_shape[1:], _specs(inputs), _specs(init_states), _specs(params),
            _specs(outputs), _specs(state_seqs), _specs(final_states), _specs(saved))
    policy = dict(checkpoint_every=checkpoint_every, packed_outputs=_packed_specs(packed_outputs),
                  packed_saved=_packed_specs(packed_saved), pack_spikes=pack_spikes)
    if device.type == "cpu":
        _core.cpu_forward(*args, threads=torch.get_num_threads(), **policy)
    elif device.type == "cuda":
        stream = _current_stream(device)
        _core.cuda_forward(*args, stream=stream, device=device.index, **policy)
    else:
        raise ValueError(f"inputs[0]: expected a CPU or CUDA tensor, got one on {device}")


def _launch_backward(program, device, seq_shape, saved, params, grad_outputs, grad_state_seqs,
                     grad_final_states, grad_inputs, grad_initial_states, grad_params, inputs=(),
                     checkpoint_every=0, packed_saved=(), pack_spikes=False):
    args = (program, seq_shape[0], seq_shape[1:], _specs(saved), _specs(params), _specs(grad_outputs),
            _specs(grad_state_seqs), _specs(grad_final_states), _specs(grad_inputs),
            _specs(grad_initial_states), _specs(grad_params))
    policy = dict(inputs=_specs(inputs), checkpoint_every=checkpoint_every,
                  packed_saved=_packed_specs(packed_saved), pack_spikes=pack_spikes)
    if device.type == "cpu":
        _core.cpu_backward(*args, threads=torch.get_num_threads(), **policy)
    elif device.type == "cuda":
        stream = _current_stream(device)
        _core.cuda_backward(*args, stream=stream, device=device.index, **policy)
    else:
        raise ValueError(f"device: expected a CPU or CUDA device, got {device}")


# ---------------------------------------------------------------------------------------------
# Implementations (plain functions: the custom ops and the eager fast path both call them)


def _output_buffers(counts, x, seq_shape, packed_outputs):
    """Empty outputs: [T, *S] values, or uint8 [T, ceil(N/8)] bit rows where packed."""
    rows = [seq_shape[0], _row_bytes(_neurons(seq_shape))]
    return [x.new_empty(rows, dtype=torch.uint8) if packed_outputs >> i & 1 else x.new_empty(seq_shape)
            for i in range(counts.outputs)]


def _packed_flags(counts, packed_outputs):
    return [bool(packed_outputs >> i & 1) for i in range(counts.outputs)]


def _inference_buffers(counts, inputs, init_states, params, store_state_seqs, final_state, packed_outputs):
    seq_shape, neuron_shape = _check_call(counts, inputs, init_states, params)
    x = inputs[0]
    outputs = _output_buffers(counts, x, seq_shape, check_packed_outputs(counts, packed_outputs))
    state_seqs = [x.new_empty(seq_shape) for _ in range(counts.states)] if store_state_seqs else []
    final_states = [x.new_empty(neuron_shape) for _ in range(counts.states)] if final_state else []
    return seq_shape, outputs, state_seqs, final_states


def inference(handle: int, inputs, init_states, params, store_state_seqs: bool, final_state: bool,
              packed_outputs: int = 0):
    """[*outputs, *state_seqs (if store_state_seqs), *final_states (if final_state)]."""
    program, counts = _counts(handle)
    seq_shape, outputs, state_seqs, final_states = _inference_buffers(
        counts, inputs, init_states, params, store_state_seqs, final_state, packed_outputs)
    full, bits = _split_by_mask(outputs, _packed_flags(counts, packed_outputs))
    _launch_forward(program, inputs[0].device, seq_shape, _contiguous(inputs), _contiguous(init_states),
                    _contiguous(params), full, state_seqs, final_states, [], packed_outputs=bits)
    return outputs + state_seqs + final_states


def saved_buffers(program, counts, x: Tensor, seq_shape, checkpoint_every: int, pack_spikes: bool = False) -> List[Tensor]:
    """Empty tensors for what the training forward saves (the layout of _core.saved_layout,
    computed here so that a symbolic T stays symbolic): per step, one [T, *S] tensor per saved
    value in x's dtype (with pack_spikes, uint8 [T, ceil(N/8)] bit rows where the plan packs);
    with checkpoints, one [ceil(T/k), *S] per state in the compute dtype."""
    if checkpoint_every == 0:
        rows = [seq_shape[0], _row_bytes(_neurons(seq_shape))]
        return [x.new_empty(rows, dtype=torch.uint8) if packed else x.new_empty(seq_shape)
                for j, packed in _plan(program, counts, pack_spikes) if j < 0]  # inputs are not copied
    rows = (seq_shape[0] + checkpoint_every - 1) // checkpoint_every
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return [x.new_empty([rows, *seq_shape[1:]], dtype=dtype) for _ in range(counts.states)]


def _training_buffers(program, counts, inputs, init_states, params, store_state_seqs, checkpoint_every,
                      packed_outputs, pack_spikes):
    seq_shape, neuron_shape = _check_call(counts, inputs, init_states, params)
    x = inputs[0]
    outputs = _output_buffers(counts, x, seq_shape, check_packed_outputs(counts, packed_outputs))
    final_states = [x.new_empty(neuron_shape) for _ in range(counts.states)]
    state_seqs = [x.new_empty(seq_shape) for _ in range(counts.states)] if store_state_seqs else []
    checkpoint_every = check_checkpoint_every(checkpoint_every)
    saved = saved_buffers(program, counts, x, seq_shape, checkpoint_every, check_pack_spikes(pack_spikes, checkpoint_every))
    return seq_shape, outputs, final_states, state_seqs, saved


def training_forward(handle: int, inputs, init_states, params, store_state_seqs: bool, checkpoint_every: int = 0,
                     packed_outputs: int = 0, pack_spikes: bool = False):
    """[*outputs, *final_states, *state_seqs (if store_state_seqs), *saved]; packed outputs and
    packed saved values are uint8 bit rows."""
    program, counts = _counts(handle)
    seq_shape, outputs, final_states, state_seqs, saved = _training_buffers(
        program, counts, inputs, init_states, params, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
    full_outputs, bit_outputs = _split_by_mask(outputs, _packed_flags(counts, packed_outputs))
    full_saved, bit_saved = saved, []
    if not checkpoint_every:
        plan = _plan(program, counts, pack_spikes)
        full_saved, bit_saved = _split_by_mask(_all_saved(plan, saved, [None] * counts.inputs),
                                               [packed for _, packed in plan])
    _launch_forward(program, inputs[0].device, seq_shape, _contiguous(inputs), _contiguous(init_states),
                    _contiguous(params), full_outputs, state_seqs, final_states, full_saved, checkpoint_every,
                    bit_outputs, bit_saved, pack_spikes)
    return outputs + final_states + state_seqs + saved


def _check_grads(grads, count, name, shape, dtype, device):
    if len(grads) not in (0, count):
        raise ValueError(f"{name}: expected 0 or {count} entries, got {len(grads)}")
    for i, g in enumerate(grads):
        if g is None:
            continue
        if list(g.shape) != shape:
            raise ValueError(f"{name}[{i}]: expected shape {shape}, got {_describe(g)}")
        if g.dtype != dtype or g.device != device:
            raise TypeError(f"{name}[{i}]: expected {dtype} on {device}, got {_describe(g)}")


def _backward_results(counts, seq_shape, dtype, device, params, grad_outputs, grad_final_states,
                      grad_state_seqs, wanted=None):
    neuron_shape = list(seq_shape[1:])
    if dtype not in DTYPE_CODES:
        raise TypeError(f"dtype: expected float32, float64, float16 or bfloat16, got {dtype}")
    _check_grads(grad_outputs, counts.outputs, "grad_outputs", list(seq_shape), dtype, device)
    _check_grads(grad_final_states, counts.states, "grad_final_states", neuron_shape, dtype, device)
    _check_grads(grad_state_seqs, counts.states, "grad_state_seqs", list(seq_shape), dtype, device)
    if len(params) != len(counts.params):
        raise ValueError(f"params: expected {len(counts.params)} tensors, got {len(params)}")
    ni, ns = counts.inputs, counts.states
    grad_inputs = [torch.empty(seq_shape, dtype=dtype, device=device) if wanted is None or wanted[i] else None
                   for i in range(ni)]
    grad_states = [torch.empty(neuron_shape, dtype=dtype, device=device)
                   if wanted is None or wanted[ni + j] else None for j in range(ns)]
    grad_params = [torch.empty_like(p) if wanted is None or wanted[ni + ns + k] else None
                   for k, p in enumerate(params)]
    return grad_inputs, grad_states, grad_params


def _split_saved(program, counts, seq_shape, dtype, device, saved, checkpoint_every, pack_spikes):
    """(saved buffers, bit-row saved buffers, inputs) of a backward call: per step, `saved` is what
    the forward saved (uint8 [T, ceil(N/8)] bit rows where pack_spikes packs); with checkpoints,
    one checkpoint per state followed by the forward's inputs."""
    if checkpoint_every == 0:
        plan = _plan(program, counts, check_pack_spikes(pack_spikes))
        if len(saved) != len(plan):
            raise ValueError(f"saved: expected {len(plan)} tensors (one per saved value), got {len(saved)}")
        rows = [seq_shape[0], _row_bytes(_neurons(seq_shape))]
        for i, (t, (_, packed)) in enumerate(zip(saved, plan)):
            if packed and (t.dtype != torch.uint8 or list(t.shape) != rows or t.device != device):
                raise ValueError(f"saved[{i}]: expected the spikes saved as bits, uint8{rows} (T, ceil(N/8)) "
                                 f"on {device}, got {_describe(t)}")
        full, bits = _split_by_mask(saved, [packed for _, packed in plan])
        return full, bits, []
    check_pack_spikes(pack_spikes, checkpoint_every)
    expected = counts.states + counts.inputs
    if len(saved) != expected:
        raise ValueError(f"saved: expected {expected} tensors with checkpoint_every = {checkpoint_every} "
                         f"({counts.states} checkpoints, then the {counts.inputs} inputs), got {len(saved)}")
    checkpoints, inputs = list(saved[:counts.states]), list(saved[counts.states:])
    for i, c in enumerate(checkpoints):
        if c.device != device:
            raise ValueError(f"saved[{i}]: expected a checkpoint on {device}, got {_describe(c)}")
    for i, x in enumerate(inputs, counts.states):
        if list(x.shape) != list(seq_shape):
            raise ValueError(f"saved[{i}]: expected an input of shape {list(seq_shape)}, got {_describe(x)}")
        if x.dtype != dtype or x.device != device:
            raise TypeError(f"saved[{i}]: expected an input of {dtype} on {device}, got {_describe(x)}")
    return checkpoints, [], inputs


def training_backward(handle: int, seq_shape, dtype, device, saved, params, grad_outputs,
                      grad_final_states, grad_state_seqs, checkpoint_every: int = 0, pack_spikes: bool = False,
                      wanted=None):
    """[*grad_inputs, *grad_initial_states, *grad_params]; None gradients count as zeros.
    `wanted` (eager path only; None: all) holds one bool per result: the unwanted ones are None
    and nothing is allocated or stored for them."""
    program, counts = _counts(handle)
    saved, bits, inputs = _split_saved(program, counts, seq_shape, dtype, device, saved,
                                       check_checkpoint_every(checkpoint_every), pack_spikes)
    grad_inputs, grad_states, grad_params = _backward_results(
        counts, seq_shape, dtype, device, params, grad_outputs, grad_final_states, grad_state_seqs, wanted)
    _launch_backward(program, device, seq_shape, _contiguous(saved), _contiguous(params),
                     _sequence_grads(grad_outputs), _sequence_grads(grad_state_seqs),
                     _contiguous(grad_final_states), grad_inputs, grad_states, grad_params,
                     _contiguous(inputs), checkpoint_every, _contiguous(bits), pack_spikes)
    return grad_inputs + grad_states + grad_params


class _ActiveReference:
    """Keeps a program registered while the autograd node that holds it is alive."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        registry.retain_active(handle)
        self.handle = handle

    def __del__(self):
        registry.release_active(self.handle)


# ---------------------------------------------------------------------------------------------
# The custom ops (what torch.compile, export and opcheck see)


@torch.library.custom_op("spikejit::neuron_inference", mutates_args=())
def neuron_inference(handle: int, inputs: List[Tensor], init_states: List[Tensor],
                     params: List[Tensor], store_state_seqs: bool, final_state: bool,
                     packed_outputs: int = 0) -> List[Tensor]:
    return inference(handle, inputs, init_states, params, store_state_seqs, final_state, packed_outputs)


@neuron_inference.register_fake
def _(handle, inputs, init_states, params, store_state_seqs, final_state, packed_outputs=0):
    _, counts = _counts(handle)
    _, outputs, state_seqs, final_states = _inference_buffers(
        counts, inputs, init_states, params, store_state_seqs, final_state, packed_outputs)
    return outputs + state_seqs + final_states


@torch.library.custom_op("spikejit::neuron_forward", mutates_args=())
def neuron_forward(handle: int, inputs: List[Tensor], init_states: List[Tensor],
                   params: List[Tensor], store_state_seqs: bool, checkpoint_every: int = 0,
                   packed_outputs: int = 0, pack_spikes: bool = False) -> List[Tensor]:
    return training_forward(handle, inputs, init_states, params, store_state_seqs, checkpoint_every,
                            packed_outputs, pack_spikes)


@neuron_forward.register_fake
def _(handle, inputs, init_states, params, store_state_seqs, checkpoint_every=0, packed_outputs=0,
      pack_spikes=False):
    program, counts = _counts(handle)
    _, outputs, final_states, state_seqs, saved = _training_buffers(
        program, counts, inputs, init_states, params, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes)
    return outputs + final_states + state_seqs + saved


@torch.library.custom_op("spikejit::neuron_backward", mutates_args=())
def neuron_backward(handle: int, seq_shape: List[int], dtype: torch.dtype, device: torch.device,
                    saved: List[Tensor], params: List[Tensor], grad_outputs: List[Optional[Tensor]],
                    grad_final_states: List[Optional[Tensor]],
                    grad_state_seqs: List[Optional[Tensor]], checkpoint_every: int = 0,
                    pack_spikes: bool = False) -> List[Tensor]:
    return training_backward(handle, seq_shape, dtype, device, saved, params, grad_outputs,
                             grad_final_states, grad_state_seqs, checkpoint_every, pack_spikes)


@neuron_backward.register_fake
def _(handle, seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states, grad_state_seqs,
      checkpoint_every=0, pack_spikes=False):
    program, counts = _counts(handle)
    _split_saved(program, counts, seq_shape, dtype, device, saved, check_checkpoint_every(checkpoint_every),
                 pack_spikes)
    grad_inputs, grad_states, grad_params = _backward_results(
        counts, seq_shape, dtype, device, params, grad_outputs, grad_final_states, grad_state_seqs)
    return grad_inputs + grad_states + grad_params


def _save_for_backward(ctx, program, counts, saved, inputs, params, checkpoint_every, pack_spikes):
    """Keeps what the backward reads: the saved tensors (per step with the saved inputs in their
    places; with checkpoints, then the inputs) and the params."""
    if checkpoint_every:
        saved = list(saved) + list(inputs)
    else:
        saved = _all_saved(_plan(program, counts, pack_spikes), saved, inputs)
    ctx.save_for_backward(*saved, *params)
    ctx.num_saved, ctx.checkpoint_every, ctx.pack_spikes = len(saved), checkpoint_every, pack_spikes


def _saved_for_backward(ctx):
    """(saved, params) as _save_for_backward kept them."""
    tensors = ctx.saved_tensors
    return list(tensors[:ctx.num_saved]), list(tensors[ctx.num_saved:])


def _grad_outputs(grads, counts, packed_outputs):
    """The outputs' gradients; none for packed outputs (bit rows carry none; autograd may still
    hand over a uint8 tangent for them)."""
    return [None if packed_outputs >> i & 1 else g for i, g in enumerate(grads[:counts.outputs])]


def _setup_forward(ctx, inputs, output):
    handle, xs, init_states, params, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes = inputs
    program, counts = _counts(handle)
    first_saved = counts.outputs + counts.states * (2 if store_state_seqs else 1)
    _save_for_backward(ctx, program, counts, output[first_saved:], xs, params, checkpoint_every, pack_spikes)
    ctx.handle = handle
    ctx.active_reference = _ActiveReference(handle)
    ctx.counts = counts
    ctx.store_state_seqs = store_state_seqs
    ctx.seq_shape = list(xs[0].shape)
    ctx.dtype = xs[0].dtype
    ctx.device = xs[0].device
    ctx.states_given = len(init_states) > 0
    ctx.packed_outputs = packed_outputs


def _backward_forward(ctx, grads):
    counts = ctx.counts
    ns, no, ni = counts.states, counts.outputs, counts.inputs
    saved, params = _saved_for_backward(ctx)
    grad_outputs = _grad_outputs(grads, counts, ctx.packed_outputs)
    grad_final_states = list(grads[no:no + ns])
    grad_state_seqs = list(grads[no + ns:no + 2 * ns]) if ctx.store_state_seqs else []
    results = torch.ops.spikejit.neuron_backward(
        ctx.handle, ctx.seq_shape, ctx.dtype, ctx.device, saved, params, grad_outputs,
        grad_final_states, grad_state_seqs, ctx.checkpoint_every, ctx.pack_spikes)
    grad_states = results[ni:ni + ns] if ctx.states_given else []
    # The dispatcher drops arguments equal to their defaults (checkpoint_every = 0, ...): one
    # gradient (None) per argument the op was called with.
    return (None, results[:ni], grad_states, results[ni + ns:], None, None, None,
            None)[:len(ctx.needs_input_grad)]


torch.library.register_autograd("spikejit::neuron_forward", _backward_forward, setup_context=_setup_forward)


# ---------------------------------------------------------------------------------------------
# Eager fast path: outside torch.compile / tracing, plain tensors skip the custom-op dispatch
# (its pytree handling of tensor lists costs ~150 us per training call). Same implementations,
# same results; the ops above remain what every graph sees.


class _Training(torch.autograd.Function):
    @staticmethod
    def forward(ctx, handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes, carriers, num_inputs,
                num_states, *tensors):
        inputs = list(tensors[:num_inputs])
        init_states = list(tensors[num_inputs:num_inputs + num_states])
        params = list(tensors[num_inputs + num_states:])
        results = training_forward(handle, inputs, init_states, params, store_state_seqs, checkpoint_every,
                                   packed_outputs, pack_spikes)
        # Unused outputs (often the final state) get None, not a tensor of zeros: the kernels
        # read an absent gradient as zero without allocating, filling and reading one. (Packed
        # outputs, uint8, carry no gradient: theirs is None too.)
        ctx.set_materialize_grads(False)
        program, counts = _counts(handle)
        first_saved = counts.outputs + counts.states * (2 if store_state_seqs else 1)
        _save_for_backward(ctx, program, counts, results[first_saved:], inputs, params, checkpoint_every, pack_spikes)
        ctx.handle, ctx.counts, ctx.store_state_seqs = handle, counts, store_state_seqs
        ctx.active_reference = _ActiveReference(handle)
        ctx.seq_shape, ctx.dtype, ctx.device = list(inputs[0].shape), inputs[0].dtype, inputs[0].device
        ctx.num_states_given = num_states
        ctx.packed_outputs = packed_outputs
        ctx.carriers = carriers
        returned = tuple(results[:first_saved])
        if carriers:
            returned += tuple(_gradient_carrier(inputs[0]) for _ in range(bin(packed_outputs).count("1")))
        return returned

    @staticmethod
    def backward(ctx, *grads):
        counts = ctx.counts
        ns, no, ni = counts.states, counts.outputs, counts.inputs
        saved, params = _saved_for_backward(ctx)
        grad_state_seqs = list(grads[no + ns:no + 2 * ns]) if ctx.store_state_seqs else []
        # Only the gradients autograd asks for: none for inputs without requires_grad (e.g. data),
        # none for initial states that were not given.
        needs = ctx.needs_input_grad[8:]
        given = ctx.num_states_given
        wanted = needs[:ni] + (needs[ni:ni + ns] if given else (False,) * ns) + needs[ni + given:]
        grad_outputs = _grad_outputs(grads, counts, ctx.packed_outputs)
        if ctx.carriers:  # the packed outputs' gradients, as their carriers received them
            grad_outputs = with_carriers(grad_outputs, grads[no + ns * (2 if ctx.store_state_seqs else 1):],
                                         ctx.packed_outputs)
        results = training_backward(ctx.handle, ctx.seq_shape, ctx.dtype, ctx.device, saved, params,
                                    grad_outputs, list(grads[no:no + ns]), grad_state_seqs,
                                    ctx.checkpoint_every, ctx.pack_spikes, wanted)
        grad_states = results[ni:ni + ns] if given else []
        return (None,) * 8 + (*results[:ni], *grad_states, *results[ni + ns:])


def with_carriers(per_output, carriers, packed_outputs: int) -> list:
    """`per_output` (one entry per output) with each packed output's entry replaced by the next of
    `carriers` (what follows the outputs, final states and state sequences with carriers=True)."""
    carried = iter(carriers)
    return [next(carried) if packed_outputs >> i & 1 else v for i, v in enumerate(per_output)]


def _gradient_carrier(x: Tensor) -> Tensor:
    """A stand-in of x's shape and dtype that stores one NaN (any use of its values shows): what a
    packed output's gradient arrives on (see run_training's `carriers`)."""
    return x.new_full((), float("nan")).expand(x.shape)


def is_eager(*groups) -> bool:
    """Plain tensors outside compilation and tracing (then the dispatcher can be skipped)."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return False
    return all(type(t) is Tensor or type(t) is torch.nn.Parameter for tensors in groups for t in tensors)


def run_training(handle: int, inputs, init_states, params, store_state_seqs: bool, checkpoint_every: int = 0,
                 packed_outputs: int = 0, pack_spikes: bool = False, carriers: bool = False):
    """The training forward with autograd: [*outputs, *final_states, *state_seqs (if stored)],
    possibly followed by the saved tensors (callers slice by their counts).

    `carriers` (eager only, see is_eager): then follows one gradient carrier per packed output, a
    float stand-in of the output's full shape holding no values, whose gradient the backward
    takes as that output's. A caller that needs an output's gradient but not its values (the
    spikes a recomputed block returns, spikejit.Recompute) saves the full-width write this way."""
    if is_eager(inputs, init_states, params):
        return list(_Training.apply(handle, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes,
                                    carriers, len(inputs), len(init_states), *inputs, *init_states, *params))
    if carriers:
        raise ValueError("carriers: expected False inside torch.compile or a tensor subclass (the custom op "
                         "has no gradient carriers), got True")
    return torch.ops.spikejit.neuron_forward(handle, inputs, init_states, params, store_state_seqs,
                                             checkpoint_every, packed_outputs, pack_spikes)


def run_inference(handle: int, inputs, init_states, params, store_state_seqs: bool, final_state: bool,
                  packed_outputs: int = 0):
    """Inference (no autograd): [*outputs, *state_seqs (if stored), *final_states (if asked)]."""
    if is_eager(inputs, init_states, params):
        return inference(handle, inputs, init_states, params, store_state_seqs, final_state, packed_outputs)
    return torch.ops.spikejit.neuron_inference(handle, inputs, init_states, params, store_state_seqs, final_state,
                                               packed_outputs)


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
        stream = _current_stream(device)
        getattr(_core, "cuda_" + kernel)(_spike_spec(first), _spike_spec(second), stream=stream, device=device.index)
    else:
        raise ValueError(f"{kernel}: expected a CPU or CUDA tensor, got one on {device}")


def _decompressed(compressed: Tensor, shape, dtype) -> Tensor:
    """Checks the arguments of bit_spike_decompress; returns the (empty) result tensor."""
    dtype = torch.uint8 if dtype is None else dtype
    _check_spike_dtype("dtype", dtype)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape: expected dimensions >= 0, got {list(shape)}")
    n = 1
    for d in shape:
        n *= d
    if compressed.dtype != torch.uint8 or compressed.dim() != 1 or compressed.numel() != (n + 7) // 8:
        raise ValueError(f"compressed: expected uint8[{(n + 7) // 8}] for shape {list(shape)}, got {_describe(compressed)}")
    return torch.empty(list(shape), dtype=dtype, device=compressed.device)


def _compress(s: Tensor) -> Tensor:
    _check_spike_dtype("s", s.dtype)
    s = s.contiguous()
    packed = torch.empty(((s.numel() + 7) // 8,), dtype=torch.uint8, device=s.device)
    _run_bit_kernel("bit_spike_compress", s.device, s, packed)
    return packed


def _decompress(compressed: Tensor, shape, dtype=None) -> Tensor:
    out = _decompressed(compressed, shape, dtype)
    _run_bit_kernel("bit_spike_decompress", compressed.device, compressed.contiguous(), out)
    return out


def compress_spikes(s: Tensor) -> Tensor:
    """bit_spike_compress: the op inside graphs; for plain tensors in eager mode its
    implementation directly (the op's dispatch costs tens of microseconds a call)."""
    return _compress(s) if is_eager([s]) else torch.ops.spikejit.bit_spike_compress(s)


def decompress_spikes(compressed: Tensor, shape, dtype=None) -> Tensor:
    """bit_spike_decompress, as compress_spikes is bit_spike_compress."""
    if is_eager([compressed]):
        return _decompress(compressed, list(shape), dtype)
    return torch.ops.spikejit.bit_spike_decompress(compressed, list(shape), dtype)


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
    rows = [shape[0], _row_bytes(_neurons(shape))]
    if packed.dtype != torch.uint8 or list(packed.shape) != rows:
        raise ValueError(f"packed: expected uint8{rows} ([T, ceil(N/8)] for shape {list(shape)}), got {_describe(packed)}")
    return torch.empty([rows[0], 8 * rows[1]], dtype=dtype, device=packed.device)


@torch.library.custom_op("spikejit::pack_spike_rows", mutates_args=())
def pack_spike_rows(s: Tensor) -> Tensor:
    """[T, *S] spikes (nonzero is a spike) -> uint8 [T, ceil(N/8)] bit rows."""
    _check_spike_dtype("s", s.dtype)
    _check_sequence_shape("s", list(s.shape))
    steps, n = s.shape[0], _neurons(list(s.shape))
    rows = s.reshape(steps, n)
    if n % 8:
        rows = torch.cat([rows, rows.new_zeros(steps, 8 - n % 8)], dim=1)
    packed = torch.empty((steps * _row_bytes(n),), dtype=torch.uint8, device=s.device)
    _run_bit_kernel("bit_spike_compress", s.device, rows.contiguous().view(-1), packed)
    return packed.view(steps, _row_bytes(n))


@pack_spike_rows.register_fake
def _(s):
    _check_spike_dtype("s", s.dtype)
    _check_sequence_shape("s", list(s.shape))
    return s.new_empty((s.shape[0], _row_bytes(_neurons(list(s.shape)))), dtype=torch.uint8)


@torch.library.custom_op("spikejit::unpack_spike_rows", mutates_args=())
def unpack_spike_rows(packed: Tensor, shape: List[int], dtype: Optional[torch.dtype] = None) -> Tensor:
    """uint8 [T, ceil(N/8)] bit rows -> 0/1 spikes of `shape` ([T, *S]) in `dtype` (default uint8)."""
    rows = _unpacked(packed, shape, dtype)
    _run_bit_kernel("bit_spike_decompress", packed.device, packed.contiguous().view(-1), rows.view(-1))
    return rows[:, :_neurons(shape)].contiguous().view(shape)


@unpack_spike_rows.register_fake
def _(packed, shape, dtype=None):
    _unpacked(packed, shape, dtype)
    return torch.empty(list(shape), dtype=torch.uint8 if dtype is None else dtype, device=packed.device)
