"""What the neuron ops do, without torch.library: argument checks, result buffers and kernel
launches (the C++ executor for CPU tensors, generated kernels on the current stream for CUDA
tensors). The custom ops in spikejit.ops and the eager fast path both call these.

At small sizes the host is the limit of a training step, so what does not change between calls
is worked out once: per handle the program's counts (Counts), per handle and save policy a
TrainingCall (the saved plan, the result layout). A call then checks its tensors, allocates and
launches. Buffers cross into C++ as (data_ptr, dtype code, shape, strides; () when contiguous).
Where the extension was built with torch (CPP_CALLS), a forward on plain tensors makes its
buffers and launches in one C++ call instead (after the same checks); the Python buffers serve
fake tensors (their shapes, for tracing) and the Python path tests compare with.

A neuron that draws random numbers (Counts.random: uniform() in its program) takes a seed: an
int64 tensor of one element on the call's device, handed to the kernels as its data_ptr, so that
they read it where it lives (no host sync; a CUDA graph replays whatever value it holds then). A
training call keeps its seed for the backward, which recomputes the same draws from it.
"""
import math
import os
from typing import List

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils.dlpack import from_dlpack as _from_dlpack

from . import _core, registry

DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}

# Calls on plain tensors in C++ (bindings/torch/eager_calls.cpp: the forward's buffers and
# kernels, and for eager training the autograd node), where the extension was built with
# PyTorch's headers: at small sizes a step is bound by its host time, most of which the Python
# path spent (docs/benchmarks.md). SPIKEJIT_CPP_CALLS=0 keeps them in Python (the buffers and
# launches below, ops._Training), which tests compare with.
CPP_CALLS = hasattr(_core, "train_eager") and os.environ.get("SPIKEJIT_CPP_CALLS", "1") != "0"


class Counts:
    """The declaration counts of a program, read once per handle."""

    __slots__ = ("inputs", "states", "outputs", "params", "state_defaults", "packable", "random", "plans")

    def __init__(self, program):
        self.inputs = program.num_inputs
        self.states = program.num_states
        self.outputs = program.num_outputs
        self.params = [kind for _, kind, _ in program.params]
        self.state_defaults = program.state_defaults
        self.packable = program.packable_outputs
        self.random = bool(program.uses_random)  # then every launch takes a seed
        self.plans = {}  # pack_spikes -> [(input or -1, packed)], on first training use (autodiff)


def _counts_in(program, cache):
    counts = cache.get("counts")
    if counts is None:
        counts = cache["counts"] = Counts(program)
    return counts


def program_counts(handle: int):
    """(program, Counts) of a live handle."""
    program, cache = registry.program_and_cache(handle)
    return program, _counts_in(program, cache)


# Dynamo cannot trace into the extension (a first call builds Counts): under torch.compile this
# runs while tracing and its result is a constant of the graph.
@torch.compiler.assume_constant_result
def uses_random(handle: int) -> bool:
    """Whether the handle's neuron draws random numbers (then its calls need a seed)."""
    return program_counts(handle)[1].random


def initial_states(handle: int, states, x_seq: Tensor, every: bool = False) -> List[Tensor]:
    """The `init_states` argument of the ops from a list with None for "the default" (or empty):
    [] when every entry is None (unless `every`), else one tensor per state (defaults filled in)."""
    if not every and all(s is None for s in states):
        return []
    if all(s is not None for s in states):
        return list(states)
    _, counts = program_counts(handle)
    states = list(states) or [None] * counts.states
    if len(states) != counts.states:
        raise ValueError(f"init_states: expected {counts.states} entries, got {len(states)}")
    shape = x_seq.shape[1:]
    return [torch.full(shape, counts.state_defaults[j], dtype=x_seq.dtype, device=x_seq.device) if s is None else s
            for j, s in enumerate(states)]


# ---------------------------------------------------------------------------------------------
# Checks of arguments


def check_checkpoint_every(checkpoint_every):
    """The save policy as given by a user: "auto" (chosen per call by resolve_checkpoint_every), 0
    (per step) or a checkpoint interval 1..MAX_CHECKPOINT_EVERY."""
    if isinstance(checkpoint_every, str) and checkpoint_every == AUTO:
        return AUTO
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
        raise TypeError(f"checkpoint_every: expected 'auto' or an int (0: save per step, k >= 1: checkpoints "
                        f"every k steps), got {checkpoint_every!r}")
    return _checked_interval(checkpoint_every)


def check_checkpoint_interval(checkpoint_every) -> int:
    """The save policy of the ops, an int: 0 (per step) or a checkpoint interval."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
        raise TypeError(f"checkpoint_every: expected an int (0: save per step, k >= 1: checkpoints every k steps), "
                        f"got {type(checkpoint_every).__name__}")
    return _checked_interval(checkpoint_every)


def _checked_interval(checkpoint_every: int) -> int:
    if not 0 <= checkpoint_every <= _core.MAX_CHECKPOINT_EVERY:
        raise ValueError(f"checkpoint_every: expected 0 (save per step) or a checkpoint interval from 1 to "
                         f"{_core.MAX_CHECKPOINT_EVERY}, got {checkpoint_every}")
    return checkpoint_every


# checkpoint_every="auto": the C++ core's rule (spikejit/buffers.h, auto_checkpoint_interval, which
# says why). The sizes are compared here, after it, so that a symbolic T or N under torch.compile
# stays symbolic (guarded by the comparison, and only where checkpoints are possible at all)
# instead of being specialized. torch.export takes no guard on a dynamic dimension: an exported
# program runs at every size of the range its user declared, so there a size that the range does
# not decide counts as small (saves per step: more memory at large sizes, never a refused export).
AUTO = "auto"


def resolve_checkpoint_every(checkpoint_every, handle: int, x: Tensor, store_state_seqs: bool, packed_outputs: int,
                             pack_spikes: bool) -> int:
    """The interval a training call of the handle's neuron on inputs like x takes under the save
    policy `checkpoint_every`."""
    if not isinstance(checkpoint_every, str):
        return checkpoint_every
    interval = _auto_interval(handle, x.is_cuda, DTYPE_CODES.get(x.dtype, -1), bool(store_state_seqs),
                              bool(packed_outputs or pack_spikes))
    large = (interval and x.dim() >= 1 and _at_least(x.shape[0], _core.AUTO_CHECKPOINT_MIN_STEPS)
             and _at_least(neurons_of(x.shape), _core.AUTO_CHECKPOINT_MIN_NEURONS))
    return interval if large else 0


def _at_least(size, bound: int) -> bool:
    """size >= bound, without a guard under torch.export (see AUTO). The flag is read, not
    torch.compiler.is_exporting(), which torch.compile's tracing answers True."""
    if torch.compiler._is_exporting_flag:
        return statically_known_true(size >= bound)
    return size >= bound


# Dynamo cannot trace into the extension: under torch.compile this runs while tracing and its
# result is a constant of the graph (its arguments are constants there too).
@torch.compiler.assume_constant_result
def _auto_interval(handle: int, on_cuda: bool, dtype_code: int, stores_state_seqs: bool, packs: bool) -> int:
    """auto_checkpoint_interval, asked once per neuron and call kind (dtype_code -1: a dtype the
    op's checks reject, with its name)."""
    program, cache = registry.program_and_cache(handle)
    key = ("auto", on_cuda, dtype_code, stores_state_seqs, packs)
    interval = cache.get(key)
    if interval is None:
        interval = 0 if dtype_code < 0 else _core.auto_checkpoint_interval(program, on_cuda, dtype_code,
                                                                            stores_state_seqs, packs)
        cache[key] = interval
    return interval


def check_pack_spikes(pack_spikes, checkpoint_every=0) -> bool:
    """The pack_spikes policy as a bool (per step only: not with checkpoints; "auto" saves per step
    under it)."""
    if not isinstance(pack_spikes, bool):
        raise TypeError(f"pack_spikes: expected a bool, got {type(pack_spikes).__name__}")
    if pack_spikes and checkpoint_every and checkpoint_every != AUTO:
        raise ValueError(f"pack_spikes: expected False with checkpoints (packed spikes are a per-step policy), "
                         f"got True with checkpoint_every = {checkpoint_every}")
    return pack_spikes


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
    return bool(program_counts(handle)[1].packable[i])


def describe(t: Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} on {t.device}"


# The usual cause of a parameter on another device than the input: a module not moved with it.
MOVE_THE_MODULE = "(a module's parameters go to its input's device with module.to(x.device))"


def check_module_tensor(name: str, t: Tensor, x: Tensor) -> None:
    """ValueError unless a module's tensor `name` is on the device of its input x."""
    if t.device != x.device:
        raise ValueError(f"{name}: expected a tensor on {x.device} (that of the input), got {describe(t)} "
                         f"{MOVE_THE_MODULE}")


def check_tensor(name: str, t) -> Tensor:
    """TypeError unless t is a tensor that is not nested (a neuron's steps need one length)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.is_nested:
        raise TypeError(f"{name}: expected a dense tensor, got a nested tensor; pad the sequences to one length "
                        f"and pass a mask (docs/user-guide.md, \"Sequences of different lengths in one batch\")")
    return t


def check_strided(name: str, t: Tensor) -> None:
    """TypeError unless t is a dense (strided) tensor: the kernels read memory by strides."""
    if t.layout is not torch.strided:
        raise TypeError(f"{name}: expected a dense (strided) tensor, got a {str(t.layout).replace('torch.', '')} "
                        f"{describe(t)} (to_dense() makes one)")


def check_seed(seed, device: torch.device) -> None:
    """TypeError / ValueError unless `seed` is None or an int64 tensor of one element on the call's
    device (the kernels read the seed from that memory)."""
    if seed is None:
        return
    if not isinstance(seed, Tensor):
        raise TypeError(f"seed: expected None or an int64 tensor of one element, got {type(seed).__name__}")
    if seed.dtype != torch.int64 or seed.numel() != 1 or seed.layout is not torch.strided:
        raise TypeError(f"seed: expected an int64 tensor of one element, got {describe(seed)}")
    if seed.device != device:
        raise ValueError(f"seed: expected a tensor on {device} (that of the call's tensors), got {describe(seed)}")


def _check_call_seed(counts, seed, x: Tensor) -> None:
    """check_seed, and a seed present for a neuron that draws random numbers. (A call then
    launches with `seed if counts.random else None`: other neurons ignore theirs.)"""
    check_seed(seed, x.device)
    if counts.random and seed is None:
        raise ValueError("seed: the neuron draws random numbers (uniform()), so its calls need a seed (an int64 "
                         "tensor of one element on the inputs' device), got None")


def scalar_param(t: Tensor, dtype) -> Tensor:
    """A one-element tensor as the ops take a scalar parameter, in `dtype`: shapes [] and [1] as
    they are (a reshape would add a view and its backward node to every training step), others
    reshaped to [1]."""
    return (t if t.dim() <= 1 else t.reshape(1)).to(dtype)


def seed_tensors(seed) -> tuple:
    """The seed as a group of tensors (the last of a call's, where it has one): () when absent."""
    return () if seed is None else (seed,)


def _seed_pointer(seed):
    return None if seed is None else seed.data_ptr()


def check_call(counts, inputs, init_states, params, seed=None):
    """Validates counts, shapes, dtypes and devices, then the seed (_check_call_seed); returns
    (seq_shape, neuron_shape), torch.Size."""
    if counts.inputs == 0:
        raise ValueError("handle: spikejit ops need a neuron with at least one input (it gives T and S)")
    if len(inputs) != counts.inputs:
        raise ValueError(f"inputs: expected {counts.inputs} tensors, got {len(inputs)}")
    if len(init_states) not in (0, counts.states):
        raise ValueError(f"init_states: expected 0 or {counts.states} entries, got {len(init_states)}")
    if len(params) != len(counts.params):
        raise ValueError(f"params: expected {len(counts.params)} tensors, got {len(params)}")
    x = inputs[0]
    check_strided("inputs[0]", x)
    if x.dim() < 1:
        raise ValueError(f"inputs[0]: expected a sequence [T, *S], got {describe(x)}")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"inputs[0]: expected float32, float64, float16 or bfloat16, got {describe(x)}")
    if x.dtype == torch.float64 and x.device.type != "cpu":
        raise TypeError(f"inputs[0]: float64 runs on the CPU only; on {x.device.type} expected float32, "
                        f"float16 or bfloat16, got {describe(x)}")
    seq_shape = x.shape
    neuron_shape = seq_shape[1:]

    def same(t, name, shape):
        check_strided(name, t)
        if t.dtype != x.dtype:
            raise TypeError(f"{name}: expected dtype {x.dtype} (that of inputs[0]), got {describe(t)}")
        if t.device != x.device:
            hint = " " + MOVE_THE_MODULE if name.startswith("params") else ""
            raise ValueError(f"{name}: expected a tensor on {x.device} (that of inputs[0]), got {describe(t)}{hint}")
        if shape is not None and t.shape != shape:
            raise ValueError(f"{name}: expected shape {list(shape)}, got {describe(t)}")

    for i in range(1, len(inputs)):
        same(inputs[i], f"inputs[{i}]", seq_shape)
    for i, t in enumerate(init_states):
        if t is not None:
            same(t, f"init_states[{i}]", neuron_shape)
    for i, (t, kind) in enumerate(zip(params, counts.params)):
        same(t, f"params[{i}]", neuron_shape if kind == "per_neuron" else None)
        if kind == "scalar" and (t.dim() > 1 or t.numel() != 1):
            raise ValueError(f"params[{i}]: expected a scalar parameter of shape [] or [1], got {describe(t)}")
    _check_call_seed(counts, seed, x)
    return seq_shape, neuron_shape


def _check_grads(grads, count, name, shape, dtype, device):
    if len(grads) not in (0, count):
        raise ValueError(f"{name}: expected 0 or {count} entries, got {len(grads)}")
    for i, g in enumerate(grads):
        if g is None:
            continue
        if list(g.shape) != shape:
            raise ValueError(f"{name}[{i}]: expected shape {shape}, got {describe(g)}")
        if g.dtype != dtype or g.device != device:
            raise TypeError(f"{name}[{i}]: expected {dtype} on {device}, got {describe(g)}")


# ---------------------------------------------------------------------------------------------
# Buffers and launches


def output_gradients(grads, counts, packed_outputs):
    """The outputs' gradients of a training backward's `grads`; none for packed outputs (bit rows
    carry none; autograd may still hand over a uint8 tangent for them)."""
    if not packed_outputs:
        return grads[:counts.outputs]
    return [None if packed_outputs >> i & 1 else g for i, g in enumerate(grads[:counts.outputs])]


def row_bytes(neurons):
    return (neurons + 7) // 8


def neurons_of(seq_shape):
    n = 1
    for d in seq_shape[1:]:
        n = n * d
    return n


def buffer_specs(tensors):
    """(data_ptr, dtype code, shape, strides; () when contiguous) per tensor, None when absent."""
    if not tensors:  # most groups of a call are empty: no comprehension for them
        return []
    return [None if t is None else
            (t.data_ptr(), DTYPE_CODES[t.dtype], t.shape, () if t.is_contiguous() else t.stride())
            for t in tensors]


def _packed_specs(tensors):
    """(data_ptr, shape, strides) per bit-row tensor, None when absent."""
    if not tensors:
        return []
    return [None if t is None else (t.data_ptr(), t.shape, () if t.is_contiguous() else t.stride())
            for t in tensors]


def _split_by_mask(tensors, packed):
    """(full-width entries, bit-row entries) of a list whose entries `packed[i]` are bit rows."""
    return ([None if p else t for t, p in zip(tensors, packed)], [t if p else None for t, p in zip(tensors, packed)])


# A CPU buffer of at least this many bytes comes from spikejit's CPU pool (bindings/cpu_pool.cpp):
# glibc maps such blocks afresh and unmaps them on free, so each call would fault its pages in
# again, most of a large CPU step (docs/benchmarks.md).
CPU_POOL_MIN_BYTES = _core.CPU_POOL_MIN_BYTES


def _pool_sized(shape, dtype: torch.dtype) -> bool:
    return math.prod(shape) * dtype.itemsize >= CPU_POOL_MIN_BYTES


def uses_cpu_pool(x: Tensor) -> bool:
    """Whether a call on the [T, *S] input x takes its large buffers from the CPU pool: x is a
    plain CPU tensor (not a fake one, whose call allocates fake tensors) of at least
    CPU_POOL_MIN_BYTES. Decided once per call, so that small calls pay nothing more."""
    return x.is_cpu and type(x) is Tensor and _pool_sized(x.shape, x.dtype)


def _pooled_empty(shape, dtype: torch.dtype) -> Tensor:
    """An empty contiguous CPU tensor whose memory the pool takes back when PyTorch frees it."""
    return _from_dlpack(_core.cpu_pool_empty(list(shape), DTYPE_CODES[dtype]))


def _new_empty(x: Tensor, shape, dtype=None, pool: bool = False) -> Tensor:
    """An empty contiguous tensor of `shape` on x's device, in `dtype` (default: x's); from the
    pool when `pool` (see uses_cpu_pool) and the buffer is large."""
    dtype = x.dtype if dtype is None else dtype
    if pool and _pool_sized(shape, dtype):
        return _pooled_empty(shape, dtype)
    return x.new_empty(list(shape), dtype=dtype)


def _gradient_buffer(shape, dtype, device, pool: bool, like=None) -> Tensor:
    """An empty contiguous gradient of `shape`: from the pool when `pool` and it is large, else
    empty_like(like) (a gradient of that shape, when there is one) or torch.empty."""
    if pool and _pool_sized(shape, dtype):
        return _pooled_empty(shape, dtype)
    if like is not None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    return torch.empty(shape, dtype=dtype, device=device)


def _empty_sequence(x: Tensor, seq_shape, pool: bool = False) -> Tensor:
    """An empty contiguous tensor of shape `seq_shape` (x's) in x's dtype and on its device: from
    the pool when `pool`; else empty_like when x is contiguous (a microsecond or two less than
    new_empty, per buffer of a call, where small calls are bound by the host)."""
    if pool:
        return _pooled_empty(seq_shape, x.dtype)
    if x.shape == seq_shape and x.is_contiguous():
        return torch.empty_like(x)
    return x.new_empty(list(seq_shape))


def _dense_like(t: Tensor) -> Tensor:
    """An empty contiguous tensor of t's shape, dtype and device (the kernels write contiguous
    results; empty_like would keep the strides of a permuted t)."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _contiguous(tensors):
    if not tensors:
        return tensors
    return [t if t is None or t.is_contiguous() else t.contiguous() for t in tensors]


class _StridedReads:
    """The read-only arguments of one call as the kernels read them: contiguous, or strided views
    read in place (spikejit::read_layout: broadcasts, slices, transposes) while the call has room
    for one more (_core.MAX_STRIDED_READS), else contiguous copies."""

    def __init__(self):
        self.left = _core.MAX_STRIDED_READS

    def __call__(self, tensors, sequence: bool):
        if not tensors:
            return tensors
        return [t if t is None or t.is_contiguous() or self._in_place(t, sequence) else t.contiguous()
                for t in tensors]

    def _in_place(self, t: Tensor, sequence: bool) -> bool:
        if self.left == 0 or not _core.reads_in_place(list(t.shape), list(t.stride()), sequence):
            return False
        self.left -= 1
        return True


def _reads_in_place(g: Tensor) -> bool:
    """Whether the backward kernels read this [T, *S] gradient as it is: stride 0 over T and/or
    over every dimension of S, the rest row-major (SequenceLayout in spikejit/buffers.h). That is
    the expanded gradient of `y.sum()`, which then needs no [T, *S] copy."""
    st, shape = g.stride(), g.shape
    if all(s == 0 or d == 1 for s, d in zip(st[1:], shape[1:])):
        return shape[0] == 1 or st[0] in (0, 1)
    return st[0] == 0 and g[0].is_contiguous()


def _sequence_grads(grads):
    if not grads:
        return grads
    return [g if g is None or g.is_contiguous() or _reads_in_place(g) else g.contiguous() for g in grads]


def current_stream(device) -> int:
    """The raw CUstream of `device`'s current stream. (What torch.cuda.current_stream(device)
    .cuda_stream returns, without building a Stream object: tens of microseconds per training
    step at small sizes, where the host is the limit. Inductor's generated code uses the same call.)"""
    return torch._C._cuda_getCurrentRawStream(device.index)


def _launch_forward(program, device, seq_shape, inputs, init_states, params, outputs, state_seqs,
                    final_states, saved, checkpoint_every=0, packed_outputs=(), packed_saved=(), pack_spikes=False,
                    seed=None, reverse=False):
    """`inputs`, `init_states` and `params` must stay referenced by the caller until this returns
    (the kernels read them through raw pointers). Arguments go positionally: nanobind matches
    keywords by name on every call."""
    specs = buffer_specs
    args = (program, seq_shape[0], seq_shape[1:], specs(inputs), specs(init_states), specs(params), specs(outputs),
            specs(state_seqs), specs(final_states), specs(saved))
    policy = (checkpoint_every, _packed_specs(packed_outputs), _packed_specs(packed_saved), pack_spikes,
              _seed_pointer(seed), reverse)
    _launch(device, _core.cuda_forward, _core.cpu_forward, args, policy)


def _launch_backward(program, device, seq_shape, saved, params, grad_outputs, grad_state_seqs,
                     grad_final_states, grad_inputs, grad_initial_states, grad_params, inputs=(),
                     checkpoint_every=0, packed_saved=(), pack_spikes=False, workspace=None, seed=None):
    specs = buffer_specs
    args = (program, seq_shape[0], seq_shape[1:], specs(saved), specs(params), specs(grad_outputs),
            specs(grad_state_seqs), specs(grad_final_states), specs(grad_inputs), specs(grad_initial_states),
            specs(grad_params))
    policy = (specs(inputs), checkpoint_every, _packed_specs(packed_saved), pack_spikes,
              None if workspace is None else specs([workspace])[0], _seed_pointer(seed))
    _launch(device, _core.cuda_backward, _core.cpu_backward, args, policy)


def _launch(device, cuda_call, cpu_call, args, policy):
    """cuda_call on the device's current stream, or cpu_call on PyTorch's intra-op threads."""
    if device.type == "cuda":
        cuda_call(*args, current_stream(device), device.index, *policy)
    elif device.type == "cpu":
        cpu_call(*args, torch.get_num_threads(), "auto", *policy)
    else:
        raise ValueError(f"inputs[0]: expected a tensor on the CPU or a CUDA device, got one on {device}")


# ---------------------------------------------------------------------------------------------
# Inference


def _output_buffers(counts, x, seq_shape, packed_outputs, pool=False):
    """Empty outputs: [T, *S] values, or uint8 [T, ceil(N/8)] bit rows where packed."""
    if not packed_outputs:
        return [_empty_sequence(x, seq_shape, pool) for _ in range(counts.outputs)]
    rows = [seq_shape[0], row_bytes(neurons_of(seq_shape))]
    return [x.new_empty(rows, dtype=torch.uint8) if packed_outputs >> i & 1 else _empty_sequence(x, seq_shape, pool)
            for i in range(counts.outputs)]


def _packed_flags(counts, packed_outputs):
    return [bool(packed_outputs >> i & 1) for i in range(counts.outputs)]


def check_inference(counts, inputs, init_states, params, packed_outputs, seed=None):
    """Checks an inference call (the seed and packed_outputs too); returns (seq_shape, neuron_shape)."""
    shapes = check_call(counts, inputs, init_states, params, seed)
    check_packed_outputs(counts, packed_outputs)
    return shapes


def inference_buffers(counts, inputs, init_states, params, store_state_seqs, final_state, packed_outputs,
                      seed=None):
    """Checks a call (the seed too); returns (seq_shape, outputs, state_seqs, final_states), empty."""
    seq_shape, neuron_shape = check_inference(counts, inputs, init_states, params, packed_outputs, seed)
    x = inputs[0]
    pool = uses_cpu_pool(x)
    outputs = _output_buffers(counts, x, seq_shape, packed_outputs, pool)
    state_seqs = [_empty_sequence(x, seq_shape, pool) for _ in range(counts.states)] if store_state_seqs else []
    final_states = [_new_empty(x, neuron_shape, None, pool) for _ in range(counts.states)] if final_state else []
    return seq_shape, outputs, state_seqs, final_states


def split_inference_results(results, num_outputs: int, num_states: int, store_state_seqs: bool):
    """(outputs, final_states, state_seqs or None) of an inference call's results with final states,
    [*outputs, *state_seqs (if stored), *final_states]."""
    seqs = list(results[num_outputs:num_outputs + num_states]) if store_state_seqs else None
    return list(results[:num_outputs]), list(results[len(results) - num_states:]), seqs


def split_training_results(results, num_outputs: int, num_states: int, store_state_seqs: bool):
    """(outputs, final_states, state_seqs or None) of a training forward's results, [*outputs,
    *final_states, *state_seqs (if stored), ...]."""
    seqs = list(results[num_outputs + num_states:num_outputs + 2 * num_states]) if store_state_seqs else None
    return list(results[:num_outputs]), list(results[num_outputs:num_outputs + num_states]), seqs


def inference(handle: int, inputs, init_states, params, store_state_seqs: bool, final_state: bool,
              packed_outputs: int = 0, seed=None, reverse: bool = False):
    """[*outputs, *state_seqs (if store_state_seqs), *final_states (if final_state)]. `reverse`: the
    steps run last to first (ForwardBuffers::reverse in spikejit/buffers.h)."""
    program, counts = program_counts(handle)
    if CPP_CALLS and type(inputs[0]) is Tensor:  # (a tracer's fake tensors take the Python path)
        check_inference(counts, inputs, init_states, params, packed_outputs, seed)
        return _core.infer_eager(program, inputs, init_states, params, seed, store_state_seqs, final_state,
                                 packed_outputs, reverse)
    seq_shape, outputs, state_seqs, final_states = inference_buffers(
        counts, inputs, init_states, params, store_state_seqs, final_state, packed_outputs, seed)
    full, bits = outputs, ()
    if packed_outputs:
        full, bits = _split_by_mask(outputs, _packed_flags(counts, packed_outputs))
    read = _StridedReads()
    _launch_forward(program, inputs[0].device, seq_shape, read(inputs, True), read(init_states, False),
                    read(params, False), full, state_seqs, final_states, (), packed_outputs=bits,
                    seed=seed if counts.random else None, reverse=reverse)
    return outputs + state_seqs + final_states


# ---------------------------------------------------------------------------------------------
# Training


def saved_plan(program, counts, pack_spikes: bool):
    """Per saved value of the per-step policy: (the input it is or -1, saved as bits)."""
    plan = counts.plans.get(pack_spikes)
    if plan is None:
        plan = counts.plans[pack_spikes] = program.saved_plan(pack_spikes)
    return plan


def all_saved(plan, computed, inputs):
    """The backward's per-step `saved` list: the forward's computed saved values, with each saved
    input (see Program.saved_inputs) taken from `inputs`."""
    rest = iter(computed)
    return [inputs[j] if j >= 0 else next(rest) for j, _ in plan]


def backward_saved(handle: int, saved, inputs, pack_spikes: bool = False) -> List[Tensor]:
    """neuron_backward's per-step `saved` from neuron_forward's `saved` and the forward's inputs."""
    program, counts = program_counts(handle)
    return all_saved(saved_plan(program, counts, pack_spikes), saved, inputs)


def differentiable_results(program, requiring, steps: int, store_state_seqs: bool, seqs_first: bool):
    """Per result of a call of `steps` steps, whether it requires grad when the inputs, initial
    states and parameters marked in `requiring` do (PyTorch's rule over a loop of the step,
    Program.results_requiring_grad), in the call's order: the outputs, then the state sequences
    (when stored) before the final states if `seqs_first`, else after."""
    flags = program.results_requiring_grad(list(requiring), steps)
    ns = len(program.differentiable_states)
    no = len(flags) - 2 * ns
    outputs, finals, seqs = flags[:no], flags[no:no + ns], flags[no + ns:]
    seqs = seqs if store_state_seqs else []
    return (*outputs, *([*seqs, *finals] if seqs_first else [*finals, *seqs]))


def requiring_grad(counts, inputs, init_states, params):
    """Per input, initial state (none given: zeros, without) and parameter: it requires grad."""
    states = [s.requires_grad for s in init_states] if init_states else [False] * counts.states
    return (*(t.requires_grad for t in inputs), *states, *(p.requires_grad for p in params))


class TrainingCall:
    """The training calls of one program under one save policy and result layout.

    forward(inputs, init_states, params) -> [*outputs, *final_states, *state_seqs (if stored), *saved]
    backward(...) -> [*grad_inputs, *grad_initial_states, *grad_params]

    `saved`: per step, the computed saved values (a saved value that is an input,
    Program.saved_inputs, is not written; the backward reads the input itself), spike-valued
    ones as uint8 [T, ceil(N/8)] bit rows under pack_spikes; with checkpoints, one [ceil(T/k), *S]
    checkpoint per state (the backward then reads them followed by the inputs)."""

    __slots__ = ("handle", "counts", "store_state_seqs", "checkpoint_every", "packed_outputs",
                 "pack_spikes", "plan", "first_saved", "output_packed", "saved_packed", "reduces_params",
                 "num_saved", "gradient_flows", "_settled", "_without_gradient")

    def __init__(self, handle, program, counts, store_state_seqs, checkpoint_every, packed_outputs, pack_spikes):
        self.handle, self.counts = handle, counts
        self.store_state_seqs = bool(store_state_seqs)
        self.checkpoint_every = check_checkpoint_interval(checkpoint_every)
        self.pack_spikes = check_pack_spikes(pack_spikes, checkpoint_every)
        self.packed_outputs = check_packed_outputs(counts, packed_outputs)
        self.first_saved = counts.outputs + counts.states * (2 if store_state_seqs else 1)
        self.output_packed = _packed_flags(counts, packed_outputs) if packed_outputs else None
        self.plan = None if checkpoint_every else saved_plan(program, counts, pack_spikes)
        self.saved_packed = None
        if self.plan is not None and any(packed for _, packed in self.plan):
            self.saved_packed = [packed for _, packed in self.plan]
        self.reduces_params = "scalar" in counts.params  # the CUDA backward needs a workspace
        # Tensors `saved` holds: per step, the computed saved values; with checkpoints, one per state.
        self.num_saved = counts.states if self.plan is None else sum(1 for j, _ in self.plan if j < 0)
        self._settled, self._without_gradient = {}, {}  # see without_gradient
        # Per input, state and parameter: False where its gradient reaches no result (None, as
        # PyTorch gives it, not zeros).
        self.gradient_flows = tuple(program.differentiable_arguments)

    def without_gradient(self, requiring, steps):
        """The indices of the results of a call of `steps` steps that carry no gradient when the
        inputs, initial states and parameters marked in `requiring` (see requiring_grad) require
        grad: returned without requires_grad, as a loop of the same step returns them."""
        # From `settled` steps on the flags no longer change: such calls share one entry, also
        # when `steps` is symbolic (torch.compile with dynamic sizes), without a guard; otherwise a
        # symbolic `steps` is made concrete (a guard: a graph per length where flags depend on it).
        settled = self._settled.get(requiring)
        if settled is None:
            settled = self._settled[requiring] = self.program.requires_grad_settles_after(list(requiring))
        steps = settled if settled >= 0 and statically_known_true(steps >= settled) else int(steps)
        found = self._without_gradient.get((requiring, steps))
        if found is None:
            flags = differentiable_results(self.program, requiring, steps, self.store_state_seqs, seqs_first=False)
            found = self._without_gradient[requiring, steps] = tuple(i for i, d in enumerate(flags) if not d)
        return found

    @property
    def program(self):
        # Looked up, not held: autograd graphs alive at interpreter exit hold calls, and the
        # extension's objects must be freed with the registry, before the extension unloads.
        return registry.program(self.handle)

    def forward_buffers(self, inputs, init_states, params, seed=None):
        """Checks a forward call (the seed too); returns (seq_shape, outputs, final_states, state_seqs,
        saved), empty."""
        counts = self.counts
        seq_shape, neuron_shape = check_call(self.counts, inputs, init_states, params, seed)
        x = inputs[0]
        pool = uses_cpu_pool(x)
        outputs = _output_buffers(counts, x, seq_shape, self.packed_outputs, pool)
        final_states = [_new_empty(x, neuron_shape, None, pool) for _ in range(counts.states)]
        state_seqs = ([_empty_sequence(x, seq_shape, pool) for _ in range(counts.states)]
                      if self.store_state_seqs else [])
        saved = self.saved_buffers(x, seq_shape, pool)
        return seq_shape, outputs, final_states, state_seqs, saved

    def saved_buffers(self, x: Tensor, seq_shape, pool: bool = False) -> List[Tensor]:
        """Empty tensors for what the forward saves (the layout of _core.saved_layout, computed
        here so that a symbolic T stays symbolic): per step, one [T, *S] tensor per computed saved
        value in x's dtype (uint8 [T, ceil(N/8)] bit rows where pack_spikes packs); with
        checkpoints, one [ceil(T/k), *S] per state in the compute dtype."""
        if self.plan is not None:
            rows = [seq_shape[0], row_bytes(neurons_of(seq_shape))]
            return [x.new_empty(rows, dtype=torch.uint8) if packed else _empty_sequence(x, seq_shape, pool)
                    for j, packed in self.plan if j < 0]  # inputs are not copied
        k = self.checkpoint_every
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        return [_new_empty(x, [(seq_shape[0] + k - 1) // k, *seq_shape[1:]], dtype, pool)
                for _ in range(self.counts.states)]

    def forward(self, inputs, init_states, params, seed=None):
        if CPP_CALLS and type(inputs[0]) is Tensor:  # (a tracer's fake tensors take the Python path)
            check_call(self.counts, inputs, init_states, params, seed)
            return _core.train_forward(self.program, inputs, init_states, params, seed, self.store_state_seqs,
                                       self.checkpoint_every, self.pack_spikes, self.packed_outputs)
        counts = self.counts
        seq_shape, outputs, final_states, state_seqs, saved = self.forward_buffers(inputs, init_states, params,
                                                                                   seed)
        x = inputs[0]
        full_outputs, bit_outputs = outputs, ()
        if self.output_packed is not None:
            full_outputs, bit_outputs = _split_by_mask(outputs, self.output_packed)
        full_saved, bit_saved = saved, ()
        if self.plan is not None:
            full_saved = all_saved(self.plan, saved, [None] * counts.inputs)
            if self.saved_packed is not None:
                full_saved, bit_saved = _split_by_mask(full_saved, self.saved_packed)
        read = _StridedReads()
        _launch_forward(self.program, x.device, seq_shape, read(inputs, True), read(init_states, False),
                        read(params, False), full_outputs, state_seqs, final_states, full_saved,
                        self.checkpoint_every, bit_outputs, bit_saved, self.pack_spikes,
                        seed if counts.random else None)
        return outputs + final_states + state_seqs + saved

    def backward_inputs(self, saved, inputs):
        """What the backward reads, from the forward's saved results and its inputs: per step the
        saved values with the saved inputs in their places; with checkpoints, then the inputs."""
        if self.plan is None:
            return list(saved) + list(inputs)
        return all_saved(self.plan, saved, inputs)

    def backward(self, seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states,
                 grad_state_seqs, wanted=None, checked=False, seed=None):
        """None gradients count as zeros. `wanted` (None: all) holds one bool per result: the
        unwanted ones are None and nothing is allocated or stored for them. `checked`: the
        arguments come from autograd for this call's own forward (shapes, dtypes and devices
        already hold), so only the custom op checks them. `seed`: the forward's (a random
        neuron's backward with checkpoints recomputes its draws from it)."""
        counts = self.counts
        if not checked:
            self._check_backward(seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states,
                                 grad_state_seqs, seed)
        bits, inputs = (), ()
        if self.plan is None:
            saved, inputs = saved[:counts.states], saved[counts.states:]
        elif self.saved_packed is not None:
            saved, bits = _split_by_mask(saved, self.saved_packed)
        neuron_shape = seq_shape[1:]
        ni, ns = counts.inputs, counts.states
        like = next((g for g in (*grad_outputs, *grad_state_seqs) if g is not None and g.dtype == dtype), None)
        # Real tensors only (a tracer's fake ones allocate fake gradients): told by one of them.
        probe = like if like is not None else next((t for t in saved if t is not None), None)
        pool = type(probe) is Tensor and probe.is_cpu and dtype in DTYPE_CODES and _pool_sized(seq_shape, dtype)
        grad_inputs = [_gradient_buffer(seq_shape, dtype, device, pool, like) if wanted is None or wanted[i] else None
                       for i in range(ni)]
        grad_states = [_gradient_buffer(neuron_shape, dtype, device, pool)
                       if wanted is None or wanted[ni + j] else None for j in range(ns)]
        grad_params = [_dense_like(p) if wanted is None or wanted[ni + ns + k] else None
                       for k, p in enumerate(params)]
        program = self.program
        read = _StridedReads()
        read_saved = _contiguous(saved) if self.checkpoint_every > 0 else read(saved, True)
        _launch_backward(program, device, seq_shape, read_saved, read(params, False),
                         _sequence_grads(grad_outputs), _sequence_grads(grad_state_seqs),
                         _contiguous(grad_final_states), grad_inputs, grad_states, grad_params,
                         read(inputs, True), self.checkpoint_every, _contiguous(bits), self.pack_spikes,
                         self.backward_workspace(program, device, seq_shape), seed if counts.random else None)
        return grad_inputs + grad_states + grad_params

    def backward_workspace(self, program, device, seq_shape):
        """The CUDA kernels' scratch for scalar parameters' gradients, from PyTorch's allocator: in a
        CUDA graph it then lives in the graph's memory pool for every replay (the extension's
        own per-stream scratch must not be captured). None where none is needed."""
        if not self.reduces_params or device.type != "cuda":
            return None
        elements = _core.backward_workspace_elements(program, neurons_of(seq_shape))
        return torch.empty(elements, dtype=torch.float64, device=device)

    def backward_buffers(self, seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states,
                       grad_state_seqs, seed=None):
        """The backward's results, empty, after its checks (the fake implementation)."""
        self._check_backward(seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states,
                             grad_state_seqs, seed)
        return ([torch.empty(seq_shape, dtype=dtype, device=device) for _ in range(self.counts.inputs)]
                + [torch.empty(seq_shape[1:], dtype=dtype, device=device) for _ in range(self.counts.states)]
                + [_dense_like(p) for p in params])

    def _check_backward(self, seq_shape, dtype, device, saved, params, grad_outputs, grad_final_states,
                        grad_state_seqs, seed=None):
        counts = self.counts
        seq_shape = list(seq_shape)
        if len(seq_shape) < 1 or any(d < 0 for d in seq_shape):
            raise ValueError(f"seq_shape: expected [T, *S] with dimensions >= 0, got {seq_shape}")
        if dtype not in DTYPE_CODES:
            raise TypeError(f"dtype: expected float32, float64, float16 or bfloat16, got {dtype}")
        self._check_backward_seed(device, seed)
        _check_grads(grad_outputs, counts.outputs, "grad_outputs", seq_shape, dtype, device)
        _check_grads(grad_final_states, counts.states, "grad_final_states", seq_shape[1:], dtype, device)
        _check_grads(grad_state_seqs, counts.states, "grad_state_seqs", seq_shape, dtype, device)
        if len(params) != len(counts.params):
            raise ValueError(f"params: expected {len(counts.params)} tensors, got {len(params)}")
        if self.plan is None:
            self._check_checkpointed(seq_shape, dtype, device, saved)
            return
        if len(saved) != len(self.plan):
            raise ValueError(f"saved: expected {len(self.plan)} tensors (one per saved value), got {len(saved)}")
        rows = [seq_shape[0], row_bytes(neurons_of(seq_shape))]
        for i, (t, (_, packed)) in enumerate(zip(saved, self.plan)):
            if packed and (t.dtype != torch.uint8 or list(t.shape) != rows or t.device != device):
                raise ValueError(f"saved[{i}]: expected the spikes saved as bits, uint8{rows} (T, ceil(N/8)) "
                                 f"on {device}, got {describe(t)}")
            if not packed and t.dtype != dtype:
                raise TypeError(f"saved[{i}]: expected {dtype} (what the forward saved), got {describe(t)}")

    def _check_backward_seed(self, device, seed):
        """The backward of a random neuron recomputes its draws under checkpoints: it needs the
        forward's seed then (per step, the draws it needs were saved)."""
        check_seed(seed, device)
        if seed is None and self.counts.random and self.checkpoint_every:
            raise ValueError(f"seed: the neuron draws random numbers and its backward with checkpoint_every = "
                             f"{self.checkpoint_every} recomputes them, so it needs the forward's seed, got None")

    def _check_checkpointed(self, seq_shape, dtype, device, saved):
        counts = self.counts
        expected = counts.states + counts.inputs
        if len(saved) != expected:
            raise ValueError(f"saved: expected {expected} tensors with checkpoint_every = {self.checkpoint_every} "
                             f"({counts.states} checkpoints, then the {counts.inputs} inputs), got {len(saved)}")
        for i in range(counts.states):
            if saved[i].device != device:
                raise ValueError(f"saved[{i}]: expected a checkpoint on {device}, got {describe(saved[i])}")
        for i in range(counts.states, expected):
            x = saved[i]
            if list(x.shape) != seq_shape:
                raise ValueError(f"saved[{i}]: expected an input of shape {seq_shape}, got {describe(x)}")
            if x.dtype != dtype or x.device != device:
                raise TypeError(f"saved[{i}]: expected an input of {dtype} on {device}, got {describe(x)}")


def training_call(handle: int, store_state_seqs: bool, checkpoint_every: int = 0, packed_outputs: int = 0,
                  pack_spikes: bool = False) -> TrainingCall:
    """The TrainingCall of a handle and policy, made (and its arguments checked) on first use."""
    program, cache = registry.program_and_cache(handle)
    key = (bool(store_state_seqs), checkpoint_every, packed_outputs, pack_spikes)
    call = cache.get(key)
    # A key equal to a cached one may still hold a bool where an int belongs (True == 1).
    if call is None or type(checkpoint_every) is not int or type(packed_outputs) is not int \
            or type(pack_spikes) is not bool:
        call = TrainingCall(handle, program, _counts_in(program, cache), store_state_seqs, checkpoint_every,
                            packed_outputs, pack_spikes)
        cache[key] = call
    return call


class ActiveReference:
    """Keeps a program registered while the autograd node that holds it is alive."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        registry.retain_active(handle)
        self.handle = handle

    def __del__(self):
        registry.release_active(self.handle)


def keep_for_backward(ctx, call, results, inputs, init_states, params, seed=None, anchor=None):
    """Saves what the backward reads (TrainingCall.backward_inputs, the params and the seed of a
    random neuron: the backward must see the forward's own) and the facts of the call, on the
    autograd context of its forward; marks the results without a gradient. `anchor`: an output of
    the forward, saved last (see ops.refusing_second_derivatives)."""
    saved = call.backward_inputs(results[call.first_saved:], inputs)
    seed = seed if call.counts.random else None
    ctx.save_for_backward(*saved, *params, *seed_tensors(seed), *(() if anchor is None else (anchor,)))
    ctx.num_saved, ctx.num_params = len(saved), len(params)
    requiring = requiring_grad(call.counts, inputs, init_states, params)
    without_gradient = call.without_gradient(requiring, inputs[0].shape[0])
    if without_gradient:
        ctx.mark_non_differentiable(*(results[i] for i in without_gradient))
    ctx.has_seed = seed is not None
    ctx.call = call
    ctx.active_reference = ActiveReference(call.handle)
    x = inputs[0]
    ctx.seq_shape, ctx.dtype, ctx.device = list(x.shape), x.dtype, x.device


def saved_for_backward(ctx):
    """(saved, params) as keep_for_backward kept them."""
    tensors = ctx.saved_tensors
    return tensors[:ctx.num_saved], tensors[ctx.num_saved:ctx.num_saved + ctx.num_params]


def seed_for_backward(ctx):
    """The forward's seed as keep_for_backward kept it, or None."""
    return ctx.saved_tensors[ctx.num_saved + ctx.num_params] if ctx.has_seed else None
