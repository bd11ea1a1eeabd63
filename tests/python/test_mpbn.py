"""MPBNLIFNode against SpikingJelly's, on the CPU and on CUDA: training with the batch norm (the
per-step loop), evaluation (one kernel), the folded thresholds in evaluation (one kernel) and in
test-time adaptation (the loop, with and without running statistics, with normalize_residual),
learnable thresholds, without the batch norm; linear (out_features) and convolutional
(out_channels) inputs; single and multi step. Spikes bit for bit, potentials and gradients within
rounding, the running statistics as SpikingJelly leaves them. Also: the evaluation runs the
kernel, torch.compile, and bad input."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input, require_cuda
from module_checks import assert_close_to_reference, check_compiles_like_eager

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

T, B, C = 5, 6, 4
SHAPES = {"out_features": (T, B, C), "out_channels": (T, B, C, 3, 2)}


def pair(device, layer="out_features", fold=None, **options):
    """(spikejit's, SpikingJelly's) MPBNLIFNode with the same state: the batch norm's weight, bias
    and running statistics (and a) moved at random; `fold`: re_parameterize_v_threshold's
    arguments, applied to both."""
    theirs = sj_neuron.MPBNLIFNode(step_mode="m", **{layer: C}, **options).to(device)
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(0.3 * torch.randn_like(p))
        if not isinstance(theirs.vbn, torch.nn.Identity):
            theirs.vbn.running_mean.normal_(0.0, 0.5)
            theirs.vbn.running_var.uniform_(0.5, 2.0)
    ours = spikejit.MPBNLIFNode(step_mode="m", **{layer: C}, **options).to(device)
    ours.load_state_dict(theirs.state_dict())
    if fold is not None:
        ours.re_parameterize_v_threshold(**fold)
        theirs.re_parameterize_v_threshold(**fold)
    return ours, theirs


def run(node, x, cotangent):
    """(spikes, v_seq, v, x's gradient, every parameter's gradient by name) of one call."""
    node.store_v_seq = True
    xr = x.clone().requires_grad_()
    s = node(xr)
    (s * cotangent).sum().backward()
    grads = {name: p.grad.clone() for name, p in node.named_parameters() if p.grad is not None}
    node.zero_grad()
    return s.detach(), node.v_seq.detach(), node.v.detach(), xr.grad, grads


def compare(ours, theirs, x, exact_potentials=True):
    """One call each from their reset states: spikes bit for bit (some fire, some not), potentials
    (bit for bit on the CPU unless `exact_potentials` is off: the batch norm of evaluation as an
    affine map rounds as F.batch_norm does only to within an ulp; on CUDA within rounding, since
    PyTorch there divides by a Python number as a multiplication by its reciprocal), gradients,
    and the state dicts after."""
    exact_potentials = exact_potentials and x.device.type == "cpu"
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(x)
    s, v_seq, v, grad_x, grads = run(ours, x, cotangent)
    s_ref, v_seq_ref, v_ref, grad_x_ref, grads_ref = run(theirs, x, cotangent)
    assert torch.equal(s, s_ref), "spikes differ"
    assert 0 < float(s_ref.mean()) < 1, "the case should fire some spikes, not all"
    for a, b in ((v_seq, v_seq_ref), (v, v_ref)):
        if exact_potentials:
            assert torch.equal(a, b)
        else:
            assert_close_to_reference(a, b)
    assert_close_to_reference(grad_x, grad_x_ref)
    assert grads.keys() == grads_ref.keys()
    for name in grads:
        assert_close_to_reference(grads[name], grads_ref[name], terms=x.numel() // grads[name].numel())
    state, state_ref = ours.state_dict(), theirs.state_dict()
    assert state.keys() == state_ref.keys()
    for name in state:
        assert torch.equal(state[name], state_ref[name]), name
    assert ours.bn_momentum == theirs.bn_momentum
    ours.reset()
    theirs.reset()


GRID = [dict(zip(("v_reset", "decay_input", "detach_reset"), values))
        for values in itertools.product((0.0, None), (False, True), (False, True))]


def case_id(options):
    return "-".join(f"{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("layer", list(SHAPES))
@pytest.mark.parametrize("options", GRID, ids=case_id)
def test_batch_norm_in_training_and_evaluation_matches_spikingjelly(options, layer, device):
    ours, theirs = pair(device, layer, **options)
    x = random_input(*SHAPES[layer], device=device)
    compare(ours, theirs, x)  # training: the per-step loop, batch statistics, running statistics updated
    ours.eval()
    theirs.eval()
    compare(ours, theirs, x, exact_potentials=False)  # evaluation: one kernel


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("layer", list(SHAPES))
@pytest.mark.parametrize("fold", [{}, {"normalize_residual": True}, {"running_stats": True},
                                  {"normalize_residual": True, "running_stats": True}], ids=case_id)
def test_folded_thresholds_and_test_time_adaptation_match_spikingjelly(fold, layer, device):
    ours, theirs = pair(device, layer, fold, v_reset=None, tau=3.0)
    x = random_input(*SHAPES[layer], device=device)
    ours.eval()
    theirs.eval()
    compare(ours, theirs, x)  # one kernel with the thresholds per channel
    ours.train()
    theirs.train()
    for _ in range(2):  # adaptation: mu, sigma2 and bn_momentum move with every step
        compare(ours, theirs, x)
    ours.eval()
    theirs.eval()
    compare(ours, theirs, x)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("options", [dict(learnable_vth=True), dict(mpbn=False), dict(mpbn=False, learnable_vth=True)],
                         ids=case_id)
def test_learnable_thresholds_and_no_batch_norm_match_spikingjelly(options, device):
    ours, theirs = pair(device, "out_channels", surrogate_function=sj_surrogate.ATan(alpha=3.0), **options)
    x = random_input(*SHAPES["out_channels"], device=device)
    for mode in ("train", "eval"):
        ours.train(mode == "train")
        theirs.train(mode == "train")
        # (evaluation with a batch norm: its affine map rounds to within an ulp of F.batch_norm's)
        compare(ours, theirs, x, exact_potentials=mode == "train" or options.get("mpbn") is False)
    if options.get("mpbn", True):  # a learned threshold folds into v_threshold = exp(a)
        ours.re_parameterize_v_threshold()
        theirs.re_parameterize_v_threshold()
        assert torch.equal(ours.v_threshold, theirs.v_threshold) and not hasattr(ours, "a")
        compare(ours, theirs, x)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_single_steps_match_spikingjellys(mode):
    ours, theirs = pair("cpu", "out_features")
    ours.step_mode = theirs.step_mode = "s"
    ours.train(mode == "train")
    theirs.train(mode == "train")
    x = random_input(T, B, C)
    for t in range(T):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        assert_close_to_reference(ours.v, theirs.v)
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a, b)


def test_evaluation_runs_one_kernel_and_training_the_loop():
    node = spikejit.MPBNLIFNode(out_features=C, step_mode="m")
    x = random_input(T, B, C).requires_grad_()
    assert type(node(x).grad_fn).__name__ == "StackBackward0"  # the steps' outputs stacked
    node.reset()
    node.eval()
    assert type(node(x).grad_fn).__name__ != "StackBackward0"
    folded = spikejit.MPBNLIFNode(out_features=C, step_mode="m").eval()
    folded.re_parameterize_v_threshold(normalize_residual=True)
    assert type(folded(x).grad_fn).__name__ != "StackBackward0"


@pytest.mark.cuda
def test_evaluation_does_not_synchronise_the_device():
    require_cuda()
    x = random_input(T, B, C, 3, 2, device="cuda").requires_grad_()
    plain = spikejit.MPBNLIFNode(out_channels=C, step_mode="m").cuda().eval()
    folded = spikejit.MPBNLIFNode(out_channels=C, step_mode="m").cuda().eval()
    folded.re_parameterize_v_threshold(normalize_residual=True)
    for node in (plain, folded):  # warm up: compiles or loads the kernels
        node(x).sum().backward()
        node.reset()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for node in (plain, folded):
            node(x).sum().backward()
            node.reset()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_compiles_without_graph_breaks(mode, device):
    node = spikejit.MPBNLIFNode(out_features=C, step_mode="m").to(device).train(mode == "train")
    check_compiles_like_eager(node, random_input(T, B, C, device=device))


def test_bad_arguments_and_inputs_are_named():
    with pytest.raises(ValueError, match=r"^out_features, out_channels: expected exactly one of them, got None and "
                                         r"None"):
        spikejit.MPBNLIFNode()
    with pytest.raises(ValueError, match=r"^out_features, out_channels: expected exactly one of them, got 3 and 4"):
        spikejit.MPBNLIFNode(out_features=3, out_channels=4)
    with pytest.raises(ValueError, match=r"^out_channels: expected an int >= 1 \(the channels\), got 0"):
        spikejit.MPBNLIFNode(out_channels=0)
    with pytest.raises(TypeError, match=r"^mpbn: expected a bool"):
        spikejit.MPBNLIFNode(out_features=3, mpbn="yes")
    with pytest.raises(ValueError, match=r"^tau: expected a float > 1, got 0\.5"):
        spikejit.MPBNLIFNode(out_features=3, tau=0.5)
    node = spikejit.MPBNLIFNode(out_features=3, step_mode="m")
    with pytest.raises(ValueError, match=r"^x_seq: expected steps of shape \[B, 3, \.\.\.\] \(3 channels at "
                                         r"dimension 1\), got shape \[2, 4\]"):
        node(torch.randn(5, 2, 4))
    with pytest.raises(TypeError, match=r"^x_seq: expected a tensor, got list"):
        node([1.0])
