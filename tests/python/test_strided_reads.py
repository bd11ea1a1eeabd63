"""Arguments that are strided views (an input repeated over T, a per-channel parameter or state
broadcast over the neurons, a slice) are read in place by the kernels: the same results and
gradients as their contiguous copies, and no copy of them, forward or backward. Past the limit
of strided views per call (MAX_STRIDED_READS) the rest are copied, still right."""
import pytest
import torch
from torch import nn

import spikejit
from spikejit import _core, _kernel_calls
from conftest import copies_in, device_params, random_input

T, B, C, L = 5, 3, 8, 11


def lif_run(x_seq, v0, g_s, g_v, checkpoint_every=0):
    s, v, v_seq = spikejit.lif_multi_step(x_seq, v0, tau=1.7, store_v_seq=True, checkpoint_every=checkpoint_every)
    if x_seq.requires_grad:
        torch.autograd.backward([s, v_seq], [g_s, g_v])
    return s, v, v_seq


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("checkpoint_every", [0, 2], ids=["saved per step", "checkpoints"])
def test_repeated_input_and_per_channel_state_equal_their_copies(checkpoint_every, device):
    """Per step the backward reads the saved input through its view; with checkpoints it
    recomputes from the inputs, read the same way."""
    frame = random_input(B, C, L, device=device).requires_grad_()  # the same input at every step
    v_channel = (0.3 * torch.randn(C, 1, device=device)).requires_grad_()  # one starting v per channel
    g_s, g_v = torch.randn(T, B, C, L, device=device), torch.randn(T, B, C, L, device=device)
    x_seq, v0 = frame.expand(T, B, C, L), v_channel.expand(B, C, L)
    assert x_seq.stride()[0] == 0 and v0.stride() == (0, 1, 0)
    ours = lif_run(x_seq, v0, g_s, g_v, checkpoint_every)
    frame2, v_channel2 = frame.detach().clone().requires_grad_(), v_channel.detach().clone().requires_grad_()
    dense = lif_run(frame2.expand(T, B, C, L).contiguous(), v_channel2.expand(B, C, L).contiguous(), g_s, g_v,
                    checkpoint_every)
    assert 0 < float(ours[0].detach().mean()) < 1
    for a, b in zip(ours, dense):
        assert torch.equal(a, b)
    torch.testing.assert_close(frame.grad, frame2.grad, rtol=1e-6, atol=1e-6)  # (sums over T in either order)
    torch.testing.assert_close(v_channel.grad, v_channel2.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_strided_arguments_are_not_copied(device):
    frame = random_input(B, C, L, device=device)
    v0 = (0.3 * torch.randn(C, 1, device=device)).expand(B, C, L)
    every_other = random_input(T, B, C, 2 * L, device=device)[..., ::2]
    for x_seq in (frame.expand(T, B, C, L), every_other):
        with torch.no_grad():
            lif_run(x_seq, v0, None, None)  # the first call builds the kernels
            assert copies_in(lambda: lif_run(x_seq, v0, None, None)) == []
        x_seq = x_seq.detach().requires_grad_()
        g_s, g_v = torch.randn(T, B, C, L, device=device), torch.randn(T, B, C, L, device=device)
        lif_run(x_seq, v0, g_s, g_v)
        assert copies_in(lambda: lif_run(x_seq, v0, g_s, g_v)) == []


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_per_channel_parameter_of_a_flexsn_core_is_read_in_place(device):
    """A per-channel threshold the core closes over is broadcast to the neurons without a copy;
    results and its gradient equal the step written out with eager autograd."""
    theta = nn.Parameter(torch.linspace(0.6, 1.2, C, device=device).view(C, 1))

    def core(x, v):
        h = v + (x - v) * 0.6
        s = spikejit.surrogate.spike(h - theta, "sigmoid", [4.0])
        return s, h - s * theta

    node = spikejit.FlexSN(core, 1, 1, 1, example_inputs=(torch.zeros(B, C, L, device=device),) * 2).to(device)
    x = random_input(T, B, C, L, device=device).requires_grad_()
    node(x).sum().backward()
    node.reset()
    assert copies_in(lambda: node(x).sum().backward()) == []

    theta2 = theta.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    v, spikes = torch.zeros(B, C, L, device=device), []
    for t in range(T):
        h = v + (x2[t] - v) * 0.6
        s = spikejit.surrogate.spike(h - theta2, "sigmoid", [4.0])
        v = h - s * theta2
        spikes.append(s)
    node.reset()
    theta.grad = None
    x.grad = None
    out = node(x)
    out.sum().backward()
    torch.stack(spikes).sum().backward()
    assert torch.equal(out, torch.stack(spikes))
    torch.testing.assert_close(theta.grad, theta2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)


def test_past_the_limit_the_rest_are_copied():
    limit = _core.MAX_STRIDED_READS
    views = [torch.randn(C).expand(T, C) for _ in range(limit + 2)]
    read = _kernel_calls._StridedReads()(views, True)
    assert all(r is v for r, v in zip(read[:limit], views[:limit]))
    assert all(r.is_contiguous() and torch.equal(r, v) for r, v in zip(read[limit:], views[limit:]))
    # A layout the kernels do not read (more than 4 dimensions after merging) is copied too.
    odd = torch.randn(2, 3, 4, 5, 6, 7).permute(0, 2, 1, 4, 3, 5)[..., ::2]
    assert not _core.reads_in_place(list(odd.shape), list(odd.stride()), True)
    assert _kernel_calls._StridedReads()([odd], True)[0].is_contiguous()


def test_a_neuron_with_more_strided_inputs_than_the_limit_runs():
    """FlexSN with MAX_STRIDED_READS + 2 inputs, each repeated over T: right results either way."""
    count = _core.MAX_STRIDED_READS + 2

    def core(*args):
        *xs, v = args
        h = v * 0.5 + sum(xs) * 0.1
        s = spikejit.surrogate.spike(h - 1.0, "sigmoid", [4.0])
        return s, h - s

    node = spikejit.FlexSN(core, count, 1, 1)
    frames = [random_input(B, L) for _ in range(count)]
    out = node(*[f.expand(T, B, L) for f in frames])
    node.reset()
    assert torch.equal(out, node(*[f.expand(T, B, L).contiguous() for f in frames]))
