"""Multi-step IF / LIF / PLIF as functions.

Seed-compatible (SpikingJelly's triton_kernel, reference section 1.1):
    multistep_if(x_seq, v_init, v_threshold, v_reset, detach_reset, surrogate_function,
                 store_v_seq=True) -> (s_seq, v_seq if store_v_seq else v_last)
    multistep_lif(x_seq, v_init, decay_input, tau, v_threshold, v_reset, detach_reset,
                  surrogate_function, store_v_seq=True) -> (s_seq, v_seq or v_last)
    multistep_plif(x_seq, v_init, r_tau, decay_input, v_threshold, v_reset, detach_reset,
                   surrogate_function) -> (s_seq, v_seq)          # r_tau = 1/tau, a 1-element tensor
SpikingJelly 2.x functional style (explicit state, learnable w with 1/tau = sigmoid(w)):
    if_multi_step / lif_multi_step / plif_multi_step(...) -> (s_seq, v_last, v_seq or None)

`v_init` may be None: the state starts at v_reset (0 under soft reset). `v_reset=None` selects
the soft reset. Every function runs the fused kernels (CPU executor or CUDA) through the
`spikejit::neuron_*` ops, with autograd when any input requires a gradient.

Every function also takes `checkpoint_every` (keyword): the save policy of training. 0 saves per
step; k >= 1 saves the state only every k steps and recomputes the steps between in the backward
(saved memory O(T/k), plus a reference to x_seq, which the backward reads); the default "auto"
chooses per call (spikejit._kernel_calls.resolve_checkpoint_every).

`packed_spikes=True` (keyword) returns s_seq as bit rows, uint8 [T, ceil(N/8)] with N =
prod(S) (spikejit.unpack_spike_rows gives [T, *S] back): 1/8 of uint8 spikes, 1/32 of float32.
Such spikes carry no gradient (the state still does).
"""
import threading
from typing import Optional, Union

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import guard_scalar

from . import _core, _double_backward, ops, registry
from ._forward_mode import has_tangents, run_with_tangents
from ._func_transforms import transforms_active
from ._kernel_calls import (check_checkpoint_every, check_pack_spikes, check_seed, check_tensor, initial_states,
                            program_counts, resolve_checkpoint_every, scalar_param, split_inference_results,
                            split_training_results, uses_random)
from ._layout import inverse, memory_order, neuron_order
from . import surrogate as _surrogate

__all__ = ["multistep_if", "multistep_lif", "multistep_plif", "if_multi_step", "lif_multi_step",
           "plif_multi_step", "builtin_handle", "shipped_handle", "run_neuron", "execute_neuron",
           "neuron_call_hook"]

_cache_lock = threading.Lock()
_builtin_handles = {}
_shipped_handles = {}


def _plif_r_text(v_threshold, v_reset, detach_reset, surrogate_name, surrogate_params, decay_input):
    """PLIF with the reciprocal time constant r = 1/tau itself as the parameter (the seed's
    multistep_plif takes r_tau), written like neurons/plif.sj."""
    soft = v_reset is None
    return "\n".join([
        "neuron plif_r",
        "input x",
        "state v = v_reset",
        "param r_tau = 0.5",
        f"const v_threshold = {float(v_threshold)!r}, v_reset = {0.0 if soft else float(v_reset)!r}",
        f"const decay_input = {str(bool(decay_input)).lower()}, soft_reset = {str(soft).lower()}, "
        f"detach_reset = {str(bool(detach_reset)).lower()}",
        "output s",
        "h = where(decay_input, v + (x - (v - v_reset)) * r_tau, v - (v - v_reset) * r_tau + x)",
        f"s = spike(h - v_threshold, {_surrogate.text(surrogate_name, surrogate_params)})",
        "s_reset = where(detach_reset, detach(s), s)",
        "v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)",
    ])


def _cached_handle(cache: dict, key, make_program) -> int:
    """The handle cached under `key`, else that of make_program() registered (once, under the
    lock); the cache owns the program for the process."""
    handle = cache.get(key)
    if handle is not None:
        return handle
    with _cache_lock:
        handle = cache.get(key)
        if handle is None:
            handle = cache[key] = registry.register(make_program())
    return handle


def shipped_handle(name: str, constants: dict, surrogate_function=None) -> int:
    """The registry handle of the shipped neuron `name` (neurons/<name>.sj; _core.shipped_names())
    with `constants` overridden ({name: number or bool}) and, unless None, the surrogate of its
    spikes replaced (any form surrogate.resolve takes); built once per distinct arguments and
    kept for the process, like the built-ins, and a constant under torch.compile like theirs."""
    values = tuple(sorted((key, float(_specialized(value))) for key, value in constants.items()))
    surrogate = None if surrogate_function is None else _surrogate.resolve(surrogate_function)
    return _shipped_handle(name, values, surrogate)


# (As _builtin_handle: dynamo runs it while tracing, its result a constant of the graph.)
@torch.compiler.assume_constant_result
def _shipped_handle(name: str, values: tuple, surrogate) -> int:
    return _cached_handle(_shipped_handles, (name, values, surrogate),
                          lambda: _core.shipped(name, dict(values), *(surrogate or (None, ()))))


def _check_number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    return float(value)


def _specialized(value):
    """A number as a constant. Under torch.compile a float argument that changed between calls
    arrives symbolic (dynamo makes it dynamic); the kernels bake hyper-parameters in, so it is
    specialized instead: a guard on its value, and a new value compiles again."""
    # (Dynamo shows a symbolic float as a float; guard_scalar returns a plain number as it is.)
    if isinstance(value, (float, int, torch.SymFloat, torch.SymInt, torch.SymBool)):
        return guard_scalar(value)
    return value


def builtin_handle(kind: str, v_threshold: float, v_reset: Optional[float], detach_reset: bool,
                   surrogate_name: str, surrogate_params: tuple, decay_input: bool = True,
                   tau: float = 2.0) -> int:
    """The registry handle of a built-in neuron ('if', 'lif', 'plif', 'plif_r') for these
    options; programs are built once per distinct options and kept for the process."""
    check_flag("detach_reset", detach_reset)
    check_flag("decay_input", decay_input)
    return _builtin_handle(kind, _specialized(v_threshold), _specialized(v_reset), _specialized(detach_reset),
                           surrogate_name, tuple(_specialized(p) for p in surrogate_params),
                           _specialized(decay_input), _specialized(tau))


# Dynamo cannot trace into the extension: under torch.compile this runs while tracing (its
# arguments are constants there) and its result is a constant of the graph.
@torch.compiler.assume_constant_result
def _builtin_handle(kind: str, v_threshold: float, v_reset: Optional[float], detach_reset: bool,
                    surrogate_name: str, surrogate_params: tuple, decay_input: bool, tau: float) -> int:
    key = (kind, v_threshold, v_reset, detach_reset, surrogate_name, tuple(surrogate_params),
           decay_input, tau if kind == "lif" else None)

    def make_program():
        threshold = _check_number("v_threshold", v_threshold)
        reset = None if v_reset is None else _check_number("v_reset", v_reset)
        if kind == "plif_r":
            return _core.Program.from_text(
                _plif_r_text(threshold, reset, detach_reset, surrogate_name, surrogate_params, decay_input),
                "<plif_r>")
        return _core.builtin(kind, v_threshold=threshold, v_reset=reset, detach_reset=bool(detach_reset),
                             surrogate=surrogate_name, surrogate_params=list(surrogate_params),
                             decay_input=bool(decay_input), tau=_check_number("tau", tau) if kind == "lif" else 2.0)

    return _cached_handle(_builtin_handles, key, make_program)


def needs_grad(*groups) -> bool:
    """Whether a call on the tensors of these groups (None: absent) takes the training path.
    (Under a torch.func transform, wrapped tensors do not tell whether an outer grad tracks them.)"""
    if not torch.is_grad_enabled():
        return False
    if not torch.compiler.is_compiling() and transforms_active():
        return True
    return any(t is not None and t.requires_grad for tensors in groups for t in tensors)


# spikejit.Recompute watches, and in its recomputation steers, the neuron calls of the block it
# runs (recompute.py). Per thread: the recomputation runs on the autograd engine's thread.
_call_hooks = threading.local()


class neuron_call_hook:
    """Within `with neuron_call_hook(hook):` every run_neuron call of this thread goes to
    hook(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
    checkpoint_every, packed_outputs, pack_spikes, seed), which answers like run_neuron (for example
    by calling execute_neuron). `seed` is the call's (drawn already for a neuron with random
    numbers, None for others)."""

    def __init__(self, hook):
        self.hook = hook

    def __enter__(self):
        self.previous = getattr(_call_hooks, "hook", None)
        _call_hooks.hook = self.hook

    def __exit__(self, *exc):
        _call_hooks.hook = self.previous


def refuse_stale_state(module) -> None:
    """For a neuron module about to start from a state an earlier call left: RuntimeError when the
    call runs inside a backward pass (torch.utils.checkpoint recomputing its block, reentrant or
    not). The forward has moved the state on since, so the recomputation would start from
    another state than the forward did, and the gradients would be silently wrong.
    spikejit.Recompute restores the states before its recomputation (its hook is set then)."""
    if torch.compiler.is_compiling():  # (a compiled graph recomputes from its own inputs)
        return
    if torch._C._current_graph_task_id() != -1 and getattr(_call_hooks, "hook", None) is None:
        raise RuntimeError(
            f"{type(module).__name__}: called during a backward pass with the state an earlier call left "
            "(torch.utils.checkpoint recomputing its block?): the recomputation would start from the state the "
            "forward ended with, not the one it began with, and the gradients would be wrong. Use "
            "spikejit.Recompute(block), which restores the neurons' states before recomputing, or reset() the "
            "neurons inside the checkpointed function")


def call_seed(handle: int, inputs, seed: Optional[Tensor] = None) -> Optional[Tensor]:
    """The seed of a call: `seed` when given (checked: an int64 tensor of one element on the
    inputs' device); else, for a neuron that draws random numbers, a fresh one from PyTorch's
    generator on that device (torch.manual_seed makes runs reproducible, torch.compile traces the
    draw, a CUDA graph draws afresh at each replay); else None."""
    x = inputs[0] if len(inputs) > 0 and isinstance(inputs[0], Tensor) else None
    if x is None:  # the call's own checks name what is wrong
        return seed
    if seed is not None:
        check_seed(seed, x.device)
        return seed
    if not uses_random(handle):
        return None
    return torch.randint(-2 ** 63, 2 ** 63 - 1, (1,), dtype=torch.int64, device=x.device)


def run_neuron(handle: int, num_outputs: int, num_states: int, inputs, init_states, params,
               store_state_seqs: bool, checkpoint_every: Union[int, str] = "auto", packed_outputs: int = 0,
               pack_spikes: bool = False, seed: Optional[Tensor] = None):
    """Runs a registered neuron over [T, *S] inputs; None in `init_states` means the state's
    declared default. Returns (outputs, final_states,
    state_seqs or None), taking the training op (with autograd) when a gradient is needed;
    `checkpoint_every` and `pack_spikes` are its save policy, `packed_outputs` (bit i: output i)
    the outputs returned as uint8 bit rows (see spikejit.ops). `seed`: the draws of a neuron with
    random numbers (see call_seed; None draws one)."""
    seed = call_seed(handle, inputs, seed)
    # (A hook steers its calls itself: spikejit.Recompute's recomputation stays first-order.)
    if (_double_backward.enabled() and getattr(_call_hooks, "hook", None) is None
            and needs_grad(inputs, init_states, params)):
        return _double_backward.run(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                                    packed_outputs, pack_spikes, seed)
    if (type(packed_outputs) is int and packed_outputs == 0 and pack_spikes is False
            and getattr(_call_hooks, "hook", None) is None and ops.is_plain_eager(inputs, init_states, params)):
        check_checkpoint_every(checkpoint_every)
        return ops.run_plain(handle, num_outputs, num_states, inputs, initial_states(handle, init_states, inputs[0]),
                             params, store_state_seqs, checkpoint_every, seed)
    hook = None
    if not torch.compiler.is_compiling():
        if has_tangents(inputs, init_states, params):
            return run_with_tangents(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                                     packed_outputs, seed)
        hook = getattr(_call_hooks, "hook", None)
    if hook is not None:
        return hook(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                    checkpoint_every, packed_outputs, pack_spikes, seed)
    return execute_neuron(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                          checkpoint_every, packed_outputs, pack_spikes, seed=seed)


def execute_neuron(handle: int, num_outputs: int, num_states: int, inputs, init_states, params,
                   store_state_seqs: bool, checkpoint_every: Union[int, str] = "auto", packed_outputs: int = 0,
                   pack_spikes: bool = False, carriers: bool = False, seed: Optional[Tensor] = None):
    """run_neuron without the hook. `carriers` (training, eager): each packed output is returned as
    its gradient carrier (see ops.run_training) instead of its bits. `seed`: the call's, as
    run_neuron resolved it (call_seed) before handing it to a hook or here."""
    check_checkpoint_every(checkpoint_every)  # also where inference leaves it unused
    check_pack_spikes(pack_spikes, checkpoint_every)
    init_states = initial_states(handle, init_states, inputs[0])
    # Bit rows follow the neurons' memory order, so packed outputs keep the logical order (a copy).
    # (A random neuron's draws follow the memory order too: a neuron's numbers are those of its
    # index in memory, so a permuted input draws other numbers for a neuron than a contiguous one.)
    order = None if packed_outputs or carriers else _call_memory_order(handle, inputs, init_states, params)
    if order is not None:
        return _in_memory_order(order, handle, num_outputs, num_states, inputs, init_states, params,
                                store_state_seqs, checkpoint_every, pack_spikes, seed)
    return _execute(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs, checkpoint_every,
                    packed_outputs, pack_spikes, carriers, seed)


def _execute(handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs, checkpoint_every,
             packed_outputs, pack_spikes, carriers, seed=None):
    """execute_neuron after its checks, on the states initial_states gave."""
    if needs_grad(inputs, init_states, params):
        checkpoint_every = resolve_checkpoint_every(checkpoint_every, handle, inputs[0], store_state_seqs,
                                                    packed_outputs, pack_spikes)
        results = ops.run_training(handle, inputs, init_states, params, store_state_seqs, checkpoint_every,
                                   packed_outputs, pack_spikes, carriers, seed)
        outputs, finals, seqs = split_training_results(results, num_outputs, num_states, store_state_seqs)
        if carriers:
            outputs = ops.with_carriers(outputs, results[num_outputs + num_states * (2 if store_state_seqs else 1):],
                                        packed_outputs)
        return outputs, finals, seqs
    results = ops.run_inference(handle, inputs, init_states, params, store_state_seqs, True, packed_outputs, seed)
    return split_inference_results(results, num_outputs, num_states, store_state_seqs)


def _call_memory_order(handle, inputs, init_states, params):
    """memory_order of inputs[0] (see _layout), when every tensor of the call has the shape the
    call expects (else None: the call's own checks then name the one that does not)."""
    order = memory_order(inputs[0])
    if order is None or (not torch.compiler.is_compiling() and transforms_active()):  # vmap: strides unknown
        return None
    counts = program_counts(handle)[1]
    if len(inputs) != counts.inputs or len(params) != len(counts.params):
        return None
    sequence, neurons = inputs[0].shape, inputs[0].shape[1:]
    fits = all(isinstance(x, Tensor) and x.shape == sequence for x in inputs[1:])
    fits = fits and all(isinstance(v, Tensor) and v.shape == neurons for v in init_states)
    if params:
        fits = fits and all(isinstance(p, Tensor) and (kind != "per_neuron" or p.shape == neurons)
                            for p, kind in zip(params, counts.params))
    return order if fits else None


def _in_memory_order(order, handle, num_outputs, num_states, inputs, init_states, params, store_state_seqs,
                     checkpoint_every, pack_spikes, seed=None):
    """execute_neuron on the views of its tensors in the memory order `order` of inputs[0] (see
    _layout), its results viewed back in the logical order: no copy of a channels-last input,
    results in its layout. The views are autograd's, so gradients take the same way back."""
    states_order = neuron_order(order)
    kinds = program_counts(handle)[1].params
    outputs, finals, seqs = _execute(
        handle, num_outputs, num_states, [x.permute(order) for x in inputs], [v.permute(states_order) for v in init_states],
        [p.permute(states_order) if kind == "per_neuron" else p for p, kind in zip(params, kinds)],
        store_state_seqs, checkpoint_every, 0, pack_spikes, False, seed)
    back, states_back = inverse(order), inverse(states_order)
    return ([y.permute(back) for y in outputs], [v.permute(states_back) for v in finals],
            None if seqs is None else [v.permute(back) for v in seqs])


def _check_sequence(x_seq):
    check_tensor("x_seq", x_seq)
    if x_seq.dim() < 1:
        raise ValueError(f"x_seq: expected a tensor [T, *S] with a time axis, got shape {list(x_seq.shape)}")


def _initial_state(v_init, x_seq):
    """None (the neuron's default, v_reset) or v_init as a [*S] tensor in x_seq's dtype. A v_init
    of another shape with N elements is read in memory order (SpikingJelly's contract: it needs
    the element count only)."""
    if v_init is None:
        return None
    if not isinstance(v_init, Tensor):
        raise TypeError(f"v_init: expected a tensor or None, got {type(v_init).__name__}")
    shape = x_seq.shape[1:]
    if v_init.shape != shape:
        if v_init.numel() != x_seq[0].numel():
            raise ValueError(f"v_init: expected shape {list(shape)} (x_seq.shape[1:]), got {list(v_init.shape)}")
        v_init = v_init.reshape(shape)
    if v_init.device != x_seq.device:
        raise ValueError(f"v_init: expected a tensor on {x_seq.device} (that of x_seq), got one on {v_init.device}")
    return v_init.to(x_seq.dtype)


def _scalar_param(value, name, x_seq):
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}: expected a one-element tensor, got {type(value).__name__}")
    if value.numel() != 1:
        raise ValueError(f"{name}: expected a one-element tensor, got shape {list(value.shape)}")
    if value.device != x_seq.device:
        raise ValueError(f"{name}: expected a tensor on {x_seq.device} (that of x_seq), got one on {value.device}")
    return scalar_param(value, x_seq.dtype)


def check_flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _run_builtin(handle, x_seq, v_init, params, store_v_seq, checkpoint_every, packed_spikes):
    packed = 1 if check_flag("packed_spikes", packed_spikes) else 0
    outputs, finals, seqs = run_neuron(handle, 1, 1, [x_seq], [_initial_state(v_init, x_seq)], params,
                                       store_v_seq, checkpoint_every, packed)
    v_last = finals[0]
    if v_init is not None and v_init.shape != v_last.shape:  # read in memory order: v_last comes back alike
        v_last = v_last.reshape(v_init.shape)
    return outputs[0], v_last, (seqs[0] if store_v_seq else None)


def if_multi_step(x_seq: Tensor, v: Optional[Tensor] = None, v_threshold: float = 1.0,
                  v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = False,
                  store_v_seq: bool = False, checkpoint_every: Union[int, str] = "auto", packed_spikes: bool = False):
    """IF over [T, *S]: (s_seq, v_last, v_seq or None)."""
    _check_sequence(x_seq)
    name, params = _surrogate.resolve(surrogate_function)
    handle = builtin_handle("if", v_threshold, v_reset, detach_reset, name, params)
    return _run_builtin(handle, x_seq, v, [], store_v_seq, checkpoint_every, packed_spikes)


def lif_multi_step(x_seq: Tensor, v: Optional[Tensor] = None, tau: float = 2.0, decay_input: bool = True,
                   v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                   detach_reset: bool = False, store_v_seq: bool = False, checkpoint_every: Union[int, str] = "auto",
                   packed_spikes: bool = False):
    """LIF over [T, *S]: (s_seq, v_last, v_seq or None)."""
    _check_sequence(x_seq)
    name, params = _surrogate.resolve(surrogate_function)
    handle = builtin_handle("lif", v_threshold, v_reset, detach_reset, name, params, decay_input, tau)
    return _run_builtin(handle, x_seq, v, [], store_v_seq, checkpoint_every, packed_spikes)


def plif_multi_step(x_seq: Tensor, v: Optional[Tensor], w: Tensor, decay_input: bool = True,
                    v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, surrogate_function=None,
                    detach_reset: bool = False, store_v_seq: bool = False, checkpoint_every: Union[int, str] = "auto",
                    packed_spikes: bool = False):
    """Parametric LIF over [T, *S] with learnable w, 1/tau = sigmoid(w): (s_seq, v_last, v_seq or None)."""
    _check_sequence(x_seq)
    name, params = _surrogate.resolve(surrogate_function)
    handle = builtin_handle("plif", v_threshold, v_reset, detach_reset, name, params, decay_input)
    return _run_builtin(handle, x_seq, v, [_scalar_param(w, "w", x_seq)], store_v_seq, checkpoint_every,
                        packed_spikes)


def multistep_if(x_seq: Tensor, v_init: Optional[Tensor], v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, detach_reset: bool = False, surrogate_function=None,
                 store_v_seq: bool = True, checkpoint_every: Union[int, str] = "auto", packed_spikes: bool = False):
    """Seed contract: (s_seq, v_seq) when store_v_seq, else (s_seq, v_last)."""
    s_seq, v_last, v_seq = if_multi_step(x_seq, v_init, v_threshold, v_reset, surrogate_function,
                                         detach_reset, store_v_seq, checkpoint_every, packed_spikes)
    return s_seq, (v_seq if store_v_seq else v_last)


def multistep_lif(x_seq: Tensor, v_init: Optional[Tensor], decay_input: bool = True, tau: float = 2.0,
                  v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, detach_reset: bool = False,
                  surrogate_function=None, store_v_seq: bool = True, checkpoint_every: Union[int, str] = "auto",
                  packed_spikes: bool = False):
    """Seed contract: (s_seq, v_seq) when store_v_seq, else (s_seq, v_last)."""
    s_seq, v_last, v_seq = lif_multi_step(x_seq, v_init, tau, decay_input, v_threshold, v_reset,
                                          surrogate_function, detach_reset, store_v_seq, checkpoint_every,
                                          packed_spikes)
    return s_seq, (v_seq if store_v_seq else v_last)


def multistep_plif(x_seq: Tensor, v_init: Optional[Tensor], r_tau: Tensor, decay_input: bool = True,
                   v_threshold: float = 1.0, v_reset: Optional[float] = 0.0, detach_reset: bool = False,
                   surrogate_function=None, checkpoint_every: Union[int, str] = "auto", packed_spikes: bool = False):
    """Seed contract: r_tau = 1/tau (a one-element tensor, gradient included); returns (s_seq, v_seq)."""
    _check_sequence(x_seq)
    name, params = _surrogate.resolve(surrogate_function)
    handle = builtin_handle("plif_r", v_threshold, v_reset, detach_reset, name, params, decay_input)
    s_seq, _, v_seq = _run_builtin(handle, x_seq, v_init, [_scalar_param(r_tau, "r_tau", x_seq)], True,
                                   checkpoint_every, packed_spikes)
    return s_seq, v_seq
