"""Where the host time of one small training step through a module goes (profile before tuning).

    .venv/bin/python bench/python/profile_step.py [--device cuda] [--neuron LIF] [--steps 8] [--neurons 1024]

A step is what the benchmarks time: forward, y.sum().backward(), reset. At small sizes the GPU
waits for the host, so the host microseconds per step are the step time. Printed: host µs per
step (mean over bursts without synchronising, best burst) for spikejit and, when installed,
SpikingJelly's module on the same device; then the Python functions that take the most time
(cProfile, sorted by own time) and the PyTorch operators seen by torch.profiler.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import spikejit_node, spikingjelly_node  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--neuron", choices=("IF", "LIF", "PLIF"), default="LIF")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--neurons", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=500, help="steps per burst")
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="rows of each profile")
    args = parser.parse_args(argv)
    for name in ("steps", "neurons", "calls", "bursts", "top"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a count >= 1, got {getattr(args, name)}")
    return args


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(node, x):
    def step():
        x.grad = None
        node(x).sum().backward()
        node.reset()
    return step


def host_us(step, device, calls, bursts):
    for _ in range(20):
        step()
    synchronize(device)
    best = float("inf")
    for _ in range(bursts):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        synchronize(device)
    return best


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = (torch.randn(args.steps, args.neurons, device=device) * 1.5 + 0.5).requires_grad_()
    ours = training_step(spikejit_node(args.neuron, device, torch.float32), x)
    print(f"# {args.neuron} training step, T = {args.steps}, N = {args.neurons}, {device}, torch {torch.__version__}\n")
    print(f"spikejit: {host_us(ours, device, args.calls, args.bursts):.1f} µs per step (host)")
    try:
        theirs = training_step(spikingjelly_node(args.neuron, device, torch.float32), x)
        print(f"SpikingJelly (its default backend on {device.type}): "
              f"{host_us(theirs, device, args.calls, args.bursts):.1f} µs per step (host)")
    except ImportError as error:
        print(f"SpikingJelly: not installed ({error})")

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        ours()
    profile.disable()
    synchronize(device)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
    print(f"\n## cProfile of {args.calls} spikejit steps (own time first)\n")
    print(text.getvalue())

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(50):
            ours()
        synchronize(device)
    print("## torch.profiler, 50 spikejit steps\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
