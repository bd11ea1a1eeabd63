"""Eager calls in C++ (bindings/torch/: forward buffers, launch, and for training the autograd
node) against the Python path (_kernel_calls.inference, TrainingCall.forward, ops._Training):
the same kernels behind both, so the same results and gradients bit for bit, over the call
kinds: built-in neurons with scalar parameters, per-neuron parameters, two inputs, given and
absent initial states, stored state sequences, final states, checkpoints, spikes saved as bits,
packed outputs, random draws, several dtypes, large and permuted inputs. The rest of the suite
runs on the C++ path (the default) against its references. CUDA cases skip without a GPU unless
SPIKEJIT_REQUIRE_CUDA=1."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from spikejit import _build_info, _core, _kernel_calls, ops, registry
from spikejit.functional import builtin_handle, run_neuron

NEURONS = Path(__file__).resolve().parent.parent / "neurons"

# A real condition, not a missing piece: where torch was installed when the extension was built,
# the node must be there (these tests then fail without it).
pytestmark = pytest.mark.skipif(_build_info.TORCH_VERSION == "",
                                reason="the extension was built where torch was not installed: no C++ calls")


@pytest.fixture
def node_in(monkeypatch):
    """node_in(cpp) selects the C++ or the Python path for the calls that follow."""
    return lambda cpp: monkeypatch.setattr(_kernel_calls, "CPP_CALLS", cpp)


def from_file(stem):
    return registry.register(_core.Program.from_file(str(NEURONS / f"{stem}.sj")))


def plif_handle():
    return builtin_handle("plif_r", 1.0, 0.0, False, "sigmoid", (4.0,), True)


CASES = {
    "plif (a scalar parameter)": plif_handle,
    "two inputs, per-neuron and scalar parameters": lambda: from_file("every_op"),
    "spikes saved as bits": lambda: from_file("two_thresholds"),
    "spikes saved as bits, a per-neuron parameter": lambda: from_file("mixed_outputs"),
    "random draws": lambda: from_file("noisy_threshold"),
}


SHAPE = (7, 3, 13)


def over_cases(test):
    """`test` parametrized over the devices, CASES and dtypes."""
    test = pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)(test)
    test = pytest.mark.parametrize("case", list(CASES))(test)
    return pytest.mark.parametrize("device", device_params(), indirect=True)(test)


def case_arguments(case, dtype, device):
    """(handle, program, params, seed) of a CASES entry for [T, *S] = SHAPE inputs."""
    if dtype == torch.float64 and device.type == "cuda":
        pytest.skip("float64 runs on the CPU only")
    handle = CASES[case]()
    program = registry.program(handle)
    params = [torch.rand(() if kind == "scalar" else SHAPE[1:], device=device, dtype=dtype) + 0.5
              for _, kind, _ in program.params]
    seed = (torch.randint(-2 ** 62, 2 ** 62, (1,), dtype=torch.int64, device=device)
            if program.uses_random else None)
    return handle, program, params, seed


def training_step(handle, xs, v0s, params, store_state_seqs, checkpoint_every, pack_spikes, seed, cotangents):
    """(results, gradients of the inputs, initial states and params) of one training call with
    the given cotangents (random ones when None, returned)."""
    program = registry.program(handle)
    xs, v0s, params = ([t.detach().clone().requires_grad_() for t in group] for group in (xs, v0s, params))
    outputs, finals, seqs = run_neuron(handle, program.num_outputs, program.num_states, xs,
                                       v0s or [None] * program.num_states, params, store_state_seqs,
                                       checkpoint_every, pack_spikes=pack_spikes, seed=seed)
    results = [*outputs, *finals, *(seqs or [])]
    if cotangents is None:
        cotangents = [torch.randn_like(r) for r in results]
    # Results without a gradient come without requires_grad (Program.differentiable_outputs).
    per_state = program.differentiable_states
    assert [r.requires_grad for r in results] == [*program.differentiable_outputs, *per_state,
                                                  *(per_state if store_state_seqs else [])]
    differentiable = [k for k, r in enumerate(results) if r.requires_grad]
    grads = torch.autograd.grad([results[k] for k in differentiable], [*xs, *v0s, *params],
                                [cotangents[k] for k in differentiable], allow_unused=True)
    return [r.detach() for r in results], grads, cotangents


@over_cases
def test_cpp_training_gives_the_python_paths_results_and_gradients(case, dtype, device, node_in):
    handle, program, params, seed = case_arguments(case, dtype, device)
    packs = [False, True] if any(packed for _, packed in program.saved_plan(True)) else [False]
    for given_states in (True, False):
        for store_state_seqs in (False, True):
            for checkpoint_every in (0, 3):
                for pack_spikes in packs if checkpoint_every == 0 else [False]:
                    xs = [random_input(*SHAPE, device=device, dtype=dtype) for _ in range(program.num_inputs)]
                    v0s = ([random_input(*SHAPE[1:], device=device, dtype=dtype, scale=0.3)
                            for _ in range(program.num_states)] if given_states else [])
                    runs, cotangents = [], None
                    for cpp in (False, True):
                        node_in(cpp)
                        results, grads, cotangents = training_step(handle, xs, v0s, params, store_state_seqs,
                                                                   checkpoint_every, pack_spikes, seed, cotangents)
                        runs.append((results, grads))
                    what = (case, given_states, store_state_seqs, checkpoint_every, pack_spikes)
                    (want, want_grads), (got, got_grads) = runs
                    for a, b in zip(want, got):
                        assert torch.equal(a, b), what
                    assert len(want_grads) == len(got_grads) == len(xs) + len(v0s) + len(params)
                    for a, b in zip(want_grads, got_grads):
                        assert (a is None) == (b is None), what
                        if a is not None:
                            assert torch.equal(a, b), what


@over_cases
def test_cpp_inference_gives_the_python_paths_results(case, dtype, device, node_in):
    handle, program, params, seed = case_arguments(case, dtype, device)
    packable = sum(1 << i for i, p in enumerate(program.packable_outputs) if p)
    xs = [random_input(*SHAPE, device=device, dtype=dtype) for _ in range(program.num_inputs)]
    for given_states in (True, False):
        v0s = ([random_input(*SHAPE[1:], device=device, dtype=dtype, scale=0.3) for _ in range(program.num_states)]
               if given_states else [])
        for store_state_seqs in (False, True):
            for final_state in (False, True):
                for packed_outputs in sorted({0, packable}):
                    runs = []
                    for cpp in (False, True):
                        node_in(cpp)
                        runs.append(ops.run_inference(handle, xs, v0s, params, store_state_seqs, final_state,
                                                      packed_outputs, seed))
                    what = (case, given_states, store_state_seqs, final_state, packed_outputs)
                    assert len(runs[0]) == len(runs[1]), what
                    for a, b in zip(*runs):
                        assert a.dtype == b.dtype and torch.equal(a, b), what


@over_cases
def test_cpp_training_forward_gives_the_python_paths_buffers(case, dtype, device, node_in):
    """The training op's forward (TrainingCall.forward: also what _Training and FuncTraining run),
    packed outputs and saved values included: the same results and saved buffers from both paths."""
    handle, program, params, seed = case_arguments(case, dtype, device)
    packable = sum(1 << i for i, p in enumerate(program.packable_outputs) if p)
    packs = [False, True] if any(packed for _, packed in program.saved_plan(True)) else [False]
    xs = [random_input(*SHAPE, device=device, dtype=dtype) for _ in range(program.num_inputs)]
    v0s = [random_input(*SHAPE[1:], device=device, dtype=dtype, scale=0.3) for _ in range(program.num_states)]
    for store_state_seqs in (False, True):
        for checkpoint_every in (0, 3):
            for pack_spikes in packs if checkpoint_every == 0 else [False]:
                for packed_outputs in sorted({0, packable}):
                    runs = []
                    for cpp in (False, True):
                        node_in(cpp)
                        runs.append(ops.training_forward(handle, xs, v0s, params, store_state_seqs, checkpoint_every,
                                                         packed_outputs, pack_spikes, seed))
                    what = (case, store_state_seqs, checkpoint_every, pack_spikes, packed_outputs)
                    assert len(runs[0]) == len(runs[1]), what
                    for a, b in zip(*runs):
                        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_large_and_permuted_calls_match_too(device, node_in):
    """Buffers of the CPU pool's size (the C++ forward takes them from the pool, as the Python one)
    and an input that is a permuted view (read through a contiguous copy), per step and with
    checkpoints: the same results and gradients from both paths, and the same inference."""
    handle = plif_handle()
    w = torch.tensor(0.3, device=device, requires_grad=True)
    for x in (random_input(32, 96, 128, device=device), random_input(96, 32, 5, device=device).permute(1, 0, 2)):
        for checkpoint_every in (0, 4):
            runs, cotangents = [], None
            for cpp in (False, True):
                node_in(cpp)
                runs.append(training_step(handle, [x], [], [w], False, checkpoint_every, False, None, cotangents))
                cotangents = runs[-1][2]
            for a, b in zip([*runs[0][0], *runs[0][1]], [*runs[1][0], *runs[1][1]]):
                assert torch.equal(a, b), (x.shape, checkpoint_every)
        inferred = []
        for cpp in (False, True):
            node_in(cpp)
            inferred.append(ops.run_inference(handle, [x], [], [w.detach()], True, True))
        for a, b in zip(*inferred):
            assert torch.equal(a, b), x.shape


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_cpu_and_cuda_calls_take_the_cpp_node(device):
    y = spikejit.LIFNode(step_mode="m")(random_input(5, 8, device=device).requires_grad_())
    assert y.grad_fn.name() == "spikejit::TrainingBackward"


def test_the_node_is_cpp_by_default_and_its_gradient_of_a_gradient_is_refused():
    x = random_input(5, 8).requires_grad_()
    node = spikejit.LIFNode(step_mode="m")
    y = node(x)
    assert y.grad_fn.name() == "spikejit::TrainingBackward"
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        gx.sum().backward()


def test_the_node_reads_an_expanded_and_a_permuted_gradient(node_in):
    """y.sum()'s expanded gradient is read in place; any other layout is copied first."""
    x = random_input(6, 4, 9)
    cotangents = (torch.ones(1).expand(6, 4, 9), torch.randn(9, 4, 6).permute(2, 1, 0))
    grads = []
    for cpp in (False, True):
        node_in(cpp)
        for cotangent in cotangents:
            xr = x.clone().requires_grad_()
            s, v = spikejit.multistep_lif(xr, None, store_v_seq=False)
            (g,) = torch.autograd.grad(s, xr, cotangent)
            grads.append(g)
    for a, b in zip(grads[:2], grads[2:]):
        assert torch.equal(a, b)


def test_spikejit_refuses_a_torch_other_than_the_one_it_was_built_against():
    code = "import torch; torch.__version__ = '0.0.1'; import spikejit"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "spikejit was built against torch " in result.stderr
    assert "but torch 0.0.1 is installed" in result.stderr


@pytest.mark.parametrize("cpp", [False, True], ids=["python node", "cpp node"])
def test_an_error_in_the_backward_keeps_its_type_and_message(cpp, node_in):
    """A saved-tensor hook that hands the backward a sequence cut short is refused by the
    backward's checks: spikejit's ArgumentError (a ValueError) from either node, not the autograd
    engine's RuntimeError."""
    node_in(cpp)
    cut_short = (lambda t: t), (lambda t: t[:2] if t.dim() == 2 else t)
    with torch.autograd.graph.saved_tensors_hooks(*cut_short):
        y = spikejit.ParametricLIFNode(step_mode="m")(random_input(4, 64).requires_grad_())
    with pytest.raises(spikejit.ArgumentError, match=r"^argument 'saved\[0\]': expected shape \[T, \*S\] = "
                                                     r"\[4, 64\], got float32\[2, 64\]") as info:
        y.sum().backward()
    assert info.value.argument == "saved[0]"


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_plain_eager_calls_skip_the_layers_with_the_same_results(device, monkeypatch):
    """run_neuron takes a plain eager call (ops.is_plain_eager) straight to the C++ calls; with
    that gate closed the same call goes through the layers (hooks, forward mode, memory order,
    the op dispatch) to the same C++ calls: the same results, states and gradients bit for bit."""
    def step(x, w):
        node = spikejit.ParametricLIFNode(step_mode="m", store_v_seq=True).to(device)
        with torch.no_grad():
            node.w.copy_(w)
        node.v = v0
        xr = x.clone().requires_grad_()
        y = node(xr)
        (y.sum() + node.v_seq.square().sum()).backward()
        with torch.no_grad():
            inferred = node(x)
        return [y.detach(), node.v_seq.detach(), node.v, xr.grad, node.w.grad, inferred]

    x, v0 = random_input(6, 3, 17, device=device), random_input(3, 17, device=device, scale=0.3)
    w = torch.tensor(0.4, device=device)
    taken = []
    monkeypatch.setattr(ops, "run_plain", lambda *args, real=ops.run_plain: taken.append(1) or real(*args))
    plain = step(x, w)
    assert len(taken) == 2, "the plain path was not taken"
    monkeypatch.setattr(ops, "is_plain_eager", lambda *args: False)
    layered = step(x, w)
    assert len(taken) == 2
    for a, b in zip(plain, layered):
        assert torch.equal(a, b)


def test_calls_the_layers_must_see_are_not_plain():
    """The gate of the plain path closes for what only the layers handle."""
    x, v = random_input(4, 8), random_input(8)
    assert ops.is_plain_eager([x], [v, None], [torch.nn.Parameter(torch.ones(()))])
    permuted = random_input(4, 3, 8).permute(0, 2, 1)
    assert not ops.is_plain_eager([permuted], [], [])                    # memory order: permuted views
    assert ops.is_plain_eager([x.t()], [], []) and ops.is_plain_eager([x[0].expand(4, 8)], [], [])  # strided
    assert not ops.is_plain_eager([x.to_sparse()], [], [])               # the layers name the bad layout
    assert not ops.is_plain_eager([x], [[0.0]], [])                      # not a tensor: the checks name it
    with torch.autograd.forward_ad.dual_level():                          # forward-mode tangents
        assert not ops.is_plain_eager([x], [], [])
    seen = []
    torch.func.vmap(lambda t: seen.append(ops.is_plain_eager([t], [], [])) or t)(x.unsqueeze(0))
    assert seen == [False]                                                # torch.func transforms

    class Mode(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Mode():                                                          # tensor modes (fake tensors, ...)
        assert not ops.is_plain_eager([x], [], [])
    assert ops.is_plain_eager([x], [], [])
