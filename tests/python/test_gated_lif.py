"""GatedLIFNode against SpikingJelly's (its torch loop), with SpikingJelly's parameters loaded, on
the CPU and on CUDA: spikes exactly, v and the gradients of x and of every parameter (the seven
gates, per channel or scalar, and the per-step conductance) within rounding. Also: v carries over
between calls until reset, option checks, torch.compile without graph breaks, checkpoints,
pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import copies_in, device_params, random_input
from module_checks import (assert_close_to_reference, backward_with_random_cotangents,
                           check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_pickled_module_runs)

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

CASES = [dict(T=6, inplane=None), dict(T=6, inplane=4), dict(T=9, inplane=4, init_tau=0.6, init_v_threshold=0.3,
                                                                 init_conduct=0.8, init_linear_decay=0.05,
                                                                 init_v_subreset=0.2)]


def pair(opts, device, dtype, surrogate=None):
    """SpikingJelly's module and spikejit's with its parameters (its gates are random)."""
    theirs = sj_neuron.GatedLIFNode(**opts, **({} if surrogate is None else dict(
        surrogate_function=getattr(sj_surrogate, surrogate[0])(**surrogate[1]))))
    ours = spikejit.GatedLIFNode(**opts, **({} if surrogate is None else dict(
        surrogate_function=getattr(spikejit.surrogate, surrogate[0])(**surrogate[1]))))
    ours.load_state_dict(theirs.state_dict())
    return ours.to(device=device, dtype=dtype), theirs.to(device=device, dtype=dtype)


def run(node, x, v0):
    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    node.v = vr
    s = node(xr)
    backward_with_random_cotangents([s, node.v], seed=9)
    return [s.detach(), node.v.detach(), xr.grad, vr.grad] + [p.grad for _, p in sorted(node.named_parameters())]


def compare(opts, device, dtype=torch.float32, neurons=(3, 4, 5, 6), surrogate=None):
    ours, theirs = pair(opts, device, dtype, surrogate)
    x = random_input(opts["T"], *neurons, device=device, dtype=dtype, scale=0.8)
    v0 = random_input(*neurons, device=device, dtype=dtype, scale=0.3)
    (s, *rest), (s_ref, *rest_ref) = run(ours, x, v0), run(theirs, x, v0)
    assert torch.equal(s, s_ref), "spikes differ"
    assert 0 < float(s_ref.mean()) < 1, "the case should fire some spikes, not all"
    for i, (a, b) in enumerate(zip(rest, rest_ref)):  # v, x's and v's gradients, then the gates'
        assert_close_to_reference(a, b, terms=s.numel() // b.numel() if i >= 3 else 1)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts, surrogate", list(itertools.product(CASES, [None, ("ATan", {"alpha": 3.0})])), ids=str)
def test_matches_spikingjelly(opts, surrogate, device):
    compare(opts, device, surrogate=surrogate)


@pytest.mark.parametrize("opts", CASES, ids=str)
def test_float64_matches_spikingjelly(opts):
    compare(opts, torch.device("cpu"), dtype=torch.float64)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_gates_and_conductance_are_read_in_place(device):
    """The per-channel gates and the per-step conductance reach the kernels as broadcast views:
    no copy runs, forward or backward."""
    node = spikejit.GatedLIFNode(T=4, inplane=3).to(device)
    x = random_input(4, 2, 3, 5, 6, device=device).requires_grad_()
    node(x).sum().backward()
    node.reset()
    assert copies_in(lambda: node(x).sum().backward()) == []
    with torch.no_grad():
        node.reset()
        assert copies_in(lambda: node(x)) == []


def test_v_carries_over_until_reset_as_in_spikingjelly():
    ours, theirs = pair(dict(T=5, inplane=4), torch.device("cpu"), torch.float32)
    x = random_input(3, 5, 2, 4, 3, 3, scale=0.8)
    for call in range(3):
        assert torch.equal(ours(x[call]), theirs(x[call]))
        torch.testing.assert_close(ours.v, theirs.v, rtol=1e-5, atol=1e-5)
    ours.reset()
    theirs.reset()
    assert ours.v == theirs.v == 0.0
    assert torch.equal(ours(x[0]), theirs(x[0]))


def test_options_are_checked():
    with pytest.raises(ValueError, match="T: expected an int >= 1"):
        spikejit.GatedLIFNode(0)
    with pytest.raises(ValueError, match=r"init_tau: expected a float in \(0, 1\), got 1.5"):
        spikejit.GatedLIFNode(4, init_tau=1.5)
    with pytest.raises(ValueError, match="step_mode: GatedLIFNode runs multi step only"):
        spikejit.GatedLIFNode(4, step_mode="s")
    node = spikejit.GatedLIFNode(4, inplane=3)
    with pytest.raises(ValueError, match=r"x_seq: expected \[T = 4, \*S\], got shape \[5, 2, 3\]"):
        node(random_input(5, 2, 3))
    with pytest.raises(ValueError, match=r"x_seq: expected \[T, N, 3, ...\] \(inplane = 3 channels"):
        node(random_input(4, 2, 5, 6))
    assert sorted(dict(node.named_parameters())) == sorted(
        dict(sj_neuron.GatedLIFNode(4, inplane=3).named_parameters()))


def test_compiles_checkpoints_and_pickles():
    x = random_input(8, 4, 16, scale=0.8)
    check_compiles_like_eager(spikejit.GatedLIFNode(8), x)

    def make(checkpoint_every):
        torch.manual_seed(0)  # the same random gates for both policies
        return spikejit.GatedLIFNode(8, checkpoint_every=checkpoint_every)

    check_checkpoints_give_per_step_gradients(make, x)
    check_pickled_module_runs(spikejit.GatedLIFNode(8), x)
