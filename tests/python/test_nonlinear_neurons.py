"""QIFNode, EIFNode and IzhikevichNode against SpikingJelly's torch reference (its per-step autograd) over an option
grid: spikes exactly equal, potentials and gradients within rounding. EIF's exp is not bit-equal
to PyTorch's in float32, so there a neuron whose reference charge comes within 1e-4 of the
threshold at some step may fire differently and is left out (a handful at most; the comparison
is exact in float64 on the CPU). On CUDA the surrogate's exp in the backward (and EIF's in the
forward) is CUDA's, and an ulp of difference grows along the sequence where a step multiplies
it by more than 1 (QIF's quadratic term: 1 + a0 (2v - v_rest - v_c) / tau): there potentials and
gradients are compared within 1e-4 of the largest value (float32 against float64 differs by up to
1.4x FP32's tolerance in the long case). Also: the modules' SpikingJelly behaviour (single and multi
step, v / v_seq, reset), option checks and reassignment."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (assert_close_to_reference, check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_pickled_module_runs)

# SpikingJelly is a pinned test requirement (tests/python/requirements.txt, and a wheel on the GPU
# machine): imported, not skipped, so that a missing install fails.
import spikingjelly._ops.eif.reference as sj_eif
import spikingjelly._ops.izhikevich.reference as sj_izhikevich
import spikingjelly._ops.qif.reference as sj_qif
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

FP32 = dict(rtol=1e-5, atol=1e-5)
NEAR_THRESHOLD = 1e-4
RUNAWAY = 100.0


def reference(kind, x, v0, w0, opts, surrogate):
    """(spikes, v_seq, h_seq) of SpikingJelly's per-step torch implementation."""
    if kind == "izhikevich":
        s, v_seq, _, h, _ = sj_izhikevich.multi_step(x, v0, w0, opts["tau"], opts["v_rest"], opts["v_c"], opts["a0"],
                                                     opts["a"], opts["b"], opts["tau_w"], opts["v_threshold"],
                                                     opts["v_reset"], surrogate, opts["detach_reset"], True)
    elif kind == "qif":
        s, v_seq, h, _ = sj_qif.multi_step(x, v0, opts["tau"], opts["a0"], opts["v_rest"], opts["v_c"],
                                           opts["v_threshold"], opts["v_reset"], surrogate, opts["detach_reset"],
                                           True)
    else:
        s, v_seq, h, _ = sj_eif.multi_step(x, v0, opts["tau"], opts["v_rest"], opts["theta_rh"], opts["delta_T"],
                                           opts["v_threshold"], opts["v_reset"], surrogate, opts["detach_reset"],
                                           True)
    return s, v_seq, h


def module(kind, opts, surrogate):
    cls = dict(qif=spikejit.QIFNode, eif=spikejit.EIFNode, izhikevich=spikejit.IzhikevichNode)[kind]
    return cls(surrogate_function=surrogate, step_mode="m", store_v_seq=True, **opts)


def grid():
    for v_reset, detach, tau in itertools.product([-0.1, None], [False, True], [2.0, 3.0]):
        base = dict(v_reset=v_reset, detach_reset=detach, tau=tau, v_threshold=1.0, v_rest=0.0)
        yield "qif", dict(base, v_c=0.8, a0=1.0)
        yield "qif", dict(base, v_c=0.5, a0=0.3, v_rest=-0.05)
        yield "eif", dict(base, delta_T=1.0, theta_rh=0.8)
        yield "eif", dict(base, delta_T=0.5, theta_rh=0.6, v_rest=-0.05)
        yield "izhikevich", dict(base, v_c=0.8, a0=1.0, v_rest=-0.1, w_rest=0.05, tau_w=2.0, a=0.2, b=0.3)


def case_id(case):
    kind, opts = case
    return kind + "-" + "-".join(f"{k}={v}" for k, v in opts.items())


def compare(kind, opts, device, dtype=torch.float32, shape=(12, 3, 37), surrogate=("Sigmoid", {})):
    x = random_input(*shape, device=device, dtype=dtype, scale=0.8)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.3)
    w0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.1) if kind == "izhikevich" else None
    g_s, g_v = torch.randn_like(x), torch.randn_like(x)
    results = []
    for ours in (False, True):
        xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
        wr = None if w0 is None else w0.clone().requires_grad_()
        if ours:
            node = module(kind, opts, getattr(spikejit.surrogate, surrogate[0])(**surrogate[1]))
            node.v = vr
            if wr is not None:
                node.w = wr
            s, v_seq, h = node(xr), node.v_seq, None
        else:
            s, v_seq, h = reference(kind, xr, vr, wr, opts, getattr(sj_surrogate, surrogate[0])(**surrogate[1]))
        ((s * g_s).sum() + (v_seq * g_v).sum()).backward()
        results.append((s.detach(), v_seq.detach(), xr.grad, vr.grad, None if wr is None else wr.grad,
                        None if h is None else h.detach()))

    (s_ref, v_ref, gx_ref, gv_ref, gw_ref, h_ref), (s, v, gx, gv, gw, _) = results
    keep = torch.ones(shape[1:], dtype=torch.bool, device=device)
    if kind == "eif" and dtype != torch.float64:
        keep = ((h_ref - opts["v_threshold"]).abs() > NEAR_THRESHOLD).all(dim=0)
        # A neuron whose v runs away (soft reset, small delta_T) grows like exp(v / delta_T): an
        # ulp of exp is multiplied by v / delta_T at every step (2.7e-5 relative at v = 2.4e5).
        keep &= torch.nan_to_num(v_ref.abs(), nan=float("inf")).le(RUNAWAY).all(dim=0)
        assert keep.float().mean() > 0.9, "too many neurons near the threshold or running away to compare"
    assert torch.equal(s[:, keep], s_ref[:, keep]), "spikes differ"
    assert 0 < float(s_ref.mean()) < 1, "the case should fire some spikes, not all"
    pairs = [(v[:, keep], v_ref[:, keep]), (gx[:, keep], gx_ref[:, keep]), (gv[keep], gv_ref[keep])]
    if w0 is not None:
        pairs.append((gw[keep], gw_ref[keep]))
    for ours, theirs in pairs:
        assert_close_to_reference(ours, theirs, exp_differs=kind == "eif")


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(case, device):
    kind, opts = case
    compare(kind, opts, device)


@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_float64_matches_spikingjelly_exactly(case):
    kind, opts = case
    compare(kind, opts, "cpu", dtype=torch.float64)


@pytest.mark.parametrize("surrogate", [("ATan", {}), ("Sigmoid", {"alpha": 2.5}), ("Erf", {})],
                         ids=lambda s: s[0] + str(s[1] or ""))
@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_surrogates_match_spikingjelly(kind, surrogate):
    opts = next(o for k, o in grid() if k == kind)
    compare(kind, opts, "cpu", surrogate=surrogate)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_long_sequences_of_many_neurons_match_spikingjelly(kind, device):
    opts = dict(next(o for k, o in grid() if k == kind), detach_reset=True, tau=3.0)
    compare(kind, opts, device, shape=(64, 4, 1001))


@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_modules_behave_like_spikingjelly_modules(kind):
    """Default options (Izhikevich: with adaptation), single step then multi step from the state
    it left, v and w, reset."""
    options = dict(a=0.2, b=0.3, w_rest=0.05) if kind == "izhikevich" else {}
    ours = getattr(spikejit, dict(qif="QIFNode", eif="EIFNode", izhikevich="IzhikevichNode")[kind])(**options)
    theirs = getattr(sj_neuron, type(ours).__name__)(**options)
    x = random_input(6, 2, 9, scale=0.8)
    states = ("v", "w") if kind == "izhikevich" else ("v",)
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        for name in states:
            torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), **FP32)
    ours.step_mode = theirs.step_mode = "m"
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    for name in states:
        torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), **FP32)
    ours.reset()
    theirs.reset()
    for name in states:
        assert getattr(ours, name) == getattr(theirs, name)


def test_options_are_checked_and_reassignment_rebuilds_the_neuron():
    with pytest.raises(ValueError, match="a0: expected a float > 0, got -1.0"):
        spikejit.QIFNode(a0=-1.0)
    with pytest.raises(ValueError, match="delta_T: expected a float > 0, got 0.0"):
        spikejit.EIFNode(delta_T=0.0)
    with pytest.raises(ValueError, match=r"v_threshold: expected a float > v_reset = -0.1, got -0.5"):
        spikejit.QIFNode(v_threshold=-0.5)
    with pytest.raises(ValueError, match=r"v_rest: expected a float >= v_reset = -0.1, got -0.2"):
        spikejit.EIFNode(v_rest=-0.2)
    with pytest.raises(ValueError, match="tau: expected a float > 1, got 0.5"):
        spikejit.QIFNode(tau=0.5)
    with pytest.raises(ValueError, match="tau_w: expected a float > 0, got -2.0"):
        spikejit.IzhikevichNode(tau_w=-2.0)
    with pytest.raises(TypeError, match="v_c: expected a float, got str"):
        spikejit.QIFNode(v_c="0.8")
    node = spikejit.QIFNode(step_mode="m")
    with pytest.raises(ValueError, match="a0: expected a float > 0"):
        node.a0 = 0.0
    assert node.a0 == 1.0  # a rejected value leaves the option as it was
    x = random_input(8, 64, scale=0.8)
    before = node(x)
    node.reset()
    node.a0 = 3.0
    after = node(x)
    node.reset()
    assert not torch.equal(before, after)
    assert torch.equal(after, spikejit.QIFNode(a0=3.0, step_mode="m")(x))


@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_compiles_without_graph_breaks(kind):
    check_compiles_like_eager(module(kind, {}, None), random_input(8, 4, 16, scale=0.8))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_checkpoints_give_the_per_step_gradients(kind, device):
    """Saving the states every 4 steps and recomputing between (the checkpointed backward) gives
    the gradients of saving every step."""
    opts = next(o for k, o in grid() if k == kind)

    def make(checkpoint_every):
        node = module(kind, opts, None)
        node.store_v_seq = False  # (a stored v_seq would be saved whole anyway)
        node.checkpoint_every = checkpoint_every
        return node
    check_checkpoints_give_per_step_gradients(make, random_input(13, 2, 50, device=device, scale=0.8))


@pytest.mark.parametrize("kind", ["qif", "eif", "izhikevich"])
def test_a_pickled_module_runs_where_it_is_loaded(kind):
    check_pickled_module_runs(module(kind, {}, spikejit.surrogate.ATan()), random_input(6, 3, 8, scale=0.8))
