"""spikejit's CPU pool (spikejit.cpu_pool): large CPU buffers of neuron calls are reused after
PyTorch frees them, never while a tensor or view of them lives, and give the same results."""
import os
import subprocess
import sys

import pytest
import torch

import spikejit
from spikejit._kernel_calls import CPU_POOL_MIN_BYTES

T, N = 4, 1 << 17  # a [T, N] float32 sequence of 2 MiB: pooled


def lif_reference(x, tau=2.0):
    """SpikingJelly's LIF (decay_input, hard reset to 0, sigmoid surrogate alpha 4) as a loop."""
    v = torch.zeros_like(x[0])
    spikes = []
    for x_t in x:
        h = v + (x_t - v) / tau
        sg = torch.sigmoid(4.0 * (h - 1.0))
        s = (h >= 1.0).to(x.dtype) + (sg - sg.detach())  # Heaviside forward, sigmoid backward
        spikes.append(s)
        v = h * (1.0 - s)
    return torch.stack(spikes)


def test_a_large_call_takes_its_buffers_from_the_pool_and_gives_them_back():
    assert T * N * 4 >= CPU_POOL_MIN_BYTES
    node = spikejit.LIFNode(step_mode="m")
    x = torch.randn(T, N) + 0.8
    with torch.no_grad():
        first = node(x)
    node.reset()
    address = first.data_ptr()
    before = spikejit.cpu_pool.info()
    del first
    assert spikejit.cpu_pool.info()["cached_bytes"] >= before["cached_bytes"] + T * N * 4
    with torch.no_grad():
        second = node(x)
    assert second.data_ptr() == address  # the same block, its pages mapped already
    assert spikejit.cpu_pool.info()["reuses"] > before["reuses"]


def test_a_view_keeps_its_block_and_its_values():
    node = spikejit.LIFNode(step_mode="m")
    x = torch.randn(T, N) + 0.8
    with torch.no_grad():
        out = node(x)
    node.reset()
    view = out[1:3, 100:]
    kept = view.clone()
    address = out.data_ptr()
    del out
    for _ in range(3):  # calls of the same size while the view lives
        with torch.no_grad():
            other = node(torch.randn(T, N) + 0.8)
        node.reset()
        assert other.data_ptr() != address
        del other
    assert torch.equal(view, kept)


def test_training_through_pooled_buffers_equals_the_loop():
    node = spikejit.LIFNode(step_mode="m")
    x = (torch.randn(T, N) + 0.8).requires_grad_()
    weight = torch.randn(T, N)
    for _ in range(2):  # the second round reuses the first round's blocks
        x.grad = None
        s = node(x)
        (s * weight).sum().backward()
        node.reset()
        got_s, got_grad = s.detach().clone(), x.grad.clone()
        del s
    x_ref = x.detach().clone().requires_grad_()
    s_ref = lif_reference(x_ref)
    (s_ref * weight).sum().backward()
    assert torch.equal(got_s, s_ref.detach())
    torch.testing.assert_close(got_grad, x_ref.grad, rtol=1e-5, atol=1e-6)


def test_small_calls_do_not_use_the_pool():
    node = spikejit.LIFNode(step_mode="m")
    before = spikejit.cpu_pool.info()
    x = torch.randn(4, 1000, requires_grad=True)
    node(x).sum().backward()
    after = spikejit.cpu_pool.info()
    assert (after["allocations"], after["reuses"]) == (before["allocations"], before["reuses"])


def test_empty_and_limits():
    node = spikejit.LIFNode(step_mode="m")
    with torch.no_grad():
        node(torch.randn(T, N))
    assert spikejit.cpu_pool.info()["cached_bytes"] > 0
    freed = spikejit.cpu_pool.empty()
    assert freed > 0 and spikejit.cpu_pool.info()["cached_bytes"] == 0
    limit = spikejit.cpu_pool.info()["limit_bytes"]
    try:
        spikejit.cpu_pool.set_limit(0)  # keeps nothing: freed blocks go back to the system
        with torch.no_grad():
            node(torch.randn(T, N))
        assert spikejit.cpu_pool.info()["cached_bytes"] == 0
    finally:
        spikejit.cpu_pool.set_limit(limit)
    with pytest.raises(ValueError, match="limit_bytes"):
        spikejit.cpu_pool.set_limit(-1)
    with pytest.raises(TypeError, match="limit_bytes"):
        spikejit.cpu_pool.set_limit(1.5)


@pytest.mark.parametrize("value,expected", [("0", 0), ("3", 3 << 20)])
def test_the_limit_comes_from_the_environment(value, expected):
    code = "import spikejit; print(spikejit.cpu_pool.info()['limit_bytes'])"
    env = dict(os.environ, SPIKEJIT_CPU_POOL_MIB=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == expected


def test_a_bad_limit_in_the_environment_is_named():
    code = ("import torch, spikejit\n"
            "try:\n    spikejit.cpu_pool.info()\nexcept ValueError as e:\n    print(e)\n")
    env = dict(os.environ, SPIKEJIT_CPU_POOL_MIB="lots")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "SPIKEJIT_CPU_POOL_MIB" in out.stdout and "lots" in out.stdout
