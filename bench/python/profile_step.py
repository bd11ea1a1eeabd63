"""Where the host time of one small training step through a module goes (profile before tuning).

    .venv/bin/python bench/python/profile_step.py [--device cuda] [--neuron LIF] [--steps 8] [--neurons 1024]

A step is what the benchmarks time: forward, y.sum().backward(), reset. At small sizes the GPU
waits for the host, so the host microseconds per step are the step time. Printed: host µs per
step (mean over bursts without synchronising, best burst) for spikejit and, when installed,
SpikingJelly's module on the same device and for two floors (a trivial autograd.Function, a
built-in op whose autograd node is C++); the host time of each phase of a step (forward, sum,
the engine until the neuron's backward starts, that backward, the rest), with and without
autograd's device threads, beside a trivial autograd.Function that allocates the same tensors
and launches nothing (the floor of any custom op); the host time of spikejit's C++ calls inside
a step against the same call repeated at once; then the Python functions that take the most
time (cProfile, sorted by own time) and the PyTorch operators seen by torch.profiler.
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
from bench_common import check_counts, spikejit_node, spikingjelly_node  # noqa: E402


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
    check_counts(parser, args, "steps", "neurons", "calls", "bursts", "top")
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


def floor_step(forward, x):
    def step():
        x.grad = None
        forward().sum().backward()
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


class _Trivial(torch.autograd.Function):
    """The allocations of a LIF training call (s, h, the final v; grad x) and nothing else."""

    @staticmethod
    def forward(ctx, x):
        s, h, v = x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty(x.shape[1:])
        ctx.save_for_backward(h)
        return s, v

    @staticmethod
    def backward(ctx, grad_s, grad_v):
        _phase_stamps["enter"] = time.perf_counter()
        (h,) = ctx.saved_tensors
        grad = torch.empty_like(h)
        _phase_stamps["exit"] = time.perf_counter()
        return grad


_phase_stamps = {}


def _stamped(backward):
    def wrapper(ctx, *grads):
        _phase_stamps["enter"] = time.perf_counter()
        result = backward(ctx, *grads)
        _phase_stamps["exit"] = time.perf_counter()
        return result
    return staticmethod(wrapper)


def phase_us(forward, device, steps=100, warmup=30):
    """Mean host µs of each phase of `steps` training steps (forward(), then .sum().backward())."""
    phases = dict.fromkeys(("forward", "sum", "to backward", "backward", "after", "step"), 0.0)
    for i in range(warmup + steps):
        _phase_stamps.clear()  # a backward that did not stamp this step fails below, not reuses old times
        t0 = time.perf_counter()
        y = forward()
        t1 = time.perf_counter()
        total = y.sum()
        t2 = time.perf_counter()
        total.backward()
        t3 = time.perf_counter()
        del y, total
        if i >= warmup:
            # A node in C++ stamps nothing: its phases after the sum are one (the whole backward call).
            enter, exit_ = _phase_stamps.get("enter", float("nan")), _phase_stamps.get("exit", float("nan"))
            for name, value in (("forward", t1 - t0), ("sum", t2 - t1),
                                ("to backward", enter - t2 if "enter" in _phase_stamps else t3 - t2),
                                ("backward", exit_ - enter), ("after", t3 - exit_), ("step", t3 - t0)):
                phases[name] += value
    synchronize(device)
    return {name: value / steps * 1e6 for name, value in phases.items()}


def print_phases(node, x, device):
    """The phases of a step of `node` and of _Trivial, with and without autograd's device threads
    (on CUDA the engine runs the backward on a thread of its own; Python work there and on the
    calling thread then pays the hand-offs between them)."""
    from spikejit import _kernel_calls, ops
    original = ops._Training.backward
    ops._Training.backward = _stamped(original)
    try:
        def ours():
            x.grad = None
            y = node(x)
            node.reset()
            return y

        def trivial():
            x.grad = None
            return _Trivial.apply(x)[0]

        def python_path():
            _kernel_calls.CPP_CALLS, cpp = False, _kernel_calls.CPP_CALLS
            try:
                return ours()
            finally:
                _kernel_calls.CPP_CALLS = cpp

        variants = [("spikejit", ours), ("trivial Function", trivial)]
        if _kernel_calls.CPP_CALLS:  # spikejit's step in C++ (the default: forward and autograd node), and in Python
            variants = [("spikejit", ours), ("spikejit, Python path", python_path), ("trivial Function", trivial)]
        rows = []
        for threads in (True, False):
            with torch.autograd.set_multithreading_enabled(threads):
                for name, forward in variants:
                    rows.append((name, "yes" if threads else "no", phase_us(forward, device)))
    finally:
        ops._Training.backward = original
    names = list(rows[0][2])
    print("| step | engine threads | " + " | ".join(f"{n} µs" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for name, threads, phases in rows:
        print(f"| {name} | {threads} | " + " | ".join("—" if phases[n] != phases[n] else f"{phases[n]:.1f}"
                                                      for n in names) + " |")
    if _kernel_calls.CPP_CALLS:
        print("\n(spikejit's C++ autograd node stamps nothing: its \"to backward\" is the whole backward call.)")


def print_launches(node, x, device, steps=300, repeats=3):
    """Host µs of each of spikejit's C++ calls inside a training step, the call itself and then
    the same call repeated at once (the same arguments, writing the same buffers), with and
    without autograd's device threads. Back to back a call is warm; inside a step it finds its
    caches cold and may wait for the GIL that another thread took while it was released. (On the
    Python path: the C++ path's calls do not pass through Python.)"""
    from spikejit import _kernel_calls
    launch, cpp = _kernel_calls._launch, _kernel_calls.CPP_CALLS
    times = {}

    def timed(device_, cuda_call, cpu_call, args, policy):
        name = (cuda_call if device_.type == "cuda" else cpu_call).__name__
        row = times.setdefault(name, [0.0] * repeats)
        for i in range(repeats):
            start = time.perf_counter()
            launch(device_, cuda_call, cpu_call, args, policy)
            row[i] += time.perf_counter() - start

    step = training_step(node, x)
    print("| engine threads | call | " + " | ".join(["in the step µs"] + [f"repeat {i} µs" for i in range(1, repeats)])
          + " |")
    print("|---|---|" + "---|" * repeats)
    _kernel_calls._launch, _kernel_calls.CPP_CALLS = timed, False
    try:
        for threads in (True, False):
            with torch.autograd.set_multithreading_enabled(threads):
                for _ in range(30):
                    step()
                synchronize(device)
                times.clear()
                for _ in range(steps):
                    step()
                synchronize(device)
            for name, row in times.items():
                print(f"| {'yes' if threads else 'no'} | {name} | " + " | ".join(f"{t / steps * 1e6:.1f}" for t in row)
                      + " |")
    finally:
        _kernel_calls._launch, _kernel_calls.CPP_CALLS = launch, cpp


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
    # The floors any neuron's step stands on: PyTorch's engine with a Python node, and with a
    # C++ node (what an op with its autograd in C++ would pay).
    for name, forward in (("trivial autograd.Function (the allocations, no launch)", lambda: _Trivial.apply(x)[0]),
                          ("built-in op with a C++ autograd node (x.sigmoid(): a launch each way)", x.sigmoid)):
        print(f"{name}: {host_us(floor_step(forward, x), device, args.calls, args.bursts):.1f} µs per step (host)")

    print("\n## Host time of the phases of a step (mean of 100 steps)\n")
    print_phases(spikejit_node(args.neuron, device, torch.float32), x, device)

    print("\n## Host time of spikejit's C++ calls inside a step (mean of 300 steps; the Python path)\n")
    print_launches(spikejit_node(args.neuron, device, torch.float32), x, device)

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
