"""eager_scan and the scan on torch's higher-order operator, with their final-state variants."""
import pytest
import torch

import spikejit
from conftest import random_input


def core(x, y, v, a):
    h = v * 0.6 + torch.tanh(x) * y
    return torch.sigmoid(h - 1), h * 0.5, a * 0.9 + h * 0.1


def manual(x, y, v, a):
    outs, vs, as_ = [], [], []
    for t in range(x.shape[0]):
        o, v, a = core(x[t], y[t], v, a)
        outs.append(o)
        vs.append(v)
        as_.append(a)
    return torch.stack(outs), torch.stack(vs), torch.stack(as_)


@pytest.mark.parametrize("shape", [(1, 8), (4, 4, 8), (16, 2, 3, 8)])
def test_eager_scan_matches_a_manual_loop(shape):
    x, y = random_input(*shape), random_input(*shape)
    v, a = random_input(*shape[1:]), random_input(*shape[1:])
    (o,), (vs, as_) = spikejit.eager_scan(core, [x, y], [v, a])
    o_ref, vs_ref, as_ref = manual(x, y, v, a)
    assert torch.equal(o, o_ref) and torch.equal(vs, vs_ref) and torch.equal(as_, as_ref)
    (o2,), (v_last, a_last) = spikejit.eager_scan_final_state(core, [x, y], [v, a])
    assert torch.equal(o2, o_ref) and torch.equal(v_last, vs_ref[-1]) and torch.equal(a_last, as_ref[-1])


@pytest.mark.skipif(not spikejit.lowerable_scan_available(), reason="this torch has no scan operator")
def test_lowerable_scan_matches_eager_with_gradients():
    x, y = random_input(6, 5).requires_grad_(), random_input(6, 5)
    v, a = random_input(5), random_input(5)
    (o,), (vs, as_) = spikejit.lowerable_scan(core, [x, y], [v, a])
    (o_ref,), (vs_ref, as_ref) = spikejit.eager_scan(core, [x, y], [v, a])
    torch.testing.assert_close(o, o_ref)
    torch.testing.assert_close(vs, vs_ref)
    torch.testing.assert_close(as_, as_ref)
    g = torch.autograd.grad((o * o_ref.detach()).sum(), x)[0]
    g_ref = torch.autograd.grad((o_ref * o_ref.detach()).sum(), x)[0]
    torch.testing.assert_close(g, g_ref)
    (o2,), finals = spikejit.lowerable_scan_final_state(core, [x, y], [v, a])
    torch.testing.assert_close(o2, o_ref)
    torch.testing.assert_close(finals[0], vs_ref[-1])


@pytest.mark.skipif(not spikejit.lowerable_scan_available(), reason="this torch has no scan operator")
def test_hop_backend_of_flexsn():
    def lif(x, v):
        h = v + (x - v) * 0.5
        s = spikejit.surrogate.Sigmoid()(h - 1.0)
        return s, h * (1 - s)

    x = random_input(5, 7)
    hop = spikejit.FlexSN(lif, 1, 1, 1, backend="hop", store_state_seqs=True)
    kernel = spikejit.FlexSN(lif, 1, 1, 1, store_state_seqs=True)
    assert torch.equal(hop(x), kernel(x))
    torch.testing.assert_close(hop.state_seqs[0], kernel.state_seqs[0])


def test_zero_steps_never_call_the_core():
    calls = []

    def counting(x, v):
        calls.append(1)
        return x, v

    v = random_input(3)
    (o,), (seq,) = spikejit.eager_scan(counting, [torch.empty(0, 3)], [v], num_outputs=1)
    assert o.shape == (0, 3) and seq.shape == (0, 3) and not calls
    (o,), (final,) = spikejit.eager_scan_final_state(counting, [torch.empty(0, 3)], [v], num_outputs=1)
    assert torch.equal(final, v) and final is not v
    with pytest.raises(ValueError, match="num_outputs"):
        spikejit.eager_scan(counting, [torch.empty(0, 3)], [v])


def test_scan_argument_checks():
    with pytest.raises(ValueError, match="inputs\\[1\\]"):
        spikejit.eager_scan(core, [torch.zeros(3, 2), torch.zeros(4, 2)], [torch.zeros(2), torch.zeros(2)])
    with pytest.raises(ValueError, match="core"):
        spikejit.eager_scan(lambda x, v: (x,), [torch.zeros(3, 2)], [torch.zeros(2)], num_outputs=1)
    with pytest.raises(ValueError, match="inputs"):
        spikejit.eager_scan(core, [], [])
