"""Every neuron module under nn.DataParallel's replicate: a replica reads its own copies of the
module's parameters and buffers (and of those of its submodules, an activation's, a core's), not
the original's. Found by this test: a compiled FlexSN (StaticInputsFlexSN too) and
CompiledSpikingJellyNeuron read the original's tensors in a replica; SimpleBaseNode and LIAFNode
with a PReLU failed to trace their step again in one.

replicate's only step that needs GPUs is the broadcast of the tensors to the devices; the tests
put a CPU stand-in in its place that gives each replica j the tensors scaled by a random factor
(j = 0: unchanged), so a replica that reads the original's tensors computes something else. The
reference is a deep copy of the module holding replica 1's values."""
import copy
import sys

import pytest
import torch
from torch import nn

import spikejit
from conftest import random_input, require_cuda
from spikingjelly.activation_based import neuron as sj_neuron
from test_every_module import MODULES, SINGLE_STEP, T, call

_REPLICATE = sys.modules["torch.nn.parallel.replicate"]


class _LearnableCore(nn.Module):
    """A FlexSN core with a scalar and a per-neuron parameter."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.3))
        self.theta = nn.Parameter(torch.rand(4) + 0.5)

    def forward(self, x, v):
        h = v + (x - v) * torch.sigmoid(self.w)
        s = spikejit.surrogate.Sigmoid()(h - self.theta)
        return s, h * (1 - s)


class _LearnableSimple(spikejit.SimpleBaseNode):
    def __init__(self):
        super().__init__(step_mode="m")
        self.a = nn.Parameter(torch.tensor(0.7))

    def neuronal_charge(self, x):
        self.v = self.a * self.v + x


class _SpikingJellyLearnable(sj_neuron.SimpleBaseNode):
    """A SpikingJelly neuron of the user's own with a learnable decay."""

    def __init__(self):
        super().__init__(step_mode="m")
        self.decay = nn.Parameter(torch.tensor(0.6))

    def neuronal_charge(self, x):
        self.v = self.decay * self.v + x


def _static_inputs_core(x, v, tau, theta):
    h = v + (x - v) / tau
    s = spikejit.surrogate.Sigmoid()(h - theta)
    return s, h * (1 - s)


CASES = {
    **{name: make for name, make in MODULES.items() if name not in SINGLE_STEP},
    "FlexSN with a learnable core": lambda: spikejit.FlexSN(_LearnableCore(), 1, 1, 1, strict=True),
    "SimpleBaseNode with a parameter": _LearnableSimple,
    "StaticInputsFlexSN with a parameter and a buffer": lambda: spikejit.StaticInputsFlexSN(
        _static_inputs_core, num_states=1, static_inputs=(nn.Parameter(torch.tensor(2.5)), torch.rand(4) + 0.5)),
    "LIAFNode with a PReLU": lambda: spikejit.LIAFNode(nn.PReLU(), True, step_mode="m"),
    "CompiledSpikingJellyNeuron with a parameter":
        lambda: spikejit.CompiledSpikingJellyNeuron(_SpikingJellyLearnable(), strict=True),
}


def _scaled_copies(tensors, devices, detach=False):
    """replicate's broadcast on the CPU: replica j gets each floating tensor times a random factor
    per element in [1 - 0.2 j, 1 + 0.2 j] (the sign kept: a variance stays positive), in the graph
    of the original unless detach."""
    copies = []
    for j, _ in enumerate(devices):
        generator = torch.Generator().manual_seed(1000 + j)
        row = []
        for t in tensors:
            if t.is_floating_point():
                factor = 1 + 0.2 * j * (2 * torch.rand(t.shape, generator=generator, dtype=t.dtype) - 1)
                c = t * factor
            else:
                c = t.clone()
            row.append(c.detach() if detach else c)
        copies.append(row)
    return copies


@pytest.mark.parametrize("name", list(CASES))
def test_a_data_parallel_replica_reads_its_own_copies(name, monkeypatch):
    monkeypatch.setattr(_REPLICATE, "_broadcast_coalesced_reshape", _scaled_copies)
    module = CASES[name]()
    replica = _REPLICATE.replicate(module, [0, 1])[1]
    reference = copy.deepcopy(module)
    with torch.no_grad():
        for tensors in (list(reference.parameters()), list(reference.buffers())):
            for t, value in zip(tensors, _scaled_copies(tensors, [0, 1], detach=True)[1]):
                t.copy_(value)

    x = random_input(T, 2, 3, 4, scale=1.0)
    x_replica, x_reference = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_replica, y_reference = call(name, replica, x_replica), call(name, reference, x_reference)
    torch.testing.assert_close(y_replica, y_reference)
    if not y_reference.requires_grad:
        assert name == "STBIFNode"  # (no derivative)
        return
    weights = torch.randn_like(y_reference)
    originals = list(module.parameters())  # (a replica's copies are in their graphs)
    grads_replica = torch.autograd.grad((y_replica * weights).sum(), [x_replica, *originals], allow_unused=True)
    grads_reference = torch.autograd.grad((y_reference * weights).sum(), [x_reference, *reference.parameters()],
                                          allow_unused=True)
    # A copy is the original times its factor: the original's gradient is the copy's times the factor.
    factors = [torch.ones_like(x)] + _scaled_copies([torch.ones_like(p) for p in originals], [0, 1], detach=True)[1]
    for i, (a, b, factor) in enumerate(zip(grads_replica, grads_reference, factors)):
        assert (a is None) == (b is None), f"gradient {i}: {a} against {b}"
        if a is not None:
            torch.testing.assert_close(a, b * factor, rtol=1e-4, atol=1e-5, msg=lambda m: f"gradient {i}: {m}")


def test_a_compiled_spikingjelly_neuron_running_eagerly_is_not_replicated(monkeypatch):
    """Its step would read the private copy's tables, the original's tensors: refused, not wrong."""
    monkeypatch.setattr(_REPLICATE, "_broadcast_coalesced_reshape", _scaled_copies)
    module = spikejit.CompiledSpikingJellyNeuron(_SpikingJellyLearnable(), backend="torch")
    with pytest.raises(RuntimeError, match=r"DataParallel cannot copy a neuron that runs its step eagerly "
                                           r"\(backend 'torch'\); use DistributedDataParallel"):
        _REPLICATE.replicate(module, [0, 1])


def two_replica_network() -> nn.Sequential:
    """Linear layers between a FlexSN with a learnable core, a PLIF and a CompiledSpikingJellyNeuron
    with a parameter, ending in a Linear (so that outputs are not only spikes)."""
    theirs = _SpikingJellyLearnable()
    theirs.v_threshold = 0.3  # (low thresholds: every neuron layer fires)
    return nn.Sequential(nn.Linear(4, 4), spikejit.FlexSN(_LearnableCore(), 1, 1, 1, strict=True),
                         nn.Linear(4, 4), spikejit.ParametricLIFNode(v_threshold=0.2, step_mode="m"), nn.Linear(4, 4),
                         spikejit.CompiledSpikingJellyNeuron(theirs, strict=True), nn.Linear(4, 4))


@pytest.mark.cuda
def test_data_parallel_on_two_gpus_equals_one_gpu(seed):
    """nn.DataParallel itself over two GPUs (the batch, dim 1 of [T, B, ...], split between them):
    outputs and every parameter's gradient equal one GPU's over the whole batch."""
    require_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    network = two_replica_network().cuda()
    single = copy.deepcopy(network)
    x = random_input(T, 8, 4, device="cuda", scale=3.0)
    weights = torch.randn(T, 8, 4, device="cuda")
    parallel = nn.DataParallel(network, device_ids=[0, 1], dim=1)
    results = []
    for runner, owner in ((parallel, network), (single, single)):
        y = runner(x)
        (y * weights).sum().backward()
        results.append((y.detach(), [p.grad for p in owner.parameters()]))
    (y_parallel, grads_parallel), (y_single, grads_single) = results
    torch.testing.assert_close(y_parallel, y_single)
    for a, b in zip(grads_parallel, grads_single):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
