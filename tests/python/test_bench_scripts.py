"""The Python benchmarks run on the GPU machine only once per session: their dry runs (tiny sizes,
CPU) run here, so that a change that breaks a benchmark fails the tests, not the GPU run."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "python"


def run_bench(name, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(BENCH / name), *args], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, f"{name} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_memory_bench_dry_run_runs_every_spikejit_variant():
    out = run_bench("bench_memory.py", "--dry-run", "--steps", "1", "--workloads", "vgg,linear-64",
                    "--variants", "spikejit,spikejit-packed,spikejit-packed-ckpt8,spikejit-recompute")
    for variant in ("spikejit", "spikejit-packed", "spikejit-packed-ckpt8", "spikejit-recompute"):
        for workload in ("vgg", "linear-64"):
            row = next((line for line in out.splitlines() if line.startswith(f"| {workload} | {variant} |")), None)
            assert row is not None and "failed" not in row and "not run" not in row, out


@pytest.mark.parametrize("script", ["bench_gpu_vs_spikingjelly.py", "bench_flexsn_vs_builtin.py",
                                    "bench_compiled_spikingjelly_neuron.py"])
def test_gpu_bench_dry_runs(script):
    out = run_bench(script, "--dry-run", *(["--sj-backends", "--budget-s", "60"] if "gpu_vs" in script else []))
    assert "| LIF |" in out or "| infer |" in out or "| AdaptiveLIF | s | infer |" in out, out


def test_gpu_bench_rounds_report_medians(tmp_path):
    """--rounds 2: every implementation measured twice in turn (SpikingJelly's torch worker runs
    on the CPU in a dry run), each case reported once as the median of both rounds."""
    import csv
    table = tmp_path / "rows.csv"
    out = run_bench("bench_gpu_vs_spikingjelly.py", "--dry-run", "--sj-backends", "torch", "--rounds", "2",
                    "--budget-s", "200", "--csv", str(table))
    assert "medians of 2 rounds" in out, out
    with open(table) as f:
        rows = [r for r in csv.DictReader(f) if r["ms"]]
    keys = [(r["implementation"], r["neuron"], r["dtype"], r["mode"], r["T"], r["N"]) for r in rows]
    assert len(keys) == len(set(keys)), "a case reported twice"
    assert {r["implementation"] for r in rows} >= {"spikejit", "SJ torch"}
    assert all(r["rounds"] == "2" for r in rows if not r["implementation"].endswith("(reference file)")), rows


def test_median_of_rounds():
    sys.path.insert(0, str(BENCH))
    try:
        from bench_gpu_vs_spikingjelly import median_of_rounds
    finally:
        sys.path.remove(str(BENCH))
    case = {"implementation": "spikejit", "neuron": "LIF", "dtype": "fp32", "mode": "train", "T": 4, "N": 8}
    rounds = [[dict(case, ms=3.0), {"implementation": "SJ cuda", "unavailable": "no build"}],
              [dict(case, ms=1.0), dict(case, implementation="SJ torch", skipped="time budget spent")],
              [dict(case, ms=2.0, spikes=5), dict(case, implementation="SJ torch", ms=4.0)]]
    merged = {r["implementation"]: r for r in median_of_rounds(rounds)}
    assert merged["spikejit"]["ms"] == 2.0 and merged["spikejit"]["rounds"] == 3
    assert merged["SJ torch"]["ms"] == 4.0 and merged["SJ torch"]["rounds"] == 1 and "skipped" not in merged["SJ torch"]
    assert merged["SJ cuda"] == {"implementation": "SJ cuda", "unavailable": "no build"}


def test_profile_step_runs_on_the_cpu():
    out = run_bench("profile_step.py", "--device", "cpu", "--calls", "20", "--bursts", "1", "--top", "3")
    assert "µs per step (host)" in out and "cProfile" in out, out
    for row in ("| spikejit | yes |", "| trivial Function | yes |", "| spikejit | no |", "| trivial Function | no |",
                "| yes | cpu_forward |", "| yes | cpu_backward |", "| no | cpu_forward |", "| no | cpu_backward |"):
        assert row in out, out


def test_host_paths_bench_takes_a_repeated_input():
    out = run_bench("bench_host_paths.py", "--calls", "20", "--bursts", "1", "--rounds", "1", "--steps", "4",
                    "--input", "repeated")
    assert "(repeated input)" in out and "| 1 | C++ |" in out, out


def test_host_paths_bench_reports_both_paths():
    out = run_bench("bench_host_paths.py", "--calls", "20", "--bursts", "1", "--rounds", "1")
    assert re.search(r"^\| 1 \| Python \|( [0-9.]+ \|){3}$", out, re.M), out
    from spikejit import _kernel_calls
    if _kernel_calls.CPP_CALLS:
        assert re.search(r"^\| 1 \| C\+\+ \|( [0-9.]+ \|){3}$", out, re.M), out


def test_cuda_graphs_bench_runs_on_the_cpu():
    """On the CPU it times eager and torch.compile (CUDA graphs need a GPU); a row per neuron."""
    out = run_bench("bench_cuda_graphs.py", "--device", "cpu", "--batches", "3", "--steps-t", "2", "--steps", "2", "--bursts", "1")
    for kind in ("IF", "LIF", "PLIF"):
        row = next((line for line in out.splitlines() if line.startswith(f"| {kind} | 2 | 3 |")), None)
        assert row is not None and row.count("x |") == 1, out
    assert "reduce-overhead" not in out.split("|", 1)[1], out


def test_memory_bench_runs_spikingjellys_memopt_on_the_vgg():
    """The sj-triton-memopt variants on the CPU (SpikingJelly's torch implementation; level 1, as
    levels 2-4 measure CUDA memory): the search applies to the VGG's blocks and the step runs."""
    import torch  # SpikingJelly is a test requirement (tests/python/requirements.txt): no skip
    sys.path.insert(0, str(BENCH))
    try:
        import bench_memory
        step = bench_memory.prepared_step("vgg", bench_memory.workloads(True)["vgg"],
                                          {"library": "spikingjelly", "implementation": "torch", "memopt": 1},
                                          torch.device("cpu"))
        step()
        wrapped = [type(m).__name__ for m in step.model.blocks.children()]
        assert all("Checkpoint" in name for name in wrapped), wrapped
        with pytest.raises(LookupError, match="memopt runs on the VGG only"):
            bench_memory.prepared_step("linear-64", bench_memory.workloads(True)["linear-64"],
                                       {"library": "spikingjelly", "implementation": "torch", "memopt": 1},
                                       torch.device("cpu"))
    finally:
        sys.path.remove(str(BENCH))


def test_profile_memory_replays_the_allocator_history():
    sys.path.insert(0, str(BENCH))
    try:
        from profile_memory import live_at_peak
    finally:
        sys.path.remove(str(BENCH))
    trace = [{"action": "alloc", "addr": 1, "size": 10}, {"action": "alloc", "addr": 2, "size": 30},
             {"action": "free_requested", "addr": 1}, {"action": "free_completed", "addr": 1},
             {"action": "alloc", "addr": 3, "size": 5}, {"action": "free_requested", "addr": 2},
             {"action": "alloc", "addr": 4, "size": 20}]
    peak, alive = live_at_peak(trace)
    assert peak == 40 and sorted(alive) == [1, 2]


@pytest.mark.parametrize("neuron", ["LIF", "FlexSN2"])
def test_profile_save_policies_dry_run_measures_every_policy(neuron):
    out = run_bench("profile_save_policies.py", "--dry-run", "--neuron", neuron, "--policies", "0", "4", "16")
    assert f"# {neuron} fp32" in out, out
    for row in ("| 4 | 256 | 0 |", "| 4 | 256 | 4 |", "| 16 | 64 | 0 |", "| 16 | 64 | 4 |", "| 16 | 64 | 16 |"):
        assert row in out, out
    assert "| 4 | 256 | 16 |" not in out, out  # k > T is not a policy of its own


def test_layout_bench_dry_run_measures_every_case():
    out = run_bench("bench_layouts.py", "--dry-run", "--device", "cpu")
    for row in ("| infer | channels-last, in place |", "| train | channels-last, copied first |",
                "| train | repeated over T, in place |", "| infer | copied first |",
                "| eager | in place |", "| compile | copied (before) |"):
        assert row in out, out


def test_forward_mode_bench_dry_run_measures_every_call():
    out = run_bench("bench_forward_mode.py", "--dry-run", "--device", "cpu")
    for row in ("| 4 | inference |", "| 4 | training (forward + backward) |", "| 4 | jvp, spikejit kernels |",
                "| 4 | jvp, eager scan (PyTorch forward mode) |"):
        assert row in out, out


def test_random_neurons_bench_dry_run_measures_every_core():
    out = run_bench("bench_random_neurons.py", "--dry-run", "--device", "cpu")
    for row in ("| LIF (no noise) |", "| noisy threshold (1 draw) |", "| Gaussian input noise (2 draws) |",
                "| Gaussian input noise by erfinv (1 draw) |", "| Gaussian input noise by ndtri (1 draw) |",
                "| Bernoulli escape (1 draw) |"):
        assert row in out, out


def test_nonlinear_neurons_bench_dry_run_compares_every_neuron_with_spikingjelly():
    out = run_bench("bench_nonlinear_neurons.py", "--dry-run", "--device", "cpu")
    assert "SpikingJelly: installed" in out, out
    for name in ("QIF", "EIF", "Izhikevich", "I-LIF", "CLIF", "KLIF", "CUBA LIF", "LIAF", "GLIF", "RAF", "ternary LIF",
                 "activation-aware IF", "STBIF", "few-spikes", "DSR IF", "DSR LIF", "MPBN LIF"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {name} |"))
        measured = "|".join(row.split("|")[5:7]) if name == "STBIF" else row.split("|", 4)[4]  # (STBIF: inference)
        assert "–" not in measured, row  # both sides measured (the copy bandwidth is CUDA's)
        assert row.rstrip(" |").endswith(" 0") or name in ("EIF", "CLIF"), row  # the same spikes


def test_flexsn_ops_bench_dry_run_measures_every_core():
    out = run_bench("bench_flexsn_ops.py", "--dry-run", "--device", "cpu")
    for row in ("| built-in LIFNode |", "| in-place LIF |", "| softplus adaptive threshold |",
                "| gelu input, elu leak |"):
        assert row in out, out


def test_cpu_allocator_bench_reports_every_size_and_implementation():
    out = run_bench("bench_cpu_allocator.py", "--sizes", "4:64", "2:128", "--steps", "2")
    assert re.search(r"spikejit's CPU pool: (up to \d+ MiB|off)", out), out
    rows = [line for line in out.splitlines() if line.startswith("| 4 | 64 |") or line.startswith("| 2 | 128 |")]
    assert {row.split("|")[3].strip() for row in rows} >= {"spikejit"}, out
    assert len(rows) == 2 * len({row.split("|")[3].strip() for row in rows}), out


def test_cpu_bench_reports_calls_after_another_implementation_and_after_their_own(tmp_path):
    csv_path = tmp_path / "cpu.csv"
    out = run_bench("bench_cpu_vs_spikingjelly.py", "--steps", "4", "--neurons", "256", "--reps", "3", "--warmup", "1",
                    "--in-a-row", "2", "--overhead-steps", "1", "--overhead-neurons", "8", "--calls", "5",
                    "--bursts", "1", "--csv", str(csv_path))
    for mode in ("train", "infer"):
        for after in ("another", "its own kind"):
            for implementation in ("spikejit", "SpikingJelly", "executor"):
                assert f"| {mode} | {after} | {implementation} |" in out, out
    large = [line for line in csv_path.read_text().splitlines() if line.startswith("large,")]
    assert len(large) == 2 * 2 * 3, large


def test_double_backward_bench_dry_run():
    out = run_bench("bench_double_backward.py", "--dry-run", "--device", "cpu")
    assert "| LIF | 4 | 64 |" in out and "| PLIF | 4 | 64 |" in out, out


@pytest.mark.parametrize("model", ["vgg11_bn", "sew_resnet18"])
def test_converted_model_bench_dry_run(model):
    """SpikingJelly's model against its conversion (the script checks their outputs agree first)."""
    out = run_bench("bench_converted_model.py", "--dry-run", "--model", model)
    assert re.search(r"^\| train \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", out, re.M), out
    assert re.search(r"^\| infer \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", out, re.M), out
