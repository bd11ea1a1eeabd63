"""SimpleBaseNode, SimpleIFNode and SimpleLIFNode against SpikingJelly's (its torch
implementation, a per-step loop): SpikingJelly's own two and a subclass written the way its users
write them (a charge with a learnable parameter and a plain number), over option grids, on the CPU
and CUDA, in float32 and float64: spikes exactly, v and the gradients (of x, the initial v and the
learnable parameter) within rounding. Also: tracing again when a number changes, single and multi
step, reset, torch.compile without graph breaks, copies, an untraceable charge."""
import copy
import itertools

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params, random_input
from module_checks import assert_close_to_reference, backward_with_random_cotangents, check_compiles_like_eager

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate


def quadratic_on(base):
    """A SimpleBaseNode subclass with a learnable parameter and a plain number, on `base`."""

    class Quadratic(base):
        def __init__(self, leak=0.9, **kwargs):
            super().__init__(**kwargs)
            # Small enough that v stays bounded (past (1 - leak) / a it would grow without bound,
            # and the comparison with it: an ulp grows by 1 + 2 a v a step).
            self.a = nn.Parameter(torch.tensor(0.02))
            self.leak = leak

        def neuronal_charge(self, x):
            self.v = self.leak * self.v + self.a * self.v * self.v + x

    return Quadratic


def make(kind, module, opts):
    opts = dict(opts)
    if "surrogate" in opts:
        name, params = opts.pop("surrogate")
        opts["surrogate_function"] = getattr(sj_surrogate, name)(**params)  # SpikingJelly's, given to both
    if kind == "if":
        return module.SimpleIFNode(**opts)
    if kind == "lif":
        return module.SimpleLIFNode(**opts)
    return quadratic_on(module.SimpleBaseNode)(**opts)


def grid():
    for v_reset, detach in itertools.product([0.0, None, -0.2], [False, True]):
        yield "if", dict(v_reset=v_reset, detach_reset=detach, v_threshold=0.8 if detach else 1.0)
    for tau, decay_input, v_reset, detach in itertools.product([2.0, 3.0], [True, False], [0.0, -0.1],
                                                               [False, True]):
        yield "lif", dict(tau=tau, decay_input=decay_input, v_reset=v_reset, detach_reset=detach)
    for v_reset, detach in itertools.product([0.0, None], [False, True]):
        yield "quadratic", dict(v_reset=v_reset, detach_reset=detach, leak=0.7 if detach else 0.9)
    yield "lif", dict(tau=2.0, decay_input=True, surrogate=("ATan", {"alpha": 3.0}))
    yield "quadratic", dict(surrogate=("PiecewiseLeakyReLU", {"w": 0.5, "c": 0.02}))


def case_id(case):
    kind, opts = case
    return kind + "-" + "-".join(f"{k}={v[0] if k == 'surrogate' else v}" for k, v in opts.items())


def run(node, x, v0):
    """One multi-step call from v0, backward against random cotangents: (spikes, v, x's, v0's and
    the parameters' gradients)."""
    node.step_mode = "m"
    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    node.v = vr
    s = node(xr)
    backward_with_random_cotangents([s, node.v], seed=3)
    return s.detach(), node.v.detach(), xr.grad, vr.grad, [p.grad for p in node.parameters()]


def compare(case, device, dtype=torch.float32, shape=(13, 3, 29)):
    kind, opts = case
    x = random_input(*shape, device=device, dtype=dtype, scale=0.8)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.3)
    ours = run(make(kind, spikejit, opts).to(device=device, dtype=dtype), x, v0)
    theirs = run(make(kind, sj_neuron, opts).to(device=device, dtype=dtype), x, v0)
    assert torch.equal(ours[0], theirs[0]), "spikes differ"
    assert 0 < float(theirs[0].mean()) < 1, "the case should fire some spikes, not all"
    for a, b in zip(ours[1:4], theirs[1:4]):
        assert_close_to_reference(a, b)
    assert len(ours[4]) == len(theirs[4])
    for a, b in zip(ours[4], theirs[4]):  # the learnable a: a sum over every neuron-step
        assert_close_to_reference(a, b, terms=x.numel())


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(case, device):
    compare(case, device)


@pytest.mark.parametrize("case", list(grid())[::4], ids=case_id)
def test_float64_matches_spikingjelly(case):
    compare(case, "cpu", dtype=torch.float64)


def test_a_changed_number_traces_again():
    x = random_input(9, 4, 17, scale=0.8)
    ours, theirs = make("quadratic", spikejit, {}), make("quadratic", sj_neuron, {})
    ours.step_mode = theirs.step_mode = "m"
    assert torch.equal(ours(x), theirs(x))
    for node in (ours, theirs):
        node.reset()
        node.leak = 0.5
        node.v_threshold = 0.7
    assert torch.equal(ours(x), theirs(x))
    for node in (ours, theirs):
        node.reset()
        node.surrogate_function = sj_surrogate.ATan(alpha=2.5)  # converted to spikejit's ATan
    assert isinstance(ours.surrogate_function, spikejit.surrogate.ATan)
    s, s_ref = ours(x), theirs(x)
    assert torch.equal(s, s_ref)
    torch.testing.assert_close(ours.v, theirs.v, rtol=1e-5, atol=1e-5)


def test_a_number_assigned_anew_many_times_keeps_a_few_kernels():
    """An annealed number traces once per value but keeps only the most recent kernels; one
    assigned back is traced again where it was dropped, with the same results."""
    x = random_input(6, 2, 9, scale=0.8)
    node = make("lif", spikejit, dict(tau=2.0, decay_input=True))
    node.step_mode = "m"
    first = node(x)
    for tau in (2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0):
        node.tau = tau
    assert len(node._kernels) == 8
    last = node._current  # tau = 7.0
    node.reset()
    node.tau = 2.0
    assert len(node._kernels) == 8
    assert torch.equal(node(x), first)
    node.tau = 7.0  # still kept: the same kernel, made the most recent
    assert node._current is last and next(reversed(node._kernels.values())) is last


def test_single_steps_carry_v_like_spikingjelly_and_reset():
    x = random_input(6, 3, 11, scale=0.8)
    ours, theirs = make("lif", spikejit, dict(tau=2.0, decay_input=False)), make(
        "lif", sj_neuron, dict(tau=2.0, decay_input=False))
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        torch.testing.assert_close(ours.v, theirs.v, rtol=1e-6, atol=1e-6)
    ours.step_mode = theirs.step_mode = "m"
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    ours.reset()
    assert ours.v == 0.0


def test_compiles_and_copies():
    node = make("quadratic", spikejit, {})
    node.step_mode = "m"
    check_compiles_like_eager(node, random_input(7, 2, 12, scale=0.8))
    node.reset()
    x = random_input(5, 2, 12, scale=0.8)
    twin = copy.deepcopy(node)
    assert torch.equal(twin(x), node(x))


def test_a_charge_it_cannot_trace_names_the_op():
    class Gamma(spikejit.SimpleBaseNode):
        def neuronal_charge(self, x):
            self.v = self.v + torch.lgamma(x.abs() + 1)

    with pytest.raises(spikejit.UnsupportedCoreError, match="lgamma"):
        Gamma()


def test_a_subclass_without_a_charge_is_refused():
    with pytest.raises(NotImplementedError, match="neuronal_charge"):
        spikejit.SimpleBaseNode()
