"""Surrogate gradients: the PyTorch formulas (spikejit::spike backward) against SpikingJelly's
surrogate classes, and the C++ definitions (the kernels) against the PyTorch formulas."""
import pytest
import torch

import spikejit
from spikejit.functional import run_neuron

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import surrogate as sj_surrogate

NAMES = [class_name for _, class_name, _, _ in spikejit._core.surrogates()]
NON_DEFAULT = {"Sigmoid": {"alpha": 2.5}, "ATan": {"alpha": 3.0}, "PiecewiseLeakyReLU": {"w": 0.5, "c": 0.05},
               "SquarewaveFourierSeries": {"n": 5, "T_period": 6.0}, "S2NN": {"alpha": 3.0, "beta": 0.5},
               "LeakyKReLU": {"leak": 0.1, "k": 0.8}, "LogTailedReLU": {"alpha": 0.2}, "Rect": {"alpha": 0.8},
               "QPseudoSpike": {"alpha": 3.0}, "FakeNumericalGradient": {"alpha": 0.5}}


def sample(n=4001, dtype=torch.float64):
    x = torch.randn(n, dtype=dtype) * 2.0
    return x[(x.abs() > 1e-3)]  # 0 is a kink or a pole for several surrogates


@pytest.mark.parametrize("kwargs_kind", ["defaults", "custom"])
@pytest.mark.parametrize("name", NAMES)
def test_gradient_formula_matches_spikingjelly(name, kwargs_kind):
    kwargs = NON_DEFAULT.get(name, {}) if kwargs_kind == "custom" else {}
    x = sample()
    x_ref = x.clone().requires_grad_()
    ref = getattr(sj_surrogate, name)(**kwargs)
    ref(x_ref).sum().backward()
    x_ours = x.clone().requires_grad_()
    s = getattr(spikejit.surrogate, name)(**kwargs)(x_ours)
    s.sum().backward()
    assert torch.equal(s, (x >= 0).to(x.dtype))
    torch.testing.assert_close(x_ours.grad, x_ref.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_surrogate_matches_formula(name):
    """The C++ derivative (through a one-line neuron on the CPU executor) equals the formula."""
    surrogate = getattr(spikejit.surrogate, name)(**NON_DEFAULT.get(name, {}))
    text = f"neuron sg\ninput x\noutput s\ns = spike(x, {spikejit.surrogate.text(surrogate.name, surrogate.params)})\n"
    handle = spikejit.registry.register(spikejit.Program.from_text(text))
    try:
        x = sample(dtype=torch.float64).reshape(1, -1)
        x_kernel = x.clone().requires_grad_()
        (s,), _, _ = run_neuron(handle, 1, 0, [x_kernel], [], [], False)
        s.sum().backward()
        x_formula = x.clone().requires_grad_()
        surrogate(x_formula).sum().backward()
        assert torch.equal(s.detach(), (x >= 0).to(x.dtype))
        torch.testing.assert_close(x_kernel.grad, x_formula.grad, rtol=1e-9, atol=1e-12)
    finally:
        spikejit.registry.release_owner(handle)


def test_resolve_accepts_every_form():
    resolve = spikejit.surrogate.resolve
    assert resolve(None) == ("sigmoid", (4.0,))
    assert resolve("ATan") == ("atan", (2.0,))
    assert resolve("piecewise_leaky_relu") == ("piecewise_leaky_relu", (1.0, 0.01))
    assert resolve(sj_surrogate.ATan(alpha=3.0)) == ("atan", (3.0,))
    assert resolve(sj_surrogate.PiecewiseLeakyReLU(w=2.0, c=0.1)) == ("piecewise_leaky_relu", (2.0, 0.1))
    assert resolve(spikejit.surrogate.Erf(1.5)) == ("erf", (1.5,))


@pytest.mark.parametrize("bad", [sj_surrogate.PoissonPass(), sj_surrogate.MultiLevelSpikeCount(4), "nope", 3.0])
def test_unsupported_surrogates_are_rejected_by_name(bad):
    with pytest.raises(ValueError, match="surrogate_function"):
        spikejit.LIFNode(surrogate_function=bad)


def test_non_spiking_surrogates_are_rejected():
    with pytest.raises(ValueError, match="spiking"):
        spikejit.IFNode(surrogate_function=sj_surrogate.Sigmoid(spiking=False))
    with pytest.raises(ValueError, match="spiking"):
        spikejit.surrogate.Sigmoid(spiking=False)


def test_subclass_of_a_spikingjelly_surrogate_is_not_mistaken_for_it():
    class MySigmoid(sj_surrogate.Sigmoid):
        pass

    with pytest.raises(ValueError, match="MySigmoid"):
        spikejit.IFNode(surrogate_function=MySigmoid())


def test_spike_function_parameters():
    x = sample(101).requires_grad_()
    spikejit.surrogate.spike(x, "sigmoid", [2.0]).sum().backward()
    expected = torch.sigmoid(2.0 * x.detach()) * (1 - torch.sigmoid(2.0 * x.detach())) * 2.0
    torch.testing.assert_close(x.grad, expected)
    with pytest.raises(ValueError, match="params"):
        spikejit.surrogate.spike(x, "sigmoid", [1.0, 2.0])
    with pytest.raises(ValueError, match="surrogate"):
        torch.ops.spikejit.spike(x, "bogus", [])
