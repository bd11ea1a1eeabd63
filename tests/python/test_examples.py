"""Runs each Python example in examples/ as a user would (a subprocess, small sizes through its
command-line flags, a fresh seed) and checks that what it prints makes sense: training lowers
the loss, compression round-trips exactly, the compiled neuron agrees with eager PyTorch, and the
digits demo prints its accuracy and speed table and writes its figure."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import device_params

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT_S = 300


def run_example(name, *args):
    """Runs examples/<name> and returns its stdout; fails with its output on a non-zero exit."""
    # One thread: the examples are small, and CI machines have few cores shared by many jobs.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True,
                            text=True, timeout=TIMEOUT_S, env=env, cwd=EXAMPLES.parent)
    assert result.returncode == 0, f"{name} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def number(pattern, text):
    match = re.search(pattern, text)
    assert match, f"no match for {pattern!r} in:\n{text}"
    return float(match.group(1))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_train_lif_lowers_the_loss(device, seed):
    out = run_example("train_lif.py", "--iterations", 60, "--steps", 8, "--batch-size", 32,
                      "--device", device, "--seed", seed)
    match = re.search(r"loss \(mean of 5 iterations\): ([\d.]+) at the start -> ([\d.]+) at the end", out)
    assert match, out
    start, end = float(match.group(1)), float(match.group(2))
    assert end < 0.5 * start, out
    assert number(r"accuracy after training: ([\d.]+)%", out) > 50.0, out  # chance is 25 %


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_custom_neuron_learnable_matches_eager_and_learns(device, seed):
    out = run_example("custom_neuron_learnable.py", "--neurons", 64, "--steps", 16, "--iterations", 40,
                      "--device", device, "--seed", seed)
    assert "param p1[neuron] = 0" in out, out    # the per-neuron threshold became a kernel parameter
    mismatches = number(r"against PyTorch's eager loop: (\d+) different spikes", out)
    gradient = number(r"parameter gradients differ by at most ([\d.e+-]+) \(relative\)", out)
    assert mismatches == 0, out
    assert gradient < 1e-9, out       # float64 (see the example), sums in another order
    start = number(r"rate error: ([\d.]+) at the start", out)
    end = number(r"-> ([\d.]+) at the end", out)
    assert end < 0.5 * start, out


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("shape", [(16, 32, 1000), (3, 5, 7)])   # 7 * 5 * 3 = 105: a padded last byte
def test_compress_spikes_round_trip_and_gradients(device, seed, shape):
    steps, batch, neurons = shape
    out = run_example("compress_spikes.py", "--steps", steps, "--batch-size", batch, "--neurons", neurons,
                      "--device", device, "--seed", seed)
    count = steps * batch * neurons
    assert f"{count * 4} bytes as float32 -> {(count + 7) // 8} bytes packed" in out, out
    assert "round trip: exact (0 of" in out, out
    assert number(r"outputs and gradients differ by at most ([\d.e+-]+);", out) < 1e-4, out


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_digits_demo_smoke(device, seed, tmp_path):
    figure = tmp_path / "digits.png"
    out = run_example("digits_demo.py", "--epochs", 1, "--max-batches", 3, "--steps", 4, "--hidden", 32,
                      "--bench-repeats", 1, "--target", 0, "--seed", seed, "--device", device,
                      "--figure", figure)
    assert re.search(r"epoch 1/1: loss [\d.]+, train accuracy [\d.]+%, test accuracy [\d.]+%, [\d.]+ s", out), out
    assert "final test accuracy:" in out, out
    for row in ("training epoch (3 batches of 32)", "test set inference (360 images)"):
        assert re.search(re.escape(row) + r"\s+[\d.]+s\s+[\d.]+s\s+[\d.]+x", out), out
    # The loop model is the same network: same weights after training, same predictions.
    assert number(r"the gradients of one batch differ by at most ([\d.e+-]+) \(relative\)", out) < 1e-4, out
    assert number(r"the weights differ by at most ([\d.e+-]+) \(Adam", out) < 1e-4, out
    assert number(r"test predictions agree on (\d+)/360", out) >= 350, out
    assert f"figure: {figure}" in out, out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figure.stat().st_size > 10_000  # a drawn figure, not an empty canvas


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_stochastic_neuron_compiles_reproduces_and_learns(device, seed):
    out = run_example("stochastic_neuron.py", "--neurons", 64, "--steps", 16, "--iterations", 40,
                      "--device", device, "--seed", seed)
    assert "uniform()" in out, out                   # torch.bernoulli became a kernel draw
    assert "the same torch.manual_seed, the same spikes: True; a fresh call, other spikes: True" in out, out
    assert number(r"against a PyTorch loop fed the same spikes: differ by at most ([\d.e+-]+)", out) < 1e-4, out
    start = number(r"rate error: ([\d.]+) at the start", out)
    end = number(r"-> ([\d.]+) at the end", out)
    assert end < 0.5 * start, out
    assert "eager scan" in out, out


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_gradient_penalty_matches_the_pytorch_loop_and_learns(device, seed):
    out = run_example("gradient_penalty.py", "--iterations", 40, "--steps", 8, "--batch-size", 32,
                      "--device", device, "--seed", seed)
    assert number(r"against the PyTorch loop: they differ by at most ([\d.e+-]+) \(relative\)", out) < 1e-4, out
    start = number(r"loss \(mean of 5 iterations\): ([\d.]+) at the start", out)
    end = number(r"loss \(mean of 5 iterations\): [\d.]+ at the start -> ([\d.]+) at the end", out)
    assert end < 0.5 * start, out
    assert number(r"accuracy after training: ([\d.]+)%", out) > 50.0, out  # chance is 25 %


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_convert_spikingjelly_trains_like_the_original(device, seed):
    out = run_example("convert_spikingjelly.py", "--iterations", 3, "--steps", 2, "--batch-size", 2, "--size", 32,
                      "--device", device, "--seed", seed)
    assert "sew_resnet18: 20 SpikingJelly neurons converted to spikejit's LIFNode, all running as kernels" in out, out
    assert number(r"outputs differ by at most ([\d.e+-]+)", out) < 1e-4, out
    assert number(r"weights after training differ by at most ([\d.e+-]+)", out) < 1e-4, out
    assert number(r"training moved them by up to ([\d.e+-]+)", out) > 1e-3, out  # (it trained)
    assert re.search(r"training step: SpikingJelly [\d.]+ ms, converted [\d.]+ ms", out), out


@pytest.mark.parametrize("kind, converted_to", [("flexsn", "StaticInputsFlexSN"),
                                                ("custom", "CompiledSpikingJellyNeuron")])
def test_convert_spikingjelly_steps_train_like_the_original(seed, kind, converted_to):
    """SpikingJelly 2.0's FlexSN neurons, or a neuron class of the user's own (a BaseNode
    subclass), converted (CPU only: on CUDA SpikingJelly runs its FlexSN as its own Triton
    kernels, whose rounding differs)."""
    out = run_example("convert_spikingjelly.py", "--neuron", kind, "--iterations", 3, "--steps", 2,
                      "--batch-size", 2, "--size", 32, "--seed", seed)
    assert (f"sew_resnet18: 20 SpikingJelly neurons converted to spikejit's {converted_to}, all running as "
            "kernels") in out, out
    assert number(r"outputs differ by at most ([\d.e+-]+)", out) < 1e-4, out
    assert number(r"weights after training differ by at most ([\d.e+-]+)", out) < 1e-4, out
    assert number(r"training moved them by up to ([\d.e+-]+)", out) > 1e-3, out
