"""ComplementaryLIFNode against SpikingJelly's (its torch reference, which it runs on the CPU):
spikes exactly, the potentials v and m and the gradients (of x and both initial states) within
rounding, over tau, v_threshold and surrogates, on the CPU and on CUDA. The step's sigmoids are
not bit-equal to PyTorch's in float32, so a neuron whose reference charge comes within 1e-4 of the
threshold at some step may fire differently and is left out (float64 compares every neuron). On
CUDA, whose sigmoid differs by an ulp more, within 1e-4 of the largest value. Also: single and
multi step from the state a call left, state_seqs, reset, option checks, torch.compile without
graph breaks, checkpoints, pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (assert_close_to_reference, check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_pickled_module_runs)

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

FP32 = dict(rtol=1e-5, atol=1e-5)
NEAR_THRESHOLD = 1e-4
SURROGATES = [None, ("ATan", {}), ("Sigmoid", {"alpha": 2.5})]


def grid():
    for tau, v_threshold, surrogate in itertools.product([2.0, 3.5], [1.0, 0.7], SURROGATES):
        yield dict(tau=tau, v_threshold=v_threshold, surrogate=surrogate)


def case_id(opts):
    surrogate = opts["surrogate"][0] if opts["surrogate"] else "Rect"
    return f"tau={opts['tau']}-v_threshold={opts['v_threshold']}-{surrogate}"


def make(module, surrogates, opts, **kwargs):
    surrogate = opts["surrogate"]
    extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
    return module.ComplementaryLIFNode(tau=opts["tau"], v_threshold=opts["v_threshold"], **extra, **kwargs)


def run(node, x, v0, m0):
    """(spikes, v_seq, m_seq, grads of x, v0, m0) of a multi-step call with random cotangents."""
    xr, vr, mr = (t.clone().requires_grad_() for t in (x, v0, m0))
    node.v, node.m = vr, mr
    s = node(xr)
    v_seq, m_seq = node.state_seqs
    cotangents = [torch.randn(s.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64).to(s)
                  for i in range(3)]
    sum((y * g).sum() for y, g in zip((s, v_seq, m_seq), cotangents)).backward()
    return s.detach(), v_seq.detach(), m_seq.detach(), xr.grad, vr.grad, mr.grad


def compare(opts, device, dtype=torch.float32, shape=(14, 3, 37)):
    x = random_input(*shape, device=device, dtype=dtype, scale=1.0)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.3)
    m0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.5).abs()
    ours = run(make(spikejit, spikejit.surrogate, opts, step_mode="m", store_state_seqs=True), x, v0, m0)
    theirs = run(make(sj_neuron, sj_surrogate, opts, step_mode="m", store_state_seqs=True), x, v0, m0)
    s, v, m, gx, gv, gm = ours
    s_ref, v_ref, m_ref, gx_ref, gv_ref, gm_ref = theirs
    keep = torch.ones(shape[1:], dtype=torch.bool, device=device)
    if dtype != torch.float64:
        v_before = torch.cat((v0.unsqueeze(0), v_ref[:-1]))
        h_ref = v_before - v_before / opts["tau"] + x
        keep = ((h_ref - opts["v_threshold"]).abs() > NEAR_THRESHOLD).all(dim=0)
        assert keep.float().mean() > 0.9, "too many neurons near the threshold to compare"
    assert torch.equal(s[:, keep], s_ref[:, keep]), "spikes differ"
    assert 0 < float(s_ref.mean()) < 1, "the case should fire some spikes, not all"
    pairs = [(v[:, keep], v_ref[:, keep]), (m[:, keep], m_ref[:, keep]), (gx[:, keep], gx_ref[:, keep]),
             (gv[keep], gv_ref[keep]), (gm[keep], gm_ref[keep])]
    for a, b in pairs:
        assert_close_to_reference(a, b)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(opts, device):
    compare(opts, device)


@pytest.mark.parametrize("opts", list(grid())[:3], ids=case_id)
def test_float64_matches_spikingjelly(opts):
    compare(opts, torch.device("cpu"), dtype=torch.float64)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_long_sequences_of_many_neurons_match_spikingjelly(device):
    compare(dict(tau=2.0, v_threshold=1.0, surrogate=None), device, shape=(64, 4, 1001))


def test_the_module_behaves_like_spikingjellys():
    """Default options: single step, then multi step from the state it left (v and m), state_seqs
    in multi step, reset."""
    ours, theirs = spikejit.ComplementaryLIFNode(), sj_neuron.ComplementaryLIFNode()
    x = random_input(6, 2, 9, scale=1.0)
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        for name in ("v", "m"):
            torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), **FP32)
    assert ours.state_seqs is None and theirs.state_seqs is None
    ours.step_mode = theirs.step_mode = "m"
    ours.store_state_seqs = theirs.store_state_seqs = True
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    for a, b in zip(ours.state_seqs, theirs.state_seqs):
        torch.testing.assert_close(a, b, **FP32)
    ours.store_state_seqs = False  # forgets them, as SpikingJelly's setter
    assert ours.state_seqs is None
    ours.reset()
    theirs.reset()
    assert ours.v == theirs.v == 0.0 and ours.m == theirs.m == 0.0


def test_options_are_checked():
    node = spikejit.ComplementaryLIFNode()
    assert type(node.surrogate_function).__name__ == "Rect" and node.surrogate_function.alpha == 1.0
    with pytest.raises(ValueError, match="tau: expected a float > 1, got 1.0"):
        spikejit.ComplementaryLIFNode(tau=1.0)
    with pytest.raises(ValueError, match="v_reset: ComplementaryLIFNode resets by v_threshold"):
        node.v_reset = 0.0
    with pytest.raises(ValueError, match="detach_reset: ComplementaryLIFNode resets by v_threshold"):
        node.detach_reset = True
    with pytest.raises(TypeError, match="store_state_seqs: expected a bool"):
        spikejit.ComplementaryLIFNode(store_state_seqs=1)
    assert node.v_reset is None and node.detach_reset is False


def test_compiles_without_graph_breaks():
    check_compiles_like_eager(spikejit.ComplementaryLIFNode(step_mode="m"), random_input(8, 4, 16, scale=1.0))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_checkpoints_give_the_per_step_gradients(device):
    check_checkpoints_give_per_step_gradients(
        lambda k: spikejit.ComplementaryLIFNode(step_mode="m", checkpoint_every=k),
        random_input(13, 2, 50, device=device, scale=1.0), states=("v", "m"))


def test_a_pickled_module_runs_where_it_is_loaded():
    check_pickled_module_runs(spikejit.ComplementaryLIFNode(surrogate_function=spikejit.surrogate.ATan(),
                                                            step_mode="m"),
                              random_input(6, 3, 8, scale=1.0), states=("v", "m"))
