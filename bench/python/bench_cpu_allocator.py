"""What the C library's allocator costs a large CPU training step: wall time and minor page faults.

    .venv/bin/python bench/python/bench_cpu_allocator.py [--sizes 32:65536 8:1048576] [--steps 10]
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 .venv/bin/python bench/python/bench_cpu_allocator.py

A step is forward + y.sum().backward() + reset of a LIFNode (spikejit and, when installed,
SpikingJelly's torch backend), in a loop of steps of one size, as a training loop runs. Each new
output, saved value and input gradient is a fresh tensor; where the allocator hands back memory
it returned to the kernel, every step touches fresh pages (a page fault each). Run it once as it
is and once with another allocator preloaded (tcmalloc, jemalloc) to see that cost. Printed: the
allocator (from LD_PRELOAD), then per size and implementation the median ms per step and the
minor page faults per step (with the MiB they stand for). spikejit's own buffers come from its
CPU pool (spikejit.cpu_pool); SPIKEJIT_CPU_POOL_MIB=0 turns it off for an A/B.
"""
import argparse
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import check_counts, markdown_table, spikejit_node, spikingjelly_node  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["32:65536", "32:262144", "8:1048576"], metavar="T:N")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per size (after 3 warm-up steps)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    args = parser.parse_args(argv)
    check_counts(parser, args, "steps")
    try:
        args.sizes = [tuple(int(v) for v in size.split(":")) for size in args.sizes]
    except ValueError:
        parser.error(f"--sizes: expected T:N pairs of ints, got {args.sizes}")
    return args


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(node, x, steps):
    """(median ms per step, minor page faults per step)"""
    def step():
        x.grad = None
        node(x).sum().backward()
        node.reset()

    for _ in range(3):
        step()
    times, faults = [], minor_faults()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), (minor_faults() - faults) / steps


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    makers = {"spikejit": spikejit_node}
    try:
        import spikingjelly  # noqa: F401
        makers["SpikingJelly"] = spikingjelly_node
    except ImportError:
        pass
    allocator = os.path.basename(os.environ.get("LD_PRELOAD", "")) or "the C library's malloc"
    import spikejit
    pool = spikejit.cpu_pool.info()["limit_bytes"] >> 20
    print(f"LIF training steps on the CPU, {torch.get_num_threads()} torch threads; allocator: {allocator}; "
          f"spikejit's CPU pool: {f'up to {pool} MiB' if pool else 'off'} (SPIKEJIT_CPU_POOL_MIB)\n")
    rows = []
    for steps, neurons in args.sizes:
        x = (torch.rand(steps, neurons, generator=torch.Generator().manual_seed(0)) * 4 - 1).requires_grad_()
        for name, make in makers.items():
            ms, faults = measure(make("LIF", torch.device("cpu"), torch.float32), x, args.steps)
            rows.append([f"{steps}", f"{neurons}", name, f"{ms:.2f}", f"{faults:.0f}", f"{faults * 4096 / 2**20:.1f}"])
    print(markdown_table(["T", "N", "implementation", "ms per step", "minor faults per step", "MiB faulted"], rows))


if __name__ == "__main__":
    main()
