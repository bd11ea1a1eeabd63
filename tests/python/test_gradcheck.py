"""torch.autograd.gradcheck in fp64 of the fused backward.

Built-in neurons: the spike is a step, so finite differences see zero where the surrogate sees
a slope. The inputs are therefore built so that every charged potential stays at least 0.25
away from the threshold and the surrogate (PiecewiseQuadratic, alpha=5) has support |h - th| <=
0.2: both derivatives of the spike are then exactly zero and gradcheck verifies everything else
(charge, leak, reset paths, detach_reset, v_seq, final state, PLIF's w) against finite
differences. A FlexSN core without spikes is checked as is."""
import itertools

import pytest
import torch

import spikejit

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly._ops.if_ import reference as sj_if
from spikingjelly._ops.lif import reference as sj_lif
from spikingjelly._ops.plif import reference as sj_plif
from spikingjelly.activation_based import surrogate as sj_surrogate

MARGIN = 0.25


def charged(kind, x_t, v, w, opts):
    sg = sj_surrogate.Sigmoid()
    if kind == "if":
        return sj_if.step(x_t, v, opts["v_threshold"], opts["v_reset"], sg, False)
    if kind == "lif":
        return sj_lif.step(x_t, v, 3.0, opts["decay_input"], opts["v_threshold"], opts["v_reset"], sg, False)
    return sj_plif.step(x_t, v, w, opts["decay_input"], opts["v_threshold"], opts["v_reset"], sg, False)


def inputs_away_from_threshold(kind, opts, steps=5, neurons=6):
    """Random inputs, each nudged until its step's h is MARGIN away from the threshold."""
    w = torch.tensor(0.3, dtype=torch.float64)
    v = torch.randn(neurons, dtype=torch.float64) * 0.3
    v0, xs = v.clone(), []
    # input level at which about half of the neurons fire (tau = 3, sigmoid(w) = 0.57)
    centre = {"if": 1.0, "lif": 3.0 if opts["decay_input"] else 1.0, "plif": 1.8 if opts["decay_input"] else 1.0}
    for _ in range(steps):
        x_t = torch.randn(neurons, dtype=torch.float64) + centre[kind]
        direction = torch.randint(0, 2, (neurons,), dtype=torch.float64) * 2 - 1
        for _ in range(1000):
            _, _, h = charged(kind, x_t, v, w, opts)
            close = (h - opts["v_threshold"]).abs() < MARGIN
            if not close.any():
                break
            x_t = torch.where(close, x_t + direction * MARGIN, x_t)
        _, v, _ = charged(kind, x_t, v, w, opts)
        xs.append(x_t)
    return torch.stack(xs), v0, w


@pytest.mark.parametrize("kind, decay_input, v_reset, detach_reset", [
    (k, d, r, dr) for k, d, r, dr in itertools.product(["if", "lif", "plif"], [True, False], [0.0, -0.2, None],
                                                        [False, True]) if k != "if" or d])
def test_builtin_gradcheck(kind, decay_input, v_reset, detach_reset):
    opts = dict(v_threshold=1.0, v_reset=v_reset, decay_input=decay_input)
    x, v0, w = inputs_away_from_threshold(kind, opts)
    surrogate = spikejit.surrogate.PiecewiseQuadratic(alpha=5.0)

    def run(x, v0, w):
        if kind == "if":
            s, v_last, v_seq = spikejit.if_multi_step(x, v0, 1.0, v_reset, surrogate, detach_reset, True)
        elif kind == "lif":
            s, v_last, v_seq = spikejit.lif_multi_step(x, v0, 3.0, decay_input, 1.0, v_reset, surrogate,
                                                       detach_reset, True)
        else:
            s, v_last, v_seq = spikejit.plif_multi_step(x, v0, w, decay_input, 1.0, v_reset, surrogate,
                                                        detach_reset, True)
        return s, v_last, v_seq

    s, _, _ = run(x, v0, w)
    assert 0 < s.sum() < s.numel(), "the case should have spikes and silences"
    args = (x.requires_grad_(), v0.requires_grad_(), w.requires_grad_())
    assert torch.autograd.gradcheck(run, args, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_flexsn_gradcheck():
    k = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    theta = torch.rand(5, dtype=torch.float64, requires_grad=True)

    def core(x, y, v, a):
        h = v * torch.sigmoid(k) + torch.tanh(x) * y
        out = torch.sigmoid(h - theta) * (1 + a)
        return out, h * 0.5 - out, 0.5 * a + torch.clamp(x * y, -1.0, 1.0) * 0.1

    node = spikejit.FlexSN(core, 2, 2, 1, example_inputs=[torch.zeros(5, dtype=torch.float64)] * 4, strict=True)

    def run(x, y, v0, a0, k, theta):
        outputs, finals, _ = node._compiled.run([x, y], [v0, a0], False, params=[k, theta])
        return outputs[0], finals[0], finals[1]

    args = (torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64),
            torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64), k, theta)
    args = tuple(a.detach().requires_grad_() for a in args)
    assert torch.autograd.gradcheck(run, args, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_flexsn_module_gradients_reach_closure_tensors():
    k = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)

    def core(x, v):
        h = v * 0.5 + x * k
        return torch.tanh(h), h

    node = spikejit.FlexSN(core, 1, 1, 1, example_inputs=[torch.zeros(3, dtype=torch.float64)] * 2)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)

    def run(x, k_value):
        with torch.no_grad():
            k.copy_(k_value)
        node.reset()
        return node(x)

    y = run(x, torch.tensor(0.7, dtype=torch.float64))
    y.sum().backward()
    h, v = [], torch.zeros(3, dtype=torch.float64)
    k2 = k.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    for t in range(6):
        v = v * 0.5 + x2[t] * k2
        h.append(torch.tanh(v))
    torch.stack(h).sum().backward()
    torch.testing.assert_close(k.grad, k2.grad)
    torch.testing.assert_close(x.grad, x2.grad)
