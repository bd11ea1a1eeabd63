"""FewSpikeNode, OutlierAwareThresholdNode and HGNode against SpikingJelly's (a torch loop over
the table's K steps), on the CPU and on CUDA, single step and multi step: the same outputs bit
for bit (the potentials follow SpikingJelly's arithmetic step by step) and the input gradients
within rounding; SpikingJelly's tables accepted; torch.compile without graph breaks; bad input."""
import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import assert_close_to_reference, check_compiles_like_eager

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

K = 5


def binary_table(module, scale=1.0, K=K):
    """The binary code of a conversion: theta = h = d = scale * 2^-k."""
    row = [scale * 2.0 ** -k for k in range(K)]
    return module.FewSpikeTable(theta=row, h=row, d=row)


def random_table(module, generator):
    row = lambda: (torch.rand(K, generator=generator) + 0.1).tolist()  # noqa: E731
    return module.FewSpikeTable(theta=row(), h=row(), d=row())


def nodes(kind, module, step_mode, surrogate_function=None):
    generator = torch.Generator().manual_seed(3)
    if kind == "few_spike":
        return module.FewSpikeNode(binary_table(module), surrogate_function, step_mode)
    if kind == "few_spike_random":
        return module.FewSpikeNode(random_table(module, generator), surrogate_function, step_mode)
    if kind == "outlier":
        return module.OutlierAwareThresholdNode(binary_table(module), binary_table(module, 4.0), split_threshold=1.5,
                                                clamp_value=6.0, surrogate_function=surrogate_function,
                                                step_mode=step_mode)
    return module.HGNode([binary_table(module, 0.5), binary_table(module), random_table(module, generator)],
                         gate_thresholds=[0.6, 1.2], surrogate_function=surrogate_function, step_mode=step_mode)


KINDS = ["few_spike", "few_spike_random", "outlier", "hg"]


def run(node, x, cotangent):
    xr = x.clone().requires_grad_()
    y = node(xr)
    (y * cotangent).sum().backward()
    return y.detach(), xr.grad


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("step_mode", ["s", "m"])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_spikingjelly(kind, step_mode, device):
    shape = (K, 7, 19) if step_mode == "m" else (7, 19)
    x = random_input(*shape, device=device, scale=1.2 if step_mode == "s" else 0.5)
    ours, theirs = nodes(kind, spikejit, step_mode).to(device), nodes(kind, sj_neuron, step_mode).to(device)
    y_shape = (K, 7, 19) if step_mode == "m" else (7, 19)
    cotangent = torch.randn(y_shape, generator=torch.Generator().manual_seed(1)).to(device)
    (y, grad), (y_want, grad_want) = run(ours, x, cotangent), run(theirs, x, cotangent)
    assert torch.equal(y, y_want)
    assert (y != 0).any() and (y == 0).any(), "a test of spikes should see some fire and some not"
    assert_close_to_reference(grad, grad_want)


@pytest.mark.parametrize("surrogate_function", [spikejit.surrogate.ATan(alpha=3.0), sj_surrogate.ATan(alpha=3.0),
                                                "ATan"])
def test_surrogates_by_any_accepted_form(surrogate_function):
    ours = nodes("few_spike", spikejit, "s", surrogate_function)
    alpha = 2.0 if surrogate_function == "ATan" else 3.0
    theirs = nodes("few_spike", sj_neuron, "s", sj_surrogate.ATan(alpha=alpha))
    x = random_input(40, scale=1.2)
    cotangent = torch.randn(40)
    (y, grad), (y_want, grad_want) = run(ours, x, cotangent), run(theirs, x, cotangent)
    assert torch.equal(y, y_want)
    assert_close_to_reference(grad, grad_want)


def test_spikingjellys_tables_and_buffers():
    sj_table = binary_table(sj_neuron)
    node = spikejit.FewSpikeNode(sj_table)
    assert torch.equal(node.theta, sj_table.theta) and node.K == K
    hg_ours, hg_theirs = nodes("hg", spikejit, "s"), nodes("hg", sj_neuron, "s")
    assert hg_ours.state_dict().keys() == hg_theirs.state_dict().keys()
    for key, value in hg_theirs.state_dict().items():
        assert torch.equal(hg_ours.state_dict()[key], value), key
    outlier_ours, outlier_theirs = nodes("outlier", spikejit, "s"), nodes("outlier", sj_neuron, "s")
    assert outlier_ours.state_dict().keys() == outlier_theirs.state_dict().keys()


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_compiles_without_graph_breaks(kind, device):
    node = nodes(kind, spikejit, "m").to(device)
    check_compiles_like_eager(node, random_input(K, 3, 16, device=device, scale=0.5))


def test_bad_input_names_the_argument():
    table = binary_table(spikejit)
    node = spikejit.FewSpikeNode(table, step_mode="m")
    with pytest.raises(ValueError, match=r"x_seq: expected \[K, \*S\] with K = 5"):
        node(torch.randn(K + 1, 3))
    with pytest.raises(TypeError, match="x_seq: expected a floating-point tensor, got torch.int64"):
        node(torch.ones(K, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="x: expected a tensor, got list"):
        spikejit.FewSpikeNode(table)([1.0])
    with pytest.raises(ValueError, match="step_mode: expected 's' or 'm', got 'x'"):
        spikejit.FewSpikeNode(table, step_mode="x")
    with pytest.raises(TypeError, match="table: expected a FewSpikeTable, got list"):
        spikejit.FewSpikeNode([1.0, 2.0])
    with pytest.raises(ValueError, match="theta, h, d: expected one length, got 2, 2, 3"):
        spikejit.FewSpikeTable([1.0, 0.5], [1.0, 0.5], [1.0, 0.5, 0.25])
    with pytest.raises(ValueError, match="theta: expected finite values"):
        spikejit.FewSpikeTable([1.0, float("nan")], [1.0, 0.5], [1.0, 0.5])
    with pytest.raises(ValueError, match="outlier_table: expected a table of K = 5 steps, got 3"):
        spikejit.OutlierAwareThresholdNode(table, binary_table(spikejit, K=3), 1.0)
    with pytest.raises(ValueError, match=r"clamp_value: expected None or a finite value > 0 and >= split_threshold"):
        spikejit.OutlierAwareThresholdNode(table, table, 2.0, clamp_value=1.0)
    with pytest.raises(ValueError, match="gate_thresholds: expected strictly increasing values"):
        spikejit.HGNode([table, table, table], [1.0, 0.5])
    with pytest.raises(ValueError, match=r"gate_thresholds: expected len\(tables\) - 1 = 1 values, got 2"):
        spikejit.HGNode([table, table], [0.5, 1.0])
    with pytest.raises(ValueError, match=r"gate_thresholds: expected len\(tables\) - 1 = 0 values, got 1"):
        spikejit.HGNode([table], [0.5])
    assert spikejit.HGNode([table], []).K == K
    with pytest.raises(ValueError, match="surrogate_function: unknown surrogate 'nope'"):
        spikejit.FewSpikeNode(table, surrogate_function="nope")
