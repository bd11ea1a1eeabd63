"""Inputs whose neuron dimensions are permuted in memory (channels-last activations) run in place:
results equal those of the contiguous input, come back in the input's memory order, and no tensor
is copied, forward or backward. Layouts that are not one row per step are read as strided views
(tests/python/test_strided_reads.py), with contiguous results, still correct."""
import pytest
import torch
import torch._dynamo
from torch import nn

import spikejit
from conftest import copies_in, device_params, random_input

T, B, C, H, W = 4, 3, 8, 5, 6


def channels_last(x):
    """[T, B, C, H, W] with C innermost in memory: what a channels-last convolution produces."""
    steps, batch = x.shape[:2]
    flat = x.reshape(steps * batch, *x.shape[2:]).contiguous(memory_format=torch.channels_last)
    return flat.view(x.shape)


def layouts():
    return {
        "channels-last": channels_last,
        "batch innermost": lambda x: x.permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3),
        "time inside (strided, contiguous results)": lambda x: x.transpose(0, 1).contiguous().transpose(0, 1),
    }


def nodes():
    return {
        "IF": lambda: spikejit.IFNode(step_mode="m", v_reset=None, store_v_seq=True),
        "LIF": lambda: spikejit.LIFNode(step_mode="m", store_v_seq=True),
        "PLIF": lambda: spikejit.ParametricLIFNode(step_mode="m", store_v_seq=True, detach_reset=True),
    }


def run(node, x, g_s, g_v):
    """Forward, then the backward of s against g_s and of v_seq against g_v."""
    s = node(x)
    torch.autograd.backward([s, node.v_seq], [g_s, g_v])
    return s, node.v, node.v_seq


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("layout", list(layouts()))
@pytest.mark.parametrize("name", list(nodes()))
def test_results_and_gradients_equal_the_contiguous_input(name, layout, device):
    lay = layouts()[layout]
    x = random_input(T, B, C, H, W, device=device)
    g_s = torch.randn(T, B, C, H, W, device=device)
    results = {}
    for case in ("contiguous", layout):
        arrange = (lambda t: t.contiguous()) if case == "contiguous" else lay
        node = nodes()[name]().to(device)
        xg = arrange(x).detach().requires_grad_()
        s, v, v_seq = run(node, xg, arrange(g_s), arrange(0.25 * g_s))
        results[case] = (s, v, v_seq, xg.grad, [p.grad for p in node.parameters()])
        if case != "contiguous" and "strided" not in layout:  # results in the input's memory order
            for y in (s, v_seq, xg.grad):
                assert y.stride() == xg.stride()
            assert v.stride() == xg[0].stride()
    (s, v, v_seq, gx, gp), (s2, v2, v_seq2, gx2, gp2) = results.values()
    assert s.sum() > 0 and torch.equal(s, s2)
    assert torch.equal(v, v2) and torch.equal(v_seq, v_seq2) and torch.equal(gx, gx2)
    for a, b in zip(gp, gp2):  # PLIF's w: a sum over the neurons, taken in another order
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", list(nodes()))
def test_channels_last_runs_without_a_copy(name, device):
    x = channels_last(random_input(T, B, C, H, W, device=device)).detach().requires_grad_()
    g_s = channels_last(torch.randn(T, B, C, H, W, device=device))
    g_v = channels_last(torch.randn(T, B, C, H, W, device=device))
    node = nodes()[name]().to(device)
    run(node, x, g_s, g_v)  # the first call builds the kernels
    node.reset()
    x.grad = None
    assert copies_in(lambda: run(node, x, g_s, g_v)) == []
    with torch.no_grad():
        node.reset()
        assert copies_in(lambda: node(x)) == []


def test_a_state_in_another_layout_is_copied_and_still_right():
    x = channels_last(random_input(T, B, C, H, W)).detach().requires_grad_()
    v0 = torch.randn(B, C, H, W).requires_grad_()  # contiguous: not x's memory order
    s, v, _ = spikejit.lif_multi_step(x, v0)
    (s.sum() + v.sum()).backward()
    x2, v02 = x.detach().contiguous().requires_grad_(), v0.detach().clone().requires_grad_()
    s2, v2, _ = spikejit.lif_multi_step(x2, v02)
    (s2.sum() + v2.sum()).backward()
    assert torch.equal(s, s2) and torch.equal(v, v2)
    assert torch.equal(x.grad, x2.grad) and torch.equal(v0.grad, v02.grad)


def test_single_step_mode_keeps_the_layout():
    node = spikejit.LIFNode(step_mode="s")
    reference = spikejit.LIFNode(step_mode="s")
    for _ in range(3):
        x = random_input(B, C, H, W).contiguous(memory_format=torch.channels_last)
        s, s2 = node(x), reference(x.contiguous())
        assert torch.equal(s, s2) and torch.equal(node.v, reference.v)
        assert s.is_contiguous(memory_format=torch.channels_last)


def test_flexsn_two_inputs_and_a_per_neuron_parameter():
    theta = nn.Parameter(torch.rand(B, C, H, W) + 0.5)

    def core(x, y, v):
        h = v + (x - v) * 0.5 + 0.1 * y
        s = spikejit.surrogate.ATan()(h - theta)
        return s, h * (1.0 - s)

    node = spikejit.FlexSN(core, num_inputs=2, num_states=1, num_outputs=1, step_mode="m")
    x, y = random_input(T, B, C, H, W), random_input(T, B, C, H, W)
    g = torch.randn(T, B, C, H, W)
    grads = []
    for arrange in (torch.Tensor.contiguous, channels_last):
        node.reset()
        theta.grad = None
        xs = [arrange(x).detach().requires_grad_(), arrange(y).detach().requires_grad_()]
        s = node(*xs)
        (s * arrange(g)).sum().backward()
        grads.append((s, xs[0].grad, xs[1].grad, theta.grad))
    (s, gx, gy, gt), (s2, gx2, gy2, gt2) = grads
    assert s.sum() > 0 and torch.equal(s, s2) and torch.equal(gx, gx2) and torch.equal(gy, gy2)
    torch.testing.assert_close(gt, gt2)


def test_a_wrong_state_shape_is_named_in_the_logical_order():
    x = channels_last(random_input(T, B, C, H, W))
    node = spikejit.FlexSN(lambda x, v: (x + v, x - v), num_inputs=1, num_states=1, num_outputs=1, step_mode="m")
    with pytest.raises(ValueError, match=r"init_states\[0\]: expected shape \[3, 8, 5, 6\], got float32\[3, 8, 5\]"):
        node.multi_step_functional_forward(x, states=[torch.zeros(B, C, H)])


class ChannelsLastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, C, 3, padding=1)
        self.lif = spikejit.LIFNode(step_mode="m")

    def forward(self, x):
        self.lif.reset()
        y = self.conv(x.flatten(0, 1))
        return self.lif(y.view(x.shape[0], x.shape[1], *y.shape[1:]))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_compiled_channels_last_network_matches_eager(device):
    torch._dynamo.reset()
    model = ChannelsLastNet().to(device).to(memory_format=torch.channels_last)
    x = random_input(T, B, 2, H, W, device=device)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    s_c = compiled(x)
    s_c.sum().backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    s_e = model(x)
    s_e.sum().backward()
    assert s_e.stride() == channels_last(s_e).stride()  # eager: the convolution's layout, kept
    torch.testing.assert_close(s_c, s_e)
    for a, b in zip(grads_c, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_compiled_with_dynamic_sizes_keeps_the_memory_order(device):
    """Under torch.compile with symbolic sizes and strides (dynamic=True, or the recompile after a
    new batch size) the memory order is found by comparing symbolic strides: no graph break, the
    results in the input's memory order, equal to eager at two lengths and batches."""
    torch._dynamo.reset()
    node = spikejit.ParametricLIFNode(step_mode="m").to(device)

    def step(x):
        node.reset()
        return node(x)

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for shape in [(T, B, C, H, W), (T + 2, B + 2, C, H, W)]:
        x = channels_last(random_input(*shape, device=device))
        results = []
        for run_step in (compiled, step):
            node.zero_grad()
            xr = x.clone(memory_format=torch.preserve_format).requires_grad_()
            s = run_step(xr)
            (s * torch.arange(s.numel(), device=device).reshape(s.shape).sin()).sum().backward()
            results.append((s, xr.grad, node.w.grad.clone()))
        (s_c, gx_c, gw_c), (s_e, gx_e, gw_e) = results
        assert s_c.stride() == s_e.stride() == channels_last(s_e).stride()
        torch.testing.assert_close(s_c, s_e)
        torch.testing.assert_close(gx_c, gx_e)
        torch.testing.assert_close(gw_c, gw_e)
    torch._dynamo.reset()
