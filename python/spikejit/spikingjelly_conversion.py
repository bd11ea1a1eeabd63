"""from_spikingjelly: a SpikingJelly network's neurons replaced by spikejit's, in one call.

    net = spikejit.from_spikingjelly(net)      # every SpikingJelly neuron becomes spikejit's
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)   # after: the neurons' parameters are new

Each SpikingJelly neuron module whose class spikejit provides (`CONVERTIBLE`) is replaced, in its
parent, by spikejit's module of the same name (for SpikingJelly 2.0's FlexSN: StaticInputsFlexSN,
which keeps its constructor and compiles the core, SpikingJelly's surrogates included), built from
the options the SpikingJelly module keeps (its constructor's arguments, read from its attributes),
with its state dict loaded (the learned parameters and buffers, e.g. PLIF's w), on the same device
and dtype (a neuron without tensors of its own: the network's), in the same training mode, with
the same requires_grad flags. The rest of the network (SpikingJelly's layers
and containers, PyTorch's modules) is left as it is, so the call changes the network in place and
returns it (a new module when `module` itself is a neuron), like
`torch.nn.SyncBatchNorm.convert_sync_batchnorm`. A neuron shared by several parents stays shared.

A neuron of another class (the user's own subclass of SpikingJelly's BaseNode, LIFNode, ...) is
compiled from its step into a CompiledSpikingJellyNeuron, when its class allows that (see that
module: its sequences must be its step repeated) and the step compiles into kernels.

What is refused, with a ValueError naming the module's path and class:
- a SpikingJelly neuron that spikejit neither provides nor compiles (the ILC and Noisy neurons, a
  step with an op outside FlexSN's table; the message says why); with
  `strict=False` these are left as they are, with one warning naming them;
- a neuron holding a state other than its reset value (a `v` from an earlier call): call
  SpikingJelly's `functional.reset_net(net)` first;
- a neuron with hooks (a SpikingJelly monitor's, for example): they would not carry over, so
  convert before attaching them.

SpikingJelly is not imported: its modules are told by their classes' module names.
"""
import inspect
import itertools
import types
import warnings
from typing import Callable, Dict

import torch
from torch import nn

from . import (compiled_spikingjelly_neuron, conversion_neurons, dsr_neuron, few_spike_neuron, gated_lif_neuron,
               ilif_neuron, lif_variants, mpbn_neuron, neuron, nonlinear_neuron, online_neurons, psn, readout_neuron,
               resonate_neuron, simple_neuron, static_inputs_flexsn, ternary_neuron)

__all__ = ["from_spikingjelly", "CONVERTIBLE"]

_SPIKINGJELLY_NEURONS = "spikingjelly.activation_based.neuron"


def _table(theta, h, d):
    """A few-spikes table from three rows (spikejit's modules read theta, h and d)."""
    return types.SimpleNamespace(theta=theta, h=h, d=d)


def _lif_options(m) -> dict:
    """LIAFNode's keyword arguments, which go on to LIFNode."""
    return _options(m, neuron.LIFNode)


def _dsr_threshold(m) -> dict:
    """The DSR neurons' v_threshold: a Parameter (learned) or a buffer outside the state dict. The
    constructor checks it against the lower bound, which a learned one may have crossed (the
    forward clamps it): the state dict brings the learned value."""
    learned = isinstance(m.v_threshold, nn.Parameter)
    value = float(m.v_threshold.detach())
    return dict(v_threshold_training=learned,
                v_threshold=max(value, m.v_threshold_lower_bound) if learned else value)


def _mpbn_arguments(m) -> dict:
    """MPBNLIFNode's mpbn and feature count, which SpikingJelly keeps only in its batch norm (or,
    after the fold, in mu; with a learned threshold, in a)."""
    bn = None if isinstance(m.vbn, nn.Identity) else m.vbn
    if bn is not None:
        layer = "out_channels" if isinstance(bn, nn.BatchNorm2d) else "out_features"
        return {"mpbn": True, layer: bn.num_features}
    like = m.mu if m.mu is not None else getattr(m, "a", None)
    return {"mpbn": m.fold_bn, "out_features": 1 if like is None else like.numel()}


def _copy_of(t: torch.Tensor) -> torch.Tensor:
    return nn.Parameter(t.detach().clone(), t.requires_grad) if isinstance(t, nn.Parameter) else t.detach().clone()


def _mpbn_fold(ours, m) -> None:
    """A folded SpikingJelly MPBNLIFNode: spikejit's folds the same way before the state dict."""
    if m.fold_bn:
        ours.re_parameterize_v_threshold(m.normalize_residual, m.running_stats)


# Arguments that SpikingJelly's modules (by class name) keep under other names, or only as the
# shapes of their parameters (a value from the state dict needs none: the state dict is loaded
# after), or that must not be their own tensors.
_MORE_ARGUMENTS: Dict[str, Callable[[nn.Module], dict]] = {
    "LIAFNode": _lif_options,
    "GatedLIFNode": lambda m: dict(inplane=None if m.alpha.dim() == 0 else m.alpha.numel()),
    "ActivationAwareIFNode": lambda m: dict(v_threshold=m.v_threshold.detach().clone(),
                                            v_offset=m.v_offset.detach().clone()),
    "FewSpikeNode": lambda m: dict(table=_table(m.theta, m.h, m.d)),
    "OutlierAwareThresholdNode": lambda m: dict(table=_table(m.theta, m.h, m.d),
                                                outlier_table=_table(m.outlier_theta, m.outlier_h, m.outlier_d)),
    "HGNode": lambda m: dict(tables=[_table(*rows) for rows in zip(m.region_theta, m.region_h, m.region_d)],
                             gate_thresholds=m.gate_thresholds.detach().clone()),
    "DSRIFNode": _dsr_threshold,
    "DSRLIFNode": _dsr_threshold,
    "MPBNLIFNode": _mpbn_arguments,
    "FlexSN": lambda m: dict(static_inputs=tuple(_copy_of(t) for t in m.static_inputs)),
}

# What a module needs after construction to take SpikingJelly's state dict (by SpikingJelly's class name).
_BEFORE_THE_STATE_DICT: Dict[str, Callable[[nn.Module, nn.Module], None]] = {"MPBNLIFNode": _mpbn_fold}

# SpikingJelly's neuron classes that spikejit provides, by name, and spikejit's class of each.
# (SimpleBaseNode is not here: it is a base that users subclass.)
CONVERTIBLE: Dict[str, type] = {
    cls.__name__: cls for cls in (
        neuron.IFNode, neuron.LIFNode, neuron.ParametricLIFNode, nonlinear_neuron.QIFNode, nonlinear_neuron.EIFNode,
        nonlinear_neuron.IzhikevichNode, ilif_neuron.ILIFNode, lif_variants.ComplementaryLIFNode,
        lif_variants.KLIFNode, lif_variants.CUBALIFNode, lif_variants.LIAFNode, gated_lif_neuron.GatedLIFNode,
        resonate_neuron.RAFNode, ternary_neuron.TernaryIFNode, ternary_neuron.TernaryLIFNode,
        readout_neuron.NonSpikingIFNode, readout_neuron.NonSpikingLIFNode, online_neurons.SLTTLIFNode,
        online_neurons.OTTTLIFNode, conversion_neurons.ActivationAwareIFNode, conversion_neurons.HalfThresholdIFNode,
        conversion_neurons.STBIFNode, simple_neuron.SimpleIFNode, simple_neuron.SimpleLIFNode, psn.PSN,
        psn.MaskedPSN, psn.SlidingPSN, few_spike_neuron.FewSpikeNode, few_spike_neuron.OutlierAwareThresholdNode,
        few_spike_neuron.HGNode, dsr_neuron.DSRIFNode, dsr_neuron.DSRLIFNode, mpbn_neuron.MPBNLIFNode)
}
# SpikingJelly 2.0's FlexSN, whose constructor is not the reference's that spikejit.FlexSN keeps.
CONVERTIBLE["FlexSN"] = static_inputs_flexsn.StaticInputsFlexSN

# Constructor arguments not taken from SpikingJelly's attributes: spikejit's own.
_OWN_ARGUMENTS = frozenset({"backend", "checkpoint_every"})


def _options(m: nn.Module, cls: type) -> dict:
    """cls's constructor arguments that m keeps as attributes of the same name, except optional
    ones its state dict holds (loaded after construction)."""
    in_state = set(m.state_dict(keep_vars=True))
    options = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if (name == "self" or name in _OWN_ARGUMENTS or (name in in_state and parameter.default is not parameter.empty)
                or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)):
            continue
        if hasattr(m, name):
            options[name] = getattr(m, name)
    return options


def _spikingjelly_neuron_class(m: nn.Module):
    """The first SpikingJelly neuron class in type(m)'s bases (type(m) itself included), or None."""
    return next((c for c in type(m).__mro__ if c.__module__.startswith(_SPIKINGJELLY_NEURONS)), None)


def _at_reset_value(value, reset_value) -> bool:
    if isinstance(value, torch.Tensor) or isinstance(reset_value, torch.Tensor):
        return (isinstance(value, torch.Tensor) and isinstance(reset_value, torch.Tensor)
                and value.shape == reset_value.shape and torch.equal(value, reset_value))
    if isinstance(value, (list, tuple)) or isinstance(reset_value, (list, tuple)):
        return type(value) is type(reset_value) and len(value) == len(reset_value) and all(
            _at_reset_value(a, b) for a, b in zip(value, reset_value))
    return value == reset_value


def _check_convertible(path: str, m: nn.Module) -> None:
    name = f"{path or 'module'} ({type(m).__module__}.{type(m).__name__})"
    hooks = [kind for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
             if getattr(m, kind, None)]
    if hooks:
        raise ValueError(f"{name}: expected a neuron without hooks (they would not carry over to spikejit's), "
                         f"got {', '.join(h.strip('_') for h in hooks)}: convert before attaching monitors")
    memories, reset_values = getattr(m, "_memories", {}), getattr(m, "_memories_rv", {})
    for state, value in memories.items():
        if state in reset_values and not _at_reset_value(value, reset_values[state]):
            raise ValueError(f"{name}: expected the neuron at its reset state, got state '{state}' from an "
                             "earlier call: call spikingjelly's functional.reset_net(net) before converting")


def _first_tensor(m: nn.Module):
    """A tensor of m's (a parameter or a buffer, in its state dict or not): its device and dtype."""
    return next(itertools.chain(m.parameters(), m.buffers()), None)


def _move_like(ours: nn.Module, like) -> None:
    """ours onto like's device (and its dtype, a floating one); nothing without `like`."""
    if like is not None:
        ours.to(device=like.device, dtype=like.dtype if like.is_floating_point() else None)


def _converted(path: str, m: nn.Module, network_tensor) -> nn.Module:
    """spikejit's module for SpikingJelly's neuron m (checked convertible), on the device and dtype
    of its own tensors, or, without any (a fixed DSR threshold is a plain attribute that
    `.to()` leaves on the CPU), of `network_tensor`."""
    _check_convertible(path, m)
    their_name = type(m).__name__
    cls = CONVERTIBLE[their_name]
    options = _options(m, cls)
    options.update(_MORE_ARGUMENTS.get(their_name, lambda _: {})(m))
    try:
        ours = cls(**options)
        _BEFORE_THE_STATE_DICT.get(their_name, lambda *_: None)(ours, m)
        own = _first_tensor(m)
        _move_like(ours, network_tensor if own is None else own)
        ours.load_state_dict(m.state_dict())
    except (TypeError, ValueError, RuntimeError) as error:
        raise type(error)(f"{path or 'module'} ({type(m).__name__}): {error}") from error
    theirs = dict(m.named_parameters())
    for name, parameter in ours.named_parameters():
        if name in theirs:
            parameter.requires_grad_(theirs[name].requires_grad)
    return ours.train(m.training)


def _placed(path: str, ours: nn.Module, m: nn.Module, network_tensor) -> nn.Module:
    """`ours`, m compiled (a neuron of a class spikejit does not provide), once m is checked
    convertible, on the network's device and dtype when m has no tensors (else it has m's)."""
    _check_convertible(path, m)
    if _first_tensor(m) is None:
        _move_like(ours, network_tensor)
    return ours


def from_spikingjelly(module: nn.Module, strict: bool = True) -> nn.Module:
    """Replaces every SpikingJelly neuron in `module` by spikejit's (see the module's docstring);
    returns `module`, or spikejit's neuron when `module` is one."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(strict, bool):
        raise TypeError(f"strict: expected a bool, got {type(strict).__name__}")

    done = {}  # id of SpikingJelly's neuron -> spikejit's: a shared neuron stays shared
    left = []  # (path, module, why) of the neurons that stay SpikingJelly's
    network_tensor = _first_tensor(module)
    for path, m in module.named_modules(remove_duplicate=True):
        sj_class = _spikingjelly_neuron_class(m)
        if sj_class is None:
            continue
        if type(m) is sj_class and sj_class.__name__ in CONVERTIBLE:
            done[id(m)] = _converted(path, m, network_tensor)
            continue
        try:
            ours = compiled_spikingjelly_neuron.CompiledSpikingJellyNeuron(m, strict=True)
        except (TypeError, ValueError, RuntimeError, NotImplementedError) as error:
            left.append((path, m, error))  # (spikejit can't compile it: why)
            continue
        done[id(m)] = _placed(path, ours, m, network_tensor)
    if left:
        names = "; ".join(f"{path or 'module'} ({type(m).__module__}.{type(m).__name__}): {why}"
                          for path, m, why in left)
        if strict:
            raise ValueError(f"module: expected SpikingJelly neurons that spikejit provides or compiles from their "
                             f"step, got {names}; strict=False leaves them as they are")
        warnings.warn(f"from_spikingjelly: left as they are: {names}", stacklevel=2)
    if id(module) in done:
        return done[id(module)]
    for parent in list(module.modules()):
        for child_name, child in list(parent._modules.items()):  # every name, also a second one of a child
            if child is not None and id(child) in done:
                setattr(parent, child_name, done[id(child)])
    return module
