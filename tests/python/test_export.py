"""torch.export of spikejit's neurons: every neuron module exports and equals itself; a network's
exported program equals the eager network, runs after the network is gone, and runs in another
process after `import spikejit` alone (the programs its graph names by handle are remembered in
the kernel cache when it is traced), in inference and with gradients. The network tests make
neurons with constants of their own (from the seed), so their programs are new to this process
and its cache folder."""
import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params, random_input, skip_if_aot_inductor_crashes
from spikingjelly.activation_based import functional as sj_functional
from test_every_module import FIXED_LENGTH, MODULES, SINGLE_STEP, T, call


def make_network(seed: int) -> nn.Sequential:
    """Linear -> LIFNode -> Linear -> FlexSN (a LIF core) -> Linear, with a threshold and a time
    constant that no other test uses."""
    generator = torch.Generator().manual_seed(seed)
    threshold = 0.9 + 0.2 * torch.rand((), generator=generator).item()
    tau = 2.0 + torch.rand((), generator=generator).item()

    def core(x, v):
        h = v + (x - v) / tau
        s = spikejit.surrogate.Sigmoid()(h - threshold)
        return s, h * (1 - s)

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), spikejit.LIFNode(tau=tau, v_threshold=threshold, step_mode="m"),
                         nn.Linear(16, 16), spikejit.FlexSN(core, 1, 1, 1, strict=True), nn.Linear(16, 4))


def reset(network: nn.Module) -> None:
    for module in network.modules():
        if isinstance(module, (spikejit.neuron.BaseNode, spikejit.FlexSN)):
            module.reset()


def handles(network: nn.Module):
    return [module.handle if isinstance(module, spikejit.FlexSN) else module._program_handle
            for module in network.modules() if isinstance(module, (spikejit.LIFNode, spikejit.FlexSN))]


def run_child(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_an_exported_network_equals_eager_and_outlives_it(device, seed):
    network = make_network(seed).to(device).eval()
    x = random_input(5, 3, 8, device=device)
    exported = torch.export.export(network, (x,))
    reset(network)
    with torch.no_grad():  # (a graph would keep the programs for its backward)
        expected = network(x)
    named = handles(network)
    assert f"torch.ops.spikejit.neuron_forward.default({named[0]}" in exported.graph_module.code
    del network
    gc.collect()
    assert not spikejit.registry.is_registered(named[1])  # the FlexSN's program was released...
    torch.testing.assert_close(exported.module()(x), expected, rtol=0, atol=0)  # ...and comes back
    assert spikejit.registry.is_registered(named[1])


def trained(modules, x):
    """Per module: its output, the input's gradient and its parameters' gradients after the
    backward of a weighted sum of the output (each module's parameters are its own)."""
    results = []
    for module in modules:
        xr = x.clone().requires_grad_()
        y = module(xr)
        (y * torch.arange(y.numel(), device=x.device).reshape(y.shape).sin()).sum().backward()
        results.append((y.detach(), xr.grad, [p.grad for p in module.parameters()]))
    return results


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_an_exported_network_trains_like_eager(device, seed):
    network = make_network(seed).to(device)
    x = random_input(5, 3, 8, device=device)
    exported = torch.export.export(network, (x,)).module()
    reset(network)
    (y_eager, gx_eager, gp_eager), (y_exported, gx_exported, gp_exported) = trained((network, exported), x)
    torch.testing.assert_close(y_exported, y_eager, rtol=0, atol=0)
    torch.testing.assert_close(gx_exported, gx_eager)
    assert len(gp_exported) == len(gp_eager) == 6
    for a, b in zip(gp_exported, gp_eager):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_an_aot_inductor_package_of_a_network_equals_eager(device, seed, tmp_path, monkeypatch):
    """AOTInductor compiles the exported network around spikejit's ops and calls them through its
    proxy executor, which passes an empty tensor list as None (the LIF's parameters, every
    neuron's initial states): the schemas declare those lists optional. A PLIF's parameter and a
    FlexSN of two states are in the network too; the package takes any T and batch, and runs in
    another process after `import spikejit` alone (every neuron has constants from the seed, so
    that its program is new to this process and to the cache folder the child reads)."""
    skip_if_aot_inductor_crashes(device)
    monkeypatch.setenv("SPIKEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPIKEJIT_CACHE", "1")
    network = make_network(seed)
    threshold = 0.3 + 0.2 * torch.rand((), generator=torch.Generator().manual_seed(seed)).item()
    network.insert(4, spikejit.ParametricLIFNode(init_tau=2.5, v_threshold=2 * threshold, step_mode="m"))
    network.insert(5, nn.Linear(16, 16))
    network.insert(6, spikejit.FlexSN(adaptive_core(threshold), 1, 2, 1, strict=True))
    network = network.to(device).eval()
    steps, batch = torch.export.Dim("steps", min=1, max=1024), torch.export.Dim("batch", min=1, max=4096)
    exported = torch.export.export(network, (random_input(5, 3, 8, device=device),),
                                   dynamic_shapes=({0: steps, 1: batch},))
    package = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "network.pt2"))
    compiled = torch._inductor.aoti_load_package(package)
    # Other lengths and batches than the example's; each call of the package starts from the
    # initial states, like a reset network.
    for shape in [(5, 3, 8), (7, 2, 8), (1, 9, 8), (5, 3, 8)]:
        x = random_input(*shape, device=device)
        reset(network)
        with torch.no_grad():
            expected = network(x)
        assert expected.abs().sum() > 0
        torch.testing.assert_close(compiled(x), expected)
    if device.type == "cuda":  # the package runs on the current stream, and spikejit's ops launch there
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = compiled(x)
        side.synchronize()
        torch.testing.assert_close(y, expected)

    torch.save((x, expected), tmp_path / "expected.pt")
    result = run_child(f"""
        import torch, spikejit
        compiled = torch._inductor.aoti_load_package({package!r})
        x, expected = torch.load({str(tmp_path / "expected.pt")!r})
        torch.testing.assert_close(compiled(x), expected)
        print("equal")
    """, dict(os.environ))
    assert result.returncode == 0 and result.stdout.strip() == "equal", result.stderr[-3000:]


class Streaming(nn.Module):
    """A network whose neurons' states come in and go out (the functional forms of a LIFNode and
    of a FlexSN of two states), so that its exported program runs a stream chunk by chunk.
    Elementwise gains stand in for layers: a matrix product over nine steps' rows and one over
    three's may round differently on CUDA (cuBLAS picks its kernel by size), and the test compares
    bit for bit."""

    def __init__(self, tau: float):
        super().__init__()
        self.tau = tau
        self.gain_in, self.gain_out = nn.Parameter(1 + torch.rand(16)), nn.Parameter(torch.randn(16))
        self.adaptive = spikejit.FlexSN(adaptive_core(0.4), 1, 2, 1, strict=True)

    def forward(self, x_seq, v, u, a):
        s, v, _ = spikejit.functional.lif_multi_step(x_seq * self.gain_in, v, tau=self.tau)
        (y,), (u, a), _ = self.adaptive.multi_step_functional_forward(s, states=[u, a])
        return y * self.gain_out, v, u, a


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_an_exported_program_runs_a_stream_chunk_by_chunk_like_one_call(device, seed):
    torch.manual_seed(seed)
    model = Streaming(tau=2.0 + torch.rand(()).item()).to(device).eval()
    x = random_input(9, 3, 16, device=device, scale=3.0)
    zeros = [torch.zeros(3, 16, device=device) for _ in range(3)]
    streamed = torch.export.export(model, (x[:3], *zeros)).module()
    with torch.no_grad():
        whole, *last = model(x, *zeros)
    assert last[0].abs().sum() > 0 and last[2].abs().sum() > 0  # the LIF charged, the adaptive neuron fired
    states, chunks = zeros, []
    for chunk in x.split(3):
        y, *states = streamed(chunk, *states)
        chunks.append(y)
    torch.testing.assert_close(torch.cat(chunks), whole, rtol=0, atol=0)
    for state, expected in zip(states, last):
        torch.testing.assert_close(state, expected, rtol=0, atol=0)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_a_training_export_with_a_dynamic_length_takes_every_length(device, strict, seed, monkeypatch):
    """checkpoint_every="auto" compares T and N with its thresholds; under torch.export with
    dynamic dimensions that comparison must not become a guard (which narrows the declared range
    and refuses the export). On the CPU the rule never checkpoints, so there it is made to answer
    as on CUDA."""
    if device.type == "cpu":
        monkeypatch.setattr(spikejit._kernel_calls, "_auto_interval", lambda *args: 8)
    network = make_network(seed).to(device)
    steps, batch = torch.export.Dim("steps", min=1, max=1024), torch.export.Dim("batch", min=1, max=1 << 20)
    exported = torch.export.export(network, (random_input(5, 3, 8, device=device),),
                                   dynamic_shapes=({0: steps, 1: batch},), strict=strict).module()
    for shape in [(12, 2, 8), (3, 5, 8)]:
        x = random_input(*shape, device=device)
        reset(network)
        (y_eager, gx_eager, _), (y_exported, gx_exported, _) = trained((network, exported), x)
        torch.testing.assert_close(y_exported, y_eager, rtol=0, atol=0)
        torch.testing.assert_close(gx_exported, gx_eager)


def adaptive_core(threshold: float):
    """The step of a LIF with an adaptive threshold (two states) that fires at `threshold` plus
    its adaptation."""
    def core(x, v, a):
        h = v + (x - v) / 2.0
        s = spikejit.surrogate.ATan()(h - threshold - a)
        return s, h * (1 - s), 0.9 * a + 0.1 * s
    return core


def test_a_saved_exported_network_runs_in_another_process(seed, tmp_path, monkeypatch):
    monkeypatch.setenv("SPIKEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPIKEJIT_CACHE", "1")
    network = make_network(seed).eval()
    x = random_input(5, 3, 8)
    torch.export.save(torch.export.export(network, (x,)), tmp_path / "network.pt2")
    reset(network)
    torch.save((x, network(x)), tmp_path / "expected.pt")
    child = f"""
        import torch, spikejit
        exported = torch.export.load({str(tmp_path / "network.pt2")!r})
        x, expected = torch.load({str(tmp_path / "expected.pt")!r})
        torch.testing.assert_close(exported.module()(x), expected, rtol=0, atol=0)
        print("equal")
    """
    result = run_child(child, dict(os.environ))
    assert result.returncode == 0 and result.stdout.strip() == "equal", result.stderr[-3000:]

    # Without the disk cache the other process cannot know the programs: a clear error.
    result = run_child(child, {**os.environ, "SPIKEJIT_CACHE": "0"})
    assert result.returncode != 0
    assert (f"RuntimeError: spikejit: kernel handle {handles(network)[0]} is not registered (released or never "
            f"created, and no graph traced with it was seen by this process or this machine's kernel cache)"
            in result.stderr), result.stderr[-3000:]


def test_a_remembered_text_of_another_program_is_not_taken_for_the_handle(seed, tmp_path, monkeypatch):
    """The text stored under a handle must rebuild to that handle (another version of spikejit may
    have written it, or the folder was tampered with): otherwise the handle stays unknown."""
    monkeypatch.setenv("SPIKEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPIKEJIT_CACHE", "1")
    handle = 1 + seed  # no program's
    assert spikejit._core.remember_program(spikejit.registry._store_name(handle), "tampered",
                                           "neuron n\ninput x\noutput y\ny = x\n") == ""
    with pytest.raises(RuntimeError, match=f"kernel handle {handle} is not registered"):
        spikejit.registry.program(handle)


def test_the_registry_holds_programs_as_their_canonical_text_makes_them():
    """A shipped neuron built with its constants folded numbers its values otherwise than the same
    neuron parsed from its canonical text; the registry keeps the latter, which any process can
    rebuild, and names it by that."""
    built = spikejit._core.shipped("lif", {"tau": 3.0})
    rebuilt = spikejit._core.Program.from_text(built.canonical())
    assert built.backward_text() != rebuilt.backward_text()  # (the premise)
    handle = spikejit.registry.register(built)
    try:
        assert spikejit.registry.program(handle).backward_text() == rebuilt.backward_text()
        assert spikejit.registry.register(rebuilt) == handle
        spikejit.registry.release_owner(handle)
    finally:
        spikejit.registry.release_owner(handle)


@pytest.mark.parametrize("name", [name for name in MODULES if name not in SINGLE_STEP])
def test_every_neuron_module_exports(name):
    """Every multi-step neuron module (in evaluation mode) exports, and its exported program gives
    the module's outputs."""
    module = MODULES[name]().eval()
    x = random_input(T, 2, 3, 4, scale=1.0)
    exported = torch.export.export(module, (x,)).module()
    sj_functional.reset_net(module)
    with torch.no_grad():
        expected = call(name, module, x)
    torch.testing.assert_close(exported(x), expected, rtol=0, atol=0)


# The neurons of a fixed length, and MPBN LIF in training, which runs SpikingJelly's loop over the
# steps (batch statistics per step).
STATIC_LENGTH_IN_TRAINING = FIXED_LENGTH | {"MPBNLIFNode"}


@pytest.mark.parametrize("name", [name for name in MODULES if name not in SINGLE_STEP])
def test_every_neuron_module_exports_for_training_with_a_dynamic_length_and_batch(name, monkeypatch):
    """In training mode (the auto save policy answering as on CUDA, where it compares T and N):
    the exported program takes other lengths and batches and equals the module there. A neuron of
    a fixed length is refused by torch.export, which names the length."""
    monkeypatch.setattr(spikejit._kernel_calls, "_auto_interval", lambda *args: 8)
    module = MODULES[name]().train()
    steps, batch = torch.export.Dim("steps", min=1, max=1024), torch.export.Dim("batch", min=1, max=1 << 20)
    dims = {0: steps, 1: batch}
    dynamic_shapes = ((dims,),) if name == "CompiledSpikingJellyNeuron" else (dims,)  # (its forward takes *args)
    x = random_input(T, 2, 3, 4, scale=1.0).requires_grad_()  # (a training call even without parameters)
    if name in STATIC_LENGTH_IN_TRAINING:
        with pytest.raises(torch._dynamo.exc.UserError, match=f"specialized it to be a constant \\({T}\\)"):
            torch.export.export(module, (x,), dynamic_shapes=dynamic_shapes)
        return
    exported = torch.export.export(module, (x,), dynamic_shapes=dynamic_shapes).module()
    for shape in [(9, 3, 3, 4), (2, 1, 3, 4)]:
        x = random_input(*shape, scale=1.0)
        sj_functional.reset_net(module)
        with torch.no_grad():
            expected = call(name, module, x)
        torch.testing.assert_close(exported(x.requires_grad_()), expected)


@pytest.mark.parametrize("name", spikejit._core.shipped_names())
def test_every_shipped_neuron_and_its_derived_neurons_rebuild_from_their_text_to_their_handles(name):
    """What a remembered program relies on: the text kept for a handle parses to a program of the
    same handle (so another process recalls the same program); for the programs derived from it
    (the tangent and adjoint neurons) too."""
    from spikejit._double_backward import adjoint_handle_of
    from spikejit._forward_mode import tangent_handle_of
    handle = spikejit.registry.register(spikejit._core.shipped(name))
    try:
        for h in (handle, tangent_handle_of(handle), adjoint_handle_of(handle)):
            text = spikejit.registry.program(h).canonical()
            assert spikejit.registry._handle_of(spikejit._core.Program.from_text(text)) == h
    finally:
        spikejit.registry.release_owner(handle)
