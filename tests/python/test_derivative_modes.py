"""The derivatives spikejit's kernels have, and the ones they refuse: reverse mode through
torch.autograd works (with create_graph=True too, as long as nothing differentiates the kernels'
gradients again; torch.func's reverse mode and vmap: test_func_transforms.py; forward mode:
test_forward_mode.py); second derivatives through the kernels are clear errors, never a gradient
silently left out. The spike function outside the kernels has every mode."""
import pytest
import torch
import torch.autograd.forward_ad as forward_ad

import spikejit
from conftest import device_params, random_input

def lif_core(x, v):
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.Sigmoid()(h - 1.0)
    return s, h * (1.0 - s)


NEURONS = {
    "LIFNode": lambda: spikejit.LIFNode(step_mode="m"),
    "ParametricLIFNode": lambda: spikejit.ParametricLIFNode(step_mode="m"),
    "FlexSN": lambda: spikejit.FlexSN(lif_core, 1, 1, 1, strict=True),
}


def run(node, x):
    node.reset()
    return node(x)


def test_functional_call_is_no_transform():
    node, x = spikejit.ParametricLIFNode(step_mode="m"), random_input(4, 6)
    w = torch.tensor(0.3, requires_grad=True)
    node.reset()
    torch.func.functional_call(node, {"w": w}, (x,)).sum().backward()
    reference = spikejit.ParametricLIFNode(step_mode="m")
    with torch.no_grad():
        reference.w.fill_(0.3)
    reference(x).sum().backward()
    torch.testing.assert_close(w.grad, reference.w.grad)


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_create_graph_gives_the_same_first_derivative_and_refuses_a_second(name, device):
    node, x = NEURONS[name]().to(device), random_input(5, 7, device=device)
    weights = torch.randn(5, 7, device=device)
    plain = x.clone().requires_grad_()
    (run(node, plain) * weights).sum().backward()
    graphed = x.clone().requires_grad_()
    loss = (run(node, graphed) * weights).sum() + (graphed ** 3).sum()  # a path with a real 2nd derivative
    (first,) = torch.autograd.grad(loss, graphed, create_graph=True)
    torch.testing.assert_close(first - 3 * graphed.detach() ** 2, plain.grad)
    with pytest.raises(RuntimeError, match="^spikejit.s neuron kernels have first derivatives only"):
        first.sum().backward()


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_second_autograd_grad_through_the_kernels_raises(name, device):
    # autograd.grad runs only the nodes on a path to what it differentiates: the refusal must sit
    # on every path from the kernels' gradients back to the call's inputs and parameters, and to
    # whatever the incoming gradient depends on (here `weights`).
    node, x = NEURONS[name]().to(device), random_input(5, 7, device=device).requires_grad_()
    weights = torch.randn(5, 7, device=device, requires_grad=True)
    (first,) = torch.autograd.grad((run(node, x) * weights).sum(), x, create_graph=True)
    for loss, wrt in [((first * x).sum(), x), (first.sum(), x), (first.sum(), weights),
                      *([(first.sum(), node.w)] if name == "ParametricLIFNode" else [])]:
        with pytest.raises(RuntimeError, match="^spikejit.s neuron kernels have first derivatives only"):
            torch.autograd.grad(loss, wrt, allow_unused=True)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_second_derivative_with_respect_to_an_initial_state_raises(device):
    x = random_input(5, 7, device=device).requires_grad_()
    v_init = (0.5 * torch.rand(7, device=device)).requires_grad_()
    _, v_last = spikejit.multistep_lif(x, v_init, store_v_seq=False)
    (first,) = torch.autograd.grad((v_last ** 2).sum(), v_init, create_graph=True)
    with pytest.raises(RuntimeError, match="^spikejit.s neuron kernels have first derivatives only"):
        torch.autograd.grad((first * v_init).sum(), v_init)


def test_a_second_derivative_through_the_custom_op_raises():
    # The op torch.compile's graphs call, used directly: its backward op refuses a gradient too.
    x = random_input(5, 7, dtype=torch.float64).requires_grad_()
    handle = spikejit.LIFNode(step_mode="m")._program_handle
    _, v_last = torch.ops.spikejit.neuron_forward(handle, [x], [], [], False)[:2]
    (first,) = torch.autograd.grad((v_last ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="^spikejit.s neuron kernels have first derivatives only"):
        torch.autograd.grad((first * x).sum(), x)


# ---- the spike function: every derivative mode, the surrogate's derivative in each -----------

SURROGATES = [("sigmoid", [4.0]), ("atan", [2.0]), ("piecewise_quadratic", [1.0]), ("super_spike", [3.0])]


def surrogate_derivative(x, name, params):
    return spikejit._surrogate_grads.surrogate_gradient(x, name, params)


@pytest.mark.parametrize("name, params", SURROGATES)
def test_spike_has_the_surrogate_derivative_in_every_mode(name, params):
    x = torch.randn(6, 5, dtype=torch.float64)
    tangent = torch.randn_like(x)
    spike = lambda xs: spikejit.surrogate.spike(xs, name, params)  # noqa: E731
    expected = surrogate_derivative(x, name, params)
    reverse = x.clone().requires_grad_()
    spike(reverse).sum().backward()
    torch.testing.assert_close(reverse.grad, expected)
    torch.testing.assert_close(torch.func.grad(lambda xs: spike(xs).sum())(x), expected)
    values, jvp = torch.func.jvp(spike, (x,), (tangent,))
    assert torch.equal(values, (x >= 0).double())
    torch.testing.assert_close(jvp, expected * tangent)
    with forward_ad.dual_level():
        dual = spike(forward_ad.make_dual(x, tangent))
        torch.testing.assert_close(forward_ad.unpack_dual(dual).tangent, expected * tangent)
    per_row = torch.func.vmap(torch.func.grad(lambda row: (spike(row) * torch.arange(1.0, 6.0)).sum()))(x)
    torch.testing.assert_close(per_row, expected * torch.arange(1.0, 6.0))
    assert torch.equal(torch.func.vmap(spike, in_dims=1, out_dims=1)(x), (x >= 0).double())


@pytest.mark.parametrize("name, params", SURROGATES)
def test_spike_second_derivative_is_the_surrogate_derivatives_derivative(name, params):
    x = torch.randn(40, dtype=torch.float64, requires_grad=True)
    (first,) = torch.autograd.grad(spikejit.surrogate.spike(x, name, params).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    reference = x.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad(surrogate_derivative(reference, name, params).sum(), reference)
    torch.testing.assert_close(second, expected)


def test_flexsn_eager_scan_runs_under_torch_func():
    """A FlexSN neuron that runs as an eager scan (backend="torch") is PyTorch ops and spikes:
    torch.func.grad and vmap work on it, equal to autograd and to a loop."""
    node = spikejit.FlexSN(lif_core, 1, 1, 1, backend="torch")
    x = random_input(5, 3, 4, dtype=torch.float64)
    reference = x.clone().requires_grad_()
    run(node, reference).sum().backward()
    torch.testing.assert_close(torch.func.grad(lambda xs: run(node, xs).sum())(x), reference.grad)
    batched = torch.func.vmap(lambda xs: run(node, xs), in_dims=1, out_dims=1)(x)
    assert torch.equal(batched, torch.stack([run(node, x[:, b]) for b in range(3)], dim=1))
