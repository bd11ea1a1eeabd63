"""FlexSN: tracing into the IR, the reference's two-input/two-state/two-output example against an
eager loop, parameters captured by the core, fallback and strict mode, T = 0, step modes."""
import copy
import functools
import gc
import re
import subprocess
import sys

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._inductor.utils import fresh_cache

import spikejit
from conftest import device_params, random_input

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import surrogate as sj_surrogate


def strange_core(x, m, v, a):
    """Two inputs, two states, two outputs; the second input modulates through a sigmoid."""
    gate = torch.sigmoid(m)
    h = v + (x * gate - v) / 2.0 - a
    s = spikejit.surrogate.ATan(alpha=2.0)(h - 1.0)
    return s, s * gate, h * (1.0 - s), 0.9 * a + 0.1 * s


def eager_loop(core, inputs, states, num_outputs):
    outputs = []
    for t in range(inputs[0].shape[0]):
        results = core(*[x[t] for x in inputs], *states)
        outputs.append(results[:num_outputs])
        states = list(results[num_outputs:])
    return [torch.stack(o) for o in zip(*outputs)], states


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_reference_example_matches_an_eager_loop(device):
    node = spikejit.FlexSN(strange_core, num_inputs=2, num_states=2, num_outputs=2)
    assert node.handle is not None, node.fallback_reason
    x, m = random_input(10, 3, 40, device=device), random_input(10, 3, 40, device=device)
    g1, g2 = torch.randn_like(x), torch.randn_like(x)
    grads = []
    for run in ("kernel", "eager"):
        xr, mr = x.clone().requires_grad_(), m.clone().requires_grad_()
        if run == "kernel":
            node.reset()
            s, y = node(xr, mr)
            v, a = node.states
        else:
            (s, y), (v, a) = eager_loop(strange_core, [xr, mr], [torch.zeros_like(x[0])] * 2, 2)
        ((s * g1).sum() + (y * g2).sum() + v.sum() + a.sum()).backward()
        grads.append((s.detach(), y.detach(), v.detach(), a.detach(), xr.grad, mr.grad))
    (s, y, v, a, gx, gm), (s_ref, y_ref, v_ref, a_ref, gx_ref, gm_ref) = grads
    assert torch.equal(s, s_ref)
    for got, want in ((y, y_ref), (v, v_ref), (a, a_ref), (gx, gx_ref), (gm, gm_ref)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_traced_text_uses_the_spike_op_and_parameters():
    theta = nn.Parameter(torch.full((7,), 0.8))
    r = torch.tensor(0.4, requires_grad=True)

    def core(x, v):
        h = v + (x - v) * r
        s = spikejit.surrogate.spike(h - theta, "piecewise_leaky_relu", [0.5, 0.02])
        return s, h - s * theta

    node = spikejit.FlexSN(core, 1, 1, 1)
    text = node.program.canonical()
    assert "spike(" in text and "piecewise_leaky_relu(w=0.5, c=0.02)" in text
    assert [k for _, k, _ in node.program.params] == ["scalar", "per_neuron"]
    x = random_input(6, 2, 7).requires_grad_()
    node(x).sum().backward()

    # the same dynamics written out, through eager autograd
    r2, theta2 = r.detach().clone().requires_grad_(), theta.detach().clone().requires_grad_()
    v, out = torch.zeros(2, 7), []
    x2 = x.detach().clone().requires_grad_()
    for t in range(6):
        h = v + (x2[t] - v) * r2
        s = spikejit.surrogate.spike(h - theta2, "piecewise_leaky_relu", [0.5, 0.02])
        v = h - s * theta2
        out.append(s)
    torch.stack(out).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(r.grad, r2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(theta.grad, theta2.grad, rtol=1e-5, atol=1e-6)


class AdaptiveCore(nn.Module):
    """A module core: its parameters become IR parameters."""

    def __init__(self):
        super().__init__()
        self.tau_w = nn.Parameter(torch.tensor(0.2))
        self.beta = nn.Parameter(torch.tensor([0.3]))

    def forward(self, x, v, b):
        h = v + (x - v) * torch.sigmoid(self.tau_w)
        s = spikejit.surrogate.Sigmoid()(h - 1.0 - self.beta * b)
        return s, h * (1 - s), b * 0.9 + s


def test_module_core_parameters_get_gradients():
    core = AdaptiveCore()
    node = spikejit.FlexSN(core, 1, 2, 1)
    assert node.handle is not None and len(node.program.params) == 2
    assert {id(p) for p in node.parameters()} == {id(core.tau_w), id(core.beta)}
    x = random_input(8, 16)
    node(x).sum().backward()
    grads = [core.tau_w.grad.clone(), core.beta.grad.clone()]
    core.zero_grad()
    outputs, _ = spikejit.eager_scan(core, [x], [torch.zeros(16), torch.zeros(16)])
    outputs[0].sum().backward()
    torch.testing.assert_close(grads[0], core.tau_w.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], core.beta.grad, rtol=1e-5, atol=1e-6)


def test_default_argument_parameters_get_gradients():
    """Tensors a core takes as default arguments are its parameters too, read at every call with
    gradients (a one-element one was baked in as a constant before)."""
    tau = nn.Parameter(torch.tensor(2.0))
    threshold = nn.Parameter(torch.rand(7) + 0.5)

    def core(x, v, tau=tau, *, threshold=threshold):
        h = v + (x - v) / tau
        s = spikejit.surrogate.spike(h - threshold)
        return s, h * (1 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    assert len(node.program.params) == 2
    x = random_input(6, 7).requires_grad_()
    node(x).sum().backward()
    grads = [x.grad.clone(), tau.grad.clone(), threshold.grad.clone()]
    x.grad, tau.grad, threshold.grad = None, None, None
    outputs, _ = spikejit.eager_scan(core, [x], [torch.zeros(7)])
    outputs[0].sum().backward()
    for got, want in zip(grads, [x.grad, tau.grad, threshold.grad]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_partial_and_bound_method_cores():
    scale = torch.tensor(1.5)

    def core(x, v, k):
        h = v * 0.5 + x * k
        s = spikejit.surrogate.Rect()(h - 1)
        return s, h - s

    node = spikejit.FlexSN(functools.partial(core, k=scale), 1, 1, 1)
    assert node.handle is not None
    x = random_input(5, 9)
    expected, _ = spikejit.eager_scan(functools.partial(core, k=scale), [x], [torch.zeros(9)])
    assert torch.equal(node(x), expected[0])
    scale.fill_(0.5)  # captured tensors are read at every call
    expected, _ = spikejit.eager_scan(functools.partial(core, k=scale), [x], [torch.zeros(9)])
    node.reset()
    assert torch.equal(node(x), expected[0])


def test_op_table_coverage():
    """A core using many table ops (comparisons, logic, where, clamp, pow, fmod, round, casts...)."""
    def core(x, v):
        a = torch.clamp(x, -2.0, 2.0) + torch.maximum(v, x) - torch.minimum(v, 0.5 * x)
        b = torch.where((x > 0) & ~(v < -1), torch.exp(-a.abs()), torch.tanh(a)) * torch.erf(v)
        c = torch.fmod(a, 0.7) + torch.round(x * 3) / 3 + torch.floor(v) - torch.ceil(-x)
        d = torch.sqrt(a.abs() + 1) * torch.rsqrt(v.abs() + 2) + torch.log(a.abs() + 1) + torch.log2(v.abs() + 1)
        e = torch.pow(a.abs() + 0.5, 1.5) + torch.sin(x) * torch.cos(v) + torch.relu(x - v) + torch.sign(v)
        f = (x >= v).float() + torch.logical_or(x < 0, v > 0).to(x.dtype) + x.masked_fill(x > 1, 1.0)
        g = torch.reciprocal(a.abs() + 1) - x.neg() + torch.clamp_min(v, -0.5) + torch.clamp_max(v, 0.5)
        s = spikejit.surrogate.SoftSign()(b + c - 1)
        return s, (d + e + f + g) * 0.01 + v * 0.5 * (1 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    x = random_input(7, 50)
    outputs, (v_last,) = spikejit.eager_scan_final_state(core, [x], [torch.zeros(50)])
    assert torch.equal(node(x), outputs[0])
    torch.testing.assert_close(node.states[0], v_last)


def test_unsupported_op_warns_naming_it_and_falls_back():
    def core(x, v):
        h = v + torch.lgamma(x * x + 1.0)
        return h, h * 0.5

    with pytest.warns(RuntimeWarning, match="aten.lgamma"):
        node = spikejit.FlexSN(core, 1, 1, 1)
    assert node.handle is None
    x = random_input(4, 3)
    expected, _ = spikejit.eager_scan(core, [x], [torch.zeros(3)])
    torch.testing.assert_close(node(x), expected[0])
    with pytest.raises(spikejit.UnsupportedCoreError, match="aten.lgamma") as info:
        spikejit.FlexSN(core, 1, 1, 1, strict=True)
    assert info.value.op == "aten.lgamma.default"


class _StraightThrough(torch.autograd.Function):
    """A user's surrogate: Heaviside forward, the identity's gradient."""

    @staticmethod
    def forward(x):
        return (x >= 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_autograd_function_surrogate_is_caught_by_the_check():
    """A surrogate whose gradient make_fx cannot see (a user's autograd.Function) would give a
    silent zero gradient; the post-trace check catches it and falls back."""
    def core(x, v):
        h = v + x
        s = _StraightThrough.apply(h - 1.0)
        return s, h * (1 - s)

    with pytest.warns(RuntimeWarning, match="gradient"):
        node = spikejit.FlexSN(core, 1, 1, 1)
    assert node.handle is None


@pytest.mark.parametrize("class_name", sorted(spikejit.surrogate._BY_CLASS_NAME))
def test_spikingjelly_surrogates_compile(class_name):
    """SpikingJelly's surrogates called in a core, as modules (here a closure's) and as functions
    (sigmoid.apply(x, alpha)), trace to the spike op with their parameters: the core compiles,
    and spikes, potentials and gradients equal the eager scan's, which runs SpikingJelly's own
    autograd.Functions; those are left as they were."""
    name, _ = spikejit.surrogate.resolve(class_name)
    sg = getattr(sj_surrogate, class_name)()
    for p in spikejit.ops.SURROGATE_INFO[name][1]:  # away from the defaults
        value = getattr(sg, p)
        setattr(sg, p, value + 1 if isinstance(value, int) else value * 1.5 if value else 0.25)

    def core(x, v):
        h = v + (x - v) / 2.0
        s = sg(h - 1.0)
        return s + 0.5 * sj_surrogate.atan.apply(h - 0.5, 3.0), h * (1.0 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    text = node.program.canonical()
    assert len(re.findall(r"\bspike\(", text)) == 2 and "atan(alpha=3)" in text, text
    assert "apply" not in vars(getattr(sj_surrogate, name)) and "apply" not in vars(sj_surrogate.atan)
    x = random_input(6, 5).requires_grad_()
    y = node(x)
    expected, _ = spikejit.eager_scan(core, [x], [torch.zeros(5)])
    torch.testing.assert_close(y, expected[0], rtol=0, atol=0)
    cotangent = random_input(6, 5)
    grad, = torch.autograd.grad(y, x, cotangent)
    expected_grad, = torch.autograd.grad(expected[0], x, cotangent)
    torch.testing.assert_close(grad, expected_grad)


def test_spikingjelly_multi_level_spike_count_compiles():
    """SpikingJelly's MultiLevelSpikeCount (I-LIF's firing; its quantize module's autograd.Function)
    in a core traces as spikejit's multi_level_spike_count: counts, potentials and gradients (a
    window narrower than [0, D]) equal the eager scan's, which runs SpikingJelly's own function;
    that is left as it was."""
    from spikingjelly.activation_based import quantize as sj_quantize
    count = sj_surrogate.MultiLevelSpikeCount(3, grad_window=(0.5, 2.5))

    def core(x, v):
        h = 0.75 * v + x
        c = count(h / 0.8)
        return c, h - c * 0.8

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    assert "round" in node.program.canonical() and "detach" in node.program.canonical()
    assert "apply" not in vars(sj_quantize.MultiLevelSpikeCountATGF)
    x = (random_input(8, 50) * 2).requires_grad_()
    y = node(x)
    expected, _ = spikejit.eager_scan(core, [x], [torch.zeros(50)])
    torch.testing.assert_close(y, expected[0], rtol=0, atol=0)
    assert len(torch.unique(y)) > 2  # counts, not spikes
    cotangent = random_input(8, 50)
    grad, = torch.autograd.grad(y, x, cotangent)
    expected_grad, = torch.autograd.grad(expected[0], x, cotangent)
    torch.testing.assert_close(grad, expected_grad)


def test_hard_threshold_output_without_a_gradient_compiles():
    """An output written as a plain comparison has no gradient (SpikingJelly's ActivationAwareIF
    fires so, with per-channel threshold and offset); it compiles, and values and the gradients
    that flow through the state match eager autograd."""
    channels = 4
    theta = torch.rand(channels, 1, 1) + 0.5
    offset = torch.rand(channels, 1, 1) * 0.1

    def core(x, v):
        h = v + x
        s = (h + offset >= theta).to(h.dtype)
        return s, h - s * theta

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    x = random_input(6, 2, channels, 3, 3).requires_grad_()
    s = node(x)
    (s.sum() + node.states[0].square().sum()).backward()
    x_ref = x.detach().clone().requires_grad_()
    (s_ref,), (v_ref,) = eager_loop(core, [x_ref], [torch.zeros(2, channels, 3, 3)], 1)
    (s_ref.sum() + v_ref.square().sum()).backward()
    assert torch.equal(s, s_ref)
    assert 0 < s.mean() < 1
    assert not s.requires_grad and not s_ref.requires_grad
    torch.testing.assert_close(node.states[0], v_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)


def make_hard_core(theta):
    """Output 0 and state n without a derivative (comparisons), output 1 and state v with one; the
    initial n (unread) and the threshold theta (in a comparison) without a gradient."""
    def hard_core(x, v, n):
        h = v + x
        s = (h >= theta).to(h.dtype)
        return s, h * 2.0, h - s, (h > 0.5).to(h.dtype) * 2.0
    return hard_core


@pytest.mark.parametrize("path", ["cpp", "python", "custom op", "torch.func", "double backward"])
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_results_without_a_derivative_do_not_require_grad_on_every_path(path, device, monkeypatch):
    """As in an eager loop of the core, on each path a training call takes: a result no derivative
    leads to (here output 0, state n, its final value and its sequence) is returned without
    requires_grad, and an argument no derivative leads from (the initial n, the threshold) gets
    the gradient None (before, both were silently zero); the other gradients equal the loop's."""
    theta = torch.tensor(1.0, device=device, requires_grad=True)
    core = make_hard_core(theta)
    node = spikejit.FlexSN(core, 1, 2, 2, store_state_seqs=True, strict=True)
    assert node.program.differentiable_outputs == [False, True]
    assert node.program.differentiable_states == [True, False]
    assert node.program.differentiable_arguments == [True, True, False, False]  # x; v, n; theta
    monkeypatch.setattr(spikejit._kernel_calls, "CPP_CALLS", path == "cpp")
    x = random_input(5, 3, 4, device=device)
    v0, n0 = random_input(3, 4, device=device, scale=0.3), random_input(3, 4, device=device)
    cotangents = [random_input(5, 3, 4, device=device), random_input(3, 4, device=device),
                  random_input(5, 3, 4, device=device)]  # of y, the final v and v's sequence

    def run(x, v0, n0):
        (s, y), finals, seqs = node.multi_step_functional_forward(x, states=[v0, n0])
        return s, y, *finals, *seqs  # s, y, v, n, v_seq, n_seq

    if path == "torch.func":  # (no requires_grad to see inside a transform, and zeros for None)
        results, pullback = torch.func.vjp(run, x, v0, n0)
        zero = torch.zeros_like(results[0])
        grads = pullback((zero, cotangents[0], cotangents[1], zero[0], cotangents[2], zero))
        assert torch.equal(grads[2], torch.zeros_like(n0))
    else:
        args = [t.clone().requires_grad_() for t in (x, v0, n0)]
        if path == "double backward":
            with spikejit.double_backward():
                results = run(*args)
        elif path == "custom op":  # traced afresh: a cached graph would keep an earlier version's flags
            torch._dynamo.reset()
            with fresh_cache():
                results = torch.compile(run, fullgraph=True)(*args)
        else:
            results = run(*args)
        assert [r.requires_grad for r in results] == [False, True, True, False, True, False]
        grads = torch.autograd.grad(results[1:3] + results[4:5], [*args, theta], cotangents, allow_unused=True)
        assert grads[2] is None and grads[3] is None

    refs = [t.clone().requires_grad_() for t in (x, v0, n0)]
    v, n = refs[1:]
    steps = []
    for t in range(x.shape[0]):
        s, y, v, n = core(refs[0][t], v, n)
        steps.append((s, y, v, n))
    s, y, v_seq, n_seq = (torch.stack(seq) for seq in zip(*steps))
    assert [r.requires_grad for r in (s, y, v, n, v_seq, n_seq)] == [False, True, True, False, True, False]
    grads_ref = torch.autograd.grad([y, v, v_seq], [*refs, theta], cotangents, allow_unused=True)
    assert grads_ref[2] is None and grads_ref[3] is None
    for got, want in zip(results, (s, y, v, n, v_seq, n_seq)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(grads[:2], grads_ref[:2])


def two_paths_core(x, m, v, c):
    """v and output 0 from x; c and output 1 from m."""
    v = v * 0.5 + x
    c = c * 0.5 + m
    return v * 2.0, c * 3.0, v, c


@pytest.mark.parametrize("path", ["cpp", "python", "custom op", "double backward"])
@pytest.mark.parametrize("requiring", ["x and v", "m only"])
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_results_reached_only_from_arguments_without_grad_do_not_require_grad(path, requiring, device,
                                                                            monkeypatch):
    """As in an eager loop: results that no argument requiring grad reaches (here through a
    second input and a state fed from it alone) come without requires_grad, so a loss of them alone
    raises, as PyTorch's does, instead of running with no gradient anywhere."""
    node = spikejit.FlexSN(two_paths_core, 2, 2, 2, store_state_seqs=True, strict=True)
    monkeypatch.setattr(spikejit._kernel_calls, "CPP_CALLS", path == "cpp")
    x, m = random_input(4, 3, device=device), random_input(4, 3, device=device)
    v0, c0 = random_input(3, device=device), random_input(3, device=device)
    wanted = [t.requires_grad_() for t in ((x, v0) if requiring == "x and v" else (m,))]

    def run(x, m, v0, c0):
        (y, z), finals, seqs = node.multi_step_functional_forward(x, m, states=[v0, c0])
        return y, z, *finals, *seqs  # y, z, v, c, v_seq, c_seq

    if path == "double backward":
        with spikejit.double_backward():
            results = run(x, m, v0, c0)
    elif path == "custom op":  # traced afresh: a cached graph would keep an earlier version's flags
        torch._dynamo.reset()
        with fresh_cache():
            results = torch.compile(run, fullgraph=True)(x, m, v0, c0)
    else:
        results = run(x, m, v0, c0)
    from_x = requiring == "x and v"
    assert [r.requires_grad for r in results] == [from_x, not from_x] * 3
    v, c, steps = v0, c0, []
    for t in range(x.shape[0]):
        *outs, v, c = two_paths_core(x[t], m[t], v, c)
        steps.append((*outs, v, c))
    y, z, v_seq, c_seq = (torch.stack(seq) for seq in zip(*steps))
    expected = (y, z, v, c, v_seq, c_seq)
    assert [r.requires_grad for r in expected] == [r.requires_grad for r in results]
    unreached = results[1] if from_x else results[0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        unreached.sum().backward()
    reached = [r for r in results if r.requires_grad]
    got = torch.autograd.grad([r.sum() for r in reached], wanted)
    want = torch.autograd.grad([r.sum() for r in expected if r.requires_grad], wanted)
    torch.testing.assert_close(got, want)


def relay_core(x, k, n):
    """k takes n's value, n a comparison's: k's value has a gradient after one step, not after two."""
    return k * 3.0, n * 2.0, (x >= 0).to(x.dtype)


@pytest.mark.parametrize("path", ["cpp", "python", "custom op", "double backward"])
@pytest.mark.parametrize("steps", [1, 5])
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_requires_grad_carries_from_step_to_step_as_in_a_loop(path, steps, device, monkeypatch):
    """A state's requires_grad is its value's from the step before, as in a loop: k's final value
    requires grad after one step (from the initial n) but not after five (n is a comparison);
    the custom op under torch.compile with a dynamic length too (no guard on it needed)."""
    node = spikejit.FlexSN(relay_core, 1, 2, 1, store_state_seqs=True, strict=True)
    monkeypatch.setattr(spikejit._kernel_calls, "CPP_CALLS", path == "cpp")
    x, k0, n0 = (random_input(*shape, device=device).requires_grad_() for shape in ((steps, 3), (3,), (3,)))

    def run(x, k0, n0):
        (y,), finals, seqs = node.multi_step_functional_forward(x, states=[k0, n0])
        return y, *finals, *seqs  # y, k, n, k_seq, n_seq

    if path == "double backward":
        with spikejit.double_backward():
            results = run(x, k0, n0)
    elif path == "custom op":
        torch._dynamo.reset()
        with fresh_cache():
            results = torch.compile(run, fullgraph=True, dynamic=True)(x, k0, n0)
    else:
        results = run(x, k0, n0)
    k, n, steps_taken = k0, n0, []
    for t in range(steps):
        y, k, n = relay_core(x[t], k, n)
        steps_taken.append((y, k, n))
    y, k_seq, n_seq = (torch.stack(seq) for seq in zip(*steps_taken))
    expected = (y, k, n, k_seq, n_seq)
    assert [r.requires_grad for r in results] == [r.requires_grad for r in expected]
    assert results[1].requires_grad == (steps == 1)
    for got, want in zip(results, expected):
        torch.testing.assert_close(got, want)
    got = torch.autograd.grad([r.sum() for r in results if r.requires_grad], [k0, n0])
    want = torch.autograd.grad([r.sum() for r in expected if r.requires_grad], [k0, n0])
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_zero_steps(device):
    node = spikejit.FlexSN(strange_core, 2, 2, 2, store_state_seqs=True)
    x = torch.empty(0, 4, device=device)
    s, y = node(x, x)
    assert s.shape == y.shape == (0, 4)
    assert all(torch.equal(v, torch.zeros(4, device=device)) for v in node.states)
    assert all(seq.shape == (0, 4) for seq in node.state_seqs)


def test_state_seqs_and_final_states_agree():
    node = spikejit.FlexSN(strange_core, 2, 2, 2, store_state_seqs=True)
    x, m = random_input(6, 11), random_input(6, 11)
    node(x, m)
    assert [s.shape for s in node.state_seqs] == [(6, 11), (6, 11)]
    for seq, final in zip(node.state_seqs, node.states):
        torch.testing.assert_close(seq[-1], final)
    seqs = [s.clone() for s in node.state_seqs]
    node(x, m)  # states carry over between calls
    assert not torch.equal(node.state_seqs[0], seqs[0]) or not torch.equal(node.state_seqs[1], seqs[1])


@pytest.mark.parametrize("make, names", [
    (lambda: spikejit.FlexSN(strange_core, 2, 2, 2, store_state_seqs=True), ("states", "state_seqs")),
    (lambda: spikejit.LIFNode(step_mode="m", store_v_seq=True), ("v", "v_seq"))])
def test_state_attributes_stay_plain_unless_a_parameter_or_module_is_assigned(make, names):
    """The state attributes bypass nn.Module.__setattr__ once they exist (a host-time fast path);
    a Parameter or Module assigned to one must still be registered as nn.Module would."""
    node = make()
    inputs = [random_input(4, 6) for _ in range(2 if isinstance(node, spikejit.FlexSN) else 1)]
    node(*inputs)
    assert not list(node.parameters()) and not node.state_dict()
    node.reset()
    assert all(getattr(node, name) is None or isinstance(getattr(node, name), float) for name in names)
    weight, child = nn.Parameter(torch.randn(6)), nn.Identity()
    setattr(node, names[0], weight)
    setattr(node, names[1], child)
    assert dict(node.named_parameters()) == {names[0]: weight}
    assert dict(node.named_children())[names[1]] is child
    assert names[0] not in node.__dict__ and names[1] not in node.__dict__


def test_single_step_mode_matches_multi_step():
    multi = spikejit.FlexSN(strange_core, 2, 2, 2)
    single = spikejit.FlexSN(strange_core, 2, 2, 2, step_mode="s")
    x, m = random_input(5, 8), random_input(5, 8)
    s_m, y_m = multi(x, m)
    outs = [single(x[t], m[t]) for t in range(5)]
    assert torch.equal(s_m, torch.stack([o[0] for o in outs]))
    torch.testing.assert_close(y_m, torch.stack([o[1] for o in outs]))


def unit_view_core(x, v):
    """Views that only add or remove dims of size 1, as SpikingJelly's own steps use them (a
    step run as a sequence of one): unsqueeze, stack and cat of one tensor, unbind, squeeze,
    select and reshape of a unit dim."""
    h = v.unsqueeze(0) + torch.stack([x])            # [1, *S]
    (h,) = torch.cat([h]).unbind(0)
    h = h.reshape(1, *h.shape).squeeze(0).unsqueeze(-1).select(-1, 0)
    s = spikejit.surrogate.Sigmoid()(h - 1.0)
    return s, h * (1.0 - s)


def test_views_of_unit_dims_compile_with_examples_without_unit_dims():
    examples = [torch.zeros(2, 3), torch.zeros(2, 3)]
    node = spikejit.FlexSN(unit_view_core, 1, 1, 1, example_inputs=examples, strict=True)
    eager = spikejit.FlexSN(unit_view_core, 1, 1, 1, backend="torch")
    x = random_input(5, 4, 7)
    results = []
    for module in (node, eager):
        xr = x.clone().requires_grad_()
        y = module(xr)
        y.sum().backward()
        results.append((y.detach(), xr.grad))
    assert torch.equal(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_views_that_move_values_between_neurons_are_refused():
    with pytest.raises(spikejit.UnsupportedCoreError, match=r"aten.unsqueeze.default: a view of the values with example "
                                                            r"inputs of shape \[1\]: their dims of size 1 cannot be "
                                                            r"told from added ones; pass example_inputs without them"):
        spikejit.FlexSN(unit_view_core, 1, 1, 1, strict=True)  # (the one-element default examples)
    examples = [torch.zeros(2, 3), torch.zeros(2, 3)]
    with pytest.raises(spikejit.UnsupportedCoreError, match=r"aten.select.int: a view from shape \[2, 3\] to "
                                                            r"\[\[3\]\]: only dims of size 1 may come or go"):
        spikejit.FlexSN(lambda x, v: (x[0] + v, v), 1, 1, 1, example_inputs=examples, strict=True)  # the first neurons
    with pytest.raises(spikejit.UnsupportedCoreError, match=r"aten.view.default: a view from shape \[2, 3\] to "
                                                            r"\[\[6\]\]"):
        spikejit.FlexSN(lambda x, v: (x.flatten().view(2, 3) + v, v), 1, 1, 1, example_inputs=examples, strict=True)
    with pytest.raises(spikejit.UnsupportedCoreError, match=r"aten.stack.default: a stack of 2 tensors: one value per "
                                                            r"neuron cannot hold several"):
        spikejit.FlexSN(lambda x, v: (torch.stack([x, v]).sum(0), v), 1, 1, 1, example_inputs=examples, strict=True)


class _LearnedGate(nn.Module):
    """A core with a learnable per-neuron gain, for the single-step gradients."""

    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(1.0 + 0.1 * torch.randn(8))

    def forward(self, x, v):
        h = 0.7 * v + self.gain * x
        s = spikejit.surrogate.Sigmoid()(h - 1.0)
        return s, h * (1.0 - s)


def test_single_steps_run_the_kernels_with_the_eager_core_s_gradients():
    """step_mode 's' runs the compiled kernels one step at a time (a sequence of one step): the
    outputs, the state carried from step to step, and the gradients of the inputs and of the
    core's parameter through all the steps equal the core's own eager steps."""
    core = _LearnedGate()
    kernels = spikejit.FlexSN(core, 1, 1, 1, step_mode="s", strict=True)
    eager = spikejit.FlexSN(core, 1, 1, 1, step_mode="s", backend="torch")
    run, calls = kernels._compiled.run, []
    kernels._compiled.run = lambda *args, **kwargs: calls.append(1) or run(*args, **kwargs)
    x = random_input(6, 3, 8)
    weights = torch.randn(6, 3, 8)
    results = []
    for node in (kernels, eager):
        xr = x.clone().requires_grad_()
        core.zero_grad()
        y = torch.stack([node(xr[t]) for t in range(6)])
        ((y * weights).sum() + node.states[0].sum()).backward()
        results.append((y.detach(), node.states[0].detach(), xr.grad, core.gain.grad.clone()))
        node.reset()
    (y_k, v_k, gx_k, gp_k), (y_e, v_e, gx_e, gp_e) = results
    assert torch.equal(y_k, y_e)
    torch.testing.assert_close(v_k, v_e)
    torch.testing.assert_close(gx_k, gx_e)
    torch.testing.assert_close(gp_k, gp_e)
    assert kernels.state_seqs is None and len(calls) == 6  # (a kernel call a step; single steps keep no sequences)


def test_custom_init_states_and_torch_backend():
    class Offset(spikejit.FlexSN):
        @staticmethod
        def init_states(num_states, step_mode, *args):
            x = args[0]
            return [torch.full_like(x[0] if step_mode == "m" else x, 0.5) for _ in range(num_states)]

    def core(x, v):
        h = v + x
        s = spikejit.surrogate.Sigmoid()(h - 1.0)
        return s, h - s

    x = random_input(4, 6)
    kernel = Offset(core, 1, 1, 1)
    torch_backend = Offset(core, 1, 1, 1, backend="torch")
    assert torch.equal(kernel(x), torch_backend(x))
    torch.testing.assert_close(kernel.states[0], torch_backend.states[0])


def test_flexsn_kernel_functional_api():
    kernel = spikejit.FlexSNKernel(strange_core, 2, 2, 2)
    x, m = random_input(5, 6), random_input(5, 6)
    v0, a0 = random_input(6, scale=0.3), random_input(6, scale=0.1)
    s, y, v_seq, a_seq = kernel(x, m, v0, a0)
    (s_ref, y_ref), _ = eager_loop(strange_core, [x, m], [v0, a0], 2)
    _, seqs = spikejit.eager_scan(strange_core, [x, m], [v0, a0])
    assert torch.equal(s, s_ref)
    torch.testing.assert_close(v_seq, seqs[0])
    torch.testing.assert_close(a_seq, seqs[1])


def test_bad_constructor_and_call_arguments():
    with pytest.raises(ValueError, match="num_inputs"):
        spikejit.FlexSN(strange_core, 0, 2, 2)
    with pytest.raises(ValueError, match="requires_grad"):
        spikejit.FlexSN(strange_core, 2, 2, 2, requires_grad=[True])
    with pytest.raises(ValueError, match="example_inputs"):
        spikejit.FlexSN(strange_core, 2, 2, 2, example_inputs=[torch.zeros(1)])
    with pytest.raises(ValueError, match="backend"):
        spikejit.FlexSN(strange_core, 2, 2, 2, backend="cuda")
    with pytest.raises(TypeError, match="core"):
        spikejit.FlexSN(3, 1, 1, 1)
    with pytest.raises(ValueError, match="core"):
        spikejit.FlexSN(strange_core, 1, 1, 1)  # the core returns 4 values, 2 expected
    node = spikejit.FlexSN(strange_core, 2, 2, 2)
    with pytest.raises(ValueError, match="inputs"):
        node(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="inputs\\[1\\]"):
        node(torch.zeros(3, 4), torch.zeros(3, 5))


# ---- kernel handle lifetime (reference section 3.5) ------------------------------------------

def live(handle):
    return spikejit.registry.is_registered(handle)


def test_handle_released_with_the_module():
    node = spikejit.FlexSN(strange_core, 2, 2, 2)
    handle = node.handle
    assert spikejit.registry.handle_info(handle) == {"owner_refs": 1, "active_refs": 0}
    del node
    gc.collect()
    assert not live(handle)


def test_pending_backward_keeps_the_kernels_alive():
    node = spikejit.FlexSN(strange_core, 2, 2, 2)
    handle = node.handle
    x = random_input(4, 5).requires_grad_()
    s, y = node(x, random_input(4, 5))
    assert spikejit.registry.handle_info(handle)["active_refs"] == 1
    loss = s.sum() + y.sum() + node.states[0].sum()
    del node, s, y
    gc.collect()
    assert live(handle), "the backward still needs the program"
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    del loss
    gc.collect()
    assert not live(handle), "freed once nothing needs it"


def test_unused_graph_releases_the_active_reference():
    node = spikejit.FlexSN(strange_core, 2, 2, 2)
    handle = node.handle
    outputs = node(random_input(3, 4).requires_grad_(), random_input(3, 4))
    assert spikejit.registry.handle_info(handle)["active_refs"] == 1
    node.reset()
    del outputs
    gc.collect()
    assert spikejit.registry.handle_info(handle) == {"owner_refs": 1, "active_refs": 0}


def test_core_parameters_are_read_where_they_live_at_each_call():
    """functional_call, a parametrization and a reassigned parameter all take effect (the kernels
    read the core's tensors at each call, not those seen when tracing), each equal to a node
    traced afresh with those values."""
    core = AdaptiveCore()
    node = spikejit.FlexSN(core, 1, 2, 1)
    x = random_input(6, 9)

    def fresh_with(tau_w, beta):
        other = AdaptiveCore()
        with torch.no_grad():
            other.tau_w.copy_(tau_w)
            other.beta.copy_(torch.tensor(beta))
        return run_fresh(spikejit.FlexSN(other, 1, 2, 1), x)

    swapped = {"core.tau_w": torch.tensor(-0.7), "core.beta": torch.tensor([0.05])}
    node.reset()
    assert torch.equal(torch.func.functional_call(node, swapped, (x,)), fresh_with(-0.7, [0.05]))
    node.reset()
    assert torch.equal(node(x), fresh_with(0.2, [0.3]))  # the module's own parameters again
    core.tau_w = nn.Parameter(torch.tensor(1.1))
    assert torch.equal(run_fresh(node, x), fresh_with(1.1, [0.3]))
    torch.nn.utils.parametrize.register_parametrization(core, "beta", Doubled())
    assert torch.equal(run_fresh(node, x), fresh_with(1.1, [0.6]))
    core.tau_w = nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"^core parameter 0: a scalar when traced, expected one element, got "
                                         r"shape \[3\]$"):
        run_fresh(node, x)
    core.tau_w = None
    expected = r"^core parameter 0: expected a tensor at \w*AdaptiveCore 'tau_w', got NoneType"
    with pytest.raises(TypeError, match=expected):
        run_fresh(node, x)


class Doubled(nn.Module):
    def forward(self, value):
        return 2 * value


def run_fresh(node, *inputs):
    node.reset()
    return node(*inputs)


def test_deepcopy_shares_the_handle():
    node = spikejit.FlexSN(AdaptiveCore(), 1, 2, 1)
    handle = node.handle
    twin = copy.deepcopy(node)
    assert twin.handle == handle
    assert spikejit.registry.handle_info(handle)["owner_refs"] == 2
    assert twin.core.tau_w is not node.core.tau_w
    assert twin._compiled.params[0] is twin.core.tau_w  # the copy uses its own parameters
    del node
    gc.collect()
    assert live(handle)
    x = random_input(3, 4)
    twin(x)
    del twin
    gc.collect()
    assert not live(handle)


def test_unknown_handle_is_an_error():
    with pytest.raises(RuntimeError, match="not registered"):
        spikejit.registry.program(987654321)
    with pytest.raises(TypeError, match="handle"):
        spikejit.registry.program("abc")


def test_requires_grad_mask_detaches_inputs():
    node = spikejit.FlexSN(strange_core, 2, 2, 2, requires_grad=[True, False, True, True])
    x, m = random_input(4, 6).requires_grad_(), random_input(4, 6).requires_grad_()
    s, y = node(x, m)
    (s.sum() + y.sum()).backward()
    assert x.grad is not None and m.grad is None


def test_handles_name_programs_the_same_in_every_process():
    """Compiled graphs cached on disk hold handles: a handle depends on the program only, not on
    what else a process registered before, and two modules of one program share an entry."""
    script = ("import spikejit, sys\n"
              "others = [spikejit.IFNode(), spikejit.LIFNode(tau=5.0)] if sys.argv[1] == 'others-first' else []\n"
              "print(spikejit.LIFNode(tau=3.0, step_mode='m')._program_handle)\n")
    handles = {subprocess.run([sys.executable, "-c", script, order], capture_output=True, text=True,
                              check=True).stdout.strip() for order in ("lif-first", "others-first")}
    node = spikejit.LIFNode(tau=3.0, step_mode="m")
    assert handles == {str(node._program_handle)}
    a, b = spikejit.FlexSN(strange_core, 2, 2, 2), spikejit.FlexSN(strange_core, 2, 2, 2)
    assert a.handle == b.handle and spikejit.registry.handle_info(a.handle)["owner_refs"] == 2
    assert spikejit.FlexSN(AdaptiveCore(), 1, 2, 1).handle != a.handle
    del a
    gc.collect()
    assert live(b.handle)


class _OlderSigmoid(torch.autograd.Function):
    """A surrogate function as older SpikingJelly versions write them: forward(ctx, x, alpha)."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        sg = torch.sigmoid(ctx.alpha * ctx.saved_tensors[0])
        return grad * ctx.alpha * sg * (1 - sg), None


def test_older_spikingjelly_surrogate_functions_compile(monkeypatch):
    """A surrogate function whose forward takes ctx first (older SpikingJelly) traces to spike
    with its parameter too, read past ctx."""
    monkeypatch.setattr(sj_surrogate, "sigmoid", _OlderSigmoid)

    def core(x, v):
        h = v + (x - v) / 2.0
        s = sj_surrogate.sigmoid.apply(h - 1.0, 2.5)
        return s, h * (1.0 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    assert "sigmoid(alpha=2.5)" in node.program.canonical(), node.program.canonical()
    assert "apply" not in vars(_OlderSigmoid)
    x = random_input(6, 5).requires_grad_()
    y = node(x)
    expected, _ = spikejit.eager_scan(core, [x], [torch.zeros(5)])
    torch.testing.assert_close(y, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(torch.autograd.grad(y.sum(), x)[0], torch.autograd.grad(expected[0].sum(), x)[0])


def test_modules_made_in_several_threads_at_once_all_compile():
    """Cores with spikejit's surrogate, SpikingJelly's surrogate function (its `apply` is replaced
    while a core is traced, for the tracing thread) and none, compiled in six threads at once,
    while a seventh calls SpikingJelly's surrogate eagerly: every module compiles, and the eager
    calls stay SpikingJelly's own. In a subprocess: tracing inside another thread's tracing
    crashed the interpreter before."""
    script = """
import threading, torch, spikejit
from spikingjelly.activation_based import surrogate
def core(x, v):
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.ATan()(h - 1.0)
    return s, h * (1.0 - s)
def sj_core(x, v):
    h = v + (x - v) / 3.0
    s = surrogate.sigmoid.apply(h - 1.0, 4.0)
    return s, h * (1.0 - s)
def plain_core(x, v):
    h = 0.9 * v + x
    return torch.sigmoid(h), h
cores = [core, sj_core, plain_core]
errors, handles, making = [], [], [True]
def make(i):
    try:
        for _ in range(3):
            handles.append(spikejit.FlexSN(cores[i % 3], 1, 1, 1, strict=True).handle)
    except Exception as e:
        errors.append(repr(e))
def call_eagerly():
    x = torch.linspace(-2, 2, 101, requires_grad=True)
    sg = torch.sigmoid(4.0 * x.detach())
    while making[0]:
        s = surrogate.sigmoid.apply(x, 4.0)
        own = type(s.grad_fn).__name__ == "sigmoidBackward"
        grad, = torch.autograd.grad(s.sum(), x)
        if not (own and torch.equal(s, (x >= 0).float()) and torch.allclose(grad, 4.0 * sg * (1 - sg))):
            errors.append(f"an eager call changed: {type(s.grad_fn).__name__}")
threads = [threading.Thread(target=make, args=(i,)) for i in range(6)]
caller = threading.Thread(target=call_eagerly)
caller.start()
for t in threads: t.start()
for t in threads: t.join()
making[0] = False
caller.join()
print(len(handles), len(set(handles)), errors)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["18", "3", "[]"], done.stdout


def test_detach_cuts_the_states_from_the_graph():
    node = spikejit.FlexSN(AdaptiveCore(), 1, 2, 1, store_state_seqs=True)
    node(random_input(4, 6).requires_grad_())
    assert all(s.requires_grad for s in node.states + node.state_seqs)
    values = [s.detach().clone() for s in node.states]
    node.detach()
    assert not any(s.requires_grad for s in node.states + node.state_seqs)
    assert all(torch.equal(a, b) for a, b in zip(node.states, values))
