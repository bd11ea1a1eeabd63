"""CUDA specifics: kernels run on the current stream without synchronising the device, and every
kernel kind agrees with the CPU executor. Skips without a GPU unless SPIKEJIT_REQUIRE_CUDA=1."""
import pytest
import torch

import spikejit
from conftest import random_input, require_cuda


@pytest.fixture(autouse=True)
def cuda_only():
    require_cuda()


def run_all(x, v0, w, surrogate):
    """Inference (full and final state) and training forward + backward of LIF and PLIF."""
    results = []
    with torch.no_grad():
        results += spikejit.lif_multi_step(x, v0, 3.0, False, 0.7, None, surrogate, True, True)[:2]
        results += spikejit.lif_multi_step(x, v0, 3.0, False, 0.7, None, surrogate, True, False)[:2]
    xg, vg, wg = x.clone().requires_grad_(), v0.clone().requires_grad_(), w.clone().requires_grad_()
    s, v_last, v_seq = spikejit.plif_multi_step(xg, vg, wg, True, 1.0, -0.1, surrogate, False, True)
    (s.sum() + (v_seq * x).sum() + v_last.sum()).backward()
    return results + [s, v_last, v_seq, xg.grad, vg.grad, wg.grad]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (7, 1003), (64, 4, 257), (3, 0)])
def test_cuda_equals_cpu(shape, dtype):
    x = random_input(*shape, dtype=dtype)
    v0 = random_input(*shape[1:], dtype=dtype, scale=0.3)
    w = torch.tensor(0.2, dtype=dtype)
    surrogate = spikejit.surrogate.ATan()
    cpu = run_all(x, v0, w, surrogate)
    gpu = run_all(x.cuda(), v0.cuda(), w.cuda(), surrogate)
    tolerance = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
                 torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]
    for i, (a, b) in enumerate(zip(cpu, gpu)):
        torch.testing.assert_close(b.cpu(), a, **tolerance, msg=lambda m: f"result {i}: {m}")


def test_no_device_synchronisation():
    node = spikejit.ParametricLIFNode(step_mode="m").cuda()
    flex = spikejit.FlexSN(lambda x, v: (spikejit.surrogate.spike(v + x - 1), (v + x) * 0.5), 1, 1, 1)
    x = random_input(8, 4096, device="cuda").requires_grad_()
    node(x)  # warm up: compiles or loads the kernels
    flex(x)
    node.reset()
    flex.reset()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        s = node(x)
        y = flex(x)
        (s.sum() + y.sum()).backward()
        with torch.no_grad():
            node(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(x.grad).all()


def test_runs_on_the_current_stream():
    x = random_input(16, 100_000, device="cuda")
    expected = spikejit.multistep_lif(x, None, True, 2.0, 1.0, 0.0, False, None, True)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = spikejit.multistep_lif(x, None, True, 2.0, 1.0, 0.0, False, None, True)
    torch.cuda.current_stream().wait_stream(stream)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_cuda_graph_capture():
    """No host work depends on tensor values, so a training step can be captured."""
    node = spikejit.LIFNode(step_mode="m").cuda()
    x = random_input(8, 2048, device="cuda").requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as CUDA graphs require
        for _ in range(2):
            node.reset()
            node(x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        node.reset()
        out = node(x)
        out.sum().backward()
    graph.replay()
    torch.cuda.synchronize()
    node.reset()
    reference = x.detach().clone().requires_grad_()
    spikejit.LIFNode(step_mode="m")(reference).sum().backward()
    assert torch.equal(out, spikejit.LIFNode(step_mode="m")(x.detach()))
    torch.testing.assert_close(x.grad, reference.grad)


def test_cuda_bad_dtype_is_rejected():
    x = random_input(4, 8, device="cuda", dtype=torch.float64)
    with pytest.raises((ValueError, TypeError), match="float64|dtype"):
        spikejit.lif_multi_step(x, None)
