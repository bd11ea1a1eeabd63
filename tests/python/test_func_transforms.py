"""The neuron kernels under torch.func: grad, vjp, jacrev and vmap, and their compositions
(per-sample gradients vmap(grad), grad(vmap), nested vmap), against torch.autograd and loops
over the batch. Covers the folded vmap rule, the one for scalar parameters (batched, or with
per-sample gradients: the neuron with its scalar parameters per neuron, one call) and the
one-call-per-element one (packed outputs)."""
import pytest
import torch
from torch.func import functional_call, grad, jacrev, vjp, vmap

import spikejit
from conftest import device_params, random_input
from spikejit import _kernel_calls


def two_input_core(x, m, v):
    h = v + (x * torch.sigmoid(m) - v) / 2.0
    s = spikejit.surrogate.ATan()(h - 1.0)
    return s, h * (1.0 - s)


NEURONS = {
    "LIF": (lambda: spikejit.LIFNode(step_mode="m"), 1),
    "PLIF": (lambda: spikejit.ParametricLIFNode(step_mode="m"), 1),
    "LIF checkpoints": (lambda: spikejit.LIFNode(step_mode="m", checkpoint_every=3), 1),
    "PLIF checkpoints": (lambda: spikejit.ParametricLIFNode(step_mode="m", checkpoint_every=3), 1),
    "two-input FlexSN": (lambda: spikejit.FlexSN(two_input_core, 2, 1, 1, strict=True), 2),
    "FlexSN packed spikes": (lambda: spikejit.FlexSN(two_input_core, 2, 1, 1, strict=True, pack_spikes=True), 2),
}


def run(node, *xs):
    node.reset()
    return node(*xs)


def dtype_on(device):
    return torch.float64 if device.type == "cpu" else torch.float32


def close(actual, expected):
    tolerance = {} if actual.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(actual, expected, **tolerance)


def make(name, device, steps=7, batch=3, neurons=5):
    factory, num_inputs = NEURONS[name]
    dtype = dtype_on(device)
    xs = [random_input(steps, batch, neurons, device=device, dtype=dtype) for _ in range(num_inputs)]
    weights = torch.randn(steps, batch, neurons, device=device, dtype=dtype)
    return factory().to(device), xs, weights


def autograd_input_grads(node, xs, weights):
    leaves = [x.clone().requires_grad_() for x in xs]
    (run(node, *leaves) * weights).sum().backward()
    return [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_grad_and_vjp_equal_autograd(name, device):
    node, xs, weights = make(name, device)
    expected = autograd_input_grads(node, xs, weights)
    grads = grad(lambda *a: (run(node, *a) * weights).sum(), argnums=tuple(range(len(xs))))(*xs)
    for g, e in zip(grads, expected):
        close(g, e)
    out, pullback = vjp(lambda *a: run(node, *a), *xs)
    assert torch.equal(out, run(node, *xs))
    for g, e in zip(pullback(weights), expected):
        close(g, e)


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_vmap_equals_one_call_on_the_whole_batch(name, device):
    """Neurons are independent, so vmapping over a batch dimension equals one call on it."""
    node, xs, _ = make(name, device)
    whole = run(node, *xs)
    assert torch.equal(vmap(lambda *a: run(node, *a), in_dims=1, out_dims=1)(*xs), whole)
    front = [x.movedim(1, 0) for x in xs]  # the batch first, vmap's default
    assert torch.equal(vmap(lambda *a: run(node, *a))(*front), whole.movedim(1, 0))
    with torch.no_grad():  # the inference call
        assert torch.equal(vmap(lambda *a: run(node, *a), in_dims=1, out_dims=1)(*xs), whole)


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_per_sample_gradients_equal_a_loop(name, device):
    node, xs, weights = make(name, device)

    def loss(*a):
        *inputs, w = a
        return (run(node, *inputs) * w).sum()

    per_sample = vmap(grad(loss, argnums=tuple(range(len(xs)))), in_dims=1, out_dims=1)(*xs, weights)
    for b in range(weights.shape[1]):
        expected = autograd_input_grads(node, [x[:, b] for x in xs], weights[:, b])
        for g, e in zip(per_sample, expected):
            close(g[:, b], e)


@pytest.mark.parametrize("name", NEURONS)
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_grad_of_vmap_and_nested_vmap_equal_autograd(name, device):
    node, xs, weights = make(name, device, batch=4)
    expected = autograd_input_grads(node, xs, weights)
    batched = vmap(lambda *a: run(node, *a), in_dims=1, out_dims=1)
    grads = grad(lambda *a: (batched(*a) * weights).sum(), argnums=tuple(range(len(xs))))(*xs)
    for g, e in zip(grads, expected):
        close(g, e)
    split = [x.reshape(x.shape[0], 2, 2, x.shape[2]) for x in xs]
    nested = vmap(vmap(lambda *a: run(node, *a), in_dims=1, out_dims=1), in_dims=1, out_dims=1)(*split)
    assert torch.equal(nested.reshape(run(node, *xs).shape), run(node, *xs))


@pytest.mark.parametrize("checkpoint_every", [0, 3])
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_plif_parameter_gradients_whole_and_per_sample(checkpoint_every, device):
    """PLIF's w is a scalar: its per-sample gradient is a sum over each sample's neurons."""
    node, (x,), weights = make("PLIF checkpoints" if checkpoint_every else "PLIF", device)
    params = {name: p.detach() for name, p in node.named_parameters()}

    def loss(p, xs, w):
        node.reset()
        return (functional_call(node, p, (xs,)) * w).sum()

    node.reset()
    (node(x) * weights).sum().backward()
    close(grad(loss)(params, x, weights)["w"], node.w.grad)
    per_sample = vmap(grad(loss), in_dims=(None, 1, 1))(params, x, weights)["w"]
    for b in range(x.shape[1]):
        node.zero_grad()
        node.reset()
        (node(x[:, b]) * weights[:, b]).sum().backward()
        close(per_sample[b], node.w.grad)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_jacrev_equals_the_autograd_jacobian(device):
    node, (x,), _ = make("LIF", device, steps=4, batch=1, neurons=3)
    jacobian = torch.autograd.functional.jacobian(lambda xs: run(node, xs), x)
    close(jacrev(lambda xs: run(node, xs))(x), jacobian)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_vmap_of_packed_outputs_equals_a_loop(device):
    """Bit rows mix neighbouring neurons' bits: vmap runs one call per batch element."""
    node = spikejit.FlexSN(two_input_core, 2, 1, 1, strict=True, packed_outputs=[0]).to(device)
    xs = [random_input(6, 3, 13, device=device, dtype=dtype_on(device)) for _ in range(2)]
    rows = vmap(lambda *a: run(node, *a), in_dims=1)(*xs)
    for b in range(3):
        assert torch.equal(rows[b], run(node, *[x[:, b] for x in xs]))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_second_derivative_through_the_kernels_is_refused(device):
    node, (x,), _ = make("LIF", device)
    with pytest.raises(RuntimeError, match="^spikejit's neuron kernels have first derivatives only"):
        grad(lambda xs: grad(lambda ys: run(node, ys).sum())(xs).sum())(x)


class AdaptiveLIF(torch.nn.Module):
    """A FlexSN neuron whose core reads a per-neuron parameter of its owner module."""

    def __init__(self, neurons):
        super().__init__()
        self.tau_w = torch.nn.Parameter(torch.randn(neurons) * 0.3)
        self.node = spikejit.FlexSN(self.core, 1, 1, 1, strict=True)

    def core(self, x, v):
        h = v + (x - v) * torch.sigmoid(self.tau_w)
        s = spikejit.surrogate.Sigmoid()(h - 1.0)
        return s, h * (1.0 - s)

    def forward(self, x):
        self.node.reset()
        return self.node(x)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_functional_call_gradients_of_a_flexsn_parameter_whole_and_per_sample(device):
    module = AdaptiveLIF(5).to(device=device, dtype=dtype_on(device))
    _, (x,), weights = make("LIF", device)
    params = {name: p.detach() for name, p in module.named_parameters()}

    def loss(p, xs, w):
        return (functional_call(module, p, (xs,)) * w).sum()

    (module(x) * weights).sum().backward()
    close(grad(loss)(params, x, weights)["tau_w"], module.tau_w.grad)
    per_sample = vmap(grad(loss), in_dims=(None, 1, 1))(params, x, weights)["tau_w"]
    for b in range(x.shape[1]):
        module.zero_grad()
        (module(x[:, b]) * weights[:, b]).sum().backward()
        close(per_sample[b], module.tau_w.grad)


def strange_core(x, m, v, a):
    """Two inputs, two states, two outputs (test_flexsn's reference example)."""
    gate = torch.sigmoid(m)
    h = v + (x * gate - v) / 2.0 - a
    s = spikejit.surrogate.ATan(alpha=2.0)(h - 1.0)
    return s, s * gate, h * (1.0 - s), 0.9 * a + 0.1 * s


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_several_outputs_states_and_state_sequences_under_vmap_and_grad(device):
    node = spikejit.FlexSN(strange_core, 2, 2, 2, strict=True, store_state_seqs=True).to(device)
    dtype = dtype_on(device)
    x, m = (random_input(6, 3, 4, device=device, dtype=dtype) for _ in range(2))
    w1, w2 = (torch.randn(6, 3, 4, device=device, dtype=dtype) for _ in range(2))

    def step(xs, ms):
        node.reset()
        s, y = node(xs, ms)
        return s, y, *node.state_seqs, *node.states

    whole = step(x, m)
    batched = vmap(step, in_dims=1, out_dims=(1, 1, 1, 1, 0, 0))(x, m)
    for b, w in zip(batched, whole):  # final states [B, N]: the batch is their first dimension
        assert torch.equal(b, w)

    def loss(xs, ms):
        s, y, v_seq, a_seq, _, _ = step(xs, ms)
        return (s * w1).sum() + (y * w2).sum() + v_seq.sum() + a_seq[-1].sum()

    leaves = [x.clone().requires_grad_(), m.clone().requires_grad_()]
    loss(*leaves).backward()
    for g, leaf in zip(grad(loss, argnums=(0, 1))(x, m), leaves):
        close(g, leaf.grad)


# The extension's calls that launch a forward on torch tensors (the C++ path, where built).
CPP_FORWARDS = ("infer_eager", "train_forward", "train_eager")


def counting(monkeypatch, kind, device):
    """Counts the kernel launches of `kind` ("forward" or "backward") on `device`'s kind, on
    either path of calls."""
    calls = []

    def count(name):
        launch = getattr(spikejit._core, name)
        monkeypatch.setattr(spikejit._core, name, lambda *a, **k: calls.append(1) or launch(*a, **k))

    count(f"{device.type}_{kind}")
    if kind == "forward":
        for name in CPP_FORWARDS:
            if hasattr(spikejit._core, name):
                count(name)
    return calls


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_per_sample_gradients_of_a_scalar_parameter_take_one_call(device, monkeypatch):
    node, (x,), weights = make("PLIF", device, batch=6)
    params = {name: p.detach() for name, p in node.named_parameters()}

    def loss(p, xs, w):
        node.reset()
        return (functional_call(node, p, (xs,)) * w).sum()

    expected = vmap(grad(loss), in_dims=(None, 1, 1))(params, x, weights)["w"]
    forwards, backwards = counting(monkeypatch, "forward", device), counting(monkeypatch, "backward", device)
    per_sample = vmap(grad(loss), in_dims=(None, 1, 1))(params, x, weights)["w"]
    assert (len(forwards), len(backwards)) == (1, 1)
    assert torch.equal(per_sample, expected) and per_sample.shape == (6,)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_batched_scalar_parameter_equals_a_loop(device, monkeypatch):
    """vmap over PLIF's w (one time constant per batch element): the values, gradients (grad of
    vmap) and tangents (vmap of jvp) of one call equal those of one call per element."""
    dtype = dtype_on(device)
    x = random_input(7, 4, 5, device=device, dtype=dtype)
    ws = torch.linspace(-1.0, 1.5, 4, device=device, dtype=dtype)
    weights = torch.randn(7, 4, 5, device=device, dtype=dtype)

    def spikes(w, xs):
        return spikejit.plif_multi_step(xs, None, w)[0]

    calls = counting(monkeypatch, "forward", device)
    batched = vmap(spikes, in_dims=(0, 1), out_dims=1)(ws, x)
    assert len(calls) == 1
    loop = torch.stack([spikes(ws[b], x[:, b]) for b in range(4)], dim=1)
    assert torch.equal(batched, loop) and loop.sum() > 0
    grads = grad(lambda w: (vmap(spikes, in_dims=(0, 1), out_dims=1)(w, x) * weights).sum())(ws)
    for b in range(4):
        close(grads[b], grad(lambda w: (spikes(w, x[:, b]) * weights[:, b]).sum())(ws[b]))
    directions = torch.randn_like(ws)
    tangents = vmap(lambda w, d, xs: torch.func.jvp(lambda v: spikes(v, xs), (w,), (d,))[1],
                    in_dims=(0, 0, 1), out_dims=1)(ws, directions, x)
    for b in range(4):
        _, expected = torch.func.jvp(lambda v: spikes(v, x[:, b]), (ws[b],), (directions[b],))
        close(tangents[:, b], expected)


def test_a_tensor_left_over_from_a_finished_transform_runs_inference_like_a_plain_one(monkeypatch):
    """Inference on a tensor that escaped torch.func.grad (a dead wrapper, without storage) reads
    the tensor it wraps, on either path of eager calls (not PyTorch's error about a missing data
    pointer)."""
    leaked = []
    x = random_input(6, 10)
    grad(lambda x: leaked.append(x) or x.sum())(x)
    dead = leaked[0]
    assert torch._C._functorch.is_functorch_wrapped_tensor(dead)
    node = spikejit.LIFNode(step_mode="m")
    with torch.no_grad():
        expected = node(x)
        for cpp in {False, _kernel_calls.CPP_CALLS}:
            monkeypatch.setattr(_kernel_calls, "CPP_CALLS", cpp)
            node.reset()
            assert torch.equal(node(dead), expected), cpp


def test_a_tensor_left_over_from_a_finished_transform_trains_like_a_plain_one():
    """A tensor that escaped torch.func.grad is still wrapped (a dead wrapper); the eager training
    call unwraps it as autograd.Function.apply does, instead of handing the wrapper to the kernels."""
    leaked = []

    def f(x):
        leaked.append(x)
        return x.sum()

    x = random_input(6, 10)
    grad(f)(x)
    dead = leaked[0]
    assert torch._C._functorch.is_functorch_wrapped_tensor(dead)
    threshold = torch.nn.Parameter(torch.linspace(0.5, 1.5, 10))

    def core(x, v):
        h = 0.5 * v + x
        s = spikejit.surrogate.Sigmoid()(h - threshold)
        return s, h * (1.0 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True, example_inputs=[torch.zeros(10)] * 2)
    results = []
    for inputs in (dead, x):
        threshold.grad = None
        y = node(inputs)
        node.reset()
        y.sum().backward()
        results.append((y.detach(), threshold.grad.clone()))
    torch.testing.assert_close(results[0], results[1])
