"""Forward mode through spikejit's kernels against reverse mode and against PyTorch's own forward mode.

    python3 bench/python/bench_forward_mode.py [--device cuda] [--steps 8 32] [--neurons 4194304]

LIF fp32 over x = [T, N]. Milliseconds per call (CUDA events on a GPU, median of bursts) of:
inference; a training step (forward, backward against a gradient); torch.func.jvp of the spikes
along a direction, through spikejit's kernels (the primal inference, then the tangent neuron's
inference); and the same jvp through the eager scan of the same core (FlexSN backend="torch":
PyTorch's forward mode over a Python loop of T steps). The jvp's share of the copy bandwidth
counts its minimal bytes: x and the direction read, the spikes and their tangents written
(16 bytes per neuron-step; spikejit's two passes move 24).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import check_counts, cuda_copy_bandwidth, device_name, fmt, markdown_table, median_ms  # noqa: E402

import spikejit  # noqa: E402


def lif_core(x, v):
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.Sigmoid()(h - 1.0)
    return s, h * (1.0 - s)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", nargs="+", type=int, default=[8, 32], help="time steps T")
    parser.add_argument("--neurons", type=int, default=4 << 20)
    parser.add_argument("--calls", type=int, default=10, help="calls per burst")
    parser.add_argument("--bursts", type=int, default=7)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, few calls (a check that it runs)")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.steps, args.neurons, args.calls, args.bursts = [4], 64, 2, 2
    check_counts(parser, args, "neurons", "calls", "bursts")
    if min(args.steps) < 1:
        parser.error(f"--steps: expected counts >= 1, got {args.steps}")
    return args


def rows_for(steps, args, device, bandwidth):
    x = torch.randn(steps, args.neurons, device=device) + 0.5
    direction, g = torch.randn_like(x), torch.randn_like(x)
    xt = x.clone().requires_grad_()
    lif = spikejit.LIFNode(step_mode="m", surrogate_function=spikejit.surrogate.Sigmoid()).to(device)
    scan = spikejit.FlexSN(lif_core, 1, 1, 1, step_mode="m", backend="torch")

    def spikes(node):
        def run(xs):
            node.reset()
            return node(xs)
        return run

    def infer():
        with torch.no_grad():
            spikes(lif)(x)

    def train():
        xt.grad = None
        spikes(lif)(xt).backward(g)

    cases = [("inference", infer, 8), ("training (forward + backward)", train, 24),
             ("jvp, spikejit kernels", lambda: torch.func.jvp(spikes(lif), (x,), (direction,)), 16),
             ("jvp, eager scan (PyTorch forward mode)", lambda: torch.func.jvp(spikes(scan), (x,), (direction,)), 16)]
    rows = []
    for name, call, minimal in cases:
        ms = median_ms(call, device, args.calls, args.bursts)
        share = "–" if bandwidth is None else f"{100 * minimal * steps * args.neurons / (ms * 1e-3) / bandwidth:.0f} %"
        rows.append([steps, name, fmt(ms), share])
    return rows


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    name = device_name(device)
    print(f"# Forward mode, LIF fp32, N = {args.neurons}, {name}, torch {torch.__version__}")
    bandwidth = cuda_copy_bandwidth(device, max(args.steps) * args.neurons)
    if bandwidth is not None:
        print(f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s")
    print(f"median of {args.bursts} bursts of {args.calls} calls\n")
    rows = [row for steps in args.steps for row in rows_for(steps, args, device, bandwidth)]
    print(markdown_table(["T", "call", "ms", "minimal bytes / copy bandwidth"], rows))


if __name__ == "__main__":
    main()
