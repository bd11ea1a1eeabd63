"""A training step of a small spiking network, eager against torch.compile with and without CUDA graphs.

    python3 bench/python/bench_cuda_graphs.py [--neurons IF LIF PLIF] [--batches 32 4096] [--steps-t 8]

The network: Linear(256, 512) -> neuron -> Linear(512, 512) -> neuron -> Linear(512, 10), over
T steps (multi-step modules, [T, B, features]). A step: reset the neurons, forward, the mean
square of the output, backward, gradients set to None (accumulating into a gradient a replay
returned is an error under CUDA graphs: PyTorch's rule, nn.Linear's too). Small batches are bound
by the host: eager launches every kernel from Python; torch.compile(mode="reduce-overhead")
replays the forward and the backward from CUDA graphs. Printed: milliseconds per step (wall time
over bursts of back-to-back steps, synchronised at the end of each burst; median of the bursts)
for eager, torch.compile (Inductor, no graphs) and reduce-overhead (CUDA only); the network with
ReLU in place of the neurons is PyTorch's own floor in the same harness.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import NEURONS, check_counts, device_name, fmt, markdown_table, quartiles, spikejit_node  # noqa: E402

MODES = ("eager", "compile", "reduce-overhead")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--neurons", nargs="+", choices=NEURONS + ("ReLU",), default=list(NEURONS) + ["ReLU"],
                        help="ReLU: the same network with torch.nn.ReLU, PyTorch's own floor")
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 4096])
    parser.add_argument("--steps-t", type=int, default=8, help="time steps T")
    parser.add_argument("--steps", type=int, default=100, help="training steps per burst")
    parser.add_argument("--bursts", type=int, default=5)
    args = parser.parse_args(argv)
    check_counts(parser, args, "steps_t", "steps", "bursts")
    if min(args.batches) < 1:
        parser.error(f"--batches: expected sizes >= 1, got {args.batches}")
    return args


def network(kind, device):
    def activation():
        return torch.nn.ReLU() if kind == "ReLU" else spikejit_node(kind, device, torch.float32)

    return torch.nn.Sequential(torch.nn.Linear(256, 512), activation(), torch.nn.Linear(512, 512), activation(),
                               torch.nn.Linear(512, 10)).to(device)


def ms_per_step(net, mode, x, device, steps, bursts):
    """Median over bursts of the wall milliseconds per step, after warm-up steps (compilation,
    graph recording)."""
    forward = net if mode == "eager" else torch.compile(
        net, mode="reduce-overhead" if mode == "reduce-overhead" else None, fullgraph=True)
    neurons = [m for m in net if hasattr(m, "reset")]

    def step():
        if device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        for m in neurons:
            m.reset()
        net.zero_grad(set_to_none=True)
        forward(x).square().mean().backward()

    for _ in range(5):
        step()
    times = []
    for _ in range(bursts):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) / steps * 1e3)
    return quartiles(times)[0]


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    modes = [m for m in MODES if m != "reduce-overhead" or device.type == "cuda"]
    rows = []
    for kind in args.neurons:
        for batch in args.batches:
            x = torch.randn(args.steps_t, batch, 256, device=device)
            times = {}
            for mode in modes:
                torch._dynamo.reset()
                times[mode] = ms_per_step(network(kind, device), mode, x, device, args.steps, args.bursts)
            eager = times["eager"]
            rows.append([kind, args.steps_t, batch] + [fmt(times[m], 4) for m in modes]
                        + [f"{eager / times[m]:.2f}x" for m in modes[1:]])
    name = device_name(device)
    print(f"# A training step of Linear -> neuron -> Linear -> neuron -> Linear, eager and compiled, on {name}\n")
    print(f"torch {torch.__version__}; ms per step (reset, forward, loss, backward), median of "
          f"{args.bursts} bursts of {args.steps} steps; speed-up over eager\n")
    print(markdown_table(["neuron", "T", "batch"] + [f"{m} ms" for m in modes] + [f"{m} speed-up" for m in modes[1:]],
                         rows))


if __name__ == "__main__":
    main()
