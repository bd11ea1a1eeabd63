"""Stochastic neurons: a FlexSN core that draws random numbers (torch.rand_like, randn_like,
bernoulli, uniform_, normal_) compiles to the IR's uniform() draws. Checked: the statistics of the
draws (range, 24-bit grid, mean and variance, no correlation between steps, neurons or streams),
reproducibility under torch.manual_seed and with a fixed seed tensor, gradients against a plain
PyTorch loop fed the kernels' own draws (per step and with checkpoints), training and inference
drawing alike, forward mode, torch.compile without graph breaks, opcheck, what the tracing still
refuses, the seed's checks, and on CUDA the same draws as the CPU and fresh draws in CUDA graphs."""
import math

import pytest
import torch
import torch.autograd.forward_ad as forward_ad

import spikejit
from conftest import device_params, random_input, require_cuda

# Tolerances are statistical: 5 standard deviations of the estimate under independence.
SIGMAS = 5.0


def uniform_core(x):
    return torch.rand_like(x)


def two_streams_core(x):
    return torch.rand_like(x), torch.rand_like(x)


def normal_core(x):
    return torch.randn_like(x)


def bernoulli_core(x):
    return torch.bernoulli(torch.sigmoid(x))


def bernoulli_p_core(x):
    return torch.bernoulli(x, 0.3)


def uniform_fill_core(x):
    return torch.empty_like(x).uniform_(-1.0, 3.0)


def normal_fill_core(x):
    return torch.empty_like(x).normal_(2.0, 0.5)


def noisy_threshold_core(x, v):
    u = torch.rand_like(x)
    h = 0.5 * v + x
    s = spikejit.surrogate.ATan()(h - 1.0 + 0.3 * (u - 0.5))
    return s, u, h * (1.0 - s)


def smooth_noisy_core(x, v):
    """Differentiable everywhere (forward mode against finite differences)."""
    u = torch.rand_like(x)
    h = 0.5 * v + x * (0.5 + u)
    return torch.tanh(h), u, 0.9 * h


def kernel(core, num_inputs=1, num_states=0, num_outputs=1, **options):
    return spikejit.FlexSN(core, num_inputs, num_states, num_outputs, strict=True, **options)


def draws(node, x, seed=None):
    """The outputs of a stateless node on x (inference)."""
    with torch.no_grad():
        outputs, _, _ = node.multi_step_functional_forward(x, seed=seed)
    return outputs


def seed_tensor(value, device):
    return torch.tensor([value], dtype=torch.int64, device=device)


def correlation(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.square().sum() * b.square().sum()).sqrt()), a.numel()


def assert_uncorrelated(a, b, what):
    r, n = correlation(a, b)
    assert abs(r) < SIGMAS / math.sqrt(n), f"{what}: correlation {r:.5f} over {n} pairs"


def assert_mean_and_variance(values, mean, variance, fourth_central_moment, what):
    n = values.numel()
    values = values.double()
    got_mean, got_variance = float(values.mean()), float(values.var())
    assert abs(got_mean - mean) < SIGMAS * math.sqrt(variance / n), f"{what}: mean {got_mean}"
    spread = math.sqrt((fourth_central_moment - variance ** 2) / n)
    assert abs(got_variance - variance) < SIGMAS * spread, f"{what}: variance {got_variance}"


# ---- statistics --------------------------------------------------------------------------------

@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_uniform_draws_have_the_uniform_statistics(device):
    x = random_input(64, 4096, device=device)
    u = draws(kernel(uniform_core), x)[0]
    assert u.shape == x.shape and u.dtype == x.dtype
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    scaled = u.double() * 2 ** 24  # 24 random bits: every draw is on the 2^-24 grid
    assert torch.equal(scaled, scaled.floor())
    assert u.unique().numel() > 0.99 * u.numel() * (1 - u.numel() / 2 ** 25)  # few repeats (birthday bound)
    assert_mean_and_variance(u, 0.5, 1 / 12, 1 / 80, "uniform")
    assert_uncorrelated(u[1:], u[:-1], "consecutive steps")
    assert_uncorrelated(u[:, 1:], u[:, :-1], "neighbouring neurons")
    assert_uncorrelated(u[:, 0::2], u[:, 1::2], "even and odd neurons")


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_two_draws_in_one_core_are_independent_streams(device):
    x = random_input(64, 4096, device=device)
    a, b = draws(kernel(two_streams_core, num_outputs=2), x)
    assert not torch.equal(a, b)
    assert_uncorrelated(a, b, "two streams")
    assert_uncorrelated(a[1:], b[:-1], "two streams, one step apart")
    assert_mean_and_variance(b, 0.5, 1 / 12, 1 / 80, "second stream")


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_normal_draws_have_the_normal_statistics(device):
    x = random_input(64, 4096, device=device)
    z = draws(kernel(normal_core), x)[0]
    assert torch.isfinite(z).all()
    assert_mean_and_variance(z, 0.0, 1.0, 3.0, "normal")
    inside = float((z.abs() < 1).double().mean())  # P(|Z| < 1) = erf(1/sqrt(2))
    p = math.erf(1 / math.sqrt(2))
    assert abs(inside - p) < SIGMAS * math.sqrt(p * (1 - p) / z.numel()), inside
    assert_uncorrelated(z[1:], z[:-1], "normal, consecutive steps")
    assert_uncorrelated(z.square()[1:], z.square()[:-1], "normal squares, consecutive steps")


# A normal draw from one uniform draw by the inverse of the normal CDF, through erfinv or ndtri.
INVERSE_CDF_NORMAL_CORES = {
    "erfinv": lambda x: math.sqrt(2.0) * torch.erfinv(2.0 * torch.rand_like(x) - 1.0),
    "ndtri": lambda x: torch.special.ndtri(torch.rand_like(x)),
}


@pytest.mark.parametrize("by", INVERSE_CDF_NORMAL_CORES)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_normal_draws_by_the_inverse_cdf_have_the_normal_statistics(device, by):
    x = random_input(64, 4096, device=device)
    z = draws(kernel(INVERSE_CDF_NORMAL_CORES[by]), x)[0]
    assert not torch.isnan(z).any()
    finite = z[torch.isfinite(z)]  # a draw of exactly 0 maps to -inf (probability 2^-24 per draw)
    assert finite.numel() >= z.numel() - 2
    assert_mean_and_variance(finite, 0.0, 1.0, 3.0, f"normal by {by}")
    inside = float((finite.abs() < 1).double().mean())
    p = math.erf(1 / math.sqrt(2))
    assert abs(inside - p) < SIGMAS * math.sqrt(p * (1 - p) / finite.numel()), inside


def normal_forms_core(x):
    """torch.normal with a tensor mean, a tensor std, both, and randn of the neuron shape, each
    standardized back to N(0, 1)."""
    spread = x.abs() + 0.5
    return ((torch.normal(x, 0.5) - x) / 0.5, (torch.normal(0.2, spread) - 0.2) / spread,
            (torch.normal(x, spread) - x) / spread, torch.randn(x.shape, dtype=x.dtype, device=x.device))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_every_form_of_normal_draws_has_the_normal_statistics(device):
    node = kernel(normal_forms_core, num_outputs=4, example_inputs=[torch.zeros(4096)])
    x = random_input(16, 4096, device=device)
    forms = draws(node, x)
    for name, z in zip(("normal(tensor, number)", "normal(number, tensor)", "normal(tensor, tensor)", "randn"),
                       forms):
        assert torch.isfinite(z).all(), name
        assert_mean_and_variance(z, 0.0, 1.0, 3.0, name)
    for a, b in zip(forms, forms[1:]):
        assert_uncorrelated(a, b, "two forms (streams of their own)")


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_bernoulli_draws_fire_at_their_rate(device):
    x = random_input(64, 4096, device=device)
    b = draws(kernel(bernoulli_core), x)[0]
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    p = torch.sigmoid(x.double())
    deviation = float((b.double() - p).sum() / (p * (1 - p)).sum().sqrt())  # a standard normal
    assert abs(deviation) < SIGMAS, deviation
    b = draws(kernel(bernoulli_p_core), x)[0]
    rate = float(b.double().mean())
    assert abs(rate - 0.3) < SIGMAS * math.sqrt(0.3 * 0.7 / b.numel()), rate
    # x.bernoulli_(p) with a tensor p of probabilities
    b = draws(kernel(lambda x: x.clone().bernoulli_(torch.sigmoid(x))), x)[0]
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    deviation = float((b.double() - p).sum() / (p * (1 - p)).sum().sqrt())
    assert abs(deviation) < SIGMAS, deviation


def dropout_core(x):
    return torch.nn.functional.dropout(x, 0.2)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_dropout_keeps_at_its_rate_scales_and_passes_gradients_through_the_kept(device):
    """F.dropout traces to its draws (bernoulli, scaled by 1 / (1 - p)): each value is 0 or
    x / 0.8, kept at rate 0.8, and the gradient is the same mask and scale. Its traced mask is
    not computed from x (functionalization makes it from an empty tensor of x's shape), so the
    examples must have the neuron shape: with one-element ones a shared draw could not be told
    apart, and the error says so."""
    with pytest.raises(spikejit.UnsupportedCoreError, match="example_inputs of the neuron shape"):
        kernel(dropout_core)
    node = kernel(dropout_core, example_inputs=[torch.zeros(4096)])
    # x >= 0.5: y == 0 only where dropped (random_input + 2.0 rounded to 0 about once in 200 runs)
    x = (random_input(32, 4096, device=device).abs() + 0.5).requires_grad_()
    y = node(x)
    kept = y != 0
    torch.testing.assert_close(y[kept], x.detach()[kept] / 0.8)
    rate = float(kept.double().mean())
    assert abs(rate - 0.8) < SIGMAS * math.sqrt(0.8 * 0.2 / y.numel()), rate
    g = torch.randn_like(y)
    (y * g).sum().backward()
    torch.testing.assert_close(x.grad, torch.where(kept, g / 0.8, torch.zeros_like(g)))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_in_place_fills_with_their_ranges(device):
    x = random_input(32, 4096, device=device)
    u = draws(kernel(uniform_fill_core), x)[0]
    assert float(u.min()) >= -1.0 and float(u.max()) < 3.0
    assert_mean_and_variance(u, 1.0, 16 / 12, 16 ** 2 / 80, "uniform_(-1, 3)")
    z = draws(kernel(normal_fill_core), x)[0]
    assert_mean_and_variance(z, 2.0, 0.25, 3 * 0.5 ** 4, "normal_(2, 0.5)")


# ---- seeds and reproducibility ----------------------------------------------------------------

@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_manual_seed_reproduces_and_fresh_calls_differ(device):
    node = kernel(noisy_threshold_core, num_states=1, num_outputs=2)
    x = random_input(8, 3, 50, device=device)
    torch.manual_seed(1234)
    first = node(x)
    node.reset()
    second = node(x)  # no reseeding: other draws
    node.reset()
    torch.manual_seed(1234)
    again = node(x)
    node.reset()
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[1], second[1])


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_seed_tensor_fixes_the_draws(device):
    node = kernel(uniform_core)
    x = random_input(6, 100, device=device)
    a = draws(node, x, seed_tensor(7, device))[0]
    b = draws(node, x, seed_tensor(7, device))[0]
    c = draws(node, x, seed_tensor(8, device))[0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    compiled = spikejit.FlexSNKernel(uniform_core, 1, 0, 1)
    with torch.no_grad():
        (d,) = compiled(x, seed=seed_tensor(7, device))
    assert torch.equal(a, d)
    # The draws do not depend on the input's values, nor on T (step t draws the same at any T).
    e = draws(node, random_input(9, 100, device=device), seed_tensor(7, device))[0]
    assert torch.equal(e[:6], a)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_training_and_inference_draw_alike(device):
    node = kernel(noisy_threshold_core, num_states=1, num_outputs=2)
    x = random_input(10, 4, 25, device=device)
    torch.manual_seed(99)
    with torch.no_grad():
        s_inference, u_inference = node(x)
    node.reset()
    torch.manual_seed(99)
    s_training, u_training = node(x.clone().requires_grad_())
    node.reset()
    assert s_training.requires_grad
    assert torch.equal(u_inference, u_training) and torch.equal(s_inference, s_training.detach())


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_draws_follow_the_memory_order(device):
    """A channels-last input runs in its memory order (docs/python.md): neuron n in memory draws
    what neuron n of a contiguous input draws."""
    node = kernel(uniform_core)
    x = random_input(3, 2, 4, 5, 6, device=device)
    last = x.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)  # channels innermost in memory
    assert not last.is_contiguous()
    a = draws(node, x, seed_tensor(5, device))[0]
    b = draws(node, last, seed_tensor(5, device))[0]
    assert b.stride() == last.stride()
    assert torch.equal(b.permute(0, 1, 3, 4, 2).reshape(3, -1), a.reshape(3, -1))


def test_making_a_random_node_leaves_the_generator_alone():
    torch.manual_seed(3)
    expected = torch.rand(5)
    torch.manual_seed(3)
    kernel(noisy_threshold_core, num_states=1, num_outputs=2)  # traces and verifies the core
    assert torch.equal(torch.rand(5), expected)


# ---- gradients ---------------------------------------------------------------------------------

def noisy_threshold_loop(x, v, u):
    """noisy_threshold_core as a Python loop with the draws given."""
    spikes = []
    for t in range(x.shape[0]):
        h = 0.5 * v + x[t]
        s = spikejit.surrogate.ATan()(h - 1.0 + 0.3 * (u[t] - 0.5))
        v = h * (1.0 - s)
        spikes.append(s)
    return torch.stack(spikes), v


def gradient_dtype(device):
    return torch.float64 if device.type == "cpu" else torch.float32


def gradient_tolerance(device):
    return dict(rtol=1e-10, atol=1e-12) if device.type == "cpu" else dict(rtol=1e-5, atol=1e-6)


def noisy_training_step(device, checkpoint_every, x, v0, g_s, g_v):
    """(s, u, v_last, x.grad, v0.grad) of a training step of the noisy-threshold neuron."""
    node = kernel(noisy_threshold_core, num_states=1, num_outputs=2, checkpoint_every=checkpoint_every)
    x, v0 = x.clone().requires_grad_(), v0.clone().requires_grad_()
    torch.manual_seed(2024)
    (s, u), (v_last,), _ = node.multi_step_functional_forward(x, states=[v0])
    # u takes a gradient too: the draws have none, so it adds nothing to x.grad and v0.grad.
    ((s * g_s).sum() + (v_last * g_v).sum() + u.sum()).backward()
    return s.detach(), u.detach(), v_last.detach(), x.grad, v0.grad


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_gradients_equal_a_loop_fed_the_same_draws(device):
    dtype = gradient_dtype(device)
    x = random_input(11, 3, 40, device=device, dtype=dtype)
    v0 = random_input(3, 40, device=device, dtype=dtype, scale=0.3)
    g_s, g_v = torch.randn_like(x), torch.randn_like(v0)
    per_step = noisy_training_step(device, 0, x, v0, g_s, g_v)
    s, u, v_last, x_grad, v0_grad = per_step
    assert 0 < float(s.mean()) < 1  # some spikes, not all

    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    s_ref, v_ref = noisy_threshold_loop(xr, vr, u)
    ((s_ref * g_s).sum() + (v_ref * g_v).sum()).backward()
    tolerance = gradient_tolerance(device)
    assert torch.equal(s, s_ref.detach())
    torch.testing.assert_close(v_last, v_ref.detach(), **tolerance)
    torch.testing.assert_close(x_grad, xr.grad, **tolerance)
    torch.testing.assert_close(v0_grad, vr.grad, **tolerance)

    for k in (1, 3, 4):  # checkpoints: the backward recomputes the draws from the forward's seed
        checkpointed = noisy_training_step(device, k, x, v0, g_s, g_v)
        for got, want in zip(checkpointed, per_step):
            assert torch.equal(got, want), f"checkpoint_every={k}"


def straight_through_core(x, v):
    """Stochastic firing with probability sigmoid(h - 1) and a straight-through gradient: the
    forward is a Bernoulli spike, the backward that of the probability."""
    h = 0.5 * v + x
    p = torch.sigmoid(4.0 * (h - 1.0))
    s = p + (torch.bernoulli(p) - p).detach()
    return s, h * (1.0 - s)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_straight_through_stochastic_spikes(device):
    """Spikes are 0 or 1 and fire at their probability's rate; the gradient is the probability's,
    as a loop fed the kernels' own spikes gives it."""
    dtype = gradient_dtype(device)
    x = random_input(12, 3, 50, device=device, dtype=dtype, scale=0.5).requires_grad_()
    node = kernel(straight_through_core, num_states=1)
    (s,), (v_last,), _ = node.multi_step_functional_forward(x)
    g = torch.randn_like(s)
    ((s * g).sum() + v_last.sum()).backward()
    assert set(s.detach().unique().tolist()) <= {0.0, 1.0} and 0 < float(s.mean()) < 1

    xr = x.detach().clone().requires_grad_()
    v, spikes = torch.zeros_like(xr[0]), []
    for t in range(xr.shape[0]):
        h = 0.5 * v + xr[t]
        p = torch.sigmoid(4.0 * (h - 1.0))
        spike = p + (s[t].detach() - p).detach()
        spikes.append(spike)
        v = h * (1.0 - spike)
    ((torch.stack(spikes) * g).sum() + v.sum()).backward()
    torch.testing.assert_close(x.grad, xr.grad, **gradient_tolerance(device))

    # The rate: sum over neurons and steps of (s - p) is a sum of independent centred Bernoullis.
    big = random_input(16, 8192, device=device, scale=0.5)
    with torch.no_grad():
        (spikes,), _, _ = node.multi_step_functional_forward(big)
        v, probabilities = torch.zeros_like(big[0]), []
        for t in range(big.shape[0]):
            h = 0.5 * v + big[t]
            probabilities.append(torch.sigmoid(4.0 * (h - 1.0)))
            v = h * (1.0 - spikes[t])
    p = torch.stack(probabilities).double()
    z = float((spikes.double() - p).sum() / (p * (1 - p)).sum().sqrt())
    assert abs(z) < SIGMAS, f"spike count off its expectation by {z:.2f} sigma"


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_recompute_draws_the_forwards_numbers_again(device):
    """spikejit.Recompute runs the block again in the backward: the neuron's seed comes from the
    generator state it restores, so the gradients are those of the forward's draws."""
    dtype = gradient_dtype(device)
    torch.manual_seed(5)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), kernel(lambda x: torch.rand_like(x) * x, checkpoint_every=0))
    block = block.to(device, dtype)
    x = random_input(6, 2, 16, device=device, dtype=dtype)
    grads = []
    for wrap in (False, True):
        xg = x.clone().requires_grad_()
        torch.manual_seed(77)
        y = (spikejit.Recompute(block, spikes=False) if wrap else block)(xg)
        y.square().sum().backward()
        grads.append(xg.grad)
    torch.testing.assert_close(grads[1], grads[0], **gradient_tolerance(device))


@pytest.mark.parametrize("randomness", ["different", "same"])
@pytest.mark.parametrize("packed_outputs", [(), (0,)])
def test_vmap_gradients_with_checkpoints_use_the_forwards_draws(packed_outputs, randomness):
    """Under vmap a call runs folded (the batch as more neurons) or per batch element (packed
    outputs), and its draws follow the neurons' indices: a checkpointed backward recomputes them
    the way its forward ran, so its per-sample gradients equal the per-step policy's."""
    x = random_input(3, 6, 10, dtype=torch.float64)
    grads = []
    for k in (0, 2):
        node = kernel(noisy_threshold_core, num_states=1, num_outputs=2, checkpoint_every=k,
                      packed_outputs=packed_outputs)

        def f(xs):
            _, (v_last,), _ = node.multi_step_functional_forward(xs, states=[torch.zeros_like(xs[0])])
            return v_last.square().sum()

        torch.manual_seed(8)
        grads.append(torch.func.vmap(torch.func.grad(f), randomness=randomness)(x))
    assert grads[0].abs().sum() > 0
    assert torch.equal(grads[0], grads[1])


# ---- forward mode ------------------------------------------------------------------------------

@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_forward_mode_takes_the_calls_seed(device):
    dtype = gradient_dtype(device)
    node = kernel(smooth_noisy_core, num_states=1, num_outputs=2)
    x = random_input(7, 30, device=device, dtype=dtype)
    v0 = random_input(30, device=device, dtype=dtype, scale=0.3)
    d = torch.randn_like(x)
    seed = seed_tensor(11, device)

    def f(xs):
        (y, u), (v_last,), _ = node.multi_step_functional_forward(xs, states=[v0], seed=seed)
        return y, u, v_last

    (y, u, v_last), (dy, du, dv) = torch.func.jvp(f, (x,), (d,))
    with torch.no_grad():
        plain = f(x)
    for got, want in zip((y, u, v_last), plain):  # the primal draws what the plain call draws
        assert torch.equal(got, want)
    assert torch.equal(du, torch.zeros_like(du))  # the draws have no tangent
    if device.type == "cpu":  # central differences in float64, with the draws held fixed by the seed
        eps = 1e-6
        with torch.no_grad():
            plus, minus = f(x + eps * d), f(x - eps * d)
        for got, p, m in zip((dy, dv), (plus[0], plus[2]), (minus[0], minus[2])):
            torch.testing.assert_close(got, (p - m) / (2 * eps), rtol=1e-6, atol=1e-8)
    with forward_ad.dual_level():
        (yd, _), (vd,), _ = node.multi_step_functional_forward(forward_ad.make_dual(x, d), states=[v0], seed=seed)
        torch.testing.assert_close(forward_ad.unpack_dual(yd).primal, y)  # one pass of the tangent neuron
        torch.testing.assert_close(forward_ad.unpack_dual(yd).tangent, dy)
        torch.testing.assert_close(forward_ad.unpack_dual(vd).tangent, dv)


# ---- torch.compile and opcheck -------------------------------------------------------------------

class NoisyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.node = kernel(noisy_threshold_core, num_states=1, num_outputs=2)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        self.node.reset()
        s, u = self.node(self.fc1(x))
        return self.fc2(s), u


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_torch_compile_has_no_graph_breaks_and_trains(device):
    model = NoisyNet().to(device)
    x = torch.randn(8, 64, 16, device=device) * 2

    def step(model, x):
        y, u = model(x)
        return y.square().mean(), u

    explanation = torch._dynamo.explain(step)(model, x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    draws_seen = []
    for _ in range(2):
        loss, u = compiled(model, x)
        loss.backward()
        u = u.detach()
        assert torch.isfinite(loss)
        assert u.shape == (8, 64, 32) and float(u.min()) >= 0 and float(u.max()) < 1
        assert abs(float(u.double().mean()) - 0.5) < SIGMAS * math.sqrt(1 / 12 / u.numel())
        for p in model.parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all()
            p.grad = None
        draws_seen.append(u)
    assert not torch.equal(draws_seen[0], draws_seen[1])  # each call draws a fresh seed


def opcheck_cases(device):
    node = kernel(noisy_threshold_core, num_states=1, num_outputs=2)
    handle = node.handle
    x = random_input(6, 4, 5, device=device)
    v0 = random_input(4, 5, device=device, scale=0.3)
    seed = seed_tensor(-3, device)
    xg, vg = x.clone().requires_grad_(), v0.clone().requires_grad_()
    forward = torch.ops.spikejit.neuron_forward
    checkpoints = forward(handle, [x], [v0], [], False, 2, 0, False, seed)[3:]
    per_step = spikejit._kernel_calls.backward_saved(handle, forward(handle, [x], [v0], [], False, 0, 0, False,
                                                                     seed)[3:], [x])
    g = [torch.randn_like(x), torch.randn_like(x)]
    cases = [
        (torch.ops.spikejit.neuron_inference.default, (handle, [x], [v0], [], True, True, 0, seed)),
        (forward.default, (handle, [xg], [vg], [], False, 0, 0, False, seed)),
        (forward.default, (handle, [xg], [vg], [], True, 2, 0, False, seed)),
        (torch.ops.spikejit.neuron_backward.default,
         (handle, [6, 4, 5], x.dtype, x.device, per_step, [], g, [torch.randn_like(v0)], [], 0, False, seed)),
        (torch.ops.spikejit.neuron_backward.default,
         (handle, [6, 4, 5], x.dtype, x.device, [*checkpoints, x], [], g, [None], [], 2, False, seed)),
    ]
    return node, cases


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("index", range(5))
def test_opcheck(index, device):
    node, cases = opcheck_cases(device)
    op, args = cases[index]
    torch.library.opcheck(op, args)


# ---- what tracing accepts and refuses -------------------------------------------------------------

def shared_scalar_core(x, v):
    h = v + x + torch.rand(1)
    return h, h * 0.5


def test_strict_accepts_per_neuron_draws_and_refuses_a_shared_one():
    for core in (uniform_core, normal_core, bernoulli_core, bernoulli_p_core, uniform_fill_core, normal_fill_core):
        node = kernel(core)
        assert node.program.uses_random, core.__name__
    assert "uniform()" in kernel(uniform_core)._compiled.text
    assert kernel(normal_core)._compiled.text.count("uniform()") == 2  # Box-Muller: two streams
    with pytest.raises(spikejit.UnsupportedCoreError) as info:
        kernel(shared_scalar_core, num_states=1)
    assert info.value.op == "aten.rand.default"
    assert "aten.rand.default" in str(info.value) and "shared" in str(info.value)
    with pytest.warns(RuntimeWarning, match="aten.rand.default"):  # not strict: the eager scan
        node = spikejit.FlexSN(shared_scalar_core, 1, 1, 1)
    assert node.handle is None


def test_shape_of_a_draw_decides():
    def by_shape(x):
        return x + torch.rand(x.shape)

    examples = [torch.zeros(8)]
    assert kernel(by_shape, example_inputs=examples).program.uses_random  # the neuron shape: per neuron
    with pytest.raises(spikejit.UnsupportedCoreError, match="aten.rand.default"):
        kernel(by_shape)  # one-element examples: a draw of shape [1] may be a shared scalar
    with pytest.raises(spikejit.UnsupportedCoreError, match="aten.randn.default"):
        kernel(lambda x: x + torch.randn(1), example_inputs=examples)
    scale = torch.tensor([0.5])

    def like_a_scalar(x):
        return x + torch.rand_like(scale)  # one draw shared by all neurons

    with pytest.raises(spikejit.UnsupportedCoreError, match="aten.rand_like.default"):
        kernel(like_a_scalar)


def test_a_per_neuron_parameter_widens_the_neuron_shape_of_draws():
    """With one-element examples and a per-neuron threshold, the step's values (and a draw of
    theirs) have the threshold's shape: that is the neuron shape, so the draw compiles; a
    one-element draw beside it is still refused."""
    theta = torch.linspace(0.5, 1.5, 6)

    def escape(x, v):
        p = torch.sigmoid(4.0 * (v + x - theta))
        s = p + (torch.bernoulli(p) - p).detach()
        return s, (v + x) * (1.0 - s)

    node = kernel(escape, num_states=1)
    assert node.program.uses_random and node.program.params[0][1] == "per_neuron"
    (s,), _, _ = node.multi_step_functional_forward(random_input(5, 6))
    assert s.shape == (5, 6) and set(s.unique().tolist()) <= {0.0, 1.0}

    def shared(x, v):
        h = v + x - theta
        return h + torch.rand(1), h

    with pytest.raises(spikejit.UnsupportedCoreError, match="aten.rand.default"):
        kernel(shared, num_states=1)


# ---- errors ------------------------------------------------------------------------------------

def test_the_seed_is_checked_and_required():
    node = kernel(noisy_threshold_core, num_states=1, num_outputs=2)
    handle = node.handle
    x, v0 = random_input(4, 6), random_input(6)
    with pytest.raises(ValueError, match="seed: the neuron draws random numbers"):
        torch.ops.spikejit.neuron_inference(handle, [x], [v0], [], False, True)
    with pytest.raises(ValueError, match="seed: the neuron draws random numbers"):
        spikejit.ops.training_forward(handle, [x], [v0], [], False)
    with pytest.raises(TypeError, match=r"seed: expected an int64 tensor of one element, got int32\[1\]"):
        node.multi_step_functional_forward(x, seed=torch.tensor([1], dtype=torch.int32))
    with pytest.raises(TypeError, match=r"seed: expected an int64 tensor of one element, got int64\[2\]"):
        node.multi_step_functional_forward(x, seed=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="seed: expected None or an int64 tensor of one element, got int"):
        node.multi_step_functional_forward(x, seed=5)
    checkpoints = spikejit.ops.training_forward(handle, [x], [v0], [], False, 2, 0, False, seed_tensor(1, "cpu"))[3:]
    with pytest.raises(ValueError, match="seed: the neuron draws random numbers and its backward with "
                                         "checkpoint_every = 2 recomputes them"):
        spikejit.ops.training_backward(handle, [4, 6], x.dtype, x.device, [*checkpoints, x], [], [None, None], [None],
                                       [], 2)
    # A neuron without random numbers takes a seed and ignores it.
    plain = spikejit.FlexSN(lambda x, v: (x + v, 0.5 * v), 1, 1, 1, strict=True)
    assert not plain.program.uses_random
    a = plain.multi_step_functional_forward(x, seed=seed_tensor(1, "cpu"))[0][0]
    assert torch.equal(a, plain.multi_step_functional_forward(x)[0][0])


@pytest.mark.cuda
def test_seed_on_another_device_is_refused():
    require_cuda()
    node = kernel(uniform_core)
    with pytest.raises(ValueError, match="seed: expected a tensor on cpu"):
        node.multi_step_functional_forward(random_input(3, 4), seed=seed_tensor(1, "cuda"))


def test_a_seed_for_the_eager_fallback_is_refused():
    with pytest.warns(RuntimeWarning):
        node = spikejit.FlexSN(shared_scalar_core, 1, 1, 1)
    with pytest.raises(ValueError, match="seed: fixes the draws of the compiled kernels"):
        node.multi_step_functional_forward(random_input(3, 4), seed=seed_tensor(1, "cpu"))


# ---- CUDA ----------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cpu_and_cuda_draw_the_same_numbers():
    require_cuda()
    node = kernel(two_streams_core, num_outputs=2)
    normal = kernel(normal_core)
    x = random_input(9, 3, 333)
    for value in (0, 1, -2 ** 63, 2 ** 63 - 1, 123456789):
        cpu = draws(node, x, seed_tensor(value, "cpu"))
        cuda = draws(node, x.cuda(), seed_tensor(value, "cuda"))
        for a, b in zip(cpu, cuda):
            assert torch.equal(a, b.cpu()), value
        z_cpu = draws(normal, x, seed_tensor(value, "cpu"))[0]
        z_cuda = draws(normal, x.cuda(), seed_tensor(value, "cuda"))[0].cpu()
        torch.testing.assert_close(z_cuda, z_cpu, rtol=1e-5, atol=1e-5)  # log/cos may round differently


@pytest.mark.cuda
def test_cuda_graph_replays_draw_afresh():
    require_cuda()
    node = kernel(uniform_core)
    x = random_input(4, 1000, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(2):  # warm-up outside the graph
            node.multi_step_functional_forward(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        (u,), _, _ = node.multi_step_functional_forward(x)
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append(u.clone())
    torch.cuda.synchronize()
    assert not torch.equal(replays[0], replays[1])
    assert float(replays[1].min()) >= 0 and float(replays[1].max()) < 1
