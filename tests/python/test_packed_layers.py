"""PackedSpikeLinear / PackedSpikeConv2d: the same outputs and gradients, bit for bit, as
nn.Linear / nn.Conv2d on spike inputs; only ceil(n / 8) bytes saved for the input (measured with
saved_tensors_hooks); opcheck; torch.compile(fullgraph=True); nothing packed without autograd."""
import copy

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import spikejit
from conftest import device_params


def spikes(*shape, device="cpu", dtype=torch.float32, p=0.3):
    return (torch.rand(*shape, device=device) < p).to(dtype)


def cpu_or_cuda_dtypes(device):
    return (torch.float32, torch.float64, torch.bfloat16) if device.type == "cpu" else \
        (torch.float32, torch.float16, torch.bfloat16)


def grads_of(layer, x, grad, needs_x=True):
    """Output and gradients (x, then every parameter) of one backward with `grad`."""
    x = x.detach().requires_grad_(needs_x)
    for p in layer.parameters():
        p.grad = None
    y = layer(x)
    y.backward(grad)
    return [y.detach(), x.grad] + [p.grad for p in layer.parameters()]


@pytest.fixture(autouse=True)
def no_tf32():
    """Full fp32 matmuls and convolutions on CUDA, so that fp32 results agree to fp32 rounding."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def assert_same(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        if b is None:
            assert a is None, f"item {i}"
        else:
            assert a.dtype == b.dtype and a.shape == b.shape, f"item {i}"
            if a.is_cuda:
                # cuDNN/cuBLAS may pick other algorithms (other summation orders) for the two calls:
                # equal within a few roundings of the dtype, relative to the result's magnitude.
                eps = torch.finfo(b.dtype).eps
                scale = b.abs().max().item() if b.numel() else 0.0
                torch.testing.assert_close(a, b, rtol=8 * eps, atol=8 * eps * scale, msg=f"item {i}")
            else:
                assert torch.equal(a, b), f"item {i}: max difference {(a.double() - b.double()).abs().max()}"


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradients_equal_nn_linear(bias, device):
    for dtype in cpu_or_cuda_dtypes(device):
        for shape in [(37,), (64, 37), (10, 16, 37), (3, 4, 5, 37)]:
            reference = nn.Linear(37, 129, bias=bias, device=device, dtype=dtype)
            packed = spikejit.packed_spikes(reference)
            x = spikes(*shape, device=device, dtype=dtype)
            grad = torch.randn(*shape[:-1], 129, device=device, dtype=dtype)
            assert_same(grads_of(packed, x, grad), grads_of(reference, x, grad))
            assert_same(grads_of(packed, x, grad, needs_x=False), grads_of(reference, x, grad, needs_x=False))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_linear_with_frozen_weights_and_its_own_parameters(device):
    layer = spikejit.PackedSpikeLinear(20, 9, device=device)
    reference = nn.Linear(20, 9, device=device)
    reference.load_state_dict(layer.state_dict())
    for module in (layer, reference):
        module.weight.requires_grad_(False)
    x, grad = spikes(6, 20, device=device), torch.randn(6, 9, device=device)
    assert_same(grads_of(layer, x, grad), grads_of(reference, x, grad))


CONV_CASES = [
    dict(in_channels=4, out_channels=6, kernel_size=3, padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, bias=False),
    dict(in_channels=4, out_channels=8, kernel_size=(3, 5), padding=(0, 2), dilation=(2, 1), groups=2),
    dict(in_channels=4, out_channels=6, kernel_size=3, padding="same"),
    dict(in_channels=4, out_channels=6, kernel_size=2, padding="valid"),
    dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, padding_mode="reflect"),
    dict(in_channels=4, out_channels=6, kernel_size=3, padding=2, padding_mode="circular"),
    dict(in_channels=4, out_channels=4, kernel_size=1),
]


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_gradients_equal_nn_conv2d(case, device):
    for dtype in cpu_or_cuda_dtypes(device):
        reference = nn.Conv2d(**CONV_CASES[case], device=device, dtype=dtype)
        packed = spikejit.packed_spikes(reference)
        x = spikes(5, 4, 11, 9, device=device, dtype=dtype)
        grad = torch.randn_like(reference(x))
        assert_same(grads_of(packed, x, grad), grads_of(reference, x, grad))
        assert_same(grads_of(packed, x, grad, needs_x=False), grads_of(reference, x, grad, needs_x=False))
        x_cl = x.contiguous(memory_format=torch.channels_last)
        assert_same(grads_of(packed, x_cl, grad), grads_of(reference, x_cl, grad))


def assert_close_sum(got, expected):
    """Equal within the rounding of a sum taken in other chunks (float32 accumulation)."""
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        if b is None:
            assert a is None, f"item {i}"
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, f"item {i}"
        eps = torch.finfo(b.dtype).eps
        scale = b.abs().max().item() if b.numel() else 0.0
        torch.testing.assert_close(a, b, rtol=16 * eps, atol=16 * eps * scale, msg=f"item {i}")


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_backward_in_chunks_of_the_batch(device, monkeypatch):
    """Past BACKWARD_CHUNK_BYTES of unpacked input (here a few rows), the weight gradient is
    summed over chunks of rows / frames, each starting on a byte of the packed input: the
    gradients of nn.Linear / nn.Conv2d within the rounding of that sum, the input's exactly
    where the layer computes it chunk by chunk."""
    monkeypatch.setattr(spikejit.nn, "BACKWARD_CHUNK_BYTES", 3 * 37 * 4)  # fewer bytes than the weight
    for dtype in cpu_or_cuda_dtypes(device):
        reference = nn.Linear(37, 5, device=device, dtype=dtype)  # 37 * 5 weights: chunks of 8 rows
        packed = spikejit.packed_spikes(reference)
        x = spikes(3, 23, 37, device=device, dtype=dtype)
        grad = torch.randn(3, 23, 5, device=device, dtype=dtype)
        assert_close_sum(grads_of(packed, x, grad), grads_of(reference, x, grad))
    monkeypatch.setattr(spikejit.nn, "BACKWARD_CHUNK_BYTES", 2 * 3 * 7 * 5 * 4)  # 2 frames; 8 for bytes
    for dtype in cpu_or_cuda_dtypes(device):
        reference = nn.Conv2d(3, 6, 3, padding=1, device=device, dtype=dtype)
        packed = spikejit.packed_spikes(reference)
        x = spikes(19, 3, 7, 5, device=device, dtype=dtype)  # 105 elements a frame: chunks of 8 frames
        grad = torch.randn(19, 6, 7, 5, device=device, dtype=dtype)
        assert_close_sum(grads_of(packed, x, grad), grads_of(reference, x, grad))
        x_cl = x.contiguous(memory_format=torch.channels_last)
        assert_close_sum(grads_of(packed, x_cl, grad), grads_of(reference, x_cl, grad))
    assert spikejit.nn._rows_per_chunk(105, torch.float32, 19, reference.weight) == 8


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_conv_unbatched_multistep_and_frozen_inputs(device):
    reference = nn.Conv2d(3, 5, 3, padding=1, device=device)
    packed = spikejit.packed_spikes(reference)
    x = spikes(3, 7, 7, device=device)  # [C, H, W]
    grad = torch.randn(5, 7, 7, device=device)
    assert_same(grads_of(packed, x, grad), grads_of(reference, x, grad))
    x_seq = spikes(4, 2, 3, 7, 7, device=device)  # [T, N, C, H, W], as SpikingJelly's layer.Conv2d
    grad_seq = torch.randn(4, 2, 5, 7, 7, device=device)
    flat = nn.Sequential(nn.Flatten(0, 1), reference, nn.Unflatten(0, (4, 2)))
    assert_same(grads_of(packed, x_seq, grad_seq), grads_of(flat, x_seq, grad_seq))
    reference.weight.requires_grad_(False)  # nothing packed: backward only needs the input's shape
    reference.bias.requires_grad_(False)
    assert_same(grads_of(packed, x_seq, grad_seq), grads_of(flat, x_seq, grad_seq))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_autocast_gives_nn_layers_results(device):
    dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    linear, conv = nn.Linear(24, 10, device=device), nn.Conv2d(3, 4, 3, padding=1, device=device)
    for reference, x in ((linear, spikes(5, 24, device=device)), (conv, spikes(2, 3, 6, 6, device=device))):
        packed = spikejit.packed_spikes(reference)
        with torch.autocast(device.type, dtype=dtype):
            grad = torch.randn_like(reference(x))
            assert grad.dtype == dtype
            got, expected = grads_of(packed, x, grad), grads_of(reference, x, grad)
        assert_same(got, expected)


def saved_by(layer, x):
    """(dtype, bytes, tensor) of each tensor that autograd saves during layer(x)."""
    saved = []

    def pack(t):
        saved.append((t.dtype, t.numel() * t.element_size(), t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    return saved


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_saved_input_is_packed(device):
    T, B, n = 7, 3, 1001
    x = spikes(T, B, n, device=device).requires_grad_()
    layer = spikejit.PackedSpikeLinear(n, 16, device=device)
    saved = saved_by(layer, x)
    # (Besides the weight and the bits: an empty anchor that links second derivatives to x.)
    inputs = [s for s in saved if s[2].data_ptr() != layer.weight.data_ptr() and s[1] > 0]
    assert [(d, b) for d, b, _ in inputs] == [(torch.uint8, (T * B * n + 7) // 8)]
    assert sum(b for _, b, _ in inputs) * 32 < x.numel() * 4 + 32
    reference = saved_by(nn.Linear(n, 16, device=device), x)  # the contrast: nn.Linear keeps x
    assert any(t.dtype == torch.float32 and t.numel() == T * B * n for _, _, t in reference)

    conv = spikejit.PackedSpikeConv2d(4, 8, 3, padding=1, device=device)
    x = spikes(2, 5, 4, 9, 9, device=device)
    inputs = [s for s in saved_by(conv, x) if s[2].data_ptr() != conv.weight.data_ptr() and s[1] > 0]
    assert [(d, b) for d, b, _ in inputs] == [(torch.uint8, (x.numel() + 7) // 8)]


class OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_nothing_is_packed_without_autograd():
    layer = spikejit.PackedSpikeLinear(30, 5)
    conv = spikejit.PackedSpikeConv2d(2, 3, 3)
    x, xc = spikes(4, 30), spikes(2, 2, 6, 6)
    for grad_enabled in (False, True):
        with torch.set_grad_enabled(grad_enabled), OpLog() as log:
            layer(x)
            conv(xc)
        packs = [n for n in log.names if "bit_spike_compress" in n]
        assert len(packs) == (2 if grad_enabled else 0), log.names
    with torch.no_grad():
        assert torch.equal(layer(x), nn.functional.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_opcheck(device):
    x = spikes(6, 4, 12, device=device).requires_grad_()
    w = torch.randn(5, 12, device=device, requires_grad=True)
    b = torch.randn(5, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.spikejit.packed_spike_linear.default, (x, w, b))
    torch.library.opcheck(torch.ops.spikejit.packed_spike_linear.default, (x, w, None))
    xc = spikes(3, 4, 8, 8, device=device).requires_grad_()
    wc = torch.randn(6, 2, 3, 3, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.spikejit.packed_spike_conv2d.default, (xc, wc, None, [1, 2], [1, 0], [1, 1], 2))
    torch.library.opcheck(torch.ops.spikejit.packed_spike_conv2d.default,
                          (xc, wc, torch.randn(6, device=device, requires_grad=True), [1, 1], [1, 1], [2, 1], 2))


class SpikingNet(nn.Module):
    """conv -> BN -> LIF -> conv (packed) -> BN -> LIF -> linear (packed), on [T, B, 2, 8, 8]."""

    def __init__(self, packed):
        super().__init__()
        wrap = spikejit.packed_spikes if packed else (lambda m: m)
        self.conv1, self.bn1 = nn.Conv2d(2, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.lif1 = spikejit.LIFNode(step_mode="m", surrogate_function=spikejit.surrogate.ATan())
        self.conv2, self.bn2 = wrap(nn.Conv2d(8, 8, 3, padding=1, bias=False)), nn.BatchNorm2d(8)
        self.lif2 = spikejit.LIFNode(step_mode="m", v_reset=None)
        self.fc = wrap(nn.Linear(8 * 8 * 8, 10))

    def forward(self, x):
        self.lif1.reset()
        self.lif2.reset()
        T, B = x.shape[:2]
        y = self.lif1(self.bn1(self.conv1(x.flatten(0, 1))).unflatten(0, (T, B)))
        y = self.lif2(self.bn2(self.conv2(y.flatten(0, 1))).unflatten(0, (T, B)))
        return self.fc(y.flatten(2)).mean(0)


def loss_of(model, x):
    return model(x).square().mean()


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_network_gradients_equal_and_compile_without_graph_breaks(device):
    packed = SpikingNet(packed=True).to(device)
    plain = copy.deepcopy(packed)
    plain.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False).to(device)
    plain.fc = nn.Linear(8 * 8 * 8, 10).to(device)
    plain.conv2.load_state_dict(packed.conv2.state_dict())
    plain.fc.load_state_dict(packed.fc.state_dict())
    x = torch.randn(4, 3, 2, 8, 8, device=device) * 2
    loss_of(packed, x).backward()
    loss_of(plain, x).backward()
    for (name, p), q in zip(packed.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), name

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(loss_of)(packed, x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    packed.lif1.reset()  # the states hold autograd history, which deepcopy refuses
    packed.lif2.reset()
    eager = copy.deepcopy(packed)
    for model in (packed, eager):
        model.zero_grad()
    compiled = torch.compile(loss_of, fullgraph=True)
    loss_c, loss_e = compiled(packed, x), loss_of(eager, x)
    loss_c.backward()
    loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(packed.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"grad of {name}")
    torch._dynamo.reset()


def test_check_spikes_flag_and_errors():
    layer = spikejit.PackedSpikeLinear(8, 3, check_spikes=True)
    layer(spikes(4, 8))
    with pytest.raises(RuntimeError, match="expects spikes"):
        layer(torch.full((4, 8), 0.5))
    conv = spikejit.PackedSpikeConv2d(2, 3, 3, check_spikes=True)
    with pytest.raises(RuntimeError, match="expects spikes"):
        conv(torch.full((1, 2, 5, 5), 2.0))
    with pytest.raises(ValueError, match=r"x: expected \[C, H, W\]"):
        conv(spikes(5, 5))
    with pytest.raises(ValueError, match="padding: 'same' with kernel_size"):
        spikejit.PackedSpikeConv2d(2, 3, 4, padding="same")
    with pytest.raises(TypeError, match="layer: expected an nn.Linear or nn.Conv2d, got Conv1d"):
        spikejit.packed_spikes(nn.Conv1d(2, 3, 3))


def test_packed_spikes_shares_parameters_and_mode():
    linear = nn.Linear(6, 4).eval()
    packed = spikejit.packed_spikes(linear)
    assert isinstance(packed, spikejit.PackedSpikeLinear) and not packed.training
    assert packed.weight is linear.weight and packed.bias is linear.bias
    conv = nn.Conv2d(2, 3, 3, bias=False, dtype=torch.float64)
    packed_conv = spikejit.packed_spikes(conv)
    assert packed_conv.weight is conv.weight and packed_conv.bias is None
    assert packed_conv.weight.dtype == torch.float64


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_a_second_derivative_through_the_weights_gradient_is_an_error_not_a_missing_term(kind):
    """The input is saved as bits: the weight's gradient has no graph back to it. Differentiating
    that gradient again raises (with respect to the input, also beside other terms); the input's
    gradient keeps its second derivatives (it reads the weight, not the input)."""
    if kind == "linear":
        layer, x = spikejit.PackedSpikeLinear(8, 4), spikes(5, 8)
        reference = nn.Linear(8, 4)
    else:
        layer, x = spikejit.PackedSpikeConv2d(2, 3, 3, padding=1), spikes(2, 2, 5, 5)
        reference = nn.Conv2d(2, 3, 3, padding=1)
    reference.load_state_dict(layer.state_dict())
    x.requires_grad_()
    (grad_w,) = torch.autograd.grad((layer(x) ** 2).sum(), layer.weight, create_graph=True)
    with pytest.raises(RuntimeError, match="^spikejit packed-spike layers: the weight's gradient has first"):
        torch.autograd.grad((grad_w ** 2).sum() + (x ** 2).sum(), x)
    for module in (layer, reference):
        (grad_x,) = torch.autograd.grad((module(x) ** 2).sum(), x, create_graph=True)
        module.second = torch.autograd.grad((grad_x ** 2).sum(), module.weight)[0]
    torch.testing.assert_close(layer.second, reference.second)
