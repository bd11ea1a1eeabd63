"""DistributedDataParallel with spikejit's neurons (examples/ddp_train.py): 2 processes launched by
torchrun (gloo on the CPU; NCCL on 2 GPUs) must train exactly like one process on the whole
global batch: the gradients of every step and the parameters after the last step agree within
the example's TOLERANCE (float64 on the CPU: 1e-10 relative, float32 on GPUs: 1e-4)."""
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import require_cuda

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
TIMEOUT_S = 300


def load_example():
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """The ids of all processes below `pid` (torchrun starts its workers in sessions of their own,
    so killing torchrun's process group does not reach them)."""
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may contain spaces.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def torchrun(processes, *args):
    """Runs the example under torchrun; on a timeout torchrun and every worker are killed, so a
    hung collective cannot hang the test run."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(EXAMPLE), *map(str, args)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for pid in descendants(process.pid) + [process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        output, _ = process.communicate()
        pytest.fail(f"torchrun did not finish within {TIMEOUT_S} s:\n{output}")
    assert process.returncode == 0, f"torchrun exited with {process.returncode}:\n{output}"
    return output


def check_against_one_process(example, record, argv, device, dtype):
    args = example.parse_args(argv)
    reference = example.single_process(args, torch.device(device), dtype)
    assert record["world"] == 2
    assert len(record["grads"]) == len(reference["grads"]) == args.steps
    # Not a vacuous comparison: every parameter, the FlexSN neuron's threshold included, gets a
    # gradient and moves.
    initial = list(example.build_network(args, torch.device("cpu"), dtype).parameters())
    for i, (grad, final, start) in enumerate(zip(record["grads"][0], record["params"], initial)):
        assert grad.abs().max() > 0, f"parameter {i} got a zero gradient"
        assert not torch.equal(final, start.detach()), f"parameter {i} did not change"
    tolerance = example.TOLERANCE[dtype]
    for step, (ours, theirs) in enumerate(zip(record["grads"], reference["grads"])):
        difference = example.largest_difference(ours, theirs)
        assert difference <= tolerance, f"step {step}: gradients differ by {difference:.2e} (relative)"
    difference = example.largest_difference(record["params"], reference["params"])
    assert difference <= tolerance, f"final parameters differ by {difference:.2e} (relative)"
    losses = torch.tensor(record["losses"], dtype=torch.float64)
    assert torch.allclose(losses, torch.tensor(reference["losses"], dtype=torch.float64), rtol=1e-6, atol=0)


def test_gloo_two_processes_equal_one_process(tmp_path, seed):
    example = load_example()
    out = tmp_path / "ddp.pt"
    argv = ["--steps", 4, "--batch-size", 24, "--time-steps", 6, "--hidden", 48, "--dtype", "float64",
            "--device", "cpu", "--seed", seed]
    output = torchrun(2, *argv, "--out", out, "--check")
    assert "2 process(es), gloo on cpu, float64: global batch 24 (12 per process)" in output, output
    assert ": PASS" in output, output       # the example's own check, which the GPU run relies on
    check_against_one_process(example, torch.load(out), [str(a) for a in argv], "cpu", torch.float64)


@pytest.mark.cuda
def test_nccl_two_gpus_equal_one_gpu(tmp_path, seed):
    require_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    example = load_example()
    out = tmp_path / "ddp.pt"
    argv = ["--steps", 4, "--batch-size", 64, "--dtype", "float32", "--device", "cuda", "--seed", seed]
    output = torchrun(2, *argv, "--out", out, "--check")
    assert "2 process(es), nccl on cuda, float32" in output, output
    assert ": PASS" in output, output
    check_against_one_process(example, torch.load(out), [str(a) for a in argv], "cuda", torch.float32)
