"""ActivationAwareIFNode, HalfThresholdIFNode and STBIFNode against SpikingJelly's (its torch
implementations), on the CPU and on CUDA. ActivationAwareIF: spikes exactly, v_seq, v and the
gradients (of x, the initial v, and thresholds and offsets that require them) within rounding,
over scalar and per-channel thresholds and offsets, resets and surrogates. HalfThresholdIF: the
same from its v_threshold / 2 start and from a random state. STBIF: outputs and every state
exactly, over levels, symmetric and custom bounds, calls that go on from the state a call left,
single and multi step. Also: option checks, reset, torch.compile without graph breaks,
checkpoints, pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (assert_run_matches_reference, backward_with_random_cotangents,
                           check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_inference_compiles_like_eager, check_pickled_module_runs, run_from_states)

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

CHANNELS = 3
SHAPE = (12, 2, CHANNELS, 5, 4)  # [T, B, C, H, W]


def aaif_grid():
    for threshold, offset, v_reset, detach_reset in itertools.product(
            ["scalar", "channel"], ["zero", "scalar", "channel"], [None, 0.0, -0.2], [False, True]):
        yield dict(threshold=threshold, offset=offset, v_reset=v_reset, detach_reset=detach_reset,
                   channel_dim=1 if detach_reset else -3)
    yield dict(threshold="channel", offset="channel", v_reset=None, detach_reset=False, channel_dim=1,
               surrogate=("ATan", {"alpha": 3.0}))


def case_id(opts):
    return "-".join(f"{k}={v[0] if k == 'surrogate' else v}" for k, v in opts.items())


def aaif_values(opts, generator):
    """The threshold and the offset of a case: scalars or one value per channel, random."""
    def value(kind, low, high):
        if kind == "zero":
            return 0.0
        count = () if kind == "scalar" else (CHANNELS,)
        return (torch.rand(count, generator=generator, dtype=torch.float64) * (high - low) + low).float()
    return value(opts["threshold"], 0.5, 1.5), value(opts["offset"], -0.2, 0.2)


def make_aaif(module, surrogates, opts, threshold, offset, device, dtype):
    surrogate = opts.get("surrogate")
    extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
    return module.ActivationAwareIFNode(v_threshold=threshold, v_offset=offset, channel_dim=opts["channel_dim"],
                                        v_reset=opts["v_reset"], detach_reset=opts["detach_reset"], step_mode="m",
                                        store_v_seq=True, **extra).to(device=device, dtype=dtype)


def run_aaif(node, x, v0, learn_thresholds):
    """(spikes, v_seq, v) and the gradients of x, v0 (and the threshold and offset) of one
    multi-step call with random cotangents on spikes, v_seq and v."""
    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    if learn_thresholds:
        node.v_threshold.requires_grad_()
        node.v_offset.requires_grad_()
    node.v = vr
    s = node(xr)
    outputs = [s, node.v_seq, node.v]
    backward_with_random_cotangents(outputs, seed=3)
    grads = [xr.grad, vr.grad] + ([node.v_threshold.grad, node.v_offset.grad] if learn_thresholds else [])
    return [y.detach() for y in outputs], grads


def compare_aaif(opts, device, dtype=torch.float32, shape=SHAPE, learn_thresholds=False):
    threshold, offset = aaif_values(opts, torch.Generator().manual_seed(11))
    x = random_input(*shape, device=device, dtype=dtype, scale=0.8)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.3)
    ours = run_aaif(make_aaif(spikejit, spikejit.surrogate, opts, threshold, offset, device, dtype), x, v0,
                    learn_thresholds)
    theirs = run_aaif(make_aaif(sj_neuron, sj_surrogate, opts, threshold, offset, device, dtype), x, v0,
                      learn_thresholds)
    assert_run_matches_reference(ours, theirs)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(aaif_grid()), ids=case_id)
def test_activation_aware_if_option_grid_matches_spikingjelly(opts, device):
    compare_aaif(opts, device)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_activation_aware_if_threshold_and_offset_gradients_match_spikingjelly(device):
    """Thresholds and offsets are buffers; made to require gradients, they get SpikingJelly's."""
    for opts in (dict(threshold="channel", offset="channel", v_reset=None, detach_reset=False, channel_dim=1),
                 dict(threshold="scalar", offset="scalar", v_reset=0.0, detach_reset=False, channel_dim=1)):
        compare_aaif(opts, device, learn_thresholds=True)


@pytest.mark.parametrize("opts", [list(aaif_grid())[i] for i in (0, 9, 36)], ids=case_id)
def test_activation_aware_if_float64_matches_spikingjelly(opts):
    compare_aaif(opts, torch.device("cpu"), dtype=torch.float64, learn_thresholds=True)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_activation_aware_if_long_sequences_match_spikingjelly(device):
    compare_aaif(dict(threshold="channel", offset="scalar", v_reset=None, detach_reset=False, channel_dim=1), device,
                 shape=(64, 4, CHANNELS, 17, 19))


def test_activation_aware_if_behaves_like_spikingjellys():
    """Inference (SpikingJelly's registered op): single step, then multi step from the state it
    left, v_seq, reset; the buffers follow the module and are in its state dict."""
    threshold, offset = torch.tensor([0.7, 1.0, 1.3]), torch.tensor([0.1, 0.0, -0.1])
    ours = spikejit.ActivationAwareIFNode(v_threshold=threshold, v_offset=offset, channel_dim=1)
    theirs = sj_neuron.ActivationAwareIFNode(v_threshold=threshold, v_offset=offset, channel_dim=1)
    x = random_input(*SHAPE, scale=0.8)
    with torch.no_grad():
        for t in range(3):
            assert torch.equal(ours(x[t]), theirs(x[t]))
            torch.testing.assert_close(ours.v, theirs.v, rtol=0, atol=0)
        ours.step_mode = theirs.step_mode = "m"
        ours.store_v_seq = theirs.store_v_seq = True
        assert torch.equal(ours(x[3:]), theirs(x[3:]))
        torch.testing.assert_close(ours.v_seq, theirs.v_seq, rtol=0, atol=0)
    ours.reset()
    assert ours.v == 0.0 and ours.v_seq is None
    assert set(ours.state_dict()) == {"v_threshold", "v_offset"}
    assert ours.to(torch.float64).v_threshold.dtype == torch.float64


def test_activation_aware_if_options_are_checked():
    with pytest.raises(ValueError, match=r"v_threshold: expected a scalar or a 1-D tensor .*got shape \[2, 2\]"):
        spikejit.ActivationAwareIFNode(v_threshold=torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"v_threshold: expected positive finite values, got \[1.0, -1.0\]"):
        spikejit.ActivationAwareIFNode(v_threshold=torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="v_offset: expected finite values, got inf"):
        spikejit.ActivationAwareIFNode(v_offset=float("inf"))
    with pytest.raises(TypeError, match="channel_dim: expected an int, got float"):
        spikejit.ActivationAwareIFNode(channel_dim=1.0)
    node = spikejit.ActivationAwareIFNode(v_threshold=torch.ones(4), channel_dim=1, step_mode="m")
    with pytest.raises(ValueError, match=r"v_threshold: expected 3 values \(the channels of dimension 1 of a step's "
                                         r"input of shape \[2, 3, 5, 4\]\), got 4"):
        node(random_input(*SHAPE))
    node.channel_dim = 7
    with pytest.raises(ValueError, match="channel_dim: expected a dimension of a step's input of shape"):
        node(random_input(*SHAPE))
    with pytest.raises(ValueError, match="v_threshold: expected positive finite values"):
        node.v_threshold = 0.0
    assert torch.equal(node.v_threshold, torch.ones(4))  # a rejected value leaves the old one


def test_activation_aware_if_compiles_checkpoints_and_pickles():
    x = random_input(8, 4, CHANNELS, 16, scale=0.8)
    per_channel = dict(v_threshold=torch.tensor([0.8, 1.0, 1.2]), v_offset=torch.tensor([0.1, 0.0, -0.1]),
                       channel_dim=1)
    check_compiles_like_eager(spikejit.ActivationAwareIFNode(step_mode="m", **per_channel), x)
    check_checkpoints_give_per_step_gradients(
        lambda k: spikejit.ActivationAwareIFNode(step_mode="m", checkpoint_every=k, **per_channel), x)
    check_pickled_module_runs(spikejit.ActivationAwareIFNode(step_mode="m", **per_channel), x)


def stbif_grid():
    yield dict(q_threshold=0.1, level=16, sym=True)
    yield dict(q_threshold=0.25, level=8, sym=False)
    yield dict(q_threshold=0.05, level=4, sym=True, pos_max=3.0, neg_min=-2.0)
    yield dict(q_threshold=torch.tensor(0.2), level=32, sym=False, pos_max=torch.tensor(5.0))


def stbif_states(node):
    return [node.q, node.acc_q, node.cur_output]


def compare_stbif(opts, device, dtype):
    """Three multi-step calls, each going on from the state the last left: outputs and states
    exactly equal to SpikingJelly's torch implementation (on the CPU: on CUDA it may choose its
    Triton kernel, whose division is not correctly rounded)."""
    ours = spikejit.STBIFNode(**opts, step_mode="m").to(device)
    theirs = sj_neuron.STBIFNode(**opts, step_mode="m")
    emitted = 0.0
    for call in range(3):
        x = random_input(10, 3, 41, device=device, dtype=dtype, scale=0.3 + 0.2 * call)
        y, y_ref = ours(x), theirs(x.cpu())
        assert torch.equal(y.cpu(), y_ref), f"call {call}: outputs differ"
        for a, b in zip(stbif_states(ours), stbif_states(theirs)):
            assert torch.equal(a.cpu(), b.to(a.dtype)), f"call {call}: states differ"
        emitted += float(y_ref.abs().sum())
    assert emitted > 0, "the case should emit"  # (a call may emit nothing once the counts reach their bounds)
    assert torch.equal(ours.accumulated.cpu(), theirs.accumulated.to(ours.accumulated.dtype))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(stbif_grid()), ids=lambda o: f"level={o['level']}-sym={o['sym']}")
def test_stbif_matches_spikingjelly(opts, device):
    compare_stbif(opts, device, torch.float32)


@pytest.mark.parametrize("opts", list(stbif_grid()), ids=lambda o: f"level={o['level']}-sym={o['sym']}")
def test_stbif_float64_matches_spikingjelly(opts):
    compare_stbif(opts, torch.device("cpu"), torch.float64)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_stbif_single_step_and_reset_behave_like_spikingjellys(device):
    ours = spikejit.STBIFNode(q_threshold=0.1, level=16, sym=True).to(device)
    theirs = sj_neuron.STBIFNode(q_threshold=0.1, level=16, sym=True)
    x = random_input(6, 5, 7, device=device, scale=0.4)
    for t in range(6):
        assert torch.equal(ours(x[t]).cpu(), theirs(x[t].cpu()))
    assert torch.equal(ours.accumulated.cpu(), theirs.accumulated)
    ours.reset()
    theirs.reset()
    assert ours.q is None and ours.acc_q is None and ours.cur_output is None
    with pytest.raises(RuntimeError, match="no accumulated state before forward"):
        ours.accumulated
    assert torch.equal(ours(x[0]).cpu(), theirs(x[0].cpu()))  # q starts at 0.5 again


def test_stbif_is_inference_only_and_checks_its_options():
    node = spikejit.STBIFNode(q_threshold=0.1, level=8, step_mode="m")
    x = random_input(4, 9, scale=0.5).requires_grad_()
    assert not node(x).requires_grad  # comparisons: no gradient, as SpikingJelly's
    with pytest.raises(ValueError, match="level: expected an int >= 2"):
        spikejit.STBIFNode(q_threshold=0.1, level=1)
    with pytest.raises(ValueError, match=r"q_threshold: expected one value, got shape \[2\]"):
        spikejit.STBIFNode(q_threshold=torch.ones(2), level=4)
    with pytest.raises(TypeError, match="x: expected a tensor, got list"):
        node([1.0])
    assert (float(node.pos_max), float(node.neg_min)) == (7.0, 0.0)
    symmetric = spikejit.STBIFNode(q_threshold=0.1, level=8, sym=True)
    assert (float(symmetric.pos_max), float(symmetric.neg_min)) == (3.0, -4.0)


def test_stbif_from_quantizer_compiles_and_pickles():
    quantizer = torch.nn.Module()
    quantizer.s, quantizer.sym = torch.tensor(0.125), True
    quantizer.pos_max, quantizer.neg_min = torch.tensor(7.0), torch.tensor(-8.0)
    ours, theirs = spikejit.STBIFNode.from_quantizer(quantizer), sj_neuron.STBIFNode.from_quantizer(quantizer)
    assert ours.level == theirs.level == 16
    ours.step_mode = "m"
    x = random_input(8, 4, 16, scale=0.5)

    def step(x):
        ours.reset()
        return ours(x)

    check_inference_compiles_like_eager(step, x)
    check_pickled_module_runs(ours, x, states=("q", "acc_q", "cur_output"))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", [dict(), dict(v_threshold=0.6, detach_reset=True),
                                  dict(v_threshold=1.5, surrogate_function="atan")], ids=str)
def test_half_threshold_if_matches_spikingjelly(opts, device):
    """From v_threshold / 2 (the default start) and from a random state: spikes exactly, v_seq,
    v and the gradients within rounding."""
    x = random_input(14, 3, 37, device=device, scale=0.8)
    sj_opts = dict(opts, surrogate_function=sj_surrogate.ATan()) if "surrogate_function" in opts else opts
    for start in ("default", "random"):
        states = {} if start == "default" else {"v": random_input(3, 37, device=device, scale=0.3)}
        runs = [run_from_states(module.HalfThresholdIFNode(step_mode="m", store_v_seq=True, **kwargs), x, states)
                for module, kwargs in ((spikejit, opts), (sj_neuron, sj_opts))]
        assert_run_matches_reference(*runs)


def test_half_threshold_if_behaves_like_spikingjellys():
    ours, theirs = spikejit.HalfThresholdIFNode(v_threshold=0.8), sj_neuron.HalfThresholdIFNode(v_threshold=0.8)
    assert ours.v == theirs.v == 0.4
    x = random_input(6, 2, 9, scale=0.8)
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
    ours.step_mode = theirs.step_mode = "m"
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    torch.testing.assert_close(ours.v, theirs.v, rtol=1e-6, atol=1e-6)
    ours.reset()
    theirs.reset()
    assert ours.v == theirs.v == 0.4
    with pytest.raises(ValueError, match="v_reset: HalfThresholdIFNode always resets softly, so expected None"):
        ours.v_reset = 0.0
    with pytest.raises(ValueError, match="v_threshold: expected a finite float > 0, got 0.0"):
        spikejit.HalfThresholdIFNode(v_threshold=0.0)
