"""DSRIFNode and DSRLIFNode against SpikingJelly's, on the CPU and on CUDA: the same outputs bit for
bit, and SpikingJelly's rate gradients of the input and the threshold within rounding, with
inputs whose rates fall below 0, inside and above the threshold's range; a fixed threshold;
torch.compile without graph breaks; bad input."""
import pytest
import torch

import spikejit
from conftest import device_params
from module_checks import assert_close_to_reference, check_compiles_like_eager

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron

T = 8
# Rates spread over (-1, 2) thresholds: below 0, within the range and above it.
SCALES = {"DSRIFNode": 6.0, "DSRLIFNode": 40.0}  # the bounds of the rates: v_threshold, v_threshold tau / delta_t
OPTIONS = [{}, {"alpha": 0.8, "v_threshold_grad_scaling": 0.5}]


def inputs(name, device, shape=(T, 5, 40)):
    rates = (torch.rand(shape[1:]) * 3 - 1) * SCALES[name]
    return (rates + torch.randn(shape) * SCALES[name] / 4).to(device)


def run(node, x, cotangent):
    xr = x.clone().requires_grad_()
    y = node(xr)
    grads = torch.autograd.grad((y * cotangent).sum(), [xr, node.v_threshold])
    return [y.detach(), *grads]


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("name", ["DSRIFNode", "DSRLIFNode"])
def test_matches_spikingjelly(name, options, device):
    ours, theirs = getattr(spikejit, name)(T=T, **options).to(device), getattr(sj_neuron, name)(T=T, **options)
    theirs.v_threshold.data = theirs.v_threshold.data.to(device)
    x = inputs(name, device)
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(device)
    got, want = run(ours, x, cotangent), run(theirs, x, cotangent)
    assert torch.equal(got[0], want[0])
    assert (got[0] != 0).any() and (got[0] == 0).any(), "a test of spikes should see some fire and some not"
    assert got[2] != 0, "the rates should reach above the threshold somewhere"
    for a, b in zip(got[1:], want[1:]):
        assert_close_to_reference(a, b)


def test_a_fixed_threshold_is_a_buffer_outside_the_state_dict():
    node = spikejit.DSRIFNode(T=T, v_threshold_training=False)
    assert not list(node.parameters()) and "v_threshold" not in node.state_dict()
    assert set(node.state_dict()) == set(sj_neuron.DSRIFNode(T=T, v_threshold_training=False).state_dict())
    x = inputs("DSRIFNode", "cpu").requires_grad_()
    node(x).sum().backward()
    assert x.grad.abs().sum() > 0


def test_the_threshold_is_clamped_to_its_lower_bound():
    ours, theirs = spikejit.DSRLIFNode(T=T), sj_neuron.DSRLIFNode(T=T)
    with torch.no_grad():
        ours.v_threshold.fill_(0.01)
        theirs.v_threshold.fill_(0.01)
    x = inputs("DSRLIFNode", "cpu")
    cotangent = torch.randn(x.shape)
    got, want = run(ours, x, cotangent), run(theirs, x, cotangent)
    assert torch.equal(got[0], want[0])
    assert got[2] == 0 and want[2] == 0  # below the bound the clamp passes no gradient


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", ["DSRIFNode", "DSRLIFNode"])
def test_compiles_without_graph_breaks(name, device):
    check_compiles_like_eager(getattr(spikejit, name)(T=T).to(device), inputs(name, device, (T, 3, 16)))


def test_bad_input_names_the_argument():
    node = spikejit.DSRIFNode(T=T)
    with pytest.raises(ValueError, match=r"x_seq: expected \[T, \*S\] with T = 8"):
        node(torch.randn(T + 1, 3))
    with pytest.raises(TypeError, match="x_seq: expected a tensor, got list"):
        node([1.0] * T)
    with pytest.raises(ValueError, match="step_mode: the DSR neurons run multi step only"):
        spikejit.DSRIFNode(step_mode="s")
    with pytest.raises(ValueError, match=r"alpha: expected a float in \(0, 1\], got 1.5"):
        spikejit.DSRIFNode(alpha=1.5)
    with pytest.raises(ValueError, match="v_threshold: expected a float >= 0.1, got 0.05"):
        spikejit.DSRLIFNode(v_threshold=0.05)
    with pytest.raises(ValueError, match="tau: expected a float > 0.0, got -1.0"):
        spikejit.DSRLIFNode(tau=-1.0)
    with pytest.raises(ValueError, match="T: expected an int >= 1, got 0"):
        spikejit.DSRIFNode(T=0)
