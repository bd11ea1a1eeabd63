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
    # w = 0: PLIF's decay sigmoid(w) is 0.5 on both devices. Any other w goes through exp, which
    # may round differently on the GPU, and a 1-ulp different decay moves a value sitting at the
    # threshold across it: one flipped spike in 65792 neurons at T = 64 did happen.
    w = torch.tensor(0.0, dtype=dtype)
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


def _warm_up(step, times):
    """Runs step() `times` times on a side stream, as CUDA graphs require before a capture;
    returns its last result (the current stream waits for it)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            result = step()
    torch.cuda.current_stream().wait_stream(side)
    return result


def test_cuda_graph_capture():
    """No host work depends on tensor values, so a training step can be captured."""
    node = spikejit.LIFNode(step_mode="m").cuda()
    x = random_input(8, 2048, device="cuda").requires_grad_()
    _warm_up(lambda: (node.reset(), node(x).sum().backward()), 2)
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


def _plif_step(node, x):
    node.reset()
    out = node(x)
    (out * torch.linspace(0.5, 1.5, out.shape[-1], device=out.device)).sum().backward()
    return out


def _eager_plif_reference(x):
    """Spikes, dL/dx and dL/dw of _plif_step on a fresh node, without graphs."""
    node = spikejit.ParametricLIFNode(step_mode="m").cuda()
    reference = x.detach().clone().requires_grad_()
    out = _plif_step(node, reference)
    return out, reference.grad, node.w.grad


def test_cuda_graph_capture_with_a_scalar_parameter_gradient():
    """PLIF's backward reduces dL/dw through a scratch buffer: in a captured graph that buffer
    must come from the graph's memory pool, stay valid for every replay and never be freed or
    reused by calls made after the capture on the same stream (here: a larger call there)."""
    node = spikejit.ParametricLIFNode(step_mode="m").cuda()
    x = random_input(8, 3000, device="cuda").requires_grad_()
    _warm_up(lambda: _plif_step(node, x), 2)
    capture = torch.cuda.Stream()  # nothing ran on it before
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    node.w.grad = None
    with torch.cuda.graph(graph, stream=capture):
        out = _plif_step(node, x)
    with torch.cuda.stream(capture):  # an odd N: one neuron a thread, more partial sums than any before
        big = random_input(2, 4_000_001, device="cuda").requires_grad_()
        _plif_step(spikejit.ParametricLIFNode(step_mode="m").cuda(), big)
    torch.cuda.current_stream().wait_stream(capture)
    for _ in range(3):  # each replay must write the graph's .grad tensors whole (zeroed before it)
        x.grad.zero_()
        node.w.grad.zero_()
        graph.replay()
    torch.cuda.synchronize()
    expected_out, expected_x_grad, expected_w_grad = _eager_plif_reference(x)
    assert torch.equal(out, expected_out)
    torch.testing.assert_close(x.grad, expected_x_grad)
    torch.testing.assert_close(node.w.grad, expected_w_grad)


def test_cuda_graph_capture_of_a_flexsn_neuron_with_a_learnable_scalar():
    """A FlexSN neuron whose core closes over a learnable scalar takes the same workspace path as
    PLIF's w: captured on a fresh stream, replayed, equal to the same neuron run eagerly."""
    r = torch.tensor(0.4, device="cuda", requires_grad=True)

    def core(x, v):
        h = v + (x - v) * r
        s = spikejit.surrogate.spike(h - 1.0, "sigmoid", [4.0])
        return s, h - s

    node = spikejit.FlexSN(core, 1, 1, 1)
    x = random_input(6, 4099, device="cuda").requires_grad_()
    weights = torch.linspace(0.5, 1.5, x.shape[-1], device="cuda")

    def step():
        node.reset()
        out = node(x)
        (out * weights).sum().backward()
        return out

    expected_out = _warm_up(step, 1).clone()
    expected_x_grad, expected_r_grad = x.grad.clone(), r.grad.clone()
    x.grad = r.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        out = step()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected_out)
    torch.testing.assert_close(x.grad, expected_x_grad)
    torch.testing.assert_close(r.grad, expected_r_grad)


def test_capture_without_scratch_is_a_clear_error(monkeypatch):
    """A backward without a caller-owned scratch (the C++ API's default) cannot be captured: an
    error naming the argument, before anything is launched."""
    from spikejit import _kernel_calls

    node = spikejit.ParametricLIFNode(step_mode="m").cuda()
    x = random_input(4, 5000, device="cuda").requires_grad_()
    _plif_step(node, x)
    # The Python path, whose scratch is taken away here (the C++ path makes its own in C++).
    monkeypatch.setattr(_kernel_calls, "CPP_CALLS", False)
    monkeypatch.setattr(_kernel_calls.TrainingCall, "backward_workspace", lambda *args: None)
    with pytest.raises(ValueError, match=r"^argument 'workspace': expected a caller-owned float64 buffer"):
        with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=torch.cuda.Stream()):
            _plif_step(node, x)


def test_capture_of_a_first_call_with_a_nonzero_default_state():
    """A default initial state is a constant of the kernels, not a device buffer: a captured call
    may be the first of its size (after the kernel is loaded) and starts from that default."""
    node = spikejit.LIFNode(step_mode="m", v_reset=-0.3125).cuda()
    with torch.no_grad():
        node(random_input(2, 100, device="cuda"))  # loads the kernel
        node.reset()
        x = random_input(3, 3_000_001, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
            out = node(x)
        node.reset()
        graph.replay()
        torch.cuda.synchronize()
        expected = spikejit.LIFNode(step_mode="m", v_reset=-0.3125)(x.cpu())
    assert torch.equal(out.cpu(), expected)


def test_compile_reduce_overhead_trains_like_eager():
    """torch.compile(mode="reduce-overhead") replays the forward and the backward from CUDA graphs
    (where the host time of small steps goes away): Linear -> PLIF -> Linear, several steps, the
    same results as eager, and no graph skipped."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)

    def model():
        return torch.nn.Sequential(torch.nn.Linear(64, 256), spikejit.ParametricLIFNode(step_mode="m"),
                                   torch.nn.Linear(256, 10)).cuda()

    eager, graphed = model(), model()
    graphed.load_state_dict(eager.state_dict())
    forward = torch.compile(graphed, mode="reduce-overhead", fullgraph=True)
    counters.clear()
    for i in range(5):
        x = random_input(8, 32, 64, device="cuda")
        losses = []
        for net, run in ((eager, eager), (graphed, forward)):
            net[1].reset()
            net.zero_grad(set_to_none=True)
            loss = run(x).square().mean()
            loss.backward()
            losses.append(loss.detach().clone())
        torch.testing.assert_close(losses[1], losses[0], msg=lambda m: f"step {i}: {m}")
        for (name, a), b in zip(eager.named_parameters(), graphed.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"step {i}, {name}: {m}")
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_cuda_bad_dtype_is_rejected():
    x = random_input(4, 8, device="cuda", dtype=torch.float64)
    with pytest.raises((ValueError, TypeError), match="float64|dtype"):
        spikejit.lif_multi_step(x, None)
