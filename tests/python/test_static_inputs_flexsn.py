"""StaticInputsFlexSN (SpikingJelly 2.0's FlexSN constructor) against SpikingJelly's FlexSN itself,
and from_spikingjelly's conversion of it. SpikingJelly runs on the CPU (its eager scan: on CUDA it
picks its own Triton kernels, whose rounding differs); ours on each device."""
import copy
import functools
import pickle

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params, random_input

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import layer as sj_layer
from spikingjelly.activation_based import surrogate as sj_surrogate
from spikingjelly.activation_based.neuron import FlexSN as SJFlexSN

SHAPE = (3, 8)  # one step's: [batch, neurons]


def lif_core(x, v, tau):
    """A LIF with a learnable time constant and SpikingJelly's surrogate."""
    h = v + (x - v) / tau
    s = SIGMOID(h - 1.0)
    return s, h * (1.0 - s)


SIGMOID = sj_surrogate.Sigmoid(alpha=3.0)
ATAN = sj_surrogate.ATan(alpha=2.5)


def adaptive_core(x, y, v, a, threshold, gain):
    """Two inputs, two states, two outputs; a per-neuron buffer and a per-neuron parameter."""
    h = 0.8 * v + gain * x + 0.3 * torch.tanh(y)
    s = ATAN(h - threshold - a)
    return s, h, h * (1.0 - s), 0.9 * a + 0.2 * s


def plain_core(x, v):
    """No static inputs; SpikingJelly's surrogate function."""
    h = 0.5 * v + x
    s = sj_surrogate.piecewise_leaky_relu.apply(h - 1.0, 2.0, 0.05)
    return s, h - s


def unsupported_core(x, v, tau):
    """lgamma is outside the table: spikejit warns and runs the core as an eager scan."""
    h = v + (x - v) / tau + 0.01 * torch.lgamma(x.abs() + 1.0)
    s = SIGMOID(h - 1.0)
    return s, h * (1.0 - s)


def statics_of(name):
    """Fresh static inputs of each core, away from any default."""
    if name == "lif":
        return (nn.Parameter(torch.tensor(2.0 + torch.rand(()).item())),)
    if name == "adaptive":
        return (torch.rand(SHAPE) * 0.5 + 0.5, nn.Parameter(torch.rand(SHAPE) + 0.5))
    if name == "unsupported":
        return (nn.Parameter(torch.tensor(2.5)),)
    return ()


CORES = {"lif": (lif_core, 1, 1), "adaptive": (adaptive_core, 2, 2), "plain": (plain_core, 1, 1),
         "unsupported": (unsupported_core, 1, 1)}


def pair(name, device, **options):
    """SpikingJelly's FlexSN on the CPU and ours on `device`, with equal static inputs."""
    core, _, num_states = CORES[name]
    statics = statics_of(name)
    theirs = SJFlexSN(core, num_states, static_inputs=statics, **options)
    ours_statics = tuple(nn.Parameter(t.detach().clone().to(device)) if isinstance(t, nn.Parameter)
                         else t.clone().to(device) for t in statics)
    if name == "unsupported":
        with pytest.warns(RuntimeWarning, match="aten.lgamma"):
            ours = spikejit.StaticInputsFlexSN(core, num_states, static_inputs=ours_statics, **options)
    else:
        ours = spikejit.StaticInputsFlexSN(core, num_states, static_inputs=ours_statics, strict=True, **options)
    return theirs, ours


def inputs_of(name, steps=6, device="cpu"):
    return [random_input(steps, *SHAPE, device=device).requires_grad_() for _ in range(CORES[name][1])]


def as_list(outputs):
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


def assert_same(ours, theirs):
    """Spikes (and every value) equal within fp32 rounding; ours may live on another device."""
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", list(CORES))
@pytest.mark.parametrize("store_state_seqs", [False, True])
def test_matches_spikingjelly(name, device, store_state_seqs):
    """Outputs, final states, state sequences, and the gradients of the inputs and of every static
    parameter over two sequences (the second continues from the first's states), as
    SpikingJelly's FlexSN; the same parameter and buffer names."""
    theirs, ours = pair(name, device, store_state_seqs=store_state_seqs)
    assert ours.handle is None if name == "unsupported" else ours.handle is not None
    assert dict(ours.named_parameters()).keys() == dict(theirs.named_parameters()).keys()
    assert dict(ours.named_buffers()).keys() == dict(theirs.named_buffers()).keys()
    assert (ours.num_inputs, ours.num_states) == (CORES[name][1], CORES[name][2])
    for _ in range(2):
        xs = inputs_of(name)
        ours_xs = [x.detach().to(device).requires_grad_() for x in xs]
        theirs_out, ours_out = as_list(theirs(*xs)), as_list(ours(*ours_xs))
        assert_same(ours_out, theirs_out)
        assert_same(list(ours.states), list(theirs.states))
        if store_state_seqs:
            assert_same(list(ours.state_seqs), list(theirs.state_seqs))
        else:
            assert ours.state_seqs is None and theirs.state_seqs is None
        cotangents = [torch.randn_like(o) for o in theirs_out]
        their_params = [p for _, p in sorted(theirs.named_parameters())]
        our_params = [p for _, p in sorted(ours.named_parameters())]
        theirs_grads = torch.autograd.grad(theirs_out, xs + their_params, cotangents)
        ours_grads = torch.autograd.grad(ours_out, ours_xs + our_params, [c.to(device) for c in cotangents])
        assert_same(list(ours_grads), list(theirs_grads))
        theirs.states = [s.detach() for s in theirs.states]
        ours.detach()


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_single_step_mode(device):
    """step_mode='s', driven step by step: SpikingJelly's outputs and states at each step."""
    theirs, ours = pair("adaptive", device, step_mode="s")
    for x, y in zip(*inputs_of("adaptive", steps=4)):
        assert_same(list(ours(x.to(device), y.to(device))), list(theirs(x, y)))
        assert_same(list(ours.states), list(theirs.states))


def test_reset_copy_and_state_dict():
    """SpikingJelly's reset_net starts it again; a deep copy runs alike with static inputs of its
    own (changing them leaves the original's); a fresh module loads the state dict, and so does
    SpikingJelly's FlexSN from ours."""
    theirs, ours = pair("lif", "cpu")
    x = random_input(5, *SHAPE)
    first = ours(x)
    sj_functional.reset_net(ours)
    assert ours.states is None
    torch.testing.assert_close(ours(x), first, rtol=0, atol=0)

    sj_functional.reset_net(ours)
    twin = copy.deepcopy(ours)
    assert twin.static_inputs[0] is not ours.static_inputs[0]
    torch.testing.assert_close(twin(x), first, rtol=0, atol=0)
    with torch.no_grad():
        twin.static_inputs[0].add_(1.0)
    sj_functional.reset_net(twin)
    sj_functional.reset_net(ours)
    assert not torch.equal(twin(x), first)
    torch.testing.assert_close(ours(x), first, rtol=0, atol=0)

    fresh, _ = pair("lif", "cpu")
    _, fresh_ours = pair("lif", "cpu")
    fresh_ours.load_state_dict(ours.state_dict())
    fresh.load_state_dict(ours.state_dict())
    for module in (ours, fresh_ours, fresh):
        sj_functional.reset_net(module)
    torch.testing.assert_close(fresh_ours(x), first, rtol=0, atol=0)
    torch.testing.assert_close(fresh(x), first, rtol=1e-6, atol=1e-6)


def test_pickles_with_a_module_level_core():
    """torch.save of a whole model: the core (a module-level function) is traced again on load."""
    _, ours = pair("lif", "cpu")
    x = random_input(5, *SHAPE)
    loaded = pickle.loads(pickle.dumps(ours))
    assert loaded.handle is not None
    torch.testing.assert_close(loaded(x), ours(x), rtol=0, atol=0)


def test_static_inputs_are_read_where_they_live():
    """A dtype change replaces the buffers (not the parameters), and so does an assignment: the
    kernels read the module's tensors as they are at each call, as SpikingJelly's core does."""
    theirs, ours = pair("adaptive", "cpu")
    theirs.double()
    ours.double()
    xs = [x.double() for x in inputs_of("adaptive")]
    assert_same(list(ours(*xs)), list(theirs(*xs)))
    threshold = torch.rand(SHAPE, dtype=torch.float64) + 1.5  # (far from the first: other spikes)
    for module in (theirs, ours):
        module.reset()
        module._static_input_0 = threshold.clone()
    assert_same(list(ours(*xs)), list(theirs(*xs)))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_converted_from_spikingjelly(device):
    """from_spikingjelly: SpikingJelly's FlexSN neurons (inside its own layers) become
    StaticInputsFlexSN, static inputs copied (new tensors of equal values and flags) on the
    network's device, and the network trains alike: outputs, input gradients, weight and
    static-parameter gradients (SpikingJelly's on the CPU)."""
    def network():
        return nn.Sequential(sj_layer.Linear(8, 8), SJFlexSN(lif_core, 1, static_inputs=statics_of("lif")),
                             sj_layer.Linear(8, 8), SJFlexSN(plain_core, 1))

    theirs = network()
    sj_functional.set_step_mode(theirs, "m")
    theirs[1]._static_input_0.requires_grad_(False)
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs).to(device))
    assert [type(ours[i]) for i in (1, 3)] == [spikejit.StaticInputsFlexSN] * 2
    assert ours[1].handle is not None and ours[3].handle is not None
    assert ours[1]._static_input_0 is not theirs[1]._static_input_0
    assert ours[1]._static_input_0.device == device and not ours[1]._static_input_0.requires_grad
    assert dict(ours.named_parameters()).keys() == dict(theirs.named_parameters()).keys()
    x = random_input(6, 3, 8).requires_grad_()
    xo = x.detach().to(device).requires_grad_()
    theirs_out, ours_out = theirs(x), ours(xo)
    torch.testing.assert_close(ours_out.cpu(), theirs_out, rtol=1e-5, atol=1e-5)
    cotangent = torch.randn_like(theirs_out)
    their_params = [p for p in theirs.parameters() if p.requires_grad]
    our_params = [p for p in ours.parameters() if p.requires_grad]
    theirs_grads = torch.autograd.grad(theirs_out, [x] + their_params, cotangent)
    ours_grads = torch.autograd.grad(ours_out, [xo] + our_params, cotangent.to(device))
    assert_same(list(ours_grads), list(theirs_grads))


def test_the_fallback_warning_names_the_callers_line():
    """The warning of a core that cannot compile points at the line that built the module (through
    StaticInputsFlexSN's constructor and FlexSN's), as FlexSN's own does."""
    tau = nn.Parameter(torch.tensor(2.5))
    with pytest.warns(RuntimeWarning, match="aten.lgamma") as caught:
        spikejit.StaticInputsFlexSN(unsupported_core, 1, static_inputs=(tau,))
    with pytest.warns(RuntimeWarning, match="aten.lgamma") as caught_flexsn:
        spikejit.FlexSN(functools.partial(unsupported_core, tau=tau), 1, 1, 1)
    assert [w.filename for w in (caught[0], caught_flexsn[0])] == [__file__, __file__]


def test_conversion_refuses_a_flexsn_with_a_state():
    theirs = SJFlexSN(plain_core, 1)
    theirs(random_input(3, *SHAPE))
    with pytest.raises(ValueError, match=r"module \(.*FlexSN\): expected the neuron at its reset state, got state "
                                         r"'_state_0'"):
        spikejit.from_spikingjelly(theirs)


def test_compiles_without_graph_breaks():
    """torch.compile(fullgraph=True) of Linear -> StaticInputsFlexSN -> Linear: the same outputs
    and gradients as eager, the static parameter's included."""
    torch._dynamo.reset()
    _, neuron = pair("lif", "cpu")
    model = nn.Sequential(nn.Linear(8, 8), neuron, nn.Linear(8, 4))
    x = random_input(5, 3, 8)

    def step(x):
        spikejit_out = model(x)
        loss = spikejit_out.square().sum()
        neuron.reset()
        return loss

    params = list(model.parameters())
    eager = torch.autograd.grad(step(x), params)
    compiled = torch.compile(step, fullgraph=True)
    loss = compiled(x)
    torch.testing.assert_close(loss, step(x))
    for a, b in zip(torch.autograd.grad(compiled(x), params), eager):
        torch.testing.assert_close(a, b)


def test_bad_arguments():
    tau = nn.Parameter(torch.tensor(2.0))
    with pytest.raises(TypeError, match=r"^core: expected a callable, got int"):
        spikejit.StaticInputsFlexSN(3, 1)
    with pytest.raises(ValueError, match=r"^num_states: expected an int >= 0, got -1"):
        spikejit.StaticInputsFlexSN(lif_core, -1)
    with pytest.raises(TypeError, match=r"^static_inputs: expected a tuple of tensors, got Parameter"):
        spikejit.StaticInputsFlexSN(lif_core, 1, static_inputs=tau)
    with pytest.raises(TypeError, match=r"^static_inputs\[0\]: expected a tensor, got float"):
        spikejit.StaticInputsFlexSN(lif_core, 1, static_inputs=(2.0,))
    with pytest.raises(TypeError, match=r"^core: expected named positional parameters .* got \*args"):
        spikejit.StaticInputsFlexSN(lambda *args: args, 1)
    with pytest.raises(ValueError, match=r"^core: expected at least one step input besides 1 state\(s\) and 1 static "
                                         r"input\(s\), got 2 positional parameters"):
        spikejit.StaticInputsFlexSN(lambda v, tau: (v, v), 1, static_inputs=(tau,))
    with pytest.raises(RuntimeError, match=r"^core: failed on one-element tensors, the call that counts its outputs: "
                                           r"ValueError: no"):
        spikejit.StaticInputsFlexSN(_raises, 1)
    with pytest.raises(ValueError, match=r"^core: expected its outputs, then 2 next state\(s\), got 1 value\(s\)"):
        spikejit.StaticInputsFlexSN(lambda x, v, w: x, 2)
    with pytest.raises(ValueError, match=r"^step_mode: expected 's' or 'm', got 'q'"):
        spikejit.StaticInputsFlexSN(lif_core, 1, static_inputs=(tau,), step_mode="q")


def _raises(x, v):
    raise ValueError("no")
