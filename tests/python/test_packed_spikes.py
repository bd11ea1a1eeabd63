"""Packed spikes in the neuron kernels: outputs returned as bit rows (uint8 [T, ceil(N/8)],
neuron n of step t at bit n % 8 of byte n // 8 of row t) and spike-valued values saved as bits
for the backward (pack_spikes). References: the rows of the pure-PyTorch formula, the unpacked
outputs, the default save policy's gradients (bit for bit on the CPU in float32 / float64).
Also opcheck, torch.compile and the errors. CUDA cases skip without a GPU unless
SPIKEJIT_REQUIRE_CUDA=1."""
import math
from pathlib import Path

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from spikejit import _core, _kernel_calls, ops, registry
from spikejit.functional import builtin_handle, run_neuron

NEURONS = Path(__file__).resolve().parent.parent / "neurons"
SHAPES = [(0, 5), (3, 0), (1, 1), (4, 7), (4, 8), (3, 9), (2, 3, 11), (5, 4, 16), (2, 1000)]


def reference_rows(s):
    """The layout by definition: bit n % 8 of byte n // 8 of row t is (s[t].flatten()[n] != 0)."""
    steps = s.shape[0]
    bits = (s.reshape(steps, math.prod(s.shape[1:])) != 0).to(torch.uint8)
    bits = torch.nn.functional.pad(bits, (0, (-bits.shape[1]) % 8)).view(steps, (bits.shape[1] + 7) // 8, 8)
    shifts = torch.arange(8, dtype=torch.uint8, device=s.device)
    return (bits << shifts).sum(dim=2, dtype=torch.uint8)


def handle_of(stem):
    """The registry handle of a neuron of tests/neurons."""
    return registry.register(_core.Program.from_file(str(NEURONS / f"{stem}.sj")))


# ---------------------------------------------------------------------------------------------
# pack_spike_rows / unpack_spike_rows


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.uint8, torch.float64], ids=str)
def test_rows_round_trip(dtype, device):
    for shape in SHAPES:
        s = (torch.rand(shape, device=device) > 0.6).to(dtype)
        packed = spikejit.pack_spike_rows(s)
        assert packed.dtype == torch.uint8 and list(packed.shape) == [shape[0], (math.prod(shape[1:]) + 7) // 8]
        assert torch.equal(packed, reference_rows(s)), shape
        back = spikejit.unpack_spike_rows(packed, shape, dtype)
        assert back.dtype == dtype and torch.equal(back, s), shape
    # nonzero is a spike, as in bit_spike_compress
    x = torch.tensor([[0.0, -0.0, 2.0, float("nan"), -1.0, 0.0, 0.0, 0.0, 5.0]], device=device)
    assert spikejit.pack_spike_rows(x).tolist() == [[0b11100, 0b1]]


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_rows_are_bit_spike_compress_when_n_is_a_multiple_of_8(device):
    s = (torch.rand(6, 4, 10, device=device) > 0.5).float()
    assert torch.equal(spikejit.pack_spike_rows(s).reshape(-1), spikejit.bit_spike_compress(s))


def test_rows_errors():
    with pytest.raises(ValueError, match=r"packed: expected uint8\[4, 2\].*got uint8\[4, 1\]"):
        spikejit.unpack_spike_rows(torch.zeros(4, 1, dtype=torch.uint8), [4, 9])
    with pytest.raises(ValueError, match=r"packed: expected uint8\[4, 2\].*got float32\[4, 2\]"):
        spikejit.unpack_spike_rows(torch.zeros(4, 2), [4, 9])
    with pytest.raises(ValueError, match=r"packed: expected uint8\[3, 2\]"):
        spikejit.unpack_spike_rows(torch.zeros(4, 2, dtype=torch.uint8), [3, 9])
    with pytest.raises(ValueError, match=r"shape: expected a sequence shape"):
        spikejit.unpack_spike_rows(torch.zeros(0, dtype=torch.uint8), [])
    with pytest.raises(ValueError, match=r"s: expected a sequence shape"):
        spikejit.pack_spike_rows(torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"dtype: expected one of"):
        spikejit.unpack_spike_rows(torch.zeros(4, 2, dtype=torch.uint8), [4, 9], torch.complex64)


# ---------------------------------------------------------------------------------------------
# Packed outputs


def functional_cases(x, packed_spikes):
    """(name, results) of every functional built-in on x, spikes packed or not."""
    w = torch.tensor([0.3], dtype=x.dtype, device=x.device)
    sg = spikejit.surrogate.ATan()
    kw = dict(packed_spikes=packed_spikes)
    return [
        ("multistep_if", spikejit.multistep_if(x, None, 1.0, None, False, sg, **kw)),
        ("multistep_lif", spikejit.multistep_lif(x, None, True, 3.0, 0.8, 0.0, True, sg, False, **kw)),
        ("multistep_plif", spikejit.multistep_plif(x, None, torch.tensor([0.4], dtype=x.dtype, device=x.device),
                                                   **kw)),
        ("if_multi_step", spikejit.if_multi_step(x, None, store_v_seq=True, **kw)),
        ("lif_multi_step", spikejit.lif_multi_step(x, None, 2.0, **kw)),
        ("plif_multi_step", spikejit.plif_multi_step(x, None, w, store_v_seq=True, **kw)),
    ]


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_functional_packed_spikes_are_the_rows_of_the_spikes(dtype, device):
    for shape in [(7, 3, 5), (4, 33), (6, 64), (0, 9), (3, 0)]:
        x = random_input(*shape, device=device, dtype=dtype)
        for (name, full), (_, packed) in zip(functional_cases(x, False), functional_cases(x, True)):
            s = full[0]
            assert packed[0].dtype == torch.uint8, name
            assert torch.equal(packed[0], reference_rows(s)), (name, shape)
            for a, b in zip(full[1:], packed[1:]):  # the states are the same
                assert (a is None and b is None) or torch.equal(a, b), name


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_packed_spikes_in_training_carry_no_gradient(device):
    x = random_input(8, 37, device=device).requires_grad_()
    s_bits, v_last, v_seq = spikejit.lif_multi_step(x, None, store_v_seq=True, packed_spikes=True)
    assert not s_bits.requires_grad and v_seq.requires_grad
    cotangent = torch.randn_like(v_seq)
    (ours,) = torch.autograd.grad(v_seq, x, cotangent)
    x2 = x.detach().clone().requires_grad_()
    s, _, v_seq2 = spikejit.lif_multi_step(x2, None, store_v_seq=True)
    assert torch.equal(s_bits, reference_rows(s))
    (want,) = torch.autograd.grad(v_seq2, x2, cotangent)
    assert torch.equal(ours, want)


def mixed_core(x, v):
    """A spike, a 0/1 comparison and a value that is neither."""
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.ATan()(h - 1.0)
    c = (h > 0.5).to(h.dtype)
    return s, c, h * c, h * (1.0 - s)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_flexsn_packed_outputs(device):
    plain = spikejit.FlexSN(mixed_core, 1, 1, 3, strict=True)
    packed = spikejit.FlexSN(mixed_core, 1, 1, 3, strict=True, packed_outputs=[0, 1])
    assert plain.program.packable_outputs == [True, True, False]
    assert packed.packed_outputs == (0, 1)
    x = random_input(6, 4, 13, device=device)
    with torch.no_grad():
        s, c, m = plain(x)
        s_bits, c_bits, m2 = packed(x)
    assert torch.equal(s_bits, reference_rows(s)) and torch.equal(c_bits, reference_rows(c))
    assert torch.equal(m, m2) and torch.equal(plain.states[0], packed.states[0])
    # Training: the packed outputs carry no gradient, the others do.
    packed.reset()
    xg = x.clone().requires_grad_()
    s_bits, c_bits, m = packed(xg)
    assert s_bits.dtype == torch.uint8 and not s_bits.requires_grad and m.requires_grad
    m.sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad).all()


def test_flexsn_packed_outputs_errors():
    with pytest.raises(ValueError, match=r"packed_outputs: output 2 is not spike-valued"):
        spikejit.FlexSN(mixed_core, 1, 1, 3, strict=True, packed_outputs=[2])
    with pytest.raises(ValueError, match=r"packed_outputs: expected output indices 0..2, got 3"):
        spikejit.FlexSN(mixed_core, 1, 1, 3, strict=True, packed_outputs=[3])
    with pytest.raises(ValueError, match=r"step_mode='m'"):
        spikejit.FlexSN(mixed_core, 1, 1, 3, step_mode="s", packed_outputs=[0])
    with pytest.raises(ValueError, match=r"needs the compiled kernels"):
        spikejit.FlexSN(mixed_core, 1, 1, 3, backend="torch", packed_outputs=[0])


def test_ops_packed_outputs_errors():
    handle = handle_of("mixed_outputs")
    x = random_input(3, 10)
    theta = torch.ones(10)
    with pytest.raises(ValueError, match=r"packed_outputs: output 2 is not spike-valued"):
        torch.ops.spikejit.neuron_inference(handle, [x], [], [theta], False, False, 0b100)
    with pytest.raises(ValueError, match=r"packed_outputs: expected bits of the 3 outputs"):
        ops.run_inference(handle, [x], [], [theta], False, False, 0b1000)
    with pytest.raises(TypeError, match=r"packed_outputs: expected a bit mask"):
        ops.run_inference(handle, [x], [], [theta], False, False, -1)


# ---------------------------------------------------------------------------------------------
# The pack_spikes save policy


def run_policy(handle, num_outputs, x, v0, params, pack_spikes, cotangents=None):
    """(outputs and final state, gradients of x, the initial state and params) of one training step."""
    x, v0 = x.detach().clone().requires_grad_(), v0.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in params]
    outputs, finals, _ = run_neuron(handle, num_outputs, 1, [x], [v0], params, False, pack_spikes=pack_spikes)
    results = list(outputs) + list(finals)
    if cotangents is None:
        cotangents = [torch.randn_like(r) for r in results]
    live = [k for k, r in enumerate(results) if r.requires_grad]  # (see Program.differentiable_outputs)
    grads = torch.autograd.grad([results[k] for k in live], [x, v0, *params], [cotangents[k] for k in live],
                                allow_unused=True)
    return [r.detach() for r in results], grads, cotangents


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("stem", ["ste_lif", "two_thresholds", "mixed_outputs"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_pack_spikes_gradients_equal_the_default_policy(stem, dtype, device):
    if dtype == torch.float64 and device.type == "cuda":
        pytest.skip("float64 runs on the CPU only")
    handle = handle_of(stem)
    program = registry.program(handle)
    assert any(packed for _, packed in program.saved_plan(True))
    outputs = program.num_outputs
    params = [torch.rand(37, dtype=dtype, device=device) + 0.5] if program.params else []
    for steps in (0, 1, 9):
        x = random_input(steps, 37, device=device, dtype=dtype)
        v0 = random_input(37, device=device, dtype=dtype, scale=0.3)
        want, want_grads, cotangents = run_policy(handle, outputs, x, v0, params, False)
        got, got_grads, _ = run_policy(handle, outputs, x, v0, params, True, cotangents)
        for a, b in zip(want, got):
            assert torch.equal(a, b)
        for a, b in zip(want_grads, got_grads):
            if a is None or b is None:
                assert a is None and b is None
            elif device.type == "cpu":
                assert torch.equal(a, b)
            else:  # the GPU's parameter sums add in another order
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_pack_spikes_saves_bits(device):
    """Autograd keeps the two spikes of two_thresholds as uint8 bit rows, not one float value."""
    handle = handle_of("two_thresholds")
    x = random_input(12, 6, 21, device=device).requires_grad_()
    for pack_spikes, expected in ((False, [(torch.float32, [12, 6, 21])]),
                                  (True, [(torch.uint8, [12, 16]), (torch.uint8, [12, 16])])):
        kept = []

        def pack(t):  # (the empty anchor that refuses second derivatives holds no memory)
            if t.data_ptr() != x.data_ptr() and t.numel() > 0:
                kept.append((t.dtype, list(t.shape)))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            (y,), _, _ = run_neuron(handle, 1, 1, [x], [None], [], False, pack_spikes=pack_spikes)
        assert kept == expected
        y.sum().backward()


def test_saved_layout_reports_bit_rows():
    handle = handle_of("two_thresholds")
    program = registry.program(handle)
    assert program.saved_plan(False) == [(-1, False)]
    assert program.saved_plan(True) == [(-1, True), (-1, True)]
    layout = _core.saved_layout(program, 5, [3, 7], 0, 0, True)
    assert [(list(s), packed) for s, _, _, packed in layout] == [([5, 3], True), ([5, 3], True)]
    ours = _kernel_calls.training_call(handle, False, 0, 0, True).saved_buffers(torch.empty(0), [5, 3, 7])
    assert [(t.dtype, list(t.shape)) for t in ours] == [(torch.uint8, [5, 3])] * 2


def test_pack_spikes_errors():
    handle = handle_of("two_thresholds")
    x = random_input(4, 10).requires_grad_()
    with pytest.raises(ValueError, match=r"pack_spikes: expected False with checkpoints"):
        run_neuron(handle, 1, 1, [x], [None], [], False, checkpoint_every=2, pack_spikes=True)
    with pytest.raises(TypeError, match=r"pack_spikes: expected a bool"):
        spikejit.FlexSN(mixed_core, 1, 1, 3, pack_spikes=1)
    bits = ops.training_forward(handle, [x.detach()], [], [], False, 0, 0, True)[2:]
    assert [(b.dtype, list(b.shape)) for b in bits] == [(torch.uint8, [4, 2])] * 2
    wrong = [bits[0], torch.zeros(4, 1, dtype=torch.uint8)]
    with pytest.raises(ValueError, match=r"saved\[1\]: expected the spikes saved as bits, uint8\[4, 2\]"):
        torch.ops.spikejit.neuron_backward(handle, [4, 10], x.dtype, x.device, wrong, [], [None], [None], [], 0, True)
    with pytest.raises(ValueError, match=r"saved: expected 1 tensors"):
        torch.ops.spikejit.neuron_backward(handle, [4, 10], x.dtype, x.device, bits, [], [None], [None], [], 0, False)


# ---------------------------------------------------------------------------------------------
# opcheck and torch.compile


def opcheck_cases(device):
    lif = builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0)
    mixed = handle_of("mixed_outputs")
    two = handle_of("two_thresholds")
    x = random_input(7, 4, 5, device=device)
    theta = torch.ones(4, 5, device=device)
    xg, thetag = x.clone().requires_grad_(), theta.clone().requires_grad_()
    bits = torch.ops.spikejit.neuron_forward(two, [x], [], [], False, 0, 0, True)[2:]
    return [
        (torch.ops.spikejit.pack_spike_rows.default, ((x > 0.5).float(),)),
        (torch.ops.spikejit.unpack_spike_rows.default, (spikejit.pack_spike_rows(x > 0.5), [7, 4, 5])),
        (torch.ops.spikejit.unpack_spike_rows.default, (spikejit.pack_spike_rows(x > 0.5), [7, 20], torch.float16)),
        (torch.ops.spikejit.neuron_inference.default, (lif, [x], [], [], True, True, 1)),
        (torch.ops.spikejit.neuron_inference.default, (mixed, [x], [], [theta], False, False, 0b11)),
        (torch.ops.spikejit.neuron_forward.default, (mixed, [xg], [], [thetag], True, 0, 0b10, True)),
        (torch.ops.spikejit.neuron_forward.default, (two, [xg], [], [], False, 0, 0, True)),
        (torch.ops.spikejit.neuron_backward.default,
         (two, [7, 4, 5], x.dtype, x.device, bits, [], [torch.randn_like(x)], [torch.randn_like(theta)], [], 0, True)),
    ]


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("index", range(8))
def test_opcheck(index, device):
    op, args = opcheck_cases(device)[index]
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_torch_compile(device):
    """fullgraph, dynamic shapes: packed outputs in inference, pack_spikes in training."""
    two = spikejit.FlexSN(_two_thresholds_core, 1, 1, 1, strict=True, pack_spikes=True)
    assert two.program.saved_plan(True) == [(-1, True), (-1, True)]

    def infer(x):
        s, v = spikejit.multistep_lif(x, None, packed_spikes=True)
        return spikejit.unpack_spike_rows(s, x.shape, x.dtype) * 2 + v

    def train(x):
        return two(x).sum()

    torch._dynamo.reset()
    for shape in [(5, 3, 9), (7, 2, 4)]:
        x = random_input(*shape, device=device)
        want = infer(x)
        got = torch.compile(infer, fullgraph=True, dynamic=True)(x)
        assert torch.equal(want, got)
        xg, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        train(xg).backward()
        two.reset()
        torch.compile(train, fullgraph=True, dynamic=True)(xc).backward()
        two.reset()
        assert torch.equal(xg.grad, xc.grad)


def _two_thresholds_core(x, v):
    """tests/neurons/two_thresholds.sj as a FlexSN core."""
    h = v + (x - v) / 2.0
    lo = spikejit.surrogate.Sigmoid()(h - 0.5).detach()
    hi = spikejit.surrogate.Sigmoid()(h - 1.0).detach()
    return x * (lo + hi), h - 0.5 * (lo + hi)
