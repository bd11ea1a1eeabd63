"""Forward-mode derivatives through the neuron kernels: torch.func.jvp, jacfwd and
torch.autograd.forward_ad run the tangent neuron's kernels. Checked against the eager scan of the
same FlexSN core (PyTorch's own forward mode through the spike function's surrogate), against
reverse mode (<J d, u> = <d, J^T u>, and jacfwd = jacrev), on CPU and CUDA."""
import gc

import pytest
import torch
import torch.autograd.forward_ad as forward_ad
from torch import nn

import spikejit
from conftest import device_params, random_input


def lif_core(x, v):
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.Sigmoid()(h - 1.0)
    return s, h * (1.0 - s)


class TwoByTwo(nn.Module):
    """Two inputs, two states, two outputs, a per-neuron and a scalar parameter."""

    def __init__(self, neurons):
        super().__init__()
        self.theta = nn.Parameter(torch.rand(neurons) * 0.5 + 0.75)
        self.w = nn.Parameter(torch.tensor(0.4))

    def forward(self, x, y, v, a):
        h = v + (x - v) * torch.sigmoid(self.w) + 0.2 * torch.tanh(y)
        s = spikejit.surrogate.ATan()(h - self.theta - a)
        return s, h * torch.sigmoid(y), h * (1.0 - s), 0.9 * a + 0.1 * s


def dtype_of(device):
    return torch.float64 if device.type == "cpu" else torch.float32


def tolerance(device):
    return dict(rtol=1e-9, atol=1e-10) if device.type == "cpu" else dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("store_state_seqs", [False, True])
def test_jvp_equals_the_eager_scan_of_the_same_core(device, store_state_seqs):
    """Inputs, initial states and both parameters get tangents; every output, state sequence and
    final state's tangent equals PyTorch's forward mode through the eager scan."""
    dtype, neurons = dtype_of(device), 12
    core = TwoByTwo(neurons).to(device, dtype)
    results = []
    for backend in ("spikejit", "torch"):
        node = spikejit.FlexSN(core, 2, 2, 2, step_mode="m", backend=backend, store_state_seqs=store_state_seqs)

        def f(x, y, v, a, theta, w):
            outputs, finals, seqs = torch.func.functional_call(
                _Functional(node), {"node.core.theta": theta, "node.core.w": w}, (x, y, [v, a]))
            return (*outputs, *finals, *(seqs or ()))

        generator = torch.Generator().manual_seed(7)

        def draw(*shape, scale=1.0):
            return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(device, dtype)

        primals = (draw(6, neurons, scale=1.5) + 0.5, draw(6, neurons), draw(neurons) * 0.3, draw(neurons) * 0.1,
                   core.theta.detach(), core.w.detach())
        tangents = tuple(draw(*p.shape) if p.dim() else draw(1)[0] for p in primals)
        values, jvps = torch.func.jvp(f, primals, tangents)
        results.append((values, jvps))
    (values, jvps), (values_ref, jvps_ref) = results
    assert values[0].sum() > 0  # spikes happen: the surrogate's derivative is exercised at spikes too
    for got, want in zip(values, values_ref):
        torch.testing.assert_close(got, want, **tolerance(device))
    for got, want in zip(jvps, jvps_ref):
        assert got.abs().sum() > 0
        torch.testing.assert_close(got, want, **tolerance(device))


class _Functional(nn.Module):
    """A FlexSN neuron's multi_step_functional_forward as a module's forward (for functional_call)."""

    def __init__(self, node):
        super().__init__()
        self.node = node

    def forward(self, x, y, states):
        return self.node.multi_step_functional_forward(x, y, states=states)


NEURONS = {
    "IFNode": lambda: spikejit.IFNode(step_mode="m", v_reset=None, store_v_seq=True),
    "LIFNode": lambda: spikejit.LIFNode(step_mode="m", store_v_seq=True, detach_reset=True),
    "ParametricLIFNode": lambda: spikejit.ParametricLIFNode(step_mode="m", store_v_seq=True),
    "FlexSN": lambda: spikejit.FlexSN(lif_core, 1, 1, 1, step_mode="m", store_state_seqs=True, strict=True),
}


def spikes_and_states(node, x):
    node.reset()
    s = node(x)
    seq = node.v_seq if hasattr(node, "v_seq") else node.state_seqs[0]
    return s, seq


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", NEURONS)
def test_jvp_is_the_transpose_of_the_backward(name, device):
    """<J d, u> = <d, J^T u>: the tangent kernels and the backward kernels agree on the
    surrogate's linearisation, spikes and resets included."""
    dtype = dtype_of(device)
    node = NEURONS[name]().to(device, dtype)
    x = random_input(9, 4, 5, device=device, dtype=dtype)
    d = torch.randn_like(x)
    u_s, u_v = torch.randn_like(x), torch.randn_like(x)
    (s, v_seq), (ds, dv) = torch.func.jvp(lambda xs: spikes_and_states(node, xs), (x,), (d,))
    xg = x.clone().requires_grad_()
    s2, v_seq2 = spikes_and_states(node, xg)
    assert torch.equal(s, s2.detach()) and s.sum() > 0
    ((s2 * u_s).sum() + (v_seq2 * u_v).sum()).backward()
    forward_side = (ds * u_s).sum() + (dv * u_v).sum()
    torch.testing.assert_close(forward_side, (d * xg.grad).sum(), **tolerance(device))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_jacfwd_equals_jacrev(device):
    dtype = dtype_of(device)
    node = spikejit.ParametricLIFNode(step_mode="m").to(device, dtype)
    x = random_input(5, 3, device=device, dtype=dtype)

    def f(xs):
        node.reset()
        return node(xs) + 0.5 * node.v

    forward = torch.func.jacfwd(f)(x)
    reverse = torch.func.jacrev(f)(x)
    assert forward.shape == (5, 3, 5, 3) and forward.abs().sum() > 0
    torch.testing.assert_close(forward, reverse, **tolerance(device))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_forward_ad_dual_tensors_and_the_scalar_parameter(device):
    """torch.autograd.forward_ad outside torch.func, with a tangent on PLIF's w too; the module's
    states carry their tangents."""
    dtype = dtype_of(device)
    x = random_input(6, 8, device=device, dtype=dtype)
    dx, dw = torch.randn_like(x), torch.tensor(0.7, device=device, dtype=dtype)
    w = torch.tensor(-0.2, device=device, dtype=dtype)
    with forward_ad.dual_level():
        s, v_last, v_seq = spikejit.plif_multi_step(forward_ad.make_dual(x, dx), None, forward_ad.make_dual(w, dw),
                                                    store_v_seq=True)
        tangents = [forward_ad.unpack_dual(t).tangent for t in (s, v_last, v_seq)]
    _, expected = torch.func.jvp(lambda xs, ws: spikejit.plif_multi_step(xs, None, ws, store_v_seq=True), (x, w),
                                 (dx, dw))
    for got, want in zip(tangents, expected):
        assert got is not None
        torch.testing.assert_close(got, want, **tolerance(device))
    torch.testing.assert_close(tangents[1], tangents[2][-1])


def test_tensors_without_tangents_run_inside_a_dual_level():
    node, x = spikejit.LIFNode(step_mode="m"), random_input(4, 6)
    expected = node(x)
    node.reset()
    with forward_ad.dual_level():
        assert torch.equal(node(x), expected)


def test_gradients_through_a_call_with_tangents_are_refused():
    """A call whose inputs carry tangents and require a gradient: the forward runs, its tangents
    are right, and a backward through it is an error, not a silent zero."""
    x = random_input(4, 6).requires_grad_()
    node = spikejit.LIFNode(step_mode="m")
    with forward_ad.dual_level():
        s = node(forward_ad.make_dual(x, torch.randn_like(x)))
        assert forward_ad.unpack_dual(s).tangent is not None
    with pytest.raises(RuntimeError, match="^spikejit's neuron kernels take forward-mode derivatives"):
        s.sum().backward()


def test_packed_outputs_with_tangents_are_refused():
    x = random_input(4, 8)
    with forward_ad.dual_level():
        with pytest.raises(ValueError, match=r"^packed_outputs: expected 0 for inputs with forward-mode tangents"):
            spikejit.lif_multi_step(forward_ad.make_dual(x, torch.randn_like(x)), packed_spikes=True)


def test_the_tangent_neuron_lives_with_its_neuron():
    node = spikejit.FlexSN(lambda x, v: (x * v, v * 0.5 + x), 1, 1, 1, step_mode="m", strict=True)
    x = random_input(3, 4)
    torch.func.jvp(lambda xs: node(xs), (x,), (torch.ones_like(x),))
    handle = node.handle
    tangent = spikejit.registry.program_and_cache(handle)[1]["tangent"]
    assert spikejit.registry.program(tangent).name.endswith("_tangent")
    del node
    gc.collect()
    assert not spikejit.registry.is_registered(handle)
    assert not spikejit.registry.is_registered(tangent)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", ["LIFNode", "ParametricLIFNode"])
def test_jvp_and_vmap_compose_both_ways(name, device):
    dtype = dtype_of(device)
    node = NEURONS[name]().to(device, dtype)
    x = random_input(5, 3, 4, device=device, dtype=dtype)
    d = torch.randn_like(x)

    def f(xs):
        node.reset()
        return node(xs)

    _, expected = torch.func.jvp(f, (x,), (d,))
    _, outer = torch.func.jvp(torch.func.vmap(f, in_dims=1, out_dims=1), (x,), (d,))
    inner = torch.func.vmap(lambda xs, ds: torch.func.jvp(f, (xs,), (ds,))[1], in_dims=(1, 1), out_dims=1)(x, d)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(outer, expected, **tolerance(device))
    torch.testing.assert_close(inner, expected, **tolerance(device))


@pytest.mark.parametrize("order", ["jacfwd(jacrev)", "jacrev(jacfwd)"])
def test_second_derivatives_mixing_the_modes_are_refused(order):
    node, x = spikejit.LIFNode(step_mode="m"), random_input(4, 3, dtype=torch.float64)

    def f(xs):
        node.reset()
        return node(xs).sum()

    outer, inner = (torch.func.jacfwd, torch.func.jacrev) if order == "jacfwd(jacrev)" else \
        (torch.func.jacrev, torch.func.jacfwd)
    with pytest.raises(RuntimeError, match="^spikejit's neuron kernels take forward-mode derivatives"):
        outer(inner(f))(x)
