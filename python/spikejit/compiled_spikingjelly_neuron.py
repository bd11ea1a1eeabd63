"""CompiledSpikingJellyNeuron: a SpikingJelly neuron of the user's own class, compiled from its step.

    class AdaptiveLIF(spikingjelly.activation_based.neuron.BaseNode):   # the user's neuron
        ...
    node = spikejit.CompiledSpikingJellyNeuron(AdaptiveLIF(...))        # or from_spikingjelly(net)

SpikingJelly's users write a neuron as a subclass of one of its neurons: a one-step function
(`single_step_functional_forward(inputs, states)` in SpikingJelly 2.0, `neuronal_charge` and its
kin for SimpleBaseNode) over the memories it registers. spikejit has no module of that class, but
it has the step: this module traces one call of the neuron's `single_step_forward`, with its
memories set to the states, into a FlexSN program. The memories are the states (their reset
values, through the neuron's own `materialize_states`, the initial ones), the neuron's
parameters and buffers are the program's parameters (with gradients, read at each call), its
surrogate functions (spikejit's or SpikingJelly's) spike ops. A multi-step call is then the step
repeated, as it is in SpikingJelly for the classes in `SPIKINGJELLY_BASES` (so a class that
defines its own multi-step forward is refused); a step that cannot be compiled runs as an eager
scan, with FlexSN's warning (or FlexSN's error with `strict=True`).

The module keeps a private copy of the neuron; its parameters, buffers and submodules are this
module's own (the same tables), so the state dict has the neuron's keys and loads both ways. The
memories read as attributes (`node.v`), `step_mode` and `store_v_seq` (then `v_seq`) are the
neuron's options. The step is traced once, so one that depends on the training mode is refused.
"""
import copy
import functools
import itertools
import math
from typing import Callable, Dict, List, Tuple, Union

import torch
from torch import Tensor, nn

from ._stateful_module import StatefulModule, appended_step
from .functional import check_flag
from .flexsn import FlexSN

__all__ = ["CompiledSpikingJellyNeuron", "SPIKINGJELLY_BASES"]

# SpikingJelly's neuron classes whose multi-step forward is their single step repeated (checked
# against SpikingJelly itself by the tests), by name: a subclass of one of these is compiled from
# its step. (Not here: neurons whose step needs the whole batch or sequence, like MPBN's batch
# norm, the PSNs or DSR; online-training neurons; the ILC and Noisy neurons.)
SPIKINGJELLY_BASES = frozenset({
    "BaseNode", "AdaptBaseNode", "SimpleBaseNode", "IFNode", "LIFNode", "ParametricLIFNode", "QIFNode", "EIFNode",
    "IzhikevichNode", "KLIFNode", "CUBALIFNode", "ComplementaryLIFNode", "RAFNode", "TernaryIFNode",
    "TernaryLIFNode", "HalfThresholdIFNode", "SimpleIFNode", "SimpleLIFNode", "ILIFNode"})

# Methods that define how a sequence runs: a class of the user's own that defines one may run a
# sequence otherwise than its step repeated.
_SEQUENCE_METHODS = ("forward", "multi_step_forward", "multi_step_functional_forward")


def _from_spikingjelly(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "spikingjelly"


def _defining(method: str, mro) -> type:
    """The class of the MRO whose `method` the neuron runs (None: none defines it)."""
    return next((cls for cls in mro if method in vars(cls)), None)


def _check_neuron(neuron) -> Tuple[str, ...]:
    """The neuron's memory names, after checking that spikejit can compile its step."""
    if not isinstance(neuron, nn.Module):
        raise TypeError(f"neuron: expected a SpikingJelly neuron module, got {type(neuron).__name__}")
    mro = type(neuron).__mro__
    base = next((c for c in mro if _from_spikingjelly(c)), None)
    if base is None or base.__name__ not in SPIKINGJELLY_BASES:
        raise ValueError(f"neuron: expected a neuron whose sequence is its step repeated, one of SpikingJelly's "
                         f"{sorted(SPIKINGJELLY_BASES)} or a subclass, got {type(neuron).__name__}"
                         f"{'' if base is None or base is type(neuron) else ' (a ' + base.__name__ + ')'}")
    for cls in mro[:mro.index(base)]:
        own = [name for name in _SEQUENCE_METHODS if name in vars(cls)]
        if own:
            raise ValueError(f"neuron: {cls.__name__} defines {', '.join(own)}, so a sequence may not be its step "
                             "repeated, which is what spikejit compiles")
    stateful_owner = _defining("single_step_forward", mro)
    if mro.index(stateful_owner) < mro.index(base) and "SimpleBaseNode" not in {c.__name__ for c in base.__mro__}:
        raise ValueError(f"neuron: {stateful_owner.__name__} defines single_step_forward, but SpikingJelly runs the "
                         f"sequences of a {base.__name__} through single_step_functional_forward, which does not call "
                         f"it: its two step modes differ; define single_step_functional_forward instead")
    step_owner = _defining("single_step_functional_forward", mro)
    sequence_owner = _defining("multi_step_functional_forward", mro)
    if sequence_owner is not None and sequence_owner.__name__ != "MemoryModule" and \
            mro.index(step_owner) < mro.index(sequence_owner):
        raise ValueError(f"neuron: {step_owner.__name__} defines single_step_functional_forward, but SpikingJelly runs "
                         f"its sequences (step_mode 'm') with {sequence_owner.__name__}'s "
                         f"multi_step_functional_forward, which does not call it: its two step modes differ; derive "
                         f"the neuron from BaseNode")
    memories = tuple(neuron._memories)
    if not memories:
        raise ValueError(f"neuron: expected registered memories (the states), got none in {type(neuron).__name__}")
    for name, value in neuron._memories_rv.items():
        if not isinstance(value, (Tensor, int, float)) or isinstance(value, bool):
            raise ValueError(f"neuron: memory '{name}' has the reset value {type(value).__name__} {value!r}, "
                             "expected a number or a tensor (a state of one value per neuron)")
    return memories


def _one_step(step: nn.Module, memories: Tuple[str, ...], num_inputs: int, *args):
    """(*outputs, *next memories) of one `single_step_forward` with the memories set to the states;
    the neuron's memories are put back as they were (they must not keep the call's tensors)."""
    table = step._memories
    before = dict(table)
    try:
        table.update(zip(memories, args[num_inputs:]))
        outputs = step.single_step_forward(*args[:num_inputs])
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        return (*outputs, *(table[name] for name in memories))
    finally:
        table.clear()
        table.update(before)


def _initial_states(step: nn.Module, memories: Tuple[str, ...], x: Tensor) -> List[Tensor]:
    """The memories' reset values as states for one step like x: through the neuron's own
    materialize_states (how SpikingJelly starts a sequence), numbers filled in."""
    values = step.materialize_states((x,), tuple(step._memories_rv[name] for name in memories), "s")
    states = []
    for name, value in zip(memories, values):
        if not isinstance(value, Tensor):
            states.append(torch.full_like(x, float(value)))
            continue
        try:
            states.append(value.detach().to(x).expand(x.shape).clone())
        except RuntimeError:
            raise ValueError(f"neuron: memory '{name}' starts as a tensor of shape {list(value.shape)}, which does "
                             f"not broadcast to the step's shape {list(x.shape)}") from None
    return states


def _probe(core: Callable, args: List[Tensor], what: str):
    """One eager call of the step (no gradients), its failure named as the neuron's."""
    with torch.no_grad():
        try:
            return core(*args)
        except Exception as error:
            raise RuntimeError(f"neuron: its step failed on {what}: {type(error).__name__}: {error}") from error


def _count_outputs(core: Callable, num_inputs: int, num_states: int, like: Tensor) -> int:
    """The number of outputs, from one call on one-element tensors."""
    results = _probe(core, [torch.ones(1).to(like)] * (num_inputs + num_states), "one-element tensors")
    return len(results) - num_states


def _same(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _example_shape(step: nn.Module) -> Tuple[int, ...]:
    """A step's shape for tracing and probing the neuron: one its tensors broadcast to (per-neuron
    ones: theirs), without dims of size 1, so that the tracer can tell the dims SpikingJelly's
    own steps add (`x.unsqueeze(0)`: they run a step as a sequence of one) from the neurons'."""
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in itertools.chain(step.parameters(), step.buffers())))
    except RuntimeError:
        shape = ()
    return tuple(2 if d == 1 else d for d in shape) if math.prod(shape) > 1 else (2, 3)


def _check_training_mode_free(core: Callable, step: nn.Module, num_inputs: int, num_states: int, like: Tensor,
                              shape: Tuple[int, ...]) -> None:
    """Refuses a step whose results change with the training mode: it is compiled once. (Random
    draws are the same in both calls, on inputs of `shape`: each starts from the same seed.)"""
    generator = torch.Generator().manual_seed(0)
    args = [torch.randn(shape, generator=generator).to(like) for _ in range(num_inputs + num_states)]
    mode = step.training
    results = []
    try:
        for training in (True, False):
            step.train(training)
            with torch.random.fork_rng(devices=[like.device] if like.is_cuda else []):
                torch.manual_seed(0)
                results.append(_probe(core, args, f"random inputs in {'training' if training else 'eval'} mode"))
    finally:
        step.train(mode)
    if not all(_same(a, b) for a, b in zip(*results)):
        raise ValueError(f"neuron: {type(step).__name__}'s step gives other results in eval mode than in training "
                         "mode, but spikejit compiles the step once")


class CompiledSpikingJellyNeuron(FlexSN):
    """A SpikingJelly neuron of any class in SPIKINGJELLY_BASES or derived from one, compiled from
    its step; see the module docstring. `num_inputs`: the step's inputs (`single_step_forward(x,
    ...)`); `backend`, `strict`, `checkpoint_every` and `pack_spikes` are FlexSN's."""

    def __init__(self, neuron: nn.Module, num_inputs: int = 1, backend: str = "spikejit", strict: bool = False,
                 checkpoint_every: Union[int, str] = "auto", pack_spikes: bool = False):
        memories = _check_neuron(neuron)
        # A private copy that starts at the reset values (a state from an earlier call may be
        # tensors of an autograd graph, which deepcopy refuses): its memories are given in the memo.
        step = copy.deepcopy(neuron, {id(neuron._memories): copy.deepcopy(neuron._memories_rv)})
        if hasattr(step, "store_v_seq"):
            step.store_v_seq = False  # (the private copy's step must not record; this module does)
        StatefulModule.__init__(self)
        # The neuron's tensors and submodules are this module's: the same tables, so that the
        # state dict has SpikingJelly's keys and .to() or a loaded state dict reaches the step.
        for table in ("_parameters", "_buffers", "_non_persistent_buffers_set", "_modules"):
            self.__dict__[table] = step.__dict__[table]
        self.__dict__["_step"] = step
        self.memory_names = memories
        core = functools.partial(_one_step, step, memories, num_inputs)
        core.__name__ = type(neuron).__name__  # (the compiled neuron's name)
        like = next((t for t in itertools.chain(step.parameters(), step.buffers()) if t.is_floating_point()),
                    torch.zeros(()))  # (the step's device and dtype)
        shape = _example_shape(step)
        num_outputs = _count_outputs(core, num_inputs, len(memories), like)
        _check_training_mode_free(core, step, num_inputs, len(memories), like, shape)
        # Traced in float64: SpikingJelly's own steps (IF, LIF, ...) run their kernel ops for
        # float32 and their reference PyTorch code for float64, which the tracer reads.
        examples = [torch.zeros(shape, dtype=torch.float64, device=like.device)
                    for _ in range(num_inputs + len(memories))]
        super().__init__(core, num_inputs, len(memories), num_outputs, example_inputs=examples,
                         step_mode=getattr(neuron, "step_mode", "s"), backend=backend,
                         store_state_seqs=bool(getattr(neuron, "store_v_seq", False)), strict=strict,
                         checkpoint_every=checkpoint_every, pack_spikes=pack_spikes)
        self.train(neuron.training)

    @property
    def neuron(self) -> nn.Module:
        """The SpikingJelly neuron whose step is compiled (a private copy; its tensors are this module's)."""
        return self._step

    def init_states(self, num_states: int, step_mode: str, *inputs) -> List[Tensor]:
        x = inputs[0] if step_mode == "s" else inputs[0].new_empty(inputs[0].shape[1:])  # (T may be 0)
        return _initial_states(self._step, self.memory_names, x)

    @property
    def store_v_seq(self) -> bool:
        """SpikingJelly's name of store_state_seqs: keep the states' sequences (v_seq)."""
        return self.store_state_seqs

    @store_v_seq.setter
    def store_v_seq(self, value: bool) -> None:
        self.store_state_seqs = check_flag("store_v_seq", value)

    def train(self, mode: bool = True):
        super().train(mode)
        self._step.training = mode  # (not one of this module's children, yet its step reads the mode)
        return self

    def single_step_forward(self, *inputs):
        """One step; with store_v_seq the states are appended to the sequences, as SpikingJelly's
        single steps append v (a step of another shape starts them again)."""
        outputs = super().single_step_forward(*inputs)
        if self.store_state_seqs:
            seqs = self.state_seqs or [None] * self.num_states
            self.state_seqs = [appended_step(seq, state.unsqueeze(0)) for seq, state in zip(seqs, self.states)]
        return outputs

    @property
    def v_seq(self):
        """The sequence of memory 'v' from the last multi-step call with store_v_seq, else None."""
        if self.state_seqs is None or "v" not in self.memory_names:
            return None
        return self.state_seqs[self.memory_names.index("v")]

    def _module_paths(self) -> Dict[int, str]:
        paths = super()._module_paths()
        paths[id(self._step)] = ""  # (the private copy's tensors are this module's)
        return paths

    def _replicate_for_data_parallel(self):
        if self._compiled is None:  # its step would read the private copy's tables: the original's tensors
            raise RuntimeError(f"CompiledSpikingJellyNeuron: DataParallel cannot copy a neuron that runs its step "
                               f"eagerly ({self.fallback_reason or 'backend ' + repr(self.backend)}); use "
                               f"DistributedDataParallel")
        return super()._replicate_for_data_parallel()

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            memories = self.__dict__.get("memory_names", ())
            if name not in memories:
                raise
        states = self.__dict__.get("states")
        return self._step._memories_rv[name] if states is None else states[memories.index(name)]

    def extra_repr(self) -> str:
        return f"{type(self._step).__name__}, memories={list(self.memory_names)}, {super().extra_repr()}"
