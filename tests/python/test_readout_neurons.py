"""NonSpikingIFNode and NonSpikingLIFNode against SpikingJelly's (a per-step torch loop) for every
decode, on the CPU and on CUDA: outputs, the last potential and the input gradients within
rounding. Also: the potential starts at 0 at every call, option checks, torch.compile without
graph breaks, pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import assert_close_to_reference, check_inference_compiles_like_eager, check_pickled_module_runs

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron

DECODES = [None, "max-mem", "max-abs-mem", "mean-mem", "last_mem"]
NODES = {"if": lambda module, decode: module.NonSpikingIFNode(decode),
         "lif": lambda module, decode: module.NonSpikingLIFNode(2.0, decode),
         "lif-tau3": lambda module, decode: module.NonSpikingLIFNode(tau=3.0, decode=decode)}


def run(node, x, cotangent):
    """The output (a list stacked), the last potential and x's gradient for a fixed cotangent."""
    xr = x.clone().requires_grad_()
    y = node(xr)
    y = torch.stack(y) if isinstance(y, list) else y
    (y * cotangent[: y.numel()].reshape(y.shape)).sum().backward()
    return [y.detach(), node.v.detach(), xr.grad]


def compare(kind, decode, device, dtype=torch.float32, shape=(12, 3, 29)):
    x = random_input(*shape, device=device, dtype=dtype, scale=1.0)
    cotangent = torch.randn(x.numel(), generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(x)
    ours = run(NODES[kind](spikejit, decode), x, cotangent)
    theirs = run(NODES[kind](sj_neuron, decode), x, cotangent)
    for a, b in zip(ours, theirs):
        assert_close_to_reference(a, b)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind, decode", list(itertools.product(NODES, DECODES)))
def test_every_decode_matches_spikingjelly(kind, decode, device):
    compare(kind, decode, device)


@pytest.mark.parametrize("kind", list(NODES))
def test_float64_matches_spikingjelly(kind):
    compare(kind, None, torch.device("cpu"), dtype=torch.float64)


def test_every_call_starts_from_zero():
    node = spikejit.NonSpikingLIFNode(decode="last_mem")
    x = random_input(5, 4, 7)
    first = node(x)
    assert torch.equal(node(x), first) and torch.equal(node.v, first)
    assert isinstance(spikejit.NonSpikingIFNode()(x), list) and len(spikejit.NonSpikingIFNode()(x)) == 5


def test_options_are_checked():
    with pytest.raises(ValueError, match=r"decode: expected one of \(None, 'max-mem', .*got 'max'"):
        spikejit.NonSpikingIFNode("max")
    with pytest.raises(ValueError, match="tau: expected a float > 0, got -1.0"):
        spikejit.NonSpikingLIFNode(tau=-1.0)
    node = spikejit.NonSpikingLIFNode(decode="mean-mem")
    with pytest.raises(ValueError, match="decode: expected one of"):
        node.decode = "sum"
    assert node.decode == "mean-mem"
    with pytest.raises(TypeError, match="x_seq: expected a tensor, got list"):
        node([1.0])
    node.tau = 4.0  # the program is made again for the new tau
    x = random_input(6, 5)
    expected = torch.zeros(5)
    outputs = []
    for t in range(6):
        expected = expected + (x[t] - expected) / 4.0
        outputs.append(expected)
    torch.testing.assert_close(node(x), torch.stack(outputs).mean(0), rtol=1e-6, atol=1e-6)


def test_compiles_without_graph_breaks_and_pickles():
    layer = torch.nn.Linear(16, 10)
    readout = spikejit.NonSpikingLIFNode(decode="max-mem")
    x = random_input(8, 4, 16)
    check_inference_compiles_like_eager(lambda x: readout(layer(x)), x)
    check_pickled_module_runs(readout, layer(x).detach())
