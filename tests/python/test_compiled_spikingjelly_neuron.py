"""CompiledSpikingJellyNeuron: SpikingJelly neurons of the user's own classes, compiled from their
step, against SpikingJelly running the same neuron. SpikingJelly runs on the CPU (its eager loop of
the step); ours on each device."""
import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params
from spikejit.compiled_spikingjelly_neuron import SPIKINGJELLY_BASES

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import neuron as sj
from spikingjelly.activation_based import surrogate as sj_surrogate

SHAPE = (3, 8)  # one step's: [batch, neurons]


class AdaptiveLIF(sj.BaseNode):
    """SpikingJelly 2.0's way: a functional step over two memories, a learnable scalar time
    constant, a per-neuron threshold buffer and a learnable per-neuron adaptation gain."""

    def __init__(self, neurons: int, **kwargs):
        super().__init__(**kwargs)
        self.register_memory("a", 0.0)
        self.w = nn.Parameter(torch.tensor(0.3))
        self.register_buffer("theta", 0.8 + 0.4 * torch.rand(neurons))
        self.gain = nn.Parameter(0.1 + 0.2 * torch.rand(neurons))

    def materialize_states(self, inputs, states, step_mode):
        states = super().materialize_states(inputs, states, step_mode)
        a = states[1]
        if not isinstance(a, torch.Tensor) or a.shape != states[0].shape:
            a = torch.zeros_like(states[0])
        return (states[0], a)

    def single_step_functional_forward(self, inputs, states, **kwargs):
        x, (v, a) = inputs[0], states
        h = v + (x - v) * torch.sigmoid(self.w)
        s = self.surrogate_function(h - self.theta - a)
        r = s.detach() if self.detach_reset else s
        v = h - r * self.v_threshold if self.v_reset is None else h * (1.0 - r) + r * self.v_reset
        return (s,), (v, 0.9 * a + self.gain * s)


class LeakyIF(sj.SimpleBaseNode):
    """SimpleBaseNode's way: only the charge is the user's."""

    def neuronal_charge(self, x):
        self.v = 0.9 * self.v + torch.tanh(x)


class TwoOutputLIF(sj.BaseNode):
    """A step that also returns the membrane potential before the reset."""

    def __init__(self, tau: float, **kwargs):
        super().__init__(**kwargs)
        self.tau = tau

    def single_step_functional_forward(self, inputs, states, **kwargs):
        x, v = inputs[0], states[0]
        h = v + (x - v) / self.tau
        s = self.surrogate_function(h - self.v_threshold)
        return (s, h), (h * (1.0 - s),)


class OverriddenLIFStep(sj.LIFNode):
    """SpikingJelly runs its sequences with LIFNode's multi-step kernels, not with this step."""

    def single_step_functional_forward(self, inputs, states, **kwargs):
        h = states[0] + inputs[0]
        s = self.surrogate_function(h - 1.0)
        return (s,), (h * (1.0 - s),)


def make(name: str):
    if name == "adaptive":
        return AdaptiveLIF(SHAPE[-1], surrogate_function=sj_surrogate.ATan(alpha=2.5), v_reset=None,
                           detach_reset=True)
    if name == "leaky_if":
        return LeakyIF(v_reset=None, surrogate_function=sj_surrogate.Sigmoid(alpha=3.0))
    return TwoOutputLIF(tau=3.0, surrogate_function=sj_surrogate.PiecewiseQuadratic(alpha=1.5))


NEURONS = ["adaptive", "leaky_if", "two_outputs"]


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def run_both(theirs, ours, device, steps: int = 6, calls: int = 2, step_mode: str = "m", dtype=torch.float32):
    """Outputs of several calls (the state carried), then the gradients of a random linear loss,
    for SpikingJelly's neuron on the CPU and ours on `device`."""
    theirs.step_mode = ours.step_mode = step_mode
    xs = [torch.randn(steps, *SHAPE, dtype=dtype) + 0.6 for _ in range(calls)]
    results = []
    for module, where in ((theirs, torch.device("cpu")), (ours, device)):
        inputs = [x.to(where).detach().requires_grad_() for x in xs]  # leaves on every device
        outputs = []
        for x in inputs:
            if step_mode == "m":
                outputs.append(as_tuple(module(x)))
            else:
                outputs.append(tuple(torch.stack(o) for o in zip(*(as_tuple(module(x_t)) for x_t in x))))
        results.append((inputs, outputs))
    torch.manual_seed(1)
    weights = [[torch.randn_like(o) for o in outs] for outs in results[0][1]]
    for module, (inputs, outputs) in zip((theirs, ours), results):
        loss = sum((o * w.to(o.device)).sum() for outs, ws in zip(outputs, weights) for o, w in zip(outs, ws))
        loss = loss + sum((getattr(module, name) * 0.5).sum() for name in theirs._memories)  # the final states too
        loss.backward()
    return results


def spikingjelly_sequence_and_steps(theirs, x):
    """SpikingJelly's neuron over x in step mode 'm', and (a copy) one step at a time, stacked."""
    one_by_one = copy.deepcopy(theirs)
    one_by_one.step_mode, theirs.step_mode = "s", "m"
    return theirs(x), torch.stack([one_by_one(x_t) for x_t in x])


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("step_mode", ["m", "s"])
def test_equals_spikingjelly_running_the_same_neuron(device, seed, name, step_mode):
    theirs = make(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # it compiles: no eager fallback warning
        ours = spikejit.CompiledSpikingJellyNeuron(theirs).to(device)
    assert ours.program is not None, ours.fallback_reason
    (x_theirs, y_theirs), (x_ours, y_ours) = run_both(theirs, ours, device, step_mode=step_mode)
    for outs_theirs, outs_ours in zip(y_theirs, y_ours):
        assert len(outs_theirs) == len(outs_ours)
        for a, b in zip(outs_theirs, outs_ours):
            torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-5, atol=1e-5)
    for memory in theirs._memories:
        torch.testing.assert_close(getattr(ours, memory).detach().cpu(), getattr(theirs, memory).detach(),
                                   rtol=1e-5, atol=1e-5)
    for a, b in zip(x_theirs, x_ours):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    theirs_params = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), theirs_params[key].grad, rtol=1e-4, atol=1e-5)


def test_spike_outputs_are_exactly_spikingjelly_s():
    theirs = make("adaptive")
    ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    (_, y_theirs), (_, y_ours) = run_both(theirs, ours, torch.device("cpu"))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(y_theirs, y_ours))


@pytest.mark.parametrize("step_mode", ["m", "s"])
def test_v_seq_with_store_v_seq(step_mode):
    theirs = make("adaptive")
    theirs.store_v_seq = True
    ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    assert ours.store_v_seq and ours.v_seq is None
    x = torch.randn(5, *SHAPE) + 0.6
    theirs.step_mode = ours.step_mode = step_mode
    for _ in range(2):  # (single steps append to the sequence of the calls before)
        for module in (theirs, ours):
            if step_mode == "m":
                module(x)
            else:
                for x_t in x:
                    module(x_t)
    torch.testing.assert_close(ours.v_seq, theirs.v_seq)
    assert ours.v_seq.shape[0] == (5 if step_mode == "m" else 10)
    assert not ours.neuron.store_v_seq  # (the private copy's step does not record)


def test_store_v_seq_set_later_and_zero_steps():
    ours = spikejit.CompiledSpikingJellyNeuron(make("leaky_if"))
    ours.step_mode = "m"
    assert not ours.store_v_seq
    ours.store_v_seq = True
    y = ours(torch.randn(3, *SHAPE))
    assert ours.store_state_seqs and ours.v_seq.shape == (3, *SHAPE) and torch.equal(ours.v_seq[-1], ours.v)
    with pytest.raises(TypeError, match=r"^store_v_seq: expected a bool"):
        ours.store_v_seq = 1
    ours.reset()
    empty = ours(torch.randn(0, *SHAPE))
    assert empty.shape == (0, *SHAPE) and torch.equal(ours.v, torch.zeros(SHAPE)) and y.shape == (3, *SHAPE)


def test_module_options_state_and_reset():
    theirs = make("adaptive")
    theirs.step_mode = "m"
    theirs.eval()
    ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    assert ours.step_mode == "m" and not ours.training and not ours.neuron.training
    assert ours.memory_names == ("v", "a") and ours.v == 0.0 and ours.a == 0.0
    assert "AdaptiveLIF" in repr(ours) and "kernels" in repr(ours)
    ours(torch.randn(4, *SHAPE))
    assert ours.v.shape == SHAPE and ours.a.shape == SHAPE
    ours.reset()
    assert ours.v == 0.0
    ours.train()
    assert ours.training and ours.neuron.training
    with pytest.raises(AttributeError):
        ours.no_such_attribute


def test_the_neuron_given_is_left_as_it_is():
    theirs = make("adaptive")
    before = {k: v.clone() for k, v in theirs.state_dict().items()}
    ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    with torch.no_grad():
        ours.w.add_(1.0)
    ours(torch.randn(4, *SHAPE))
    assert all(torch.equal(before[k], v) for k, v in theirs.state_dict().items())
    assert theirs.v == 0.0 and ours.w is not theirs.w


def test_state_dict_has_spikingjelly_s_keys_and_loads_both_ways():
    theirs, other = make("adaptive"), make("adaptive")
    ours = spikejit.CompiledSpikingJellyNeuron(other)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in theirs.state_dict().items())
    with torch.no_grad():
        ours.gain.mul_(2.0)
    theirs.load_state_dict(ours.state_dict())
    assert torch.equal(theirs.gain, ours.gain)
    (_, y_theirs), (_, y_ours) = run_both(theirs, ours, torch.device("cpu"))  # the loaded values are read
    torch.testing.assert_close(torch.cat(y_ours[-1]), torch.cat(y_theirs[-1]).detach())


def test_double_moves_every_tensor_the_step_reads():
    theirs = make("adaptive").double()
    ours = spikejit.CompiledSpikingJellyNeuron(make("adaptive")).double()
    ours.load_state_dict(theirs.state_dict())
    assert ours.neuron.theta.dtype == torch.float64 and ours.neuron.w is ours.w
    (_, y_theirs), (_, y_ours) = run_both(theirs, ours, torch.device("cpu"), dtype=torch.float64)
    assert y_ours[0][0].dtype == torch.float64
    torch.testing.assert_close(y_ours[1][0], y_theirs[1][0].detach(), rtol=1e-12, atol=1e-12)


def test_deepcopy_and_pickle_have_their_own_parameters():
    ours = spikejit.CompiledSpikingJellyNeuron(make("adaptive"))
    x = torch.randn(4, *SHAPE) + 0.6
    expected = ours(x)
    for twin in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        twin.reset()
        assert twin.program is not None and twin.w is not ours.w and twin.neuron.w is twin.w
        assert torch.equal(twin(x), expected)
        with torch.no_grad():
            twin.w.add_(5.0)
        assert not torch.equal(twin.w, ours.w)
        twin.reset()
        assert not torch.equal(twin(x), expected)  # the twin's step reads its own w


def test_a_neuron_with_a_state_compiles_from_its_reset_values_and_from_spikingjelly_refuses_it():
    theirs = make("adaptive")
    theirs.step_mode = "m"
    theirs(torch.randn(4, *SHAPE, requires_grad=True)).sum()  # a state in an autograd graph
    ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    assert ours.v == 0.0 and ours.neuron._memories == {"v": 0.0, "a": 0.0}
    assert theirs.v.shape == SHAPE  # the neuron given keeps its state
    with pytest.raises(ValueError, match=r"^module \(.*AdaptiveLIF\): expected the neuron at its reset state, got "
                                         r"state 'v'"):
        spikejit.from_spikingjelly(theirs)


def test_the_neuron_s_memories_keep_no_tensor_of_a_call():
    ours = spikejit.CompiledSpikingJellyNeuron(make("leaky_if"), backend="torch")  # the eager scan runs the step
    ours(torch.randn(4, *SHAPE, requires_grad=True))
    assert ours.neuron._memories == {"v": 0.0}


def test_from_spikingjelly_converts_a_network_of_user_neurons_and_trains_the_same():
    torch.manual_seed(3)
    theirs = nn.Sequential(nn.Linear(SHAPE[-1], SHAPE[-1]), make("adaptive"), nn.Linear(SHAPE[-1], SHAPE[-1]),
                           make("leaky_if"), sj.LIFNode())
    sj_functional.set_step_mode(theirs, "m")
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    assert [type(m) for m in ours] == [nn.Linear, spikejit.CompiledSpikingJellyNeuron, nn.Linear,
                                       spikejit.CompiledSpikingJellyNeuron, spikejit.LIFNode]
    assert ours[1].step_mode == "m" and ours[1].program is not None and ours[3].program is not None
    assert list(ours.state_dict()) == list(theirs.state_dict())
    optimizers = [torch.optim.SGD(net.parameters(), lr=0.5) for net in (theirs, ours)]
    for _ in range(3):
        x = torch.randn(5, *SHAPE) + 0.5
        for net, optimizer in zip((theirs, ours), optimizers):
            sj_functional.reset_net(net)
            if isinstance(net[1], spikejit.CompiledSpikingJellyNeuron):
                for m in (net[1], net[3], net[4]):
                    m.reset()
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for (key, a), b in zip(theirs.state_dict().items(), ours.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=key)


class LgammaIF(sj.SimpleBaseNode):
    """A step with an op outside FlexSN's table."""

    def neuronal_charge(self, x):
        self.v = self.v + 0.1 * torch.lgamma(x.abs() + 1.0)


def test_from_spikingjelly_refuses_what_does_not_compile_or_leaves_it_with_a_warning():
    net = nn.Sequential(LgammaIF(), make("leaky_if"))
    with pytest.raises(ValueError, match=r"^module: expected SpikingJelly neurons that spikejit provides or compiles"
                                         r" .*0 \(.*LgammaIF\): FlexSN: cannot compile the core: aten.lgamma"):
        spikejit.from_spikingjelly(net)
    assert isinstance(net[1], LeakyIF)  # nothing converted
    with pytest.warns(UserWarning, match=r"left as they are: 0 \(.*LgammaIF\)"):
        spikejit.from_spikingjelly(net, strict=False)
    assert isinstance(net[0], LgammaIF) and isinstance(net[1], spikejit.CompiledSpikingJellyNeuron)


# Every SpikingJelly base a user may derive from, with the arguments it needs.
_BASE_ARGUMENTS = {"SimpleLIFNode": dict(tau=2.0, decay_input=True)}
_ABSTRACT = {"BaseNode", "AdaptBaseNode", "SimpleBaseNode"}
# The bases whose own step spikejit compiles: all of them. IF, LIF, PLIF, QIF, EIF, Izhikevich and
# HalfThresholdIF compile through their reference code (traced in float64); ILIF's multi-level
# spike count, an autograd.Function, traces as spikejit's multi_level_spike_count (plain ops).
_COMPILED = SPIKINGJELLY_BASES - _ABSTRACT


@pytest.mark.parametrize("base", sorted(SPIKINGJELLY_BASES - _ABSTRACT))
def test_every_base_is_its_step_repeated_and_a_subclass_equals_it(base, seed):
    cls = type(f"My{base}", (getattr(sj, base),), {})
    theirs = cls(**_BASE_ARGUMENTS.get(base, {}))
    x = torch.randn(6, *SHAPE) + 0.8
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = spikejit.CompiledSpikingJellyNeuron(theirs)
    ours.step_mode = "m"
    expected, steps = spikingjelly_sequence_and_steps(copy.deepcopy(theirs), x)
    assert torch.equal(steps, expected)  # the premise, in SpikingJelly
    assert (ours.program is not None) == (base in _COMPILED), (base, ours.fallback_reason)
    assert bool(caught) == (base not in _COMPILED)
    # Outputs and gradients against SpikingJelly's own sequence (its kernel ops, in float32).
    (x_theirs, y_theirs), (x_ours, y_ours) = run_both(theirs, ours, torch.device("cpu"), steps=6, calls=1)
    torch.testing.assert_close(y_ours[0][0], y_theirs[0][0].detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x_ours[0].grad, x_theirs[0].grad, rtol=1e-4, atol=1e-5)
    theirs_params = dict(theirs.named_parameters())
    for key, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs_params[key].grad, rtol=1e-4, atol=1e-5, msg=key)


class OwnSingleStep(AdaptiveLIF):
    """A BaseNode whose single_step_forward is its own: SpikingJelly's sequences do not call it."""

    def single_step_forward(self, x, *args, **kwargs):
        return super().single_step_forward(0.5 * x, *args, **kwargs)


@pytest.mark.parametrize("make_neuron, message", [
    (OverriddenLIFStep, r"OverriddenLIFStep defines single_step_functional_forward, but SpikingJelly runs its "
                        r"sequences \(step_mode 'm'\) with LIFNode's"),
    (lambda: OwnSingleStep(SHAPE[-1]), r"OwnSingleStep defines single_step_forward, but SpikingJelly runs the "
                                       r"sequences of a BaseNode through single_step_functional_forward")])
def test_a_step_that_spikingjelly_s_sequences_do_not_run_is_refused(make_neuron, message):
    sequence, steps = spikingjelly_sequence_and_steps(make_neuron(), torch.randn(6, *SHAPE) + 0.8)
    assert not torch.equal(sequence, steps)  # SpikingJelly's two step modes differ
    with pytest.raises(ValueError, match="^neuron: " + message):
        spikejit.CompiledSpikingJellyNeuron(make_neuron())


@pytest.mark.parametrize("base", sorted(_ABSTRACT))
def test_an_abstract_base_is_refused_naming_its_step(base):
    with pytest.raises(RuntimeError, match=r"^neuron: its step failed on one-element tensors: NotImplementedError"):
        spikejit.CompiledSpikingJellyNeuron(getattr(sj, base)())


def test_bad_neurons_are_refused_naming_the_argument():
    with pytest.raises(TypeError, match=r"^neuron: expected a SpikingJelly neuron module, got function"):
        spikejit.CompiledSpikingJellyNeuron(lambda x: x)
    with pytest.raises(ValueError, match=r"^neuron: expected a neuron whose sequence is its step repeated, .* got "
                                         r"LIAFNode$"):
        spikejit.CompiledSpikingJellyNeuron(sj.LIAFNode(act=torch.tanh, threshold_related=False))
    with pytest.raises(ValueError, match=r"^neuron: expected a neuron whose sequence is its step repeated, .* got "
                                         r"ILCLIFNode$"):
        spikejit.CompiledSpikingJellyNeuron(sj.ILCLIFNode(2, 2))
    with pytest.raises(ValueError, match=r"^neuron: expected a neuron whose sequence is its step repeated, .* got "
                                         r"Linear$"):
        spikejit.CompiledSpikingJellyNeuron(nn.Linear(2, 2))

    class OwnSequence(LeakyIF):
        def multi_step_forward(self, x_seq):
            return super().multi_step_forward(x_seq.flip(0))

    with pytest.raises(ValueError, match=r"^neuron: OwnSequence defines multi_step_forward, so a sequence may not"):
        spikejit.CompiledSpikingJellyNeuron(OwnSequence())

    class ListMemory(LeakyIF):
        def __init__(self):
            super().__init__()
            self.register_memory("queue", [])

    with pytest.raises(ValueError, match=r"^neuron: memory 'queue' has the reset value list \[\], expected a number"):
        spikejit.CompiledSpikingJellyNeuron(ListMemory())

    class ModeDependent(LeakyIF):
        def neuronal_charge(self, x):
            self.v = self.v + (x if self.training else 0.5 * x)

    with pytest.raises(ValueError, match=r"^neuron: ModeDependent's step gives other results in eval mode"):
        spikejit.CompiledSpikingJellyNeuron(ModeDependent())

    class Broken(LeakyIF):
        def neuronal_charge(self, x):
            raise KeyError("oops")

    with pytest.raises(RuntimeError, match=r"^neuron: its step failed on one-element tensors: KeyError: 'oops'"):
        spikejit.CompiledSpikingJellyNeuron(Broken())


def test_a_step_with_random_draws_is_not_taken_for_a_mode_dependent_one():
    class NoisyIF(LeakyIF):
        def neuronal_charge(self, x):
            self.v = self.v + x + 0.1 * torch.randn_like(x)

    ours = spikejit.CompiledSpikingJellyNeuron(NoisyIF())
    assert ours.program is not None, ours.fallback_reason


def test_compiles_without_graph_breaks():
    """torch.compile(fullgraph=True) of Linear -> CompiledSpikingJellyNeuron -> Linear: the same
    outputs and gradients as eager, the neuron's parameters included."""
    torch._dynamo.reset()
    neuron = spikejit.CompiledSpikingJellyNeuron(make("adaptive"))
    neuron.step_mode = "m"
    model = nn.Sequential(nn.Linear(SHAPE[-1], SHAPE[-1]), neuron, nn.Linear(SHAPE[-1], 4))
    x = torch.randn(5, *SHAPE)

    def step(x):
        loss = model(x).square().sum()
        neuron.reset()
        return loss

    params = list(model.parameters())
    eager = torch.autograd.grad(step(x), params)
    compiled = torch.compile(step, fullgraph=True)
    torch.testing.assert_close(compiled(x), step(x))
    for a, b in zip(torch.autograd.grad(compiled(x), params), eager):
        torch.testing.assert_close(a, b)


class GatedIF(sj.BaseNode):
    """A step of two inputs: SpikingJelly passes the second one through single_step_forward(x, g)."""

    def single_step_functional_forward(self, inputs, states, **kwargs):
        x, g = inputs
        h = states[0] + x * torch.sigmoid(g)
        s = self.surrogate_function(h - self.v_threshold)
        return (s,), (h * (1.0 - s),)


@pytest.mark.parametrize("step_mode", ["m", "s"])
def test_a_step_of_two_inputs(step_mode):
    theirs = GatedIF(step_mode=step_mode)
    ours = spikejit.CompiledSpikingJellyNeuron(theirs, num_inputs=2)
    assert ours.program is not None and ours.num_inputs == 2
    x, g = torch.randn(5, *SHAPE) + 0.8, torch.randn(5, *SHAPE)
    if step_mode == "m":
        assert torch.equal(ours(x, g), theirs(x, g))
    else:
        assert all(torch.equal(ours(x[t], g[t]), theirs(x[t], g[t])) for t in range(5))
    torch.testing.assert_close(ours.v, theirs.v)
