"""The host time of small eager calls through a module on spikejit's two paths: the C++ one
(the default where the extension was built with torch: buffers, launch and autograd node in
C++) and the Python one (SPIKEJIT_CPP_CALLS=0), side by side in one process, alternated.

    .venv/bin/python bench/python/bench_host_paths.py [--device cpu] [--steps 1] [--neurons 16]
        [--input contiguous|repeated]

At these sizes a step is bound by the host. Printed per path: best-of-bursts µs per call of the
training forward (x requires grad), of the forward plus y.sum().backward(), and of inference
under torch.no_grad(), each followed by the module's reset; one row per path and round.
`--input repeated`: x is one step's values expanded over T (a strided view the kernels read in
place), not a contiguous [T, N] tensor.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import burst_ms, check_counts, markdown_table, spikejit_node  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--neuron", choices=("IF", "LIF", "PLIF"), default="LIF")
    parser.add_argument("--steps", type=int, default=1, help="T")
    parser.add_argument("--neurons", type=int, default=16, help="N")
    parser.add_argument("--calls", type=int, default=3000, help="calls per burst")
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two paths")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--input", choices=("contiguous", "repeated"), default="contiguous",
                        help="x as a [T, N] tensor, or one step expanded over T")
    args = parser.parse_args(argv)
    check_counts(parser, args, "steps", "neurons", "calls", "bursts", "rounds", "threads")
    return args


def best_us(call, device, calls, bursts):
    """Best µs per call over `bursts` bursts of `calls` calls (bench_common.burst_ms), after a
    warm-up burst."""
    burst_ms(call, device, calls)
    return min(burst_ms(call, device, calls) for _ in range(bursts)) * 1e3


def calls_of(node, x, leaf):
    """The timed calls on x, whose gradient reaches `leaf` (x itself, or what it expands)."""
    def train_forward():
        node(x)
        node.reset()

    def train_step():
        leaf.grad = None
        node(x).sum().backward()
        node.reset()

    def inference():
        with torch.no_grad():
            node(x)
            node.reset()

    return {"training forward": train_forward, "forward + backward": train_step, "inference": inference}


def main(argv=None):
    args = parse_args(argv)
    from spikejit import _kernel_calls
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    node = spikejit_node(args.neuron, device, torch.float32)
    if args.input == "repeated":
        leaf = torch.randn(args.neurons, device=device).requires_grad_()
        x = leaf.expand(args.steps, args.neurons)
    else:
        leaf = x = torch.randn(args.steps, args.neurons, device=device).requires_grad_()
    calls = calls_of(node, x, leaf)
    paths = [("Python", False), ("C++", True)] if _kernel_calls.CPP_CALLS else [("Python", False)]
    print(f"# {args.neuron}, T = {args.steps}, N = {args.neurons} ({args.input} input), {device}, "
          f"{args.threads} thread(s), "
          f"torch {torch.__version__}: µs per call, best of {args.bursts} bursts of {args.calls}\n")
    if not _kernel_calls.CPP_CALLS:
        print("(the C++ path is not in this build or SPIKEJIT_CPP_CALLS=0: the Python path only)\n")
    rows = []
    for round_ in range(1, args.rounds + 1):
        for name, cpp in paths:
            _kernel_calls.CPP_CALLS = cpp
            rows.append([round_, name, *(f"{best_us(call, device, args.calls, args.bursts):.1f}"
                                         for call in calls.values())])
    print(markdown_table(["round", "path", *calls], rows))

if __name__ == "__main__":
    main()
