"""The errors a user can hit, with the exact messages docs/errors.md quotes: missing driver or
NVRTC (simulated with SPIKEJIT_CUDA_DRIVER_PATH / SPIKEJIT_NVRTC_PATH in a subprocess, since each
library is opened once per process), unsupported FlexSN ops, bad neuron text, shape / dtype /
device mismatches, non-contiguous inputs, unknown surrogates, and SPIKEJIT_LOG."""
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import spikejit
from spikejit import functional
from conftest import random_input, require_cuda

KNOWN = ("ATan, DeterministicPass, Erf, FakeNumericalGradient, LeakyKReLU, LogTailedReLU, NonzeroSignLogAbs, "
         "PiecewiseExp, PiecewiseLeakyReLU, PiecewiseQuadratic, QPseudoSpike, Rect, S2NN, Sigmoid, SoftSign, "
         "SquarewaveFourierSeries, SuperSpike")


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with `env` added (None removes a variable)."""
    full = dict(os.environ)
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True,
                          text=True, timeout=300)


def bogus_path(tmp_path, name):
    return str(tmp_path / "missing" / name)  # a folder that does not exist


def lif_handle():
    return functional.builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,))


# ---- no driver, no NVRTC ------------------------------------------------------------------------

def test_no_driver_is_reported_with_every_path_tried(tmp_path):
    driver = bogus_path(tmp_path, "libcuda.so.1")
    result = run_python("""
        import spikejit
        print(spikejit.cuda_available())
        print(spikejit.cuda_unavailable_reason())
    """, SPIKEJIT_CUDA_DRIVER_PATH=driver, SPIKEJIT_LOG=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"False\ncannot open the CUDA driver library (libcuda); tried, in order:\n"
                             f"  {driver}: cannot open shared object file: No such file or directory\n")
    assert result.stderr == ""


def test_cuda_launch_without_a_driver_raises_spikejit_error(tmp_path):
    # What the ops call for CUDA tensors; the driver fails to open before any pointer is used.
    driver = bogus_path(tmp_path, "libcuda.so.1")
    result = run_python("""
        import torch, spikejit
        from spikejit import functional
        program = spikejit.registry.program(functional.builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,)))
        x = torch.randn(4, 8) + 0.5
        s = torch.empty(4, 8)
        spec = lambda t: (t.data_ptr(), 0, list(t.shape), [])
        try:
            spikejit._core.cuda_forward(program, 4, [8], [spec(x)], [], [], [spec(s)], [], [], [], stream=0, device=0)
        except spikejit.Error as e:
            print(type(e).__name__, isinstance(e, RuntimeError))
            print(e)
    """, SPIKEJIT_CUDA_DRIVER_PATH=driver)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"Error True\ncannot open the CUDA driver library (libcuda); tried, in order:\n"
                             f"  {driver}: cannot open shared object file: No such file or directory\n")


def test_toolkit_stub_is_named_not_mistaken_for_a_driver():
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    stubs = [os.path.join(r, "lib64", "stubs", "libcuda.so") for r in roots if r]
    stub = next((p for p in stubs if os.path.exists(p)), None)
    if stub is None:
        pytest.skip(f"no CUDA toolkit link stub here (looked at {', '.join(stubs)})")
    result = run_python("""
        import spikejit
        print(spikejit.cuda_unavailable_reason())
    """, SPIKEJIT_CUDA_DRIVER_PATH=stub)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"cuInit failed: CUDA_ERROR_STUB_LIBRARY (the toolkit's link stub, not a driver) "
                             f"(driver {stub})\n")


@pytest.mark.cuda
def test_no_nvrtc_on_a_gpu_names_the_library(tmp_path):
    require_cuda()
    nvrtc = bogus_path(tmp_path, "libnvrtc.so.13")
    result = run_python("""
        import torch, spikejit
        try:
            spikejit.LIFNode(step_mode="m")(torch.randn(4, 256, device="cuda") + 0.5)
            print("no error")
        except spikejit.Error as e:
            print(e)
    """, SPIKEJIT_NVRTC_PATH=nvrtc, SPIKEJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"cannot open the NVRTC library (libnvrtc); tried, in order:\n"
                             f"  {nvrtc}: cannot open shared object file: No such file or directory\n")


# ---- FlexSN --------------------------------------------------------------------------------------

def lgamma_core(x, v):
    h = v + torch.lgamma(x * x + 1.0)  # aten.lgamma has no rule (nor a decomposition into ops with one)
    s = spikejit.surrogate.ATan()(h - 1.0)
    return s, h * (1.0 - s)


UNSUPPORTED = ("FlexSN: cannot compile the core: aten.lgamma.default: not supported "
               "(docs/user-guide.md lists the ops FlexSN compiles); ")


def test_unsupported_op_warns_and_falls_back_to_an_eager_scan():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        node = spikejit.FlexSN(lgamma_core, num_inputs=1, num_states=1, num_outputs=1)
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert messages == [UNSUPPORTED + "falling back to an eager scan"]
    assert node.handle is None
    x = random_input(5, 16)
    v = torch.zeros(16)
    expected = []
    for t in range(5):  # the fallback still computes the core's dynamics
        s, v = lgamma_core(x[t], v)
        expected.append(s)
    torch.testing.assert_close(node(x), torch.stack(expected))


def test_unsupported_op_in_strict_mode_raises():
    with pytest.raises(spikejit.UnsupportedCoreError) as info:
        spikejit.FlexSN(lgamma_core, num_inputs=1, num_states=1, num_outputs=1, strict=True)
    assert str(info.value) == UNSUPPORTED + "strict=True, so no eager fallback"
    assert info.value.op == "aten.lgamma.default"
    assert isinstance(info.value, NotImplementedError)


def test_core_of_the_wrong_shape_is_rejected():
    with pytest.raises(ValueError) as info:
        spikejit.FlexSN(lambda x: x, num_inputs=1, num_states=1, num_outputs=1)
    assert str(info.value) == "core: expected a callable of 2 arguments (inputs then states), got one with signature (x)"
    with pytest.raises(ValueError) as info:
        spikejit.FlexSN(lambda x, v: (x,), num_inputs=1, num_states=1, num_outputs=1)
    assert str(info.value) == "core: expected 1 outputs and 1 next states (2 values), got 1"


# ---- bad neuron text ----------------------------------------------------------------------------

def test_parse_error_lists_every_diagnostic_with_line_column_and_caret():
    text = "neuron lif\ninput x\nstate v = 0\noutput s\nh = v + y\ns = spike(h - 1, no_such)\nv = h\n"
    with pytest.raises(spikejit.ParseError) as info:
        spikejit.Program.from_text(text, "lif.sj")
    known = ("piecewise_quadratic, piecewise_exp, sigmoid, soft_sign, super_spike, atan, nonzero_sign_log_abs, erf, "
             "piecewise_leaky_relu, squarewave_fourier_series, s2nn, q_pseudo_spike, leaky_k_relu, "
             "fake_numerical_gradient, log_tailed_relu, deterministic_pass, rect")
    assert str(info.value) == ("lif.sj:5:9: error: unknown name 'y'\n"
                               "  h = v + y\n"
                               "          ^\n"
                               f"lif.sj:6:18: error: unknown surrogate 'no_such' (known: {known})\n"
                               "  s = spike(h - 1, no_such)\n"
                               "                   ^")
    assert isinstance(info.value, ValueError)
    assert info.value.diagnostics == [("lif.sj", 5, 9, "unknown name 'y'"),
                                      ("lif.sj", 6, 18, f"unknown surrogate 'no_such' (known: {known})")]


# ---- shapes, dtypes, devices ----------------------------------------------------------------------

def expect(error, message, call):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


def test_shape_mismatches_name_the_argument():
    x = random_input(4, 3, 5)
    expect(ValueError, "v_init: expected shape [3, 5] (x_seq.shape[1:]), got [7]",
           lambda: spikejit.multistep_lif(x, torch.zeros(7)))
    expect(ValueError, "init_states[0]: expected shape [3, 5], got float32[3, 6] on cpu",
           lambda: torch.ops.spikejit.neuron_inference(lif_handle(), [x], [torch.zeros(3, 6)], [], False, True))
    expect(ValueError, "inputs: expected 1 tensors, got 2",
           lambda: torch.ops.spikejit.neuron_inference(lif_handle(), [x, x], [], [], False, True))
    expect(ValueError, "r_tau: expected a one-element tensor, got shape [2]",
           lambda: spikejit.multistep_plif(x, None, torch.tensor([0.5, 0.5])))
    expect(ValueError, "compressed: expected uint8[3] for shape [4, 5], got uint8[2] on cpu",
           lambda: spikejit.bit_spike_decompress(torch.zeros(2, dtype=torch.uint8), (4, 5)))


def test_dtype_mismatches_name_the_argument():
    x = random_input(4, 3, 5)
    expect(TypeError, "inputs[0]: expected float32, float64, float16 or bfloat16, got int64[4, 3] on cpu",
           lambda: spikejit.LIFNode(step_mode="m")(torch.ones(4, 3, dtype=torch.int64)))
    expect(TypeError, "init_states[0]: expected dtype torch.float32 (that of inputs[0]), got float64[3, 5] on cpu",
           lambda: torch.ops.spikejit.neuron_inference(lif_handle(), [x], [torch.zeros(3, 5, dtype=torch.float64)],
                                                      [], False, True))
    expect(TypeError, "x_seq: expected a tensor, got list", lambda: spikejit.LIFNode(step_mode="m")([1.0, 2.0]))
    expect(TypeError, "v_threshold: expected a float, got str", lambda: spikejit.LIFNode(v_threshold="1"))
    expect(ValueError, "tau: expected a float > 1, got 0.5", lambda: spikejit.LIFNode(tau=0.5))


def test_arguments_of_the_wrong_type_name_the_argument():
    x = random_input(4, 3)
    expect(TypeError, "decay_input: expected a bool, got str", lambda: spikejit.LIFNode(decay_input="False"))
    expect(TypeError, "store_v_seq: expected a bool, got str", lambda: spikejit.IFNode(store_v_seq="yes"))
    expect(TypeError, "detach_reset: expected a bool, got str",
           lambda: spikejit.lif_multi_step(x, None, detach_reset="no"))
    expect(TypeError, "IFNode.__init__() got an unexpected keyword argument 'tau'", lambda: spikejit.IFNode(tau=5.0))
    node = spikejit.LIFNode(step_mode="m")
    node.v = None
    expect(TypeError, "v: expected a tensor or a float (the state), got NoneType", lambda: node(x))
    plif = spikejit.ParametricLIFNode(step_mode="m")
    plif.w = torch.nn.Parameter(torch.zeros(3))
    expect(ValueError, "w: expected a one-element tensor (1/tau = sigmoid(w)), got shape [3]", lambda: plif(x))
    core = lambda x, v: (torch.sigmoid(v + x), v + x)  # noqa: E731
    expect(TypeError, "strict: expected a bool, got str", lambda: spikejit.FlexSN(core, 1, 1, 1, strict="False"))
    expect(TypeError, "requires_grad[0]: expected a bool, got str",
           lambda: spikejit.FlexSN(core, 1, 1, 1, requires_grad="ab"))
    expect(TypeError, "example_inputs[0]: expected a tensor, got float",
           lambda: spikejit.FlexSN(core, 1, 1, 1, example_inputs=[1.0, 2.0]))
    expect(TypeError, "packed_outputs: expected a sequence of output indices, got 0",
           lambda: spikejit.FlexSN(core, 1, 1, 1, packed_outputs=0))
    expect(TypeError, "states[0]: expected a tensor or None, got float",
           lambda: spikejit.FlexSN(core, 1, 1, 1).multi_step_functional_forward(x, states=[0.5]))
    expect(TypeError, "shape: expected a shape (an int or a sequence of ints), got '12'",
           lambda: spikejit.bit_spike_decompress(torch.zeros(2, dtype=torch.uint8), "12"))
    assert spikejit.bit_spike_decompress(spikejit.bit_spike_compress(x > 0), 12).equal((x > 0).flatten().byte())
    expect(TypeError, "s: expected a tensor, got list", lambda: spikejit.bit_spike_compress([1.0, 0.0]))
    expect(TypeError, "x: expected a tensor, got list", lambda: spikejit.surrogate.ATan()([1.0, 0.0]))
    expect(TypeError, "alpha: expected a number, got str", lambda: spikejit.surrogate.Sigmoid(alpha="a"))
    expect(ValueError, "params[0]: expected a finite number, got nan",
           lambda: spikejit.surrogate.spike(x, "atan", [float("nan")]))
    expect(TypeError, "params: expected a sequence of numbers, got str",
           lambda: spikejit.surrogate.spike(x, "sigmoid", "4"))


def test_a_rejected_option_assignment_leaves_the_module_as_it_was():
    import copy
    x = random_input(6, 4)
    node = spikejit.LIFNode(step_mode="m")
    before = node(x)
    node.reset()
    expect(ValueError, "tau: expected a float > 1, got 0.5", lambda: setattr(node, "tau", 0.5))
    expect(TypeError, "v_threshold: expected a float, got str", lambda: setattr(node, "v_threshold", "x"))
    expect(ValueError, f"surrogate_function: unknown surrogate 'nope'; known: {KNOWN}",
           lambda: setattr(node, "surrogate_function", "nope"))
    assert node.tau == 2.0 and node.v_threshold == 1.0 and isinstance(node.surrogate_function,
                                                                       spikejit.surrogate.Sigmoid)
    assert torch.equal(copy.deepcopy(node)(x), before)
    handle = node._program_handle
    node.surrogate_function = "ATan"  # a name after a module, and back
    assert node._program_handle != handle and node.surrogate_function == "ATan"
    node.surrogate_function = spikejit.surrogate.Sigmoid()
    assert node._program_handle == handle


@pytest.mark.parametrize("result", [1.0, "a"])
def test_core_results_that_are_not_tensors_are_rejected(result):
    message = f"core: expected tensors (outputs, then next states), got {type(result).__name__} as value 0"
    expect(TypeError, message, lambda: spikejit.FlexSN(lambda x, v: (result, v + x), 1, 1, 1))
    eager = spikejit.FlexSN(lambda x, v: (result, v + x), 1, 1, 1, backend="torch")
    expect(TypeError, message, lambda: eager(random_input(4, 3)))


def test_raw_backward_op_checks_what_the_forward_saved():
    x = random_input(5, 3).requires_grad_()
    handle = lif_handle()
    saved = torch.ops.spikejit.neuron_forward(handle, [x], [], [], False)[2]
    grads = [torch.randn(5, 3)]
    expect(TypeError, "saved[0]: expected torch.float32 (what the forward saved), got float64[5, 3] on cpu",
           lambda: torch.ops.spikejit.neuron_backward(handle, [5, 3], torch.float32, x.device, [saved.double()], [],
                                                      grads, [None], []))
    expect(ValueError, "seq_shape: expected [T, *S] with dimensions >= 0, got [-5, 3]",
           lambda: torch.ops.spikejit.neuron_backward(handle, [-5, 3], torch.float32, x.device, [saved], [],
                                                      grads, [None], []))


def test_sparse_tensors_are_rejected_by_name():
    x = random_input(4, 3)
    sparse = "expected a dense (strided) tensor, got a sparse_coo"
    expect(TypeError, f"inputs[0]: {sparse} float32[4, 3] on cpu (to_dense() makes one)",
           lambda: spikejit.LIFNode(step_mode="m")(x.to_sparse()))
    expect(TypeError, f"init_states[0]: {sparse} float32[3] on cpu (to_dense() makes one)",
           lambda: spikejit.multistep_lif(x, torch.zeros(3).to_sparse()))
    expect(TypeError, f"inputs[0]: {sparse} float32[4, 3] on cpu (to_dense() makes one)",
           lambda: spikejit.FlexSN(lambda x, v: (x + v, v * 0.5), 1, 1, 1, strict=True)(x.to_sparse()))
    expect(TypeError, f"s: {sparse} float32[4, 3] on cpu (to_dense() makes one)",
           lambda: spikejit.bit_spike_compress((x > 0).float().to_sparse()))
    expect(TypeError, f"compressed: {sparse} uint8[2] on cpu (to_dense() makes one)",
           lambda: spikejit.bit_spike_decompress(torch.ones(2, dtype=torch.uint8).to_sparse(), (16,)))


def test_nested_tensors_are_rejected_by_name():
    nested = torch.nested.nested_tensor([random_input(4, 3), random_input(2, 3)])
    message = ("expected a dense tensor, got a nested tensor; pad the sequences to one length and pass a mask "
               "(docs/user-guide.md, \"Sequences of different lengths in one batch\")")
    expect(TypeError, f"x_seq: {message}", lambda: spikejit.LIFNode(step_mode="m")(nested))
    expect(TypeError, f"x: {message}", lambda: spikejit.LIFNode(step_mode="s")(nested))
    expect(TypeError, f"x_seq: {message}", lambda: spikejit.lif_multi_step(nested))
    expect(TypeError, f"inputs[0]: {message}",
           lambda: spikejit.FlexSN(lambda x, v: (x + v, v * 0.5), 1, 1, 1, strict=True)(nested))
    expect(TypeError, f"x: {message}", lambda: spikejit.SimpleLIFNode(tau=2.0, decay_input=True)(nested))


def test_device_mismatch_names_both_devices():
    x = random_input(4, 3, 5)
    expect(ValueError, "v_init: expected a tensor on cpu (that of x_seq), got one on meta",
           lambda: spikejit.multistep_lif(x, torch.zeros(3, 5, device="meta")))
    expect(ValueError, "init_states[0]: expected a tensor on cpu (that of inputs[0]), got float32[3, 5] on meta",
           lambda: torch.ops.spikejit.neuron_inference(lif_handle(), [x], [torch.zeros(3, 5, device="meta")],
                                                      [], False, True))


def test_non_contiguous_inputs_are_handled_not_rejected():
    x = random_input(5, 3, 4).transpose(0, 1)  # [3, 5, 4], not contiguous
    assert not x.is_contiguous()
    s, v = spikejit.multistep_lif(x, None)
    s_ref, v_ref = spikejit.multistep_lif(x.contiguous(), None)
    assert torch.equal(s, s_ref) and torch.equal(v, v_ref)
    assert s.sum() > 0  # the inputs make spikes: the comparison is not between two empty results


def test_released_kernel_handle():
    program = spikejit.Program.from_text("neuron n\ninput x\noutput y\ny = x\n")
    handle = spikejit.registry.register(program)
    spikejit.registry.release_owner(handle)
    expect(RuntimeError, f"spikejit: kernel handle {handle} is not registered (released or never created, and no "
                         f"graph traced with it was seen by this process or this machine's kernel cache)",
           lambda: spikejit.registry.program(handle))


# ---- surrogates -----------------------------------------------------------------------------------

def test_unknown_and_unsupported_surrogates():
    expect(ValueError, f"surrogate_function: unknown surrogate 'nope'; known: {KNOWN}",
           lambda: spikejit.LIFNode(surrogate_function="nope"))
    expect(ValueError, f"surrogate: unknown surrogate 'nope'; known: {KNOWN}",
           lambda: spikejit.surrogate.spike(torch.zeros(2), "nope"))
    expect(TypeError, "Sigmoid got an unexpected parameter 'beta'; it takes ('alpha',)",
           lambda: spikejit.surrogate.Sigmoid(beta=2.0))
    from spikingjelly.activation_based import surrogate as sj
    unsupported = f"; spikejit supports {KNOWN} (spikejit.surrogate or SpikingJelly's classes)"
    expect(ValueError, "surrogate_function: unsupported surrogate PoissonPass" + unsupported,
           lambda: spikejit.LIFNode(surrogate_function=sj.PoissonPass()))

    class MySigmoid(sj.Sigmoid):  # may change the gradient: not taken for its parent
        pass

    expect(ValueError, "surrogate_function: unsupported surrogate MySigmoid" + unsupported,
           lambda: spikejit.LIFNode(surrogate_function=MySigmoid()))
    class Sigmoid(torch.nn.Module):  # SpikingJelly's name, not its class: its gradient is unknown
        alpha = 4.0

    expect(ValueError, f"surrogate_function: unsupported surrogate {__name__}.Sigmoid; a class named like "
                       "SpikingJelly's Sigmoid is taken only from SpikingJelly's surrogate module (its gradient is "
                       "spikejit's sigmoid); use spikejit.surrogate.Sigmoid or SpikingJelly's",
           lambda: spikejit.LIFNode(surrogate_function=Sigmoid()))
    expect(ValueError, "surrogate_function: Sigmoid(spiking=False) is not supported; spikejit fires Heaviside spikes",
           lambda: spikejit.LIFNode(surrogate_function=sj.Sigmoid(spiking=False)))


# ---- SPIKEJIT_LOG ---------------------------------------------------------------------------------

LOG_PROBE = """
    import torch, spikejit
    x = torch.randn(8, 64, requires_grad=True)
    spikejit.LIFNode(step_mode="m")(x).sum().backward()   # CPU training: nothing to log
    spikejit.cuda_available()                              # opens (or fails to open) the driver
"""


def test_silent_by_default(tmp_path):
    result = run_python(LOG_PROBE, SPIKEJIT_LOG=None, SPIKEJIT_CUDA_DRIVER_PATH=bogus_path(tmp_path, "libcuda.so.1"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_debug_log_reports_the_library_search(tmp_path):
    driver = bogus_path(tmp_path, "libcuda.so.1")
    result = run_python(LOG_PROBE, SPIKEJIT_LOG="debug", SPIKEJIT_CUDA_DRIVER_PATH=driver)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"spikejit: [debug] looking for the CUDA driver library (libcuda): {driver}: "
        "cannot open shared object file: No such file or directory",
        "spikejit: [info] cannot open the CUDA driver library (libcuda): tried 1 candidate "
        "(SPIKEJIT_LOG=debug lists them)",
    ]


def test_unknown_log_level_says_so_and_logs_at_info(tmp_path):
    result = run_python(LOG_PROBE, SPIKEJIT_LOG="verbose",
                        SPIKEJIT_CUDA_DRIVER_PATH=bogus_path(tmp_path, "libcuda.so.1"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == ("spikejit: [warning] SPIKEJIT_LOG='verbose' is not one of off, warning, info, debug, "
                        "trace (or 0-3); logging at info")
    assert all(re.match(r"spikejit: \[(warning|info)\] ", line) for line in lines), lines
    assert any("cannot open the CUDA driver library" in line for line in lines), lines
