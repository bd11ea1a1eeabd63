"""spikejit.from_spikingjelly against SpikingJelly itself: a network of SpikingJelly's layers and
neurons (options moved from their defaults, learned parameters moved at random) gives, after the
conversion, SpikingJelly's outputs and gradients; every neuron spikejit provides converts; what
cannot convert is refused by name."""
import copy
import warnings

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params, random_input
from spikejit.spikingjelly_conversion import CONVERTIBLE

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import functional, layer, surrogate
from spikingjelly.activation_based import neuron as sj
from spikingjelly.activation_based.model import spiking_vgg

T, B, FEATURES = 6, 3, 5


def _table(scale):
    row = [scale * 2.0 ** -k for k in range(T)]
    return sj.FewSpikeTable(row, row, row)


# SpikingJelly's neurons, each with options away from its defaults; all take [T, B, FEATURES].
SPIKINGJELLY_NEURONS = {
    "IFNode": lambda: sj.IFNode(v_threshold=0.8, v_reset=None, surrogate_function=surrogate.ATan(alpha=3.0),
                                detach_reset=True, step_mode="m", store_v_seq=True),
    "LIFNode": lambda: sj.LIFNode(tau=3.0, decay_input=False, v_threshold=0.9, v_reset=-0.1,
                                  surrogate_function=surrogate.Sigmoid(alpha=2.0), step_mode="m"),
    "ParametricLIFNode": lambda: sj.ParametricLIFNode(init_tau=3.0, decay_input=False, v_reset=None,
                                                      surrogate_function=surrogate.ATan(), step_mode="m"),
    "QIFNode": lambda: sj.QIFNode(tau=2.5, v_c=0.7, a0=1.2, step_mode="m"),
    "EIFNode": lambda: sj.EIFNode(tau=2.5, delta_T=0.8, theta_rh=0.7, step_mode="m"),
    "IzhikevichNode": lambda: sj.IzhikevichNode(a=0.2, b=0.3, tau_w=3.0, step_mode="m"),
    "ILIFNode": lambda: sj.ILIFNode(tau=1.5, v_threshold=0.9, step_mode="m"),
    "ComplementaryLIFNode": lambda: sj.ComplementaryLIFNode(tau=2.5, step_mode="m"),
    "KLIFNode": lambda: sj.KLIFNode(scale_reset=True, tau=2.5, step_mode="m"),
    "CUBALIFNode": lambda: _multi_step(sj.CUBALIFNode(c_decay=0.4, v_decay=0.6)),
    # (SpikingJelly's multi step of LIAF without store_v_seq returns LIF's spikes, not act(h))
    "LIAFNode": lambda: sj.LIAFNode(nn.PReLU(), True, tau=2.5, step_mode="m", store_v_seq=True),
    "GatedLIFNode": lambda: sj.GatedLIFNode(T, inplane=FEATURES, init_tau=0.3),
    "RAFNode": lambda: sj.RAFNode(b=-0.3, omega=1.2, step_mode="m"),
    "TernaryIFNode": lambda: sj.TernaryIFNode(v_threshold=0.8, step_mode="m"),
    "TernaryLIFNode": lambda: sj.TernaryLIFNode(tau=2.5, step_mode="m"),
    "NonSpikingIFNode": lambda: sj.NonSpikingIFNode(decode="max-mem"),
    "NonSpikingLIFNode": lambda: sj.NonSpikingLIFNode(tau=2.5, decode="mean-mem"),
    "SLTTLIFNode": lambda: sj.SLTTLIFNode(tau=2.5),
    "OTTTLIFNode": lambda: sj.OTTTLIFNode(tau=2.5),
    "ActivationAwareIFNode": lambda: sj.ActivationAwareIFNode(v_threshold=torch.rand(FEATURES) + 0.5,
                                                              v_offset=0.1 * torch.randn(FEATURES), step_mode="m"),
    "HalfThresholdIFNode": lambda: sj.HalfThresholdIFNode(v_threshold=0.9, step_mode="m"),
    "STBIFNode": lambda: sj.STBIFNode(q_threshold=0.1, level=16, sym=True, step_mode="m"),
    "SimpleIFNode": lambda: sj.SimpleIFNode(v_threshold=0.8, step_mode="m"),
    "SimpleLIFNode": lambda: sj.SimpleLIFNode(tau=2.5, decay_input=False, step_mode="m"),
    "PSN": lambda: sj.PSN(T),
    "MaskedPSN": lambda: sj.MaskedPSN(2, T, lambda_init=0.5, step_mode="m"),
    "SlidingPSN": lambda: sj.SlidingPSN(3, exp_init=False, step_mode="m"),
    "FewSpikeNode": lambda: sj.FewSpikeNode(_table(1.0), step_mode="m"),
    "OutlierAwareThresholdNode": lambda: sj.OutlierAwareThresholdNode(_table(1.0), _table(4.0), 1.5, step_mode="m"),
    "HGNode": lambda: sj.HGNode([_table(0.5), _table(1.0)], [0.6], step_mode="m"),
    "DSRIFNode": lambda: sj.DSRIFNode(T=T, v_threshold=2.0, alpha=0.4),
    "DSRLIFNode": lambda: sj.DSRLIFNode(T=T, tau=2.5, v_threshold_training=False),
    "MPBNLIFNode": lambda: sj.MPBNLIFNode(tau=2.5, out_features=FEATURES, learnable_vth=True, step_mode="m"),
}
SINGLE_STEP = {"SLTTLIFNode", "OTTTLIFNode"}  # online training: one step per call
INFERENCE = {"STBIFNode"}  # SpikingJelly's STBIF refuses autograd


def _multi_step(node):
    node.step_mode = "m"
    return node


def network(name):
    """Linear (-> Unflatten) -> SpikingJelly's neuron, the neuron's parameters moved from their initial values."""
    neuron = SPIKINGJELLY_NEURONS[name]()
    with torch.no_grad():
        for parameter in neuron.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    if name == "GatedLIFNode":  # SpikingJelly's gates of a channel broadcast over [T, B, C, H, W]
        return nn.Sequential(nn.Linear(4, 4 * FEATURES), nn.Unflatten(2, (FEATURES, 2, 2)), neuron)
    return nn.Sequential(nn.Linear(4, FEATURES), neuron)


def run(net, x, single_step, inference=False):
    """Outputs over x [T, B, 4] (a single-step network step by step), and the gradients of x and of
    every parameter, by name, after a weighted sum of the outputs (none for inference)."""
    if inference:
        with torch.no_grad():
            return run(net, x, single_step)
    x = x.detach().clone().requires_grad_(True)
    if single_step:
        outputs = [net(step) for step in x]
        y = torch.stack([o[0] if isinstance(o, list) else o for o in outputs])
    else:
        y = net(x)
    if not y.requires_grad:
        return y, None, {}
    (y * torch.linspace(0.5, 1.5, y.numel(), device=y.device, dtype=y.dtype).view_as(y)).sum().backward()
    grads = {name: p.grad for name, p in net.named_parameters() if p.grad is not None}
    return y.detach(), x.grad, grads


def test_every_spikejit_neuron_with_a_spikingjelly_counterpart_converts():
    exported = {name for name in spikejit.__all__ if name.endswith(("Node", "PSN")) and hasattr(sj, name)}
    # SimpleBaseNode: a base users subclass, not a neuron; FlexSN: SpikingJelly 2.0's, converted to
    # StaticInputsFlexSN (tests/python/test_static_inputs_flexsn.py)
    assert set(CONVERTIBLE) == exported - {"SimpleBaseNode"} | {"FlexSN"}
    assert CONVERTIBLE["FlexSN"] is spikejit.StaticInputsFlexSN
    assert set(SPIKINGJELLY_NEURONS) == set(CONVERTIBLE) - {"FlexSN"}


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", list(SPIKINGJELLY_NEURONS))
def test_converted_network_gives_spikingjellys_outputs_and_gradients(name, device):
    theirs = network(name).to(device)
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    assert type(ours[-1]) is getattr(spikejit, name) and isinstance(ours[0], nn.Linear)
    assert {n for n, _ in ours.named_parameters()} == {n for n, _ in theirs.named_parameters()}
    x = random_input(T, B, 4, device=device)
    for _ in range(2):  # a second sequence after reset_net
        y, grad_x, grads = run(ours, x, name in SINGLE_STEP, name in INFERENCE)
        y_ref, grad_x_ref, grads_ref = run(theirs, x, name in SINGLE_STEP, name in INFERENCE)
        torch.testing.assert_close(y, y_ref)
        torch.testing.assert_close(grad_x, grad_x_ref, rtol=1e-4, atol=1e-5)
        assert grads.keys() == grads_ref.keys()
        # Near-zero elements are compared against the network's gradient scale: a gradient whose
        # true value is 0 is rounding noise on both sides (MPBN's batch norm removes the Linear's
        # bias: its gradient came out 1e-5 against weight gradients of 700).
        atol = 1e-5 + 1e-6 * max((g.abs().max().item() for g in grads_ref.values()), default=0.0)
        for key in grads:
            torch.testing.assert_close(grads[key], grads_ref[key], rtol=1e-4, atol=atol, msg=key)
        ours.zero_grad()
        theirs.zero_grad()
        functional.reset_net(ours)
        functional.reset_net(theirs)


def test_a_single_step_network_converts_and_runs_step_by_step():
    """SpikingJelly's default, step_mode 's', driven by a loop over the steps as in its tutorials."""
    theirs = nn.Sequential(layer.Linear(4, 8), sj.LIFNode(tau=3.0, surrogate_function=surrogate.ATan()),
                           layer.Linear(8, 3), sj.IFNode(v_reset=None))
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    assert ours[1].step_mode == "s" and ours[3].step_mode == "s"
    x = random_input(T, B, 4)
    for _ in range(2):
        y, grad_x, grads = run(ours, x, True)
        y_ref, grad_x_ref, grads_ref = run(theirs, x, True)
        assert torch.equal(y, y_ref)
        torch.testing.assert_close(grad_x, grad_x_ref, rtol=1e-4, atol=1e-5)
        for key in grads_ref:
            torch.testing.assert_close(grads[key], grads_ref[key], rtol=1e-4, atol=1e-5, msg=key)
        for net in (ours, theirs):
            net.zero_grad()
            functional.reset_net(net)


def test_a_spikingjelly_model_converts_and_trains_alike():
    """SpikingJelly's own spiking VGG (its convolutions, batch norms and LIF neurons)."""
    theirs = spiking_vgg.spiking_vgg11_bn(num_classes=10, spiking_neuron=sj.LIFNode, tau=2.5,
                                          surrogate_function=surrogate.ATan(), detach_reset=True)
    functional.set_step_mode(theirs, "m")
    theirs.train()
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    neurons = [m for m in ours.modules() if isinstance(m, spikejit.LIFNode)]
    assert len(neurons) == 10 and not any(isinstance(m, sj.BaseNode) for m in ours.modules())
    assert all(m.tau == 2.5 and m.detach_reset and m.step_mode == "m" for m in neurons)
    x = torch.rand(2, 2, 3, 32, 32)  # [T, B, C, H, W]
    seed = int(torch.randint(2**31, ()))
    torch.manual_seed(seed)  # the same masks in the classifier's dropouts
    y, grad_x, grads = run(ours, x, False)
    torch.manual_seed(seed)
    y_ref, grad_x_ref, grads_ref = run(theirs, x, False)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_x, grad_x_ref, rtol=1e-3, atol=1e-6)
    for key in grads_ref:
        torch.testing.assert_close(grads[key], grads_ref[key], rtol=1e-3, atol=1e-6, msg=key)


@pytest.mark.parametrize("running_stats", [False, True])
def test_a_folded_mpbn_neuron_converts_folded(running_stats):
    """After re_parameterize_v_threshold: the folded thresholds (one kernel in evaluation) and
    the test-time adaptation (training) as SpikingJelly's."""
    theirs = sj.MPBNLIFNode(out_channels=FEATURES, v_reset=None, step_mode="m")
    with torch.no_grad():
        theirs.vbn.weight.uniform_(0.5, 1.5)
        theirs.vbn.bias.normal_(0.0, 0.3)
        theirs.vbn.running_mean.normal_(0.0, 0.5)
        theirs.vbn.running_var.uniform_(0.5, 2.0)
    theirs.re_parameterize_v_threshold(normalize_residual=True, running_stats=running_stats)
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    assert ours.fold_bn and ours.normalize_residual and ours.running_stats == running_stats
    x = random_input(T, B, FEATURES, 2, 2)
    for mode in ("eval", "train", "eval"):
        ours.train(mode == "train")
        theirs.train(mode == "train")
        assert torch.equal(ours(x), theirs(x))
        assert torch.equal(ours.v, theirs.v)
        assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
        functional.reset_net(ours)
        functional.reset_net(theirs)


def test_a_converted_network_compiles_without_graph_breaks():
    """SpikingJelly's layers around converted neurons: torch.compile(fullgraph=True) of the
    network, its outputs and gradients equal to eager. (reset_net stays outside the compiled
    function, as usual: for modules that are not its MemoryModule it calls its logger, which
    dynamo does not trace.)"""
    torch._dynamo.reset()
    net = nn.Sequential(layer.Conv2d(2, 4, 3, padding=1), layer.BatchNorm2d(4),
                        sj.LIFNode(surrogate_function=surrogate.ATan()), layer.Flatten(),
                        layer.Linear(4 * 6 * 6, 5), sj.ParametricLIFNode())
    functional.set_step_mode(net, "m")
    net = spikejit.from_spikingjelly(net)
    x = torch.rand(3, 2, 2, 6, 6)
    assert torch._dynamo.explain(net)(x).graph_break_count == 0
    results = []
    for model in (torch.compile(net, fullgraph=True), net):
        functional.reset_net(net)
        y = model(x)
        y.sum().backward()
        results.append((y.detach(), [p.grad.clone() for p in net.parameters()]))
        net.zero_grad()
    (compiled, compiled_grads), (eager, eager_grads) = results
    assert torch.equal(compiled, eager)
    for a, b in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_conversion_keeps_dtype_mode_flags_and_sharing():
    shared = sj.ParametricLIFNode(step_mode="m")
    net = nn.Sequential(nn.Linear(4, 4), shared, nn.Linear(4, 4), shared).double().eval()
    shared.w.requires_grad_(False)
    out = spikejit.from_spikingjelly(net)
    assert out is net  # in place, the parent returned
    assert isinstance(net[1], spikejit.ParametricLIFNode) and net[1] is net[3]
    assert net[1].w.dtype == torch.float64 and not net[1].training and not net[1].w.requires_grad


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_neuron_without_tensors_of_its_own_takes_the_networks_device_and_dtype(device):
    """SpikingJelly's DSR LIF with a fixed threshold keeps it as a plain attribute, which `.to()`
    leaves as it is (float32, on the CPU: SpikingJelly mixes it in as a scalar); spikejit's, a
    buffer, goes where the network is and runs there (found on a GPU: it stayed on the CPU)."""
    dtype = torch.float64 if device.type == "cpu" else torch.float32  # (float64 runs on the CPU only)
    net = nn.Sequential(nn.Linear(4, 4), sj.DSRLIFNode(T=T, tau=2.5, v_threshold_training=False))
    net.to(device=device, dtype=dtype)
    assert net[1].v_threshold.device.type == "cpu" and net[1].v_threshold.dtype == torch.float32
    theirs = copy.deepcopy(net)
    ours = spikejit.from_spikingjelly(net)
    assert ours[1].v_threshold.device == device and ours[1].v_threshold.dtype == dtype
    x = random_input(T, B, 4, device=device, dtype=dtype)
    y = ours(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, theirs(x), check_dtype=False)  # (SpikingJelly's comes out in float32)


def test_a_neuron_alone_converts_to_a_new_module():
    theirs = sj.LIFNode(tau=4.0, step_mode="m")
    ours = spikejit.from_spikingjelly(theirs)
    assert isinstance(ours, spikejit.LIFNode) and ours.tau == 4.0 and ours.step_mode == "m"


def test_a_network_without_spikingjelly_neurons_is_unchanged():
    net = nn.Sequential(nn.Linear(3, 3), spikejit.LIFNode(), layer.Flatten())
    children = list(net)
    assert spikejit.from_spikingjelly(net) is net and list(net) == children


class _LgammaIF(sj.SimpleBaseNode):  # (a step with an op outside FlexSN's table)
    def neuronal_charge(self, x):
        self.v = self.v + 0.1 * torch.lgamma(x.abs() + 1.0)


def test_neurons_without_a_counterpart_are_refused_by_path_or_left_with_a_warning():
    net = nn.Sequential(nn.Linear(4, 4), sj.ILCLIFNode(2, 2), nn.Sequential(_LgammaIF()), sj.IFNode())
    with pytest.raises(ValueError, match=r"^module: expected SpikingJelly neurons that spikejit provides or compiles "
                                         r"from their step, got 1 \(.*ILCLIFNode\): neuron: expected a neuron whose "
                                         r"sequence is its step repeated.*; 2\.0 \(.*_LgammaIF\): FlexSN: cannot compile "
                                         r"the core: aten.lgamma.*; strict=False"):
        spikejit.from_spikingjelly(net)
    assert isinstance(net[3], sj.IFNode)  # nothing converted
    with pytest.warns(UserWarning, match=r"left as they are: 1 .*ILCLIFNode.*2\.0 .*_LgammaIF"):
        spikejit.from_spikingjelly(net, strict=False)
    assert isinstance(net[1], sj.ILCLIFNode) and isinstance(net[2][0], _LgammaIF)
    assert isinstance(net[3], spikejit.IFNode)


def test_a_neuron_with_state_or_hooks_is_refused():
    net = nn.Sequential(nn.Linear(4, 4), sj.LIFNode(step_mode="m"))
    net(torch.randn(3, 2, 4))
    with pytest.raises(ValueError, match=r"^1 \(.*LIFNode\): expected the neuron at its reset state, got state 'v'"
                                         r".*functional\.reset_net"):
        spikejit.from_spikingjelly(net)
    functional.reset_net(net)
    handle = net[1].register_forward_hook(lambda *args: None)
    with pytest.raises(ValueError, match=r"^1 \(.*LIFNode\): expected a neuron without hooks .* got forward_hooks"):
        spikejit.from_spikingjelly(net)
    handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(spikejit.from_spikingjelly(net)[1], spikejit.LIFNode)


def test_bad_arguments_are_type_errors_naming_them():
    with pytest.raises(TypeError, match=r"^module: expected a torch\.nn\.Module, got list"):
        spikejit.from_spikingjelly([sj.IFNode()])
    with pytest.raises(TypeError, match=r"^strict: expected a bool, got str"):
        spikejit.from_spikingjelly(sj.IFNode(), strict="yes")
