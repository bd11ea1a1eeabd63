"""PSN, MaskedPSN and SlidingPSN against SpikingJelly's, on the CPU and on CUDA: the same
parameters (copied over), the same spikes bit for bit, and the gradients of the input, the
weights and the bias within rounding; step by step as in multi-step mode; masks and the sliding
matrix equal to SpikingJelly's; torch.compile without graph breaks; bad input."""
import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import assert_close_to_reference, check_compiles_like_eager

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

T = 6
SCALE = 4.0  # inputs wide enough that sums of a few small weights (MaskedPSN: k = 2) cross 0 often


def pair(kind, **options):
    """(spikejit's neuron, SpikingJelly's) with the same parameters: SpikingJelly's initial ones,
    moved at random."""
    make = {"psn": lambda m: m.PSN(T, **options),
            "masked": lambda m: m.MaskedPSN(k=2, T=T, **options),
            "sliding": lambda m: m.SlidingPSN(k=3, **options)}[kind]
    ours, theirs = make(spikejit), make(sj_neuron)
    with torch.no_grad():
        for name, value in theirs.named_parameters():
            value.add_(0.2 * torch.randn_like(value))
            getattr(ours, name).copy_(value)
    return ours, theirs


def run(node, x, cotangent, steps=None):
    """Spikes and the gradients of x and every parameter, for a fixed cotangent; `steps`: run
    step by step (single-step mode) instead of on the whole sequence."""
    node.zero_grad()
    xr = x.clone().requires_grad_()
    y = torch.stack([node(xr[t]) for t in range(steps)]) if steps else node(xr)
    (y * cotangent).sum().backward()
    return [y.detach(), xr.grad] + [p.grad for _, p in sorted(node.named_parameters())]


def compare(ours, theirs, x, steps=None):
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(x)
    got, want = run(ours, x, cotangent, steps), run(theirs, x, cotangent, steps)
    assert torch.equal(got[0], want[0]), "spikes differ"
    assert 0 < got[0].mean() < 1, "a test of spikes should see some fire and some not"
    for a, b in zip(got[1:], want[1:]):
        assert_close_to_reference(a, b)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["psn", "masked", "sliding"])
def test_multi_step_matches_spikingjelly(kind, device):
    options = {} if kind == "psn" else {"step_mode": "m"}
    ours, theirs = pair(kind, **options)
    compare(ours.to(device), theirs.to(device), random_input(T, 5, 33, device=device, scale=SCALE))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("lambda_", [0.3, 1.0])
def test_masked_psn_blends_its_mask_like_spikingjelly(lambda_, device):
    ours, theirs = pair("masked", step_mode="m", lambda_init=0.0)
    ours.lambda_, theirs.lambda_ = lambda_, lambda_
    ours, theirs = ours.to(device), theirs.to(device)
    assert torch.equal(ours.masked_weight(), theirs.masked_weight())
    compare(ours, theirs, random_input(T, 40, device=device, scale=SCALE))


def test_masked_psn_takes_lambda_above_one_as_one():
    node = spikejit.MaskedPSN(k=3, T=T, lambda_init=1.7)
    assert torch.equal(node.masked_weight(), node.weight * node.mask0)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["masked", "sliding"])
def test_single_step_matches_spikingjelly_and_multi_step(kind, device):
    options = {"lambda_init": 1.0} if kind == "masked" else {}
    ours, theirs = pair(kind, **options)
    ours, theirs = ours.to(device), theirs.to(device)
    x = random_input(T, 4, 9, device=device, scale=SCALE)
    compare(ours, theirs, x, steps=T)
    assert len(ours.queue) == ours.k
    ours.reset()
    stepped = torch.stack([ours(x[t]) for t in range(T)])
    ours.step_mode = "m"
    # The same sums in another order (a matrix product): a spike may flip only where h is within
    # rounding of 0.
    assert (stepped != ours(x)).float().mean() < 0.01


@pytest.mark.parametrize("T_run", [1, 4, 9])
def test_sliding_matrix_is_spikingjellys(T_run):
    ours, theirs = pair("sliding")
    assert torch.equal(ours.gen_gemm_weight(T_run), theirs.gen_gemm_weight(T_run))


def test_initial_parameters_are_spikingjellys():
    for kind, make in (("psn", lambda m: m.PSN(T)), ("masked", lambda m: m.MaskedPSN(2, T)),
                       ("sliding", lambda m: m.SlidingPSN(4))):
        ours, theirs = make(spikejit), make(sj_neuron)
        assert torch.equal(ours.bias, theirs.bias), kind
        assert ours.weight.shape == theirs.weight.shape, kind
        if kind == "sliding":
            assert torch.equal(ours.weight, theirs.weight)  # (..., 1/4, 1/2, 1)
        else:  # Kaiming uniform with a = sqrt(5): within 1 / sqrt(fan_in)
            assert ours.weight.abs().max() <= T ** -0.5 and ours.weight.std() > 0, kind
    masked = spikejit.MaskedPSN(2, T)
    assert torch.equal(masked.mask0, sj_neuron.MaskedPSN(2, T).mask0)


@pytest.mark.parametrize("surrogate_function", [spikejit.surrogate.Sigmoid(alpha=3.0), sj_surrogate.Sigmoid(alpha=3.0),
                                                "Sigmoid"])
def test_surrogates_by_any_accepted_form(surrogate_function):
    ours, theirs = pair("psn", surrogate_function=surrogate_function)
    theirs.surrogate_function = sj_surrogate.Sigmoid(alpha=3.0 if surrogate_function != "Sigmoid" else 4.0)
    compare(ours, theirs, random_input(T, 50, scale=SCALE))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["psn", "masked", "sliding"])
def test_compiles_without_graph_breaks(kind, device):
    node = {"psn": lambda: spikejit.PSN(T), "masked": lambda: spikejit.MaskedPSN(2, T, 0.5, step_mode="m"),
            "sliding": lambda: spikejit.SlidingPSN(3, step_mode="m")}[kind]().to(device)
    check_compiles_like_eager(node, random_input(T, 3, 16, device=device))


def test_bad_input_names_the_argument():
    psn = spikejit.PSN(T)
    with pytest.raises(ValueError, match=r"x_seq: expected \[T, N, \*\] with T = 6"):
        psn(torch.randn(T + 1, 4))
    with pytest.raises(ValueError, match="x_seq: expected at least 2 dimensions"):
        psn(torch.randn(T))
    with pytest.raises(TypeError, match="x_seq: expected dtype torch.float32"):
        psn(torch.randn(T, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="x_seq: expected a tensor, got list"):
        psn([1.0] * T)
    with pytest.raises(ValueError, match="T: expected an int >= 1, got 0"):
        spikejit.PSN(0)
    with pytest.raises(ValueError, match="k: expected an int >= 1, got 2.5"):
        spikejit.SlidingPSN(2.5)
    with pytest.raises(ValueError, match="step_mode: expected 's' or 'm', got 'x'"):
        spikejit.SlidingPSN(2, step_mode="x")
    with pytest.raises(ValueError, match="surrogate_function: unknown surrogate 'nope'"):
        spikejit.PSN(T, surrogate_function="nope")
    masked = spikejit.MaskedPSN(2, T, lambda_init=0.5)
    with pytest.raises(ValueError, match="lambda_ >= 1"):
        masked(torch.randn(4))
    masked.lambda_ = 1.0
    for _ in range(T):
        masked(torch.randn(4))
    with pytest.raises(OverflowError, match=r"MaskedPSN\(T=6\) has run 6 steps"):
        masked(torch.randn(4))
    masked.reset()
    assert masked(torch.randn(4)).shape == (4,)
