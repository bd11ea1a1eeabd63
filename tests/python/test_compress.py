"""Bit-spike compression ops on the C++ kernels: bytes against the pure-PyTorch formula for every
dtype and length, decompression into every dtype, opcheck, torch.compile, the errors, and on CUDA
the same bytes as on the CPU (poisoned outputs, the current stream, no synchronisation)."""
import pytest
import torch

import spikejit
from conftest import device_params
from spikejit import _core
from spikejit.ops import SPIKE_DTYPE_CODES

DTYPES = list(SPIKE_DTYPE_CODES)
LENGTHS = [0, 1, 7, 8, 9, 31, 33, 4097, 64 * 1024 + 13, (1 << 20) + 3]


def reference_compress(s):
    """The format by definition: bit i of byte j is (element 8j+i != 0), the last byte zero-padded."""
    bits = (s.reshape(-1) != 0).to(torch.uint8)
    bits = torch.nn.functional.pad(bits, (0, (-bits.numel()) % 8)).view(-1, 8)
    shifts = torch.arange(8, dtype=torch.uint8, device=s.device)
    return (bits << shifts).sum(dim=1, dtype=torch.uint8)


def random_spikes(n, dtype, device="cpu"):
    """Zeros, ones and other values (negatives, -0.0, NaN, Inf, the most negative integer)."""
    kind = torch.randint(0, 10, (n,))
    if dtype == torch.bool:
        return (kind < 4).to(device)
    if dtype.is_floating_point:
        other = torch.randn(n, dtype=torch.float64) * 100
        specials = torch.tensor([-0.0, float("nan"), float("inf"), -float("inf"), 1e-40, -2.0], dtype=torch.float64)
        other = torch.where(kind == 9, specials[torch.randint(0, len(specials), (n,))], other)
    else:
        info = torch.iinfo(dtype)
        other = torch.randint(info.min, info.max, (n,), dtype=torch.int64)
        other = torch.where(kind == 9, torch.full_like(other, info.min), other)
    x = torch.where(kind < 4, torch.zeros_like(other), torch.where(kind < 7, torch.ones_like(other), other))
    return x.to(dtype).to(device)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bytes_equal_the_pure_torch_formula(dtype, device):
    for n in LENGTHS:
        s = random_spikes(n, dtype, device)
        c = spikejit.bit_spike_compress(s)
        assert c.dtype == torch.uint8 and c.shape == ((n + 7) // 8,) and c.device == s.device
        assert torch.equal(c, reference_compress(s)), f"n={n}"
        back = spikejit.bit_spike_decompress(c, [n], dtype)
        assert back.dtype == dtype and torch.equal(back, (s != 0).to(dtype)), f"n={n}"


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("out", DTYPES, ids=str)
def test_decompress_into_every_dtype(out, device):
    s = (torch.rand(6, 5, 37, device=device) > 0.6).float()
    c = spikejit.bit_spike_compress(s)
    y = spikejit.bit_spike_decompress(c, (6, 5, 37), out)
    assert y.shape == s.shape and y.dtype == out
    assert torch.equal(y.double(), s.double())
    assert spikejit.bit_spike_decompress(c, [6, 185]).dtype == torch.uint8  # the default


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_shapes_and_non_contiguous_inputs(device):
    s = (torch.rand(9, 13, 7, device=device) > 0.5).half()
    t = s.transpose(0, 2)  # not contiguous: compressed as its row-major contiguous copy
    assert torch.equal(spikejit.bit_spike_compress(t), reference_compress(t.contiguous()))
    assert torch.equal(spikejit.bit_spike_compress(s), spikejit.bit_spike_compress(s.reshape(-1)))
    c = spikejit.bit_spike_compress(s[:, 3:, 1:])  # a view with an offset
    assert torch.equal(c, reference_compress(s[:, 3:, 1:].contiguous()))
    empty = torch.empty(0, 4, device=device)
    assert spikejit.bit_spike_compress(empty).shape == (0,)
    assert spikejit.bit_spike_decompress(spikejit.bit_spike_compress(empty), [0, 4], torch.float32).shape == (0, 4)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_kernels_write_every_byte_of_poisoned_outputs(device):
    """The bindings on pre-filled outputs: every packed byte and every element is overwritten."""
    run = _core.cpu_bit_spike_compress if device.type == "cpu" else _core.cuda_bit_spike_compress
    back = _core.cpu_bit_spike_decompress if device.type == "cpu" else _core.cuda_bit_spike_decompress
    extra = {"threads": 2} if device.type == "cpu" else {"stream": torch.cuda.current_stream(device).cuda_stream,
                                                          "device": device.index}
    from spikejit.ops import _spike_spec
    for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.float64):
        n = 3 * 4096 + 45
        s = random_spikes(n, dtype, device)
        packed = torch.full(((n + 7) // 8,), 0xA5, dtype=torch.uint8, device=device)
        run(_spike_spec(s), _spike_spec(packed), **extra)
        assert torch.equal(packed, reference_compress(s))
        y = torch.full((n,), float("nan") if dtype.is_floating_point else 77, dtype=dtype, device=device)
        back(_spike_spec(packed), _spike_spec(y), **extra)
        assert torch.equal(y, (s != 0).to(dtype))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_opcheck(device):
    for dtype in (torch.float32, torch.bool, torch.int16, torch.float64):
        s = random_spikes(77, dtype, device).reshape(7, 11)
        torch.library.opcheck(torch.ops.spikejit.bit_spike_compress.default, (s,))
    c = spikejit.bit_spike_compress(random_spikes(77, torch.float32, device))
    torch.library.opcheck(torch.ops.spikejit.bit_spike_decompress.default, (c, [7, 11]))
    torch.library.opcheck(torch.ops.spikejit.bit_spike_decompress.default, (c, [77], torch.bfloat16))


def test_compiles_without_graph_breaks():
    import torch._dynamo

    def round_trip(x):
        c = spikejit.bit_spike_compress(x > 0)
        return spikejit.bit_spike_decompress(c, x.shape, torch.float32) * x

    x = torch.randn(5, 33)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(round_trip)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    assert torch.equal(torch.compile(round_trip, fullgraph=True)(x), x.clamp(min=0))


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="^s: expected one of bool, uint8"):
        spikejit.bit_spike_compress(torch.zeros(4, dtype=torch.complex64))
    c = spikejit.bit_spike_compress(torch.ones(20))
    with pytest.raises(ValueError, match=r"compressed: expected uint8\[4\] for shape \[30\]"):
        spikejit.bit_spike_decompress(c, [30])
    with pytest.raises(ValueError, match="compressed: expected uint8"):
        spikejit.bit_spike_decompress(c.int(), [20])
    with pytest.raises(ValueError, match="shape: expected dimensions >= 0"):
        spikejit.bit_spike_decompress(c, [-4, -5])
    with pytest.raises(TypeError, match="^dtype: expected one of"):
        spikejit.bit_spike_decompress(c, [20], torch.complex64)
    with pytest.raises(spikejit.ArgumentError, match="packed") as info:
        _core.cpu_bit_spike_compress((torch.ones(20).data_ptr(), 8, [20]), (c.data_ptr(), 1, [2]))
    assert info.value.argument == "packed"
    with pytest.raises(spikejit.ArgumentError, match="spike dtype code"):
        _core.cpu_bit_spike_compress((torch.ones(20).data_ptr(), 12, [20]), (c.data_ptr(), 1, [3]))


# ---- CUDA only --------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_bytes_equal_cpu_bytes(device):
    for dtype in DTYPES:
        for n in LENGTHS + [(1 << 24) + 5]:
            s = random_spikes(n, dtype)
            c_cpu = spikejit.bit_spike_compress(s)
            c_gpu = spikejit.bit_spike_compress(s.to(device))
            assert torch.equal(c_gpu.cpu(), c_cpu), f"{dtype} n={n}"
            y = spikejit.bit_spike_decompress(c_gpu, [n], dtype)
            assert torch.equal(y.cpu(), spikejit.bit_spike_decompress(c_cpu, [n], dtype)), f"{dtype} n={n}"


@pytest.mark.cuda
@pytest.mark.parametrize("device", ["cuda"], indirect=True)
def test_cuda_runs_on_the_current_stream_without_synchronising(device):
    s = random_spikes((1 << 22) + 9, torch.float16, device)
    expected = reference_compress(s)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(side):
            c = spikejit.bit_spike_compress(s)
            y = spikejit.bit_spike_decompress(c, s.shape, torch.float16)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    side.synchronize()
    assert torch.equal(c, expected)
    assert torch.equal(y, (s != 0).half())
