"""Shared fixtures: fresh random seeds (printed, so a failure can be replayed with
SPIKEJIT_TEST_SEED) and the CUDA policy (skip without a GPU, fail under SPIKEJIT_REQUIRE_CUDA=1);
SpikingJelly's PyTorch reference pinned on CUDA."""
import functools
import os
import secrets
import subprocess
import sys

import pytest
import torch

import spikejit

# SpikingJelly's modules on CUDA choose a fused implementation of their own (its CUDA or Triton
# kernels, whose arithmetic is not its PyTorch reference's: Triton's division is not correctly
# rounded, for one). The tests compare against the reference, so each neuron's choice is pinned
# to it here, before SpikingJelly is imported (it reads these when imported).
for _kind in ("IF", "LIF", "PLIF", "QIF", "EIF", "IZHIKEVICH", "ILIF", "ACTIVATION_AWARE_IF", "STBIF", "CLIF"):
    os.environ.setdefault(f"SJ_{_kind}_CUDA_IMPLEMENTATION", "torch")


@pytest.fixture(autouse=True)
def seed(request):
    """Seeds torch for each test from the OS (or SPIKEJIT_TEST_SEED) and prints the seed."""
    value = int(os.environ.get("SPIKEJIT_TEST_SEED", secrets.randbits(31)))
    torch.manual_seed(value)
    print(f"seed: SPIKEJIT_TEST_SEED={value} ({request.node.nodeid})")
    return value


def cuda_usable() -> bool:
    return torch.cuda.is_available() and spikejit.cuda_available()


def require_cuda():
    """Skips the test without CUDA, or fails when SPIKEJIT_REQUIRE_CUDA=1."""
    if cuda_usable():
        return
    why = "torch sees no GPU" if not torch.cuda.is_available() else spikejit.cuda_unavailable_reason()
    if os.environ.get("SPIKEJIT_REQUIRE_CUDA") == "1":
        pytest.fail(f"SPIKEJIT_REQUIRE_CUDA=1 but CUDA is not usable: {why}")
    pytest.skip(f"CUDA not usable: {why}")


def device_params():
    """['cpu', 'cuda'] with the CUDA case following the policy of require_cuda()."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def device(request):
    name = getattr(request, "param", "cpu")
    if name == "cuda":
        require_cuda()
        return torch.device("cuda", torch.cuda.current_device())  # with its index, like tensors' devices
    return torch.device(name)


# A package of plain PyTorch (a Linear, no spikejit) built by AOTInductor, loaded and run.
_AOT_INDUCTOR_PROBE = """
import os, sys, tempfile, torch
model, x = torch.nn.Linear(4, 2).to(sys.argv[1]), torch.randn(3, 4, device=sys.argv[1])
path = os.path.join(tempfile.mkdtemp(), "probe.pt2")
package = torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)), package_path=path)
torch._inductor.aoti_load_package(package)(x)
"""


@functools.lru_cache(maxsize=None)
def _aot_inductor_crash(device_type: str) -> str:
    """What killed a child process that loaded the probe package on the device ('' if none)."""
    result = subprocess.run([sys.executable, "-c", _AOT_INDUCTOR_PROBE, device_type], capture_output=True,
                            text=True, timeout=600)
    return f"signal {-result.returncode}" if result.returncode < 0 else ""


def skip_if_aot_inductor_crashes(device: torch.device):
    """Skips a test of AOTInductor packages where PyTorch's AOTInductor does not work at all: a
    package of plain PyTorch crashes the process that loads it (a C++ compiler whose shared
    objects do not load: it happens). A probe in a child process tells, so that the test's own
    process survives. Under SPIKEJIT_REQUIRE_CUDA=1 (the GPU check, which must run every test)
    that is a failure instead, naming the fix. Any other failure of the probe is left to the
    test to show."""
    crash = _aot_inductor_crash(device.type)
    if not crash:
        return
    why = (f"AOTInductor: loading a package of plain PyTorch (a Linear, no spikejit) on {device.type} died of "
           f"{crash} in a child process; the package's C++ compiler is CXX={os.environ.get('CXX', 'g++')} "
           f"(set CXX to another C++ compiler)")
    if os.environ.get("SPIKEJIT_REQUIRE_CUDA") == "1":
        pytest.fail(f"SPIKEJIT_REQUIRE_CUDA=1 runs every test, but {why}")
    pytest.skip(why)


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device (skips without one unless SPIKEJIT_REQUIRE_CUDA=1)")


def random_input(*shape, device="cpu", dtype=torch.float32, scale=1.5):
    """Random currents around the threshold (never all zeros)."""
    return (torch.randn(*shape, dtype=torch.float64) * scale + 0.3).to(device=device, dtype=dtype)


def copies_in(step):
    """The names of the copying ATen ops that run during step()."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
    copying = {"aten::clone", "aten::copy_", "aten::contiguous", "aten::_to_copy"}
    return sorted({event.key for event in profile.key_averages() if event.key in copying})
