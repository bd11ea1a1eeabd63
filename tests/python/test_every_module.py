"""Every neuron module spikejit exports, through the same checks: a multi-step call (single step
for the online-training ones), equal results from a deep copy and from a module that loaded the
state dict, SpikingJelly's functional.reset_net, and a clear TypeError naming the input for a
non-tensor, the meta device, second derivatives, torch.compile with dynamic sizes. A module added to
spikejit.__all__ must be listed here (the first test says so)."""
import copy

import pytest
import torch

import spikejit
from conftest import random_input

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import neuron as sj_neuron

T = 6
class _SimpleQuadratic(spikejit.SimpleBaseNode):
    """A SimpleBaseNode subclass, as its users write them."""

    def neuronal_charge(self, x):
        self.v = self.v + 0.1 * self.v * self.v + x


class _SpikingJellyQuadratic(sj_neuron.SimpleBaseNode):
    """A neuron class of a SpikingJelly user's own, for CompiledSpikingJellyNeuron."""

    def neuronal_charge(self, x):
        self.v = self.v + 0.1 * self.v * self.v + x


def _binary_table(scale=1.0):
    """A few-spikes table of T steps: theta = h = d = scale 2^-k."""
    row = [scale * 2.0 ** -k for k in range(T)]
    return spikejit.FewSpikeTable(row, row, row)


MODULES = {
    "IFNode": lambda: spikejit.IFNode(step_mode="m"),
    "LIFNode": lambda: spikejit.LIFNode(step_mode="m"),
    "ParametricLIFNode": lambda: spikejit.ParametricLIFNode(step_mode="m"),
    "QIFNode": lambda: spikejit.QIFNode(step_mode="m"),
    "EIFNode": lambda: spikejit.EIFNode(step_mode="m"),
    "IzhikevichNode": lambda: spikejit.IzhikevichNode(a=0.2, b=0.3, step_mode="m"),
    "ILIFNode": lambda: spikejit.ILIFNode(step_mode="m"),
    "ComplementaryLIFNode": lambda: spikejit.ComplementaryLIFNode(step_mode="m"),
    "KLIFNode": lambda: spikejit.KLIFNode(step_mode="m"),
    "CUBALIFNode": lambda: spikejit.CUBALIFNode(step_mode="m"),
    "LIAFNode": lambda: spikejit.LIAFNode(torch.nn.PReLU(), True, step_mode="m"),
    "GatedLIFNode": lambda: spikejit.GatedLIFNode(T, inplane=3),
    "RAFNode": lambda: spikejit.RAFNode(step_mode="m"),
    "TernaryIFNode": lambda: spikejit.TernaryIFNode(step_mode="m"),
    "TernaryLIFNode": lambda: spikejit.TernaryLIFNode(step_mode="m"),
    "NonSpikingIFNode": lambda: spikejit.NonSpikingIFNode(decode="max-mem"),
    "NonSpikingLIFNode": lambda: spikejit.NonSpikingLIFNode(decode="mean-mem"),
    "SLTTLIFNode": lambda: spikejit.SLTTLIFNode(),
    "OTTTLIFNode": lambda: spikejit.OTTTLIFNode(),
    "ActivationAwareIFNode": lambda: spikejit.ActivationAwareIFNode(v_threshold=torch.tensor([0.8, 1.0, 1.2]),
                                                                    channel_dim=1, step_mode="m"),
    "HalfThresholdIFNode": lambda: spikejit.HalfThresholdIFNode(step_mode="m"),
    "STBIFNode": lambda: spikejit.STBIFNode(q_threshold=0.1, level=16, sym=True, step_mode="m"),
    "SimpleBaseNode": lambda: _SimpleQuadratic(step_mode="m"),
    "SimpleIFNode": lambda: spikejit.SimpleIFNode(step_mode="m"),
    "SimpleLIFNode": lambda: spikejit.SimpleLIFNode(tau=2.0, decay_input=True, step_mode="m"),
    "FewSpikeNode": lambda: spikejit.FewSpikeNode(_binary_table(), step_mode="m"),
    "OutlierAwareThresholdNode": lambda: spikejit.OutlierAwareThresholdNode(_binary_table(), _binary_table(4.0), 1.5,
                                                                            step_mode="m"),
    "HGNode": lambda: spikejit.HGNode([_binary_table(0.5), _binary_table()], [0.6], step_mode="m"),
    "DSRIFNode": lambda: spikejit.DSRIFNode(T=T),
    "DSRLIFNode": lambda: spikejit.DSRLIFNode(T=T),
    "MPBNLIFNode": lambda: spikejit.MPBNLIFNode(out_channels=3, step_mode="m"),
    "PSN": lambda: spikejit.PSN(T),
    "MaskedPSN": lambda: spikejit.MaskedPSN(2, T, lambda_init=0.5, step_mode="m"),
    "SlidingPSN": lambda: spikejit.SlidingPSN(3, step_mode="m"),
    "CompiledSpikingJellyNeuron": lambda: spikejit.CompiledSpikingJellyNeuron(_SpikingJellyQuadratic(step_mode="m")),
}
SINGLE_STEP = {"SLTTLIFNode", "OTTTLIFNode"}
# T is a constructor argument, or the length of their tables.
FIXED_LENGTH = {"GatedLIFNode", "FewSpikeNode", "OutlierAwareThresholdNode", "HGNode", "DSRIFNode", "DSRLIFNode",
                "PSN", "MaskedPSN"}
# First derivatives constant in x, or piecewise so (SpikingJelly's rate gradient, ILIF's
# straight-through count, linear neurons): as in PyTorch, they come without requires_grad.
FIRST_ORDER = {"DSRIFNode", "DSRLIFNode", "ILIFNode", "NonSpikingIFNode", "NonSpikingLIFNode"}


def call(name, node, x):
    """The module's output over x [T, B, 3, 4] as one tensor (single-step modules step by step;
    OTTT's [spike, trace] counts its spikes)."""
    if name not in SINGLE_STEP:
        return node(x)
    outputs = [node(step) for step in x]
    return torch.stack([o[0] if isinstance(o, list) else o for o in outputs])


def test_every_exported_neuron_module_is_listed():
    exported = {name for name in spikejit.__all__ if name.endswith(("Node", "PSN", "Neuron"))}
    assert exported == set(MODULES), f"list these in MODULES: {sorted(exported - set(MODULES))}"


@pytest.mark.parametrize("name", list(MODULES))
def test_runs_copies_loads_and_resets(name):
    x = random_input(T, 2, 3, 4, scale=1.0)
    node = MODULES[name]()
    first = call(name, node, x)
    assert first.shape == x.shape[1:] if name.startswith("NonSpiking") else first.shape == x.shape
    assert torch.isfinite(first).all()

    sj_functional.reset_net(node)
    torch.testing.assert_close(call(name, node, x), first, rtol=0, atol=0)  # reset: the same call again

    sj_functional.reset_net(node)
    twin = copy.deepcopy(node)
    torch.testing.assert_close(call(name, twin, x), call(name, node, x), rtol=0, atol=0)

    fresh = MODULES[name]()
    fresh.load_state_dict(node.state_dict())
    sj_functional.reset_net(node)
    sj_functional.reset_net(fresh)
    torch.testing.assert_close(call(name, fresh, x), call(name, node, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", list(MODULES))
def test_a_non_tensor_input_is_a_type_error_naming_it(name):
    with pytest.raises(TypeError, match=r"^(x(_seq)?|inputs\[0\]): expected a tensor, got list"):
        MODULES[name]()([[1.0, 2.0]])


@pytest.mark.parametrize("name", list(MODULES))
def test_runs_on_the_meta_device_with_the_shapes_of_a_real_run(name):
    """On the meta device (shapes without data, as for planning memory) a module gives the results
    and gradients a CPU run gives, in shape and dtype: its ops take the dispatcher to their fake
    implementations."""
    x = random_input(T, 2, 3, 4, scale=1.0)
    real = MODULES[name]()
    meta = MODULES[name]().to("meta")
    xr, xm = x.clone().requires_grad_(), x.to("meta").requires_grad_()
    y, ym = call(name, real, xr), call(name, meta, xm)
    assert ym.device.type == "meta" and (ym.shape, ym.dtype, ym.requires_grad) == (y.shape, y.dtype, y.requires_grad)
    if y.requires_grad:
        y.sum().backward()
        ym.sum().backward()
        assert xm.grad.shape == xr.grad.shape and xm.grad.device.type == "meta"
        for (p_name, p), pm in zip(real.named_parameters(), meta.parameters()):
            assert (pm.grad is None) == (p.grad is None), p_name
            assert p.grad is None or pm.grad.shape == p.grad.shape, p_name


@pytest.mark.parametrize("name", list(MODULES))
def test_a_module_left_on_another_device_than_its_input_says_to_move_it(name):
    """The commonest mistake with devices: a module not moved with its input (here left on the
    CPU, the input on the meta device, as a CUDA input would be). A module with parameters
    refuses the call with a ValueError that names the parameter's device and says to move the
    module; one without parameters runs (its buffers, thresholds and tables of a few values, are
    read on the input's device)."""
    node = MODULES[name]()
    x = random_input(T, 2, 3, 4, scale=1.0).to("meta").requires_grad_()
    if not list(node.parameters()):
        assert call(name, node, x).device.type == "meta"
        return
    with pytest.raises(ValueError, match=r"on cpu.*module\.to\(x\.device\)") as error:
        call(name, node, x)
    assert "meta" in str(error.value)


@pytest.mark.parametrize("name", list(MODULES))
def test_second_derivatives_run_and_keep_the_first(name):
    """Inside spikejit.double_backward() the first derivatives (of the input and of every
    parameter) equal the usual path's, and a second derivative runs (the adjoint neuron of every
    shipped neuron); a module without any derivative is left out, and first derivatives that are
    constants of x (FIRST_ORDER) come without requires_grad, as in PyTorch."""
    x = random_input(T, 2, 3, 4, scale=1.0, dtype=torch.float64)
    node = MODULES[name]().double()
    weights = torch.randn_like(call(name, node, x).detach())
    params = [p for p in node.parameters() if p.requires_grad]

    def first_derivatives(x=x):
        sj_functional.reset_net(node)
        xr = x.clone().requires_grad_()
        y = call(name, node, xr)
        if not y.requires_grad:
            pytest.skip(f"{name} has no derivative")
        return xr, torch.autograd.grad((y * weights).sum(), [xr, *params], create_graph=True, allow_unused=True)

    _, usual = first_derivatives()
    with spikejit.double_backward():
        xr, twice = first_derivatives()
    for got, want in zip(twice, usual):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    if name in FIRST_ORDER:  # constants of x: there is no second derivative to take
        assert not any(g is not None and g.requires_grad for g in twice)
        _, moved = first_derivatives(x + 1e-6 * torch.randn_like(x))  # (ILIF's: constant between thresholds)
        for got, want in zip(moved, usual):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        return
    (second,) = torch.autograd.grad(sum((g ** 2).sum() for g in twice if g is not None), xr)
    assert torch.isfinite(second).all()


@pytest.mark.parametrize("name", list(MODULES))
def test_compiles_with_dynamic_sizes(name):
    """torch.compile(fullgraph=True, dynamic=True): symbolic T and batch through Dynamo and
    AOTAutograd (where graph breaks and guards come from; the aot_eager backend, as Inductor
    runs the ops as they are). At two lengths and batches the outputs and the input's gradient
    equal eager; a neuron of a fixed length keeps its T."""
    torch._dynamo.reset()
    node = MODULES[name]()

    def step(x):
        if hasattr(node, "reset"):
            node.reset()
        return call(name, node, x)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=True)
    for steps, batch in [(T, 2), (T if name in FIXED_LENGTH else T + 3, 5)]:
        x = random_input(steps, batch, 3, 4, scale=1.0)
        results = []
        for run_step in (compiled, step):
            xr = x.clone().requires_grad_()
            y = run_step(xr)
            if y.requires_grad:
                (y * torch.arange(y.numel()).reshape(y.shape).sin()).sum().backward()
            results.append((y.detach(), xr.grad))
        (y_c, gx_c), (y_e, gx_e) = results
        torch.testing.assert_close(y_c, y_e)
        assert (gx_c is None) == (gx_e is None) == (name == "STBIFNode")  # (STBIF has no derivative)
        if gx_e is not None:
            torch.testing.assert_close(gx_c, gx_e)
    torch._dynamo.reset()
