"""The custom ops: torch.library.opcheck for each, results against a Python loop, the calling
conventions (T = 0, N = 0, non-contiguous, dtypes) and bad input rejected with the argument named."""
import pytest
import torch

import spikejit
from conftest import device_params, random_input
from spikejit.functional import builtin_handle, shipped_handle

LIF = lambda: builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0)  # noqa: E731
PLIF = lambda: builtin_handle("plif", 0.5, None, True, "atan", (2.0,), False)  # noqa: E731


def loop_lif(x, v, tau=2.0, v_th=1.0):
    s_seq, v_seq = [], []
    for x_t in x:
        h = v + (x_t - v) / tau
        s = (h >= v_th).to(x.dtype)
        v = (1 - s) * h
        s_seq.append(s)
        v_seq.append(v)
    return torch.stack(s_seq), torch.stack(v_seq)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_inference_matches_a_python_loop(device):
    x = random_input(9, 3, 11, device=device)
    v0 = random_input(3, 11, device=device, scale=0.3)
    s_ref, v_ref = loop_lif(x, v0)
    out = torch.ops.spikejit.neuron_inference(LIF(), [x], [v0], [], True, True)
    s, v_seq, v_last = out
    assert torch.equal(s, s_ref)
    torch.testing.assert_close(v_seq, v_ref)
    torch.testing.assert_close(v_last, v_ref[-1])
    s2, v_last2 = torch.ops.spikejit.neuron_inference(LIF(), [x], [v0], [], False, True)
    assert torch.equal(s2, s) and torch.equal(v_last2, v_last)
    (s3,) = torch.ops.spikejit.neuron_inference(LIF(), [x], [], [], False, False)
    assert torch.equal(s3, loop_lif(x, torch.zeros_like(v0))[0])


def opcheck_cases(device):
    x = random_input(6, 4, 5, device=device)
    v0 = random_input(4, 5, device=device, scale=0.3)
    w = torch.tensor([0.2], device=device)
    xg, vg, wg = (t.clone().requires_grad_() for t in (x, v0, w))
    cases = [
        (torch.ops.spikejit.neuron_inference.default, (LIF(), [x], [v0], [], True, True)),
        (torch.ops.spikejit.neuron_inference.default, (PLIF(), [x], [], [w], False, True)),
        (torch.ops.spikejit.neuron_forward.default, (LIF(), [xg], [vg], [], False)),
        (torch.ops.spikejit.neuron_forward.default, (PLIF(), [xg], [vg], [wg], True)),
        (torch.ops.spikejit.spike.default, (x.clone().requires_grad_(), "atan", [2.0])),
        (torch.ops.spikejit.bit_spike_compress.default, ((x > 0.5).float(),)),
        (torch.ops.spikejit.bit_spike_decompress.default,
         (spikejit.bit_spike_compress((x > 0.5).float()), [6, 4, 5])),
    ]
    saved = spikejit._kernel_calls.backward_saved(PLIF(), torch.ops.spikejit.neuron_forward(PLIF(), [x], [v0], [w], False)[2:], [x])
    cases.append((torch.ops.spikejit.neuron_backward.default,
                  (PLIF(), [6, 4, 5], x.dtype, x.device, saved, [w], [torch.randn_like(x)],
                   [torch.randn_like(v0)], [])))
    cases.append((torch.ops.spikejit.neuron_backward.default,
                  (PLIF(), [6, 4, 5], x.dtype, x.device, saved, [w], [None], [None], [])))
    # STBIF: a state without a gradient, returned without requires_grad.
    stbif = shipped_handle("stbif", {})
    params = [(torch.rand((), device=device) + 0.5).requires_grad_() for _ in range(3)]
    cases.append((torch.ops.spikejit.neuron_forward.default, (stbif, [xg], [], params, True)))
    return cases


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("index", range(10))
def test_opcheck(index, device):
    op, args = opcheck_cases(device)[index]
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_missing_gradients_equal_zeros(device):
    x = random_input(5, 7, device=device)
    w = torch.tensor([0.3], device=device)
    saved = spikejit._kernel_calls.backward_saved(PLIF(), torch.ops.spikejit.neuron_forward(PLIF(), [x], [], [w], True)[3:], [x])
    g = torch.randn_like(x)
    with_none = torch.ops.spikejit.neuron_backward(PLIF(), [5, 7], x.dtype, x.device, saved, [w], [g], [None], [None])
    with_zeros = torch.ops.spikejit.neuron_backward(PLIF(), [5, 7], x.dtype, x.device, saved, [w], [g],
                                                    [torch.zeros(7, device=device)], [torch.zeros_like(x)])
    for a, b in zip(with_none, with_zeros):
        assert torch.equal(a, b)


def test_non_contiguous_inputs_and_gradients():
    x = random_input(4, 6, 8).permute(2, 1, 0).contiguous().permute(2, 1, 0)  # [4, 6, 8], strided
    assert not x.is_contiguous()
    x.requires_grad_()
    s, v_last, v_seq = spikejit.lif_multi_step(x, None, store_v_seq=True)
    g = torch.randn(8, 6, 4).permute(2, 1, 0)
    (s * g).sum().backward()
    x2 = x.detach().contiguous().requires_grad_()
    s2, _, _ = spikejit.lif_multi_step(x2, None, store_v_seq=True)
    (s2 * g.contiguous()).sum().backward()
    assert torch.equal(s, s2)
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("layout", ["one value", "same each step", "same each neuron"])
@pytest.mark.parametrize("shape", [(7, 3, 9), (3, 96, 1024)])  # the second: CUDA's vector variant
def test_broadcast_gradients_equal_their_dense_copies(device, layout, shape):
    """Expanded gradients (y.sum() gives one value broadcast over [T, *S]) are read in place, on
    the CPU and on CUDA; the gradients equal those of the dense copy, bit for bit."""
    x = random_input(*shape, device=device)
    steps, *neurons = shape
    compact = {"one value": (), "same each step": (1, *neurons), "same each neuron": (steps, 1, 1)}[layout]
    g_s = torch.randn(compact, device=device).expand(shape)
    g_v = (torch.randn(compact, device=device) * 0.3).expand(shape)
    assert not g_s.is_contiguous()
    grads = []
    for dense in (False, True):
        xg = x.clone().requires_grad_()
        node = spikejit.ParametricLIFNode(step_mode="m", store_v_seq=True).to(device)
        y = node(xg)
        torch.autograd.backward([y, node.v_seq], [g_s.contiguous(), g_v.contiguous()] if dense else [g_s, g_v])
        grads.append((xg.grad, node.w.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_only_the_gradients_autograd_needs(device):
    """Inputs without requires_grad get no gradient computed; the others are unchanged by that."""
    x = random_input(6, 4, 5, device=device)
    v0 = random_input(4, 5, device=device, scale=0.3)
    g = torch.randn(6, 4, 5, device=device)
    runs = {}
    for needs in ("all", "w only", "v0 and w"):
        xg = x.clone().requires_grad_(needs == "all")
        vg = v0.clone().requires_grad_(needs != "w only")
        w = torch.tensor([0.4], device=device, requires_grad=True)
        s = spikejit.ops.run_training(PLIF(), [xg], [vg], [w], False)[0]
        (s * g).sum().backward()
        runs[needs] = (xg.grad, vg.grad, w.grad)
    assert runs["w only"][0] is None and runs["w only"][1] is None
    assert runs["v0 and w"][0] is None
    for other in ("w only", "v0 and w"):
        assert torch.equal(runs[other][2], runs["all"][2])
    assert torch.equal(runs["v0 and w"][1], runs["all"][1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_dtypes_keep_their_storage_type(dtype):
    x = random_input(5, 9, dtype=dtype).requires_grad_()
    s, v_last, _ = spikejit.lif_multi_step(x, None)
    assert s.dtype == v_last.dtype == dtype
    s.sum().backward()
    assert x.grad.dtype == dtype


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_plif_w_gradient_is_deterministic(device):
    """The same bits every run: on CUDA, partial sums of many blocks added in a fixed order."""
    x = random_input(16, 300000, device=device)
    grads = []
    for _ in range(3):
        w = torch.tensor(0.1, requires_grad=True, device=device)
        s, v_last, _ = spikejit.plif_multi_step(x, None, w)
        (s.sum() + v_last.sum()).backward()
        grads.append(w.grad)
    assert grads[0] == grads[1] == grads[2]


# ---- bad input -------------------------------------------------------------------------------

def test_bad_arguments_name_the_argument():
    x = random_input(4, 3)
    with pytest.raises(ValueError, match="v_init"):
        spikejit.multistep_lif(x, torch.zeros(4), True, 2.0, 1.0, 0.0, False, None)
    with pytest.raises(TypeError, match="x_seq"):
        spikejit.multistep_if([1.0, 2.0], None)
    with pytest.raises(ValueError, match="x_seq"):
        spikejit.multistep_if(torch.tensor(1.0), None)
    with pytest.raises(TypeError, match="v_threshold"):
        spikejit.IFNode(v_threshold="1")
    with pytest.raises(ValueError, match="tau"):
        spikejit.LIFNode(tau=0.5)
    with pytest.raises(ValueError, match="step_mode"):
        spikejit.LIFNode(step_mode="x")
    with pytest.raises(ValueError, match="r_tau"):
        spikejit.multistep_plif(x, None, torch.ones(2), True, 1.0, 0.0, False, None)
    with pytest.raises(TypeError, match="inputs\\[0\\]"):
        spikejit.lif_multi_step(x.to(torch.int32), None)
    with pytest.raises(ValueError, match="inputs"):
        torch.ops.spikejit.neuron_inference(LIF(), [x, x], [], [], False, True)
    with pytest.raises(ValueError, match="init_states\\[0\\]"):
        torch.ops.spikejit.neuron_inference(LIF(), [x], [torch.zeros(2)], [], False, True)
    with pytest.raises(TypeError, match="init_states\\[0\\]"):
        torch.ops.spikejit.neuron_inference(LIF(), [x], [torch.zeros(3, dtype=torch.float64)], [], False, True)
    with pytest.raises(ValueError, match="params"):
        torch.ops.spikejit.neuron_inference(PLIF(), [x], [], [], False, True)
    with pytest.raises(ValueError, match="params\\[0\\]"):
        torch.ops.spikejit.neuron_inference(PLIF(), [x], [], [torch.zeros(2)], False, True)
    with pytest.raises(RuntimeError, match="handle"):
        torch.ops.spikejit.neuron_inference(10**9, [x], [], [], False, True)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_mixed_devices_are_rejected(device):
    if device.type == "cpu":
        pytest.skip("needs a second device")
    x = random_input(4, 3, device=device)
    with pytest.raises(ValueError, match="init_states\\[0\\]"):
        torch.ops.spikejit.neuron_inference(LIF(), [x], [torch.zeros(3)], [], False, True)


def test_nan_and_inf_propagate():
    x = random_input(4, 6)
    x[1, 2] = float("nan")
    x[2, 3] = float("inf")
    s, v_last, v_seq = spikejit.if_multi_step(x, None, v_reset=None, store_v_seq=True)
    assert torch.isnan(v_seq[1:, 2]).all()
    assert s[2, 3] == 1


# ---- compression -----------------------------------------------------------------------------

@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, 1001])
def test_bit_spike_compression_round_trip(n, device):
    s = (torch.rand(n, device=device) > 0.5).float()
    c = spikejit.bit_spike_compress(s)
    assert c.dtype == torch.uint8 and c.numel() == (n + 7) // 8
    assert torch.equal(spikejit.bit_spike_decompress(c, [n]).float(), s)
    # element 8j+i at bit i of byte j
    j = n // 2
    assert ((c[j // 8] >> (j % 8)) & 1).item() == s[j].item()


def test_bit_spike_compression_counts_nonzero_as_spike():
    s = torch.tensor([0.0, 0.3, -2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 5.0])
    c = spikejit.bit_spike_compress(s)
    assert c.tolist() == [0b00010110, 1]
    with pytest.raises(ValueError, match="compressed"):
        spikejit.bit_spike_decompress(c, [20])


def test_eager_fast_path_equals_the_custom_op_path():
    """Eager calls skip the dispatcher (spikejit.ops.run_training); graphs use the op. Same bits."""
    x = random_input(7, 3, 9)
    v0 = random_input(3, 9, scale=0.3)
    w = torch.tensor([0.4])
    g = [torch.randn(7, 3, 9), torch.randn(3, 9), torch.randn(7, 3, 9)]
    results = []
    for path in ("fast", "op"):
        args = [t.clone().requires_grad_() for t in (x, v0, w)]
        if path == "fast":
            out = spikejit.ops.run_training(PLIF(), [args[0]], [args[1]], [args[2]], True)
        else:
            out = torch.ops.spikejit.neuron_forward(PLIF(), [args[0]], [args[1]], [args[2]], True)[:3]
        sum((o * gi).sum() for o, gi in zip(out, g)).backward()
        results.append([o.detach() for o in out] + [a.grad for a in args])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_saved_inputs_are_not_copied():
    # PLIF's backward reads x itself: the forward writes one saved sequence (v), not two.
    x = random_input(6, 4, 5).requires_grad_()
    w = torch.tensor([0.2], requires_grad=True)
    results = torch.ops.spikejit.neuron_forward(PLIF(), [x], [], [w], False)
    assert len(results) == 3  # spikes, final v, saved v
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        s, _, _ = spikejit.plif_multi_step(x, None, w)
    assert any(t.data_ptr() == x.data_ptr() for t in kept)
    assert sum(t.numel() for t in kept if t.dim() == 3) == 2 * x.numel()  # x and v, nothing else
    s.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and w.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_cpu_calls_run_the_fused_steps_with_the_interpreted_bits(monkeypatch, dtype):
    """From 2^20 neuron-steps a CPU call runs the neuron's step compiled by the host C++ compiler
    (docs/user-guide.md, "CPU and GPU"); SPIKEJIT_CPU_FUSED=0 interprets it. Both give the same
    spikes, states, PLIF w gradient and input gradients, bit for bit."""
    x = (random_input(16, 65537, dtype=torch.float32) + 0.4).to(dtype)  # a partial last block
    grad = torch.randn(16, 65537).to(dtype)
    results = {}
    for fused in ("0", "1"):
        monkeypatch.setenv("SPIKEJIT_CPU_FUSED", fused)
        node = spikejit.ParametricLIFNode(init_tau=2.5, step_mode="m", store_v_seq=True).to(dtype)
        xr = x.clone().requires_grad_()
        s = node(xr)
        (s * grad).sum().backward()
        results[fused] = (s, node.v_seq, xr.grad, node.w.grad)
    bits = lambda t: t.view(torch.int16 if t.element_size() == 2 else torch.int32)  # noqa: E731
    for got, want in zip(results["1"], results["0"]):
        assert torch.equal(bits(got), bits(want))


def test_cpu_fused_support_says_why_not(monkeypatch):
    assert spikejit.cpu_fused_available(), spikejit.cpu_fused_unavailable_reason()  # CI has a compiler
    assert spikejit.cpu_fused_unavailable_reason() == ""
    monkeypatch.setenv("SPIKEJIT_CPU_FUSED", "0")
    assert not spikejit.cpu_fused_available()
    assert spikejit.cpu_fused_unavailable_reason() == "turned off by SPIKEJIT_CPU_FUSED=0"
    monkeypatch.setenv("SPIKEJIT_CPU_FUSED", "auto")
    monkeypatch.setenv("SPIKEJIT_CXX", "/nonexistent/c++")
    assert "/nonexistent/c++: not found" in spikejit.cpu_fused_unavailable_reason()
    monkeypatch.setenv("SPIKEJIT_CPU_FUSED", "sometimes")
    with pytest.raises(spikejit.Error, match="SPIKEJIT_CPU_FUSED: expected 0, 1 or auto, got 'sometimes'"):
        spikejit.cpu_fused_available()
