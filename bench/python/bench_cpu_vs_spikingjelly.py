"""LIF forward + backward on the CPU: spikejit's LIFNode against SpikingJelly's LIFNode (torch
backend), side by side in one process, same inputs, same thread count.

    .venv/bin/python bench/python/bench_cpu_vs_spikingjelly.py [--steps 32] [--neurons 65536]

Prints the median wall time of each (forward + y.sum().backward() + reset) and the ratio.
"""
import argparse
import statistics
import time

import torch

import spikejit
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate


def median_ms(step, reps):
    for _ in range(3):
        step()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--neurons", type=int, default=65536)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    x = torch.randn(args.steps, args.neurons) * 1.5 + 0.5
    x.requires_grad_(True)
    ours = spikejit.LIFNode(tau=2.0, step_mode="m", surrogate_function=spikejit.surrogate.Sigmoid())
    # SpikingJelly 2.0 from PyPI: its LIFNode is the plain PyTorch loop (the torch backend).
    theirs = sj_neuron.LIFNode(tau=2.0, step_mode="m", surrogate_function=sj_surrogate.Sigmoid())

    def step(node):
        def run():
            x.grad = None
            node(x).sum().backward()
            node.reset()
        return run

    # Same results first: a benchmark of different computations would mean nothing.
    ys, yt = ours(x), theirs(x)
    assert torch.equal(ys, yt), "spikes differ from SpikingJelly's"
    ours.reset()
    theirs.reset()

    t_ours = median_ms(step(ours), args.reps)
    t_theirs = median_ms(step(theirs), args.reps)
    print(f"LIF forward+backward, T={args.steps}, N={args.neurons}, fp32, CPU, "
          f"{torch.get_num_threads()} torch threads")
    print(f"| implementation | median ms |\n|---|---|")
    print(f"| spikejit LIFNode | {t_ours:.2f} |")
    print(f"| SpikingJelly LIFNode (torch backend) | {t_theirs:.2f} |")
    print(f"speed-up: {t_theirs / t_ours:.1f}x")


if __name__ == "__main__":
    main()
