"""ILIFNode and spikejit.surrogate.MultiLevelSpikeCount against SpikingJelly's ILIFNode and
MultiLevelSpikeCount (its torch backend; its registered op where it takes one): spike counts
exactly, potentials and gradients within float32 rounding, over an option grid (tau, D, the
gradient window, detach_reset) on the CPU and on CUDA, exactly in float64. Also: single and multi
step from the state a call left, reset, option checks, torch.compile without graph breaks,
checkpoints, and a FlexSN core that calls the surrogate tracing to the same neuron."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_pickled_module_runs)

# SpikingJelly is a pinned test requirement: imported, not skipped.
import spikingjelly._ops.ilif.reference as sj_ilif
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import quantize as sj_quantize
from spikingjelly.activation_based import surrogate as sj_surrogate

FP32 = dict(rtol=1e-5, atol=1e-5)


def grid():
    for tau, (count, window), detach in itertools.product(
            [4.0 / 3.0, 2.5], [(4, None), (2, (0.5, 1.5)), (8, (-1.0, 9.0))], [False, True]):
        yield dict(tau=tau, count=count, window=window, detach_reset=detach, v_threshold=1.0)
    yield dict(tau=2.0, count=3, window=None, detach_reset=False, v_threshold=0.6)


def case_id(opts):
    return "-".join(f"{k}={v}" for k, v in opts.items())


def nodes(opts, **kwargs):
    """(ours, SpikingJelly's) ILIFNode with the options of `opts`."""
    made = []
    for module, surrogate in ((spikejit, spikejit.surrogate), (sj_neuron, sj_surrogate)):
        made.append(module.ILIFNode(tau=opts["tau"], v_threshold=opts["v_threshold"],
                                    surrogate_function=surrogate.MultiLevelSpikeCount(opts["count"],
                                                                                      grad_window=opts["window"]),
                                    detach_reset=opts["detach_reset"], **kwargs))
    return made


def run(node, x, v0):
    """(counts, v_seq, x.grad, v0.grad) of a multi-step call with random cotangents."""
    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    node.v = vr
    c = node(xr)
    g_c = torch.randn(c.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(c)
    g_v = torch.randn(c.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(c)
    ((c * g_c).sum() + (node.v_seq * g_v).sum()).backward()
    return c.detach(), node.v_seq.detach(), xr.grad, vr.grad


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(opts, device):
    x = random_input(12, 3, 37, device=device, scale=1.5)
    v0 = random_input(3, 37, device=device, scale=0.5)
    ours, theirs = nodes(opts, step_mode="m", store_v_seq=True)
    (c, v, gx, gv), (c_ref, v_ref, gx_ref, gv_ref) = run(ours, x, v0), run(theirs, x, v0)
    assert torch.equal(c, c_ref), "spike counts differ"
    assert len(c_ref.unique()) > 2, "the case should fire several counts"
    for a, b in ((v, v_ref), (gx, gx_ref), (gv, gv_ref)):
        torch.testing.assert_close(a, b, **FP32)
    assert gx.abs().sum() > 0


@pytest.mark.parametrize("opts", list(grid())[:4], ids=case_id)
def test_float64_matches_spikingjelly_exactly(opts):
    x = random_input(10, 2, 29, dtype=torch.float64)
    v0 = random_input(2, 29, dtype=torch.float64, scale=0.5)
    ours = nodes(opts, step_mode="m", store_v_seq=True)[0]
    ours_results = run(ours, x, v0)
    x.requires_grad_()
    v0.requires_grad_()
    c_ref, v_ref, _ = sj_ilif.multi_step(x, v0, opts["tau"], float(opts["count"]),
                                         *(opts["window"] or (0.0, float(opts["count"]))), opts["v_threshold"],
                                         opts["detach_reset"], True)
    g_c = torch.randn(c_ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g_v = torch.randn(c_ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    gx_ref, gv_ref = torch.autograd.grad((c_ref * g_c).sum() + (v_ref * g_v).sum(), (x, v0))
    for a, b in zip(ours_results, (c_ref, v_ref, gx_ref, gv_ref)):
        torch.testing.assert_close(a, b.detach(), rtol=1e-12, atol=1e-12)


def test_the_module_behaves_like_spikingjellys():
    """Default options: single step, then multi step from the state it left, v and v_seq, reset."""
    ours, theirs = spikejit.ILIFNode(store_v_seq=True), sj_neuron.ILIFNode(store_v_seq=True)
    x = random_input(6, 2, 9, scale=1.5)
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        torch.testing.assert_close(ours.v, theirs.v, **FP32)
        torch.testing.assert_close(ours.v_seq, theirs.v_seq, **FP32)
    ours.step_mode = theirs.step_mode = "m"
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    torch.testing.assert_close(ours.v, theirs.v, **FP32)
    ours.reset()
    theirs.reset()
    assert ours.v == theirs.v == 0.0


def test_the_surrogate_matches_spikingjellys_function():
    x = (torch.randn(4000, dtype=torch.float64) * 3).requires_grad_()
    for count, window in ((4, None), (2, (0.5, 1.5)), (3, (-1.0, 0.25))):
        ours = spikejit.surrogate.MultiLevelSpikeCount(count, grad_window=window)(x)
        theirs = sj_quantize.multi_level_spike_count(x, count, window)
        assert torch.equal(ours, theirs)
        g = torch.randn_like(x)
        assert torch.equal(*(torch.autograd.grad(y, x, g)[0] for y in (ours, theirs)))


def test_options_are_checked():
    with pytest.raises(ValueError, match="surrogate_function: expected a MultiLevelSpikeCount"):
        spikejit.ILIFNode(surrogate_function=spikejit.surrogate.Sigmoid())
    with pytest.raises(ValueError, match=r"surrogate_function: expected MultiLevelSpikeCount\(spiking=True\)"):
        spikejit.ILIFNode(surrogate_function=sj_surrogate.MultiLevelSpikeCount(4, spiking=False))
    with pytest.raises(ValueError, match="spiking=False is not supported"):
        spikejit.surrogate.MultiLevelSpikeCount(4, spiking=False)
    with pytest.raises(TypeError, match="max_spike_count: expected an int >= 1, got float"):
        spikejit.surrogate.MultiLevelSpikeCount(2.0)
    with pytest.raises(ValueError, match="max_spike_count: expected an int >= 1, got 0"):
        spikejit.surrogate.MultiLevelSpikeCount(0)
    with pytest.raises(ValueError, match=r"grad_window: expected grad_min <= grad_max, got \(2.0, 1.0\)"):
        spikejit.surrogate.MultiLevelSpikeCount(4, grad_window=(2.0, 1.0))
    with pytest.raises(ValueError, match="tau: expected a float > 1, got 1.0"):
        spikejit.ILIFNode(tau=1.0)
    node = spikejit.ILIFNode(step_mode="m")
    with pytest.raises(ValueError, match="v_reset: ILIFNode always resets softly"):
        node.v_reset = 0.0
    assert node.v_reset is None
    x = random_input(8, 64, scale=1.5)
    before = node(x)
    node.reset()
    node.surrogate_function = sj_surrogate.MultiLevelSpikeCount(2)  # SpikingJelly's object, reassigned
    after = node(x)
    assert before.max() > 2 and after.max() == 2


def test_compiles_without_graph_breaks():
    check_compiles_like_eager(spikejit.ILIFNode(step_mode="m"), random_input(8, 4, 16, scale=1.5))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_checkpoints_give_the_per_step_gradients(device):
    check_checkpoints_give_per_step_gradients(lambda k: spikejit.ILIFNode(step_mode="m", checkpoint_every=k),
                                              random_input(13, 2, 50, device=device, scale=1.5))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_flexsn_core_with_the_surrogate_is_the_same_neuron(device):
    """I-LIF written as one PyTorch step with spikejit.surrogate.MultiLevelSpikeCount traces to
    the IR (no fallback) and gives ILIFNode's counts, states and gradients."""
    count = spikejit.surrogate.MultiLevelSpikeCount(3, grad_window=(0.25, 3.0))

    def core(x, v):
        h = 0.5 * v + x
        c = count(h / 0.8)
        return c, h - c * 0.8

    x = random_input(9, 4, 21, device=device, scale=1.5)
    flex = spikejit.FlexSN(core, num_inputs=1, num_states=1, num_outputs=1, step_mode="m", strict=True)
    node = spikejit.ILIFNode(tau=2.0, v_threshold=0.8, surrogate_function=count, step_mode="m")
    results = []
    for neuron in (flex, node):
        xr = x.clone().requires_grad_()
        c = neuron(xr)
        (c * torch.linspace(-1, 2, 21, device=device)).sum().backward()
        results.append((c.detach(), xr.grad))
    assert torch.equal(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1], **FP32)


def test_a_pickled_module_runs_where_it_is_loaded():
    count = spikejit.surrogate.MultiLevelSpikeCount(3, grad_window=(0.5, 3.0))
    check_pickled_module_runs(spikejit.ILIFNode(surrogate_function=count, step_mode="m"),
                              random_input(6, 3, 8, scale=1.5))
