"""FlexSN: a spiking neuron from a PyTorch function of one time step.

    def core(x, v):                      # (*inputs, *states) -> (*outputs, *next_states)
        h = v + (x - v) / 2.0
        s = spikejit.surrogate.Sigmoid(alpha=4.0)(h - 1.0)
        return s, h * (1.0 - s)
    node = spikejit.FlexSN(core, num_inputs=1, num_states=1, num_outputs=1)
    s_seq = node(x_seq)                  # [T, *S] -> [T, *S], fused kernels, autograd included

`core` is traced with make_fx, translated into the neuron IR and compiled into the same kernels
as the built-in neurons. Tensors it closes over (module parameters, closure cells, attributes
of a bound `self`, functools.partial arguments) become IR parameters, read at every call and
given gradients: one-element tensors are scalar parameters, others per-neuron parameters that
broadcast to the neuron shape. After translation the program is checked against the eager core
(values and gradients on random inputs). When an op is outside the supported table, or the
check fails, FlexSN warns (naming the op) and runs an eager scan instead; `strict=True` raises.

A core may draw random numbers (torch.rand_like, randn_like, bernoulli, uniform_, normal_, ...,
one value per neuron): the kernels draw them per neuron and step from a seed, which each call
takes from PyTorch's generator on the inputs' device unless one is given (`seed=` of
multi_step_functional_forward and FlexSNKernel).
"""
import copy
import inspect
import os
import sys
import threading
import warnings
import weakref
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch import Tensor

from . import _core, registry
from ._trace import UnsupportedOp, captured_tensors, trace_core
from .functional import check_flag, refuse_stale_state, run_neuron
from ._kernel_calls import AUTO, MOVE_THE_MODULE, check_checkpoint_every, check_pack_spikes, check_tensor, scalar_param
from ._stateful_module import StatefulModule
from .scan import core_results, eager_scan, eager_scan_final_state, lowerable_scan, lowerable_scan_available, \
    lowerable_scan_final_state

__all__ = ["FlexSN", "FlexSNKernel", "UnsupportedCoreError"]

KERNEL_BACKENDS = ("spikejit", "triton", "inductor")
BACKENDS = KERNEL_BACKENDS + ("torch", "hop")


class UnsupportedCoreError(NotImplementedError):
    """Raised under strict=True when a core cannot be compiled; `.op` names what is missing."""

    def __init__(self, message: str, op: str):
        super().__init__(message)
        self.op = op


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def _as_list(results) -> list:
    return list(results) if isinstance(results, (tuple, list)) else [results]


def _check_arity(core, count: int) -> None:
    try:
        signature = inspect.signature(core)
    except (TypeError, ValueError):  # no signature to read (a builtin); calls will tell
        return
    try:
        signature.bind(*range(count))
    except TypeError:
        raise ValueError(f"core: expected a callable of {count} arguments (inputs then states), "
                         f"got one with signature {signature}") from None


def _example_device(params: Sequence[Tensor]) -> torch.device:
    return params[0].device if params else torch.device("cpu")


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _stacklevel_outside_spikejit() -> int:
    """warnings.warn's stacklevel, for a warning raised by its caller, that names the first line
    outside this package (the user's construction, through any subclass's __init__)."""
    frame, level = sys._getframe(1), 1  # (1: the caller, the function that warns)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def module_paths(root: torch.nn.Module) -> Dict[int, str]:
    """id -> path below `root`, for each module of its tree: where a DataParallel replica of root
    has its copy of that module."""
    paths = {}
    for name, module in root.named_modules(remove_duplicate=False):
        paths.setdefault(id(module), name)
    return paths


def replicate_kernel(module: torch.nn.Module, replica: torch.nn.Module, kernel: "FlexSN") -> None:
    """For a module that runs `kernel` with tensors of its own tree (a LIAF's activation, a
    SimpleBaseNode's step): its DataParallel `replica` reads them from the replica's tree, where
    replicate puts their copies (kernel_params)."""
    replica.__dict__["_replica_core"] = kernel._compiled.for_replica(module_paths(module), replica)


def kernel_params(module: torch.nn.Module, kernel: "FlexSN", x_seq: Tensor) -> List[Tensor]:
    """kernel.runtime_params(x_seq), read from `module`'s tree when it is a replica (replicate_kernel)."""
    replica_core = module.__dict__.get("_replica_core")
    return (kernel if replica_core is None else replica_core).runtime_params(x_seq)


class _ReplicaSource:
    """A core tensor read from a DataParallel replica: attribute `name` of the module at `path`
    below it (replicate sets the copies of parameters and buffers there after making the replica).
    The replica is held weakly: its compiled core must not keep it alive."""

    __slots__ = ("replica", "path", "name")
    owner = None  # (not the original's: a replica of a replica maps nothing again)

    def __init__(self, replica: torch.nn.Module, path: str, name: str):
        self.replica, self.path, self.name = weakref.ref(replica), path, name

    def get(self):
        replica = self.replica()
        return None if replica is None else getattr(replica.get_submodule(self.path), self.name, None)

    def describe(self) -> str:
        return f"{self.path + '.' if self.path else ''}{self.name} of a DataParallel replica"


class _CompiledCore:
    """A core translated into a registered program, with the tensors bound to its parameters."""

    def __init__(self, core, num_inputs, num_states, num_outputs, example_inputs):
        traced = trace_core(core, num_inputs, num_states, num_outputs, example_inputs)
        try:
            program = _core.Program.from_text(traced.text, "<FlexSN core>")
        except _core.ParseError as e:  # the translation produced something the IR rejects
            raise UnsupportedOp("translation", str(e)) from e
        self.sources = traced.params
        self.param_kinds = traced.param_kinds
        self.text = traced.text
        self.num_inputs, self.num_states, self.num_outputs = num_inputs, num_states, num_outputs
        self.handle = registry.register(program)

    @property
    def program(self):
        # Looked up, not held (like TrainingCall.program): a module kept alive to interpreter exit
        # (say by a reference cycle) must not hold the extension's objects past the registry.
        return registry.program(self.handle)

    @property
    def params(self) -> List[Tensor]:
        """The tensors bound to the program's parameters, read where they live now (so that
        torch.func.functional_call, parametrizations and reassigned attributes take effect)."""
        tensors = [source.get() for source in self.sources]
        for i, (t, source) in enumerate(zip(tensors, self.sources)):
            if not isinstance(t, Tensor):
                raise TypeError(f"core parameter {i}: expected a tensor at {source.describe()}, got "
                                f"{type(t).__name__}")
        return tensors

    def runtime_params(self, x_seq: Tensor, params: Optional[Sequence[Tensor]] = None) -> List[Tensor]:
        """The parameter tensors as the ops take them: x_seq's dtype, scalars as [] or [1], per-neuron
        tensors broadcast to the neuron shape (gradients flow back through the broadcast)."""
        if not self.param_kinds:  # (the common core: no parameters, nothing to look up per call)
            return []
        out = []
        neuron_shape = x_seq.shape[1:]
        for i, (p, kind) in enumerate(zip(self.params if params is None else params, self.param_kinds)):
            if p.device != x_seq.device:
                raise ValueError(f"core parameter {i}: on {p.device}, but the inputs are on {x_seq.device} "
                                 f"{MOVE_THE_MODULE}")
            if kind == "scalar":
                if p.numel() != 1:
                    raise ValueError(f"core parameter {i}: a scalar when traced, expected one element, got shape "
                                     f"{list(p.shape)}")
                out.append(scalar_param(p, x_seq.dtype))
                continue
            p = p.to(x_seq.dtype)
            try:
                out.append(p.expand(neuron_shape))
            except RuntimeError:
                raise ValueError(f"core parameter {i}: shape {list(p.shape)} does not broadcast to the "
                                 f"neuron shape {list(neuron_shape)}") from None
        return out

    def for_replica(self, paths: Dict[int, str], replica: torch.nn.Module) -> "_CompiledCore":
        """A copy whose tensors that live in a module of `paths` (id -> its path below the module
        replicated) are read from the same path below `replica`."""
        new = copy.copy(self)
        new.sources = [_ReplicaSource(replica, paths[id(source.owner)], source.name)
                       if id(source.owner) in paths else source for source in self.sources]
        return new

    def run(self, inputs, states, store_state_seqs, params=None, checkpoint_every=AUTO, packed_outputs=0,
            pack_spikes=False, seed=None):
        return run_neuron(self.handle, self.num_outputs, self.num_states, list(inputs), list(states),
                          self.runtime_params(inputs[0], params), store_state_seqs, checkpoint_every,
                          packed_outputs, pack_spikes, seed)


class _EagerCoreFailed(UnsupportedOp):
    """The eager core raised on _verify's random inputs."""


def _verify(compiled: _CompiledCore, core: Callable, device: torch.device) -> None:
    """Checks the compiled program against the eager core on random inputs: outputs, next states
    and gradients (inputs, states, parameters that require gradients). Raises UnsupportedOp.

    On the CPU the check runs in float64, unless the eager core itself fails there and runs in
    float32: a core may hold float32 tensors that an op will not mix with float64 ones
    (torch.heaviside(x, torch.tensor(0.0))), and its float32 calls would still run.

    A core that draws random numbers draws other numbers eagerly than the kernels do (they have
    their own generator), so its values and gradients cannot be compared: for it only their
    shapes (and the dtype of ours) are checked, and that both sides run."""
    if device.type == "cpu":
        try:
            _verify_in(compiled, core, device, torch.float64)
            return
        except _EagerCoreFailed:
            pass
    _verify_in(compiled, core, device, torch.float32)


def _verify_in(compiled: _CompiledCore, core: Callable, device: torch.device, dtype: torch.dtype) -> None:
    ni, ns, no = compiled.num_inputs, compiled.num_states, compiled.num_outputs
    random_draws = compiled.program.uses_random
    tolerance = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    per_neuron = [p.shape for p, k in zip(compiled.params, compiled.param_kinds) if k == "per_neuron"]
    shape = torch.broadcast_shapes(*per_neuron) if per_neuron else torch.Size([64])
    generator = torch.Generator(device="cpu").manual_seed(20240611)

    def random():
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * 1.5).to(device, dtype)

    args = [random().requires_grad_() for _ in range(ni + ns)]
    cotangents = [random() for _ in range(no + ns)]
    trainable = [i for i, p in enumerate(compiled.params) if p.requires_grad]
    try:
        with torch.enable_grad():
            # Clones: a core may update its arguments in place (the kernels never write them).
            eager = [e.expand(shape) for e in _as_list(core(*[a.clone() for a in args]))]
            # Results without a gradient (a spike written as a plain comparison) contribute
            # none; the compiled side below keeps every result, so a gradient it lets through
            # one of them shows up as a mismatch.
            live = [k for k, e in enumerate(eager) if e.requires_grad and not random_draws]
            wrt = args + [compiled.params[i] for i in trainable]
            # (A random core's gradients depend on its draws, so they are not compared; some
            # have none in PyTorch: torch.bernoulli's raises, where the kernels' draws give zero.)
            eager_grads = (torch.autograd.grad([eager[k] for k in live], wrt, [cotangents[k] for k in live],
                                               allow_unused=True) if live else [None] * len(wrt))
    except Exception as e:
        raise _EagerCoreFailed("verification", f"the eager core failed on random inputs: {e}") from e

    params = [p.detach().to(dtype).requires_grad_() for p in compiled.params]
    seqs = [a.detach().unsqueeze(0).requires_grad_() for a in args[:ni]]
    states = [a.detach().requires_grad_() for a in args[ni:]]
    with torch.enable_grad():
        outputs, finals, _ = compiled.run(seqs, states, False, params)
        ours = [o[0] for o in outputs] + list(finals)
        wrt = seqs + states + [params[i] for i in trainable]
        # Results without a gradient come without requires_grad (Program.differentiable_outputs).
        kept = [k for k, o in enumerate(ours) if o.requires_grad]
        ours_grads = (torch.autograd.grad([ours[k] for k in kept], wrt, [cotangents[k] for k in kept],
                                          allow_unused=True) if kept else [None] * len(wrt))
    ours_grads = [g[0] if g is not None and k < ni else g for k, g in enumerate(ours_grads)]

    if random_draws:
        _check_shapes(eager, ours, eager_grads, ours_grads, dtype)
        return
    for k, (a, b) in enumerate(zip(eager, ours)):
        if not torch.allclose(a.detach().to(dtype), b.detach(), equal_nan=True, **tolerance):
            raise UnsupportedOp("verification", f"result {k} of the compiled neuron differs from the eager core")
    for k, (a, b) in enumerate(zip(eager_grads, ours_grads)):
        if a is None and b is None:
            continue
        a = torch.zeros_like(b) if a is None else a.to(dtype)
        b = torch.zeros_like(a) if b is None else b
        if a.shape != b.shape or not torch.allclose(a, b, equal_nan=True, **tolerance):
            raise UnsupportedOp("verification", f"gradient {k} of the compiled neuron differs from eager "
                                "autograd (a surrogate written as an autograd.Function? use spikejit.surrogate)")


def _check_shapes(eager, ours, eager_grads, ours_grads, dtype) -> None:
    """_verify's check of a core with random draws: results and gradients of the same shapes."""
    for k, (a, b) in enumerate(zip(eager, ours)):
        if a.shape != b.shape or b.dtype != dtype:
            raise UnsupportedOp("verification", f"result {k} of the compiled neuron is {b.dtype}{list(b.shape)}, "
                                f"the eager core's has shape {list(a.shape)}")
    for k, (a, b) in enumerate(zip(eager_grads, ours_grads)):
        if a is not None and b is not None and a.shape != b.shape:
            raise UnsupportedOp("verification", f"gradient {k} of the compiled neuron has shape {list(b.shape)}, "
                                f"eager autograd's {list(a.shape)}")


# Tracing (make_fx patches module-level state of PyTorch's), the generators' save and restore
# and the verification of one core at a time: FlexSN modules made in several threads at once
# would otherwise trace inside each other (a crash, or a spurious fallback).
_COMPILING = threading.RLock()
_cuda_guard_pinned = False


def _pin_fake_cuda_guard() -> None:
    """Works around a PyTorch bug (2.11; fixed upstream by pytorch/pytorch#178950): where CUDA
    has no device, the first FakeTensorMode (make_fx enters one) registers a no-op CUDA device
    guard owned by its thread. Once that thread ends the registry points at freed memory, and
    the next trace, in any thread, crashes. Registered by a thread that lives as long as the
    process (the main thread, else a parked one), the guard stays valid. Call under _COMPILING."""
    global _cuda_guard_pinned
    ensure = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)  # (older PyTorch: no such guard)
    if _cuda_guard_pinned or ensure is None:
        return
    if threading.current_thread() is threading.main_thread():
        ensure()
    else:
        registered = threading.Event()

        def park():
            ensure()
            registered.set()
            threading.Event().wait()

        threading.Thread(target=park, name="spikejit-cuda-guard", daemon=True).start()
        registered.wait()
    _cuda_guard_pinned = True


def _untouched_generators(device: torch.device):
    """A context that restores PyTorch's generators (the CPU's and, for a CUDA device, its own) on
    exit: tracing and verifying a core run it, and a core's random draws must not move them (making
    a model must not change what a later torch.manual_seed gives)."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    return torch.random.fork_rng(devices=devices)


class FlexSN(StatefulModule):
    """A neuron from a one-step core; see the module docstring.

    Arguments follow SpikingJelly's FlexSN: `core`, `num_inputs`, `num_states`, `num_outputs`,
    `example_inputs` (per-step tensors used for tracing; default one-element float32 zeros),
    `requires_grad` (per input and state: False detaches it), `step_mode` ('m': inputs [T, *S];
    's': one step), `backend` ('spikejit' — also 'triton'/'inductor' —, 'torch' for an eager
    scan, 'hop' for torch's scan operator), `store_state_seqs`, `example_outputs` (accepted and
    checked for count; outputs always have the per-step shape of the inputs), `strict`,
    `checkpoint_every` (the kernels' save policy of training: 0 saves per step, k >= 1 keeps the
    states only every k steps and recomputes the rest in the backward, "auto" chooses per call;
    the eager fallback ignores it), `pack_spikes`
    (save policy: spike-valued values saved as bits; the eager fallback ignores it) and
    `packed_outputs` (indices of spike-valued outputs returned as uint8 bit rows [T, ceil(N/8)],
    which carry no gradient; needs the compiled kernels and step_mode 'm').
    """

    _STATE_NAMES = frozenset({"states", "state_seqs"})

    def __init__(self, core: Callable, num_inputs: int, num_states: int, num_outputs: int,
                 example_inputs: Optional[Sequence[Tensor]] = None, requires_grad: Optional[Sequence[bool]] = None,
                 step_mode: str = "m", backend: str = "spikejit", store_state_seqs: bool = False,
                 example_outputs: Optional[Sequence[Tensor]] = None, strict: bool = False,
                 checkpoint_every: Union[int, str] = "auto", pack_spikes: bool = False,
                 packed_outputs: Sequence[int] = ()):
        if "_parameters" not in self.__dict__:  # (a subclass whose core reads the module's own
            super().__init__()                  # tensors sets the module up and registers them first)
        if not callable(core):
            raise TypeError(f"core: expected a callable, got {type(core).__name__}")
        self.num_inputs = _check_count("num_inputs", num_inputs, 1)
        self.num_states = _check_count("num_states", num_states, 0)
        self.num_outputs = _check_count("num_outputs", num_outputs, 0)
        if step_mode not in ("s", "m"):
            raise ValueError(f"step_mode: expected 's' or 'm', got {step_mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        count = num_inputs + num_states
        if requires_grad is not None and len(requires_grad) != count:
            raise ValueError(f"requires_grad: expected {count} flags (inputs then states), got {len(requires_grad)}")
        if example_inputs is not None:
            if len(example_inputs) != count:
                raise ValueError(f"example_inputs: expected {count} tensors (inputs then states), "
                                 f"got {len(example_inputs)}")
            for i, e in enumerate(example_inputs):
                if not isinstance(e, Tensor):
                    raise TypeError(f"example_inputs[{i}]: expected a tensor, got {type(e).__name__}")
        if example_outputs is not None and len(example_outputs) != num_outputs:
            raise ValueError(f"example_outputs: expected {num_outputs} tensors, got {len(example_outputs)}")
        _check_arity(core, count)
        self.core = core
        self.requires_grad = None if requires_grad is None else [
            check_flag(f"requires_grad[{i}]", r) for i, r in enumerate(requires_grad)]
        self.step_mode = step_mode
        self.backend = backend
        self.store_state_seqs = check_flag("store_state_seqs", store_state_seqs)
        self.strict = check_flag("strict", strict)
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.pack_spikes = check_pack_spikes(pack_spikes, self.checkpoint_every)
        self.fallback_reason = None
        self._compiled = None
        self._finalizer = None
        self._example_inputs = None if example_inputs is None else [e.detach().clone() for e in example_inputs]
        if backend in KERNEL_BACKENDS:
            self._compile(self._example_inputs)
        self._packed_mask = self._check_packed_outputs(packed_outputs)
        self.packed_outputs = tuple(i for i in range(num_outputs) if self._packed_mask >> i & 1)
        self.states = None
        self.state_seqs = None

    # -- compilation ---------------------------------------------------------------------------

    def _compile(self, example_inputs):
        count = self.num_inputs + self.num_states
        try:
            device = _example_device(captured_tensors(self.core))
            if example_inputs is None:
                examples = [torch.zeros(1, device=device) for _ in range(count)]
            else:
                examples = [e.clone() for e in example_inputs]  # tracing an in-place core writes them
                device = examples[0].device
            with _COMPILING, _untouched_generators(device):
                _pin_fake_cuda_guard()
                compiled = _CompiledCore(self.core, self.num_inputs, self.num_states, self.num_outputs, examples)
                try:
                    _verify(compiled, self.core, device)
                except BaseException:
                    registry.release_owner(compiled.handle)
                    raise
        except UnsupportedOp as e:
            message = (f"FlexSN: cannot compile the core: {e}; "
                       f"{'strict=True, so no eager fallback' if self.strict else 'falling back to an eager scan'}")
            if self.strict:
                raise UnsupportedCoreError(message, e.op) from e
            warnings.warn(message, RuntimeWarning, stacklevel=_stacklevel_outside_spikejit())
            self.fallback_reason = str(e)
            return
        self._compiled = compiled
        self._finalizer = registry.attach_owner(self, compiled.handle)

    def _check_packed_outputs(self, packed_outputs) -> int:
        """The bit mask of `packed_outputs` (indices of spike-valued outputs)."""
        if isinstance(packed_outputs, (str, bytes)) or not isinstance(packed_outputs, Iterable):
            raise TypeError(f"packed_outputs: expected a sequence of output indices, got {packed_outputs!r}")
        indices = list(packed_outputs)
        if not indices:
            return 0
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_outputs:
                raise ValueError(f"packed_outputs: expected output indices 0..{self.num_outputs - 1}, got {i!r}")
        if self.step_mode != "m":
            raise ValueError("packed_outputs: bit rows [T, ceil(N/8)] are for step_mode='m'")
        if self._compiled is None:
            raise ValueError(f"packed_outputs: needs the compiled kernels, but the core runs as "
                             f"{'an eager scan: ' + self.fallback_reason if self.fallback_reason else self.backend}")
        packable = self._compiled.program.packable_outputs
        for i in indices:
            if not packable[i]:
                raise ValueError(f"packed_outputs: output {i} is not spike-valued (spike(), a comparison, "
                                 f"float(bool), 0/1 products: see Program.packable_outputs)")
        return sum(1 << i for i in set(indices))

    @property
    def handle(self) -> Optional[int]:
        """The registry handle of the compiled program, or None when running eagerly."""
        return None if self._compiled is None else self._compiled.handle

    @property
    def program(self):
        """The compiled spikejit._core.Program, or None."""
        return None if self._compiled is None else self._compiled.program

    def runtime_params(self, x_seq: Tensor) -> List[Tensor]:
        """The tensors the compiled core's parameters are bound to, as the ops take them for
        inputs like x_seq (for a caller that runs `handle` itself)."""
        if self._compiled is None:
            raise RuntimeError(f"FlexSN: the core runs as an eager scan, without parameters to pass: "
                               f"{self.fallback_reason or 'backend ' + repr(self.backend)}")
        return self._compiled.runtime_params(x_seq)

    def _module_paths(self) -> Dict[int, str]:
        """Where the modules holding the core's tensors are below this module (module_paths)."""
        return module_paths(self)

    def _replicate_for_data_parallel(self):
        # DataParallel's copy for another device (torch.nn.parallel.replicate): the core's tensors
        # that live in this module's tree are read from the replica's tree, where their copies go.
        replica = super()._replicate_for_data_parallel()
        if self._compiled is not None:
            replica._compiled = self._compiled.for_replica(self._module_paths(), replica)
        return replica

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self._with_detached_state(self.__dict__).items():
            if key == "_finalizer":
                continue
            new.__dict__[key] = copy.deepcopy(value, memo) if key != "_compiled" else None
        new._finalizer = None
        if self._compiled is not None:
            compiled = copy.copy(self._compiled)
            compiled.sources = [copy.deepcopy(source, memo) for source in self._compiled.sources]
            registry.retain_owner(compiled.handle)
            new._compiled = compiled
            new._finalizer = registry.attach_owner(new, compiled.handle)
        return new

    # A pickled FlexSN (torch.save of a whole model, multiprocessing) holds its core, not the
    # program: it is traced and registered again where it is loaded (the core must be picklable:
    # a module-level function or an nn.Module, not a lambda or a closure).
    def __getstate__(self):
        state = super().__getstate__()
        state["_compiled"], state["_finalizer"] = self._compiled is not None, None
        return state

    def __setstate__(self, state):
        compiled = state.pop("_compiled")
        super().__setstate__(state)
        self._compiled = None
        if compiled:
            self._compile(self._example_inputs)
            if self._compiled is None:
                raise RuntimeError(f"FlexSN: the unpickled core no longer compiles: {self.fallback_reason}")

    # -- state ---------------------------------------------------------------------------------

    @staticmethod
    def init_states(num_states: int, step_mode: str, *args) -> List[Tensor]:
        """Initial states: zeros shaped like one step of the first input. Override to change."""
        x = args[0]
        like = x if step_mode == "s" else x.new_empty(x.shape[1:])
        return [torch.zeros_like(like) for _ in range(num_states)]

    def _custom_init(self) -> bool:
        return type(self).init_states is not FlexSN.init_states

    def detach(self) -> None:
        """Cuts the states (and stored state sequences) from the autograd graph (truncated BPTT)."""
        for name in ("states", "state_seqs"):
            values = getattr(self, name)
            if values is not None:
                setattr(self, name, [v.detach() if isinstance(v, Tensor) else v for v in values])

    def reset(self) -> None:
        self.states = None
        self.state_seqs = None

    def _current_states(self, x, sequence: bool):
        """The states an earlier call left, when they fit the steps of input x (a sequence [T, *S]
        or one step); else None."""
        states = self.states
        if states is None:
            return None
        step_shape = x.shape[1:] if sequence else x.shape
        if all(s.shape == step_shape for s in states):
            refuse_stale_state(self)
            return list(states)
        return None

    # -- forward -------------------------------------------------------------------------------

    def _check_inputs(self, inputs):
        if len(inputs) != self.num_inputs:
            raise ValueError(f"inputs: expected {self.num_inputs} tensors, got {len(inputs)}")
        first = check_tensor("inputs[0]", inputs[0])
        for i in range(1, len(inputs)):
            x = check_tensor(f"inputs[{i}]", inputs[i])
            if x.shape != first.shape:
                raise ValueError(f"inputs[{i}]: expected shape {list(first.shape)} (that of inputs[0]), "
                                 f"got {list(x.shape)}")
        if self.step_mode == "m" and first.dim() < 1:
            raise ValueError("inputs[0]: expected a sequence [T, *S]")

    def _mask(self, inputs, states):
        """The inputs and states, detached where requires_grad says False."""
        if self.requires_grad is None:
            return list(inputs), states
        flags = self.requires_grad
        inputs = [x if flags[i] else x.detach() for i, x in enumerate(inputs)]
        if states is not None:
            states = [s if s is None or flags[self.num_inputs + j] else s.detach() for j, s in enumerate(states)]
        return inputs, states

    def single_step_forward(self, *inputs):
        """One step: the compiled kernels over a sequence of one step (as the built-in neurons
        run a step), or the core itself when it runs eagerly."""
        self._check_inputs(inputs)
        states = self._current_states(inputs[0], sequence=False)
        if self._compiled is not None:
            outputs, self.states, _ = self._run_sequence([x.unsqueeze(0) for x in inputs], states, one_step=True)
            return [y[0] for y in outputs]
        if states is None:
            states = self.init_states(self.num_states, "s", *inputs)
        inputs, states = self._mask(inputs, states)
        outputs, self.states = core_results(self.core(*inputs, *states), self.num_outputs, self.num_states)
        return outputs

    def multi_step_functional_forward(self, *inputs, states: Optional[Sequence[Tensor]] = None,
                                      seed: Optional[Tensor] = None):
        """(outputs, final states, state sequences or None) without touching the module's state;
        `states=None` starts from init_states (or the program's zeros). `seed` (a core with random
        draws, compiled): an int64 tensor of one element on the inputs' device that fixes the
        draws; None draws one from PyTorch's generator."""
        self._check_inputs(inputs)
        if states is not None:
            if len(states) != self.num_states:
                raise ValueError(f"states: expected {self.num_states} tensors (or None), got {len(states)}")
            for j, s in enumerate(states):
                if s is not None and not isinstance(s, Tensor):
                    raise TypeError(f"states[{j}]: expected a tensor or None, got {type(s).__name__}")
        return self._run_sequence(list(inputs), states, seed)

    def _run_sequence(self, inputs, states, seed=None, one_step=False):
        """multi_step_functional_forward after its checks. `one_step`: the inputs are one step
        made a sequence (single_step_forward), which keeps no state sequences and no bit rows."""
        if seed is not None and self._compiled is None:
            raise ValueError(f"seed: fixes the draws of the compiled kernels, but the core runs as "
                             f"{'an eager scan: ' + self.fallback_reason if self.fallback_reason else self.backend}"
                             f" (its draws come from PyTorch's generator)")
        if states is None and (self._compiled is None or self._custom_init()):
            states = self.init_states(self.num_states, "m", *inputs)
        inputs, states = self._mask(inputs, None if states is None else list(states))
        if self._compiled is not None:
            init = [None] * self.num_states if states is None else states
            outputs, finals, seqs = self._compiled.run(inputs, init, self.store_state_seqs and not one_step,
                                                       checkpoint_every=self.checkpoint_every,
                                                       packed_outputs=0 if one_step else self._packed_mask,
                                                       pack_spikes=self.pack_spikes, seed=seed)
            return list(outputs), list(finals), (list(seqs) if seqs is not None else None)
        use_hop = self.backend == "hop" and lowerable_scan_available()
        if self.store_state_seqs:
            scan = lowerable_scan if use_hop else eager_scan
            outputs, seqs = scan(self.core, inputs, states, self.num_outputs)
            finals = [seq[-1] if seq.shape[0] > 0 else s.clone() for seq, s in zip(seqs, states)]
            return outputs, finals, seqs
        scan = lowerable_scan_final_state if use_hop else eager_scan_final_state
        outputs, finals = scan(self.core, inputs, states, self.num_outputs)
        return outputs, finals, None

    def multi_step_forward(self, *inputs):
        self._check_inputs(inputs)
        states = self._current_states(inputs[0], sequence=True)
        outputs, finals, seqs = self._run_sequence(list(inputs), states)
        self.states = finals
        if self.store_state_seqs:
            self.state_seqs = seqs
        return outputs

    def forward(self, *inputs):
        if self.step_mode == "m":
            outputs = self.multi_step_forward(*inputs)
        else:
            outputs = self.single_step_forward(*inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def extra_repr(self) -> str:
        mode = "kernels" if self._compiled is not None else f"eager ({self.fallback_reason or self.backend})"
        return (f"num_inputs={self.num_inputs}, num_states={self.num_states}, num_outputs={self.num_outputs}, "
                f"step_mode={self.step_mode}, {mode}")


class FlexSNKernel:
    """The functional kernel API: `kernel(*input_seqs, *init_states, seed=None) -> (*output_seqs,
    *state_seqs)`. The core must compile (strict); the kernels live as long as this object or its
    copies. `seed` fixes the draws of a core with random numbers (an int64 tensor of one element on
    the inputs' device; None draws one from PyTorch's generator); other cores ignore it."""

    def __init__(self, core: Callable, num_inputs: int, num_states: int, num_outputs: int,
                 example_inputs: Optional[Sequence[Tensor]] = None, requires_grad: Optional[Sequence[bool]] = None,
                 checkpoint_every: Union[int, str] = "auto"):
        self._module = FlexSN(core, num_inputs, num_states, num_outputs, example_inputs, requires_grad,
                              step_mode="m", store_state_seqs=True, strict=True, checkpoint_every=checkpoint_every)

    @property
    def handle(self) -> int:
        return self._module.handle

    def __call__(self, *args, seed: Optional[Tensor] = None):
        m = self._module
        if len(args) != m.num_inputs + m.num_states:
            raise ValueError(f"args: expected {m.num_inputs} input sequences and {m.num_states} states, got {len(args)}")
        outputs, _, seqs = m.multi_step_functional_forward(*args[:m.num_inputs], states=list(args[m.num_inputs:]),
                                                           seed=seed)
        return tuple(outputs) + tuple(seqs)

    def __deepcopy__(self, memo):
        new = FlexSNKernel.__new__(FlexSNKernel)
        new._module = copy.deepcopy(self._module, memo)
        return new
