"""LIF on the CPU: spikejit's LIFNode against SpikingJelly's LIFNode (its CPU implementation, the
PyTorch loop of the torch backend), side by side in one process, same inputs, same thread count.

    .venv/bin/python bench/python/bench_cpu_vs_spikingjelly.py [--steps 32] [--neurons 65536] [--csv F]

1. The large case (T = 32, N = 65 536, fp32): training (forward + y.sum().backward() + reset) and
   inference (forward under no_grad + reset). spikejit, SpikingJelly and spikejit's executor alone
   (the C++ calls on preallocated buffers: the floor of the Python layer) run interleaved, so that
   the noise of a shared machine hits all three alike: per round, each runs --in-a-row calls, in
   an order shuffled anew each round. The first call of a run follows another implementation's
   (its data evicted from the caches by the other's work: SpikingJelly's step writes hundreds of
   MiB); the later ones follow a call of their own kind, as the steps of a training loop follow
   each other. Both are reported: median wall time with the 25-75 % range, process CPU time and
   minor page faults per call.
2. What limits it: the copy bandwidth of this machine (a preallocated 256 MiB copy, bytes read +
   written), the minimal bytes of the case and the time they take at that bandwidth, and the
   cost of touching a fresh tensor (page faults) against a reused one.
3. Per-call overhead at tiny N (default N = 16, T = 1 and 8): microseconds per call for inference
   and for training, the mean over bursts of calls, median of the bursts.
"""
import argparse
import csv
import os
import random
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (check_counts, fmt, markdown_table, minimal_bytes,  # noqa: E402
                          quartiles, spikejit_node, spikingjelly_node)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32, help="T of the large case")
    parser.add_argument("--neurons", type=int, default=65536, help="N of the large case")
    parser.add_argument("--reps", type=int, default=40, help="timed calls of each implementation (large case)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--in-a-row", type=int, default=3,
                        help="calls of one implementation in a row per round (the first follows another's)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    parser.add_argument("--overhead-steps", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--overhead-neurons", type=int, default=16)
    parser.add_argument("--calls", type=int, default=1000, help="calls per burst in the overhead measurement")
    parser.add_argument("--bursts", type=int, default=7)
    parser.add_argument("--csv", help="also write the results to this CSV file")
    args = parser.parse_args(argv)
    check_counts(parser, args, "steps", "neurons", "reps", "in_a_row", "overhead_neurons", "calls", "bursts")
    if min(args.overhead_steps) < 1:
        parser.error(f"--overhead-steps: expected counts >= 1, got {args.overhead_steps}")
    return args


def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime, r.ru_minflt


def sample(step):
    """(wall ms, process CPU ms, minor page faults) of one call."""
    w0, c0, f0 = usage()
    step()
    w1, c1, f1 = usage()
    return (w1 - w0) * 1e3, (c1 - c0) * 1e3, f1 - f0


def interleaved(steps, reps, warmup, in_a_row):
    """`reps` rounds; per round, each named step runs `in_a_row` times, in an order shuffled each
    round (a fixed rotation would let one implementation always follow the same other). Returns
    {(name, after): [(wall, cpu, faults), ...]} with after "another" for the first call of a run
    and "its own kind" for the others."""
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    order = random.Random(0)
    results = {}
    for _ in range(reps):
        order.shuffle(names)
        for name in names:
            for k in range(in_a_row):
                after = "another" if k == 0 else "its own kind"
                results.setdefault((name, after), []).append(sample(steps[name]))
    return results


def copy_bandwidth(nbytes=256 << 20, reps=10):
    """Bytes read + written per second by a copy between two preallocated tensors."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * nbytes / quartiles(times)[0]


def first_touch(shape, reps=10):
    """(ms to allocate and fill a fresh tensor, ms to fill a reused one, faults per fresh tensor)."""
    reused = torch.empty(shape)
    fresh, again, faults = [], [], []
    for _ in range(reps):
        wall, _, flt = sample(lambda: torch.empty(shape).fill_(1.0))
        fresh.append(wall)
        faults.append(flt)
        again.append(sample(lambda: reused.fill_(1.0))[0])
    return quartiles(fresh)[0], quartiles(again)[0], quartiles(faults)[0]


def executor_steps(node, x):
    """spikejit's C++ executor alone on preallocated buffers: (training, inference) steps that do
    the work of the module calls (the sum()'s gradient is one value broadcast over [T, N])."""
    from spikejit import _core, _kernel_calls as calls
    program, counts = calls.program_counts(node._program_handle)
    T, N = x.shape
    x = x.detach()
    s, v_last, grad_x = torch.empty_like(x), torch.empty(N), torch.empty_like(x)
    saved = [torch.empty_like(x) for _ in range(len(calls.saved_plan(program, counts, False)))]
    spec = calls.buffer_specs

    def forward(with_saved):
        _core.cpu_forward(program, T, [N], spec([x]), [], [], spec([s]), [], spec([v_last]),
                          spec(saved) if with_saved else [], torch.get_num_threads())

    def backward(grad_s):
        _core.cpu_backward(program, T, [N], spec(saved), [], spec([grad_s]), [], [None], spec([grad_x]), [], [],
                           torch.get_num_threads())

    grad_s = torch.ones(()).expand(T, N)
    forward(True)
    try:
        backward(grad_s)
    except _core.ArgumentError:  # a spikejit before broadcast gradients: the old copy of ones
        grad_s = grad_s.contiguous()
        print("note: this spikejit's executor needs a contiguous gradient; the executor rows use one\n")

    def train():
        forward(True)
        backward(grad_s)

    return train, lambda: forward(False)


def module_steps(node, x):
    def train():
        x.grad = None
        node(x).sum().backward()
        node.reset()

    def infer():
        with torch.no_grad():
            node(x)
        node.reset()

    return train, infer


def large_case(args):
    T, N = args.steps, args.neurons
    torch.manual_seed(0)
    x = (torch.randn(T, N) * 1.5 + 0.5).requires_grad_(True)
    ours, theirs = spikejit_node("LIF", "cpu", torch.float32), spikingjelly_node("LIF", "cpu", torch.float32)
    # Same results first: a benchmark of different computations would mean nothing.
    ys, yt = ours(x), theirs(x)
    assert torch.equal(ys, yt), "spikes differ from SpikingJelly's"
    ys.sum().backward()
    gs = x.grad
    x.grad = None
    yt.sum().backward()
    torch.testing.assert_close(gs, x.grad)
    ours.reset()
    theirs.reset()

    rows = []
    ours_train, ours_infer = module_steps(ours, x)
    theirs_train, theirs_infer = module_steps(theirs, x)
    exec_train, exec_infer = executor_steps(ours, x)
    for mode, steps in (("train", {"spikejit": ours_train, "SpikingJelly": theirs_train, "executor": exec_train}),
                        ("infer", {"spikejit": ours_infer, "SpikingJelly": theirs_infer, "executor": exec_infer})):
        results = interleaved(steps, args.reps, args.warmup, args.in_a_row)
        for (name, after), samples in sorted(results.items(), key=lambda item: item[0][1]):
            wall, lo, hi = quartiles([s[0] for s in samples])
            rows.append({"section": "large", "mode": mode, "after": after, "implementation": name, "T": T, "N": N,
                         "wall_ms": wall, "wall_p25_ms": lo, "wall_p75_ms": hi,
                         "cpu_ms": quartiles([s[1] for s in samples])[0],
                         "minor_faults": quartiles([s[2] for s in samples])[0]})
    return rows


def limits(args):
    T, N = args.steps, args.neurons
    bandwidth = copy_bandwidth()
    fresh_ms, reused_ms, faults = first_touch((T, N))
    rows = []
    for mode in ("train", "infer"):
        nbytes = minimal_bytes(mode, T, N, 4)
        rows.append({"section": "limits", "mode": mode, "T": T, "N": N, "minimal_bytes": nbytes,
                     "copy_bandwidth_gbs": bandwidth / 1e9, "floor_ms": nbytes / bandwidth * 1e3,
                     "fresh_fill_ms": fresh_ms, "reused_fill_ms": reused_ms, "faults_per_fresh": faults})
    return rows


def per_call_us(step, calls, bursts):
    for _ in range(max(10, calls // 10)):
        step()
    means = []
    for _ in range(bursts):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        means.append((time.perf_counter() - start) / calls * 1e6)
    return quartiles(means)[0]


def overhead(args):
    rows = []
    N = args.overhead_neurons
    for T in args.overhead_steps:
        torch.manual_seed(T)
        x = (torch.randn(T, N) * 1.5 + 0.5).requires_grad_(True)
        for name, make in (("spikejit", spikejit_node), ("SpikingJelly", spikingjelly_node)):
            train, infer = module_steps(make("LIF", "cpu", torch.float32), x)
            for mode, step in (("infer", infer), ("train", train)):
                rows.append({"section": "overhead", "mode": mode, "implementation": name, "T": T, "N": N,
                             "us_per_call": per_call_us(step, args.calls, args.bursts)})
    return rows


def by(rows, **keys):
    return next(r for r in rows if all(r.get(k) == v for k, v in keys.items()))


def report(args, large, limit, calls):
    T, N = args.steps, args.neurons
    print(f"LIF (tau 2, Sigmoid surrogate), fp32, CPU, {torch.get_num_threads()} torch threads "
          f"(spikejit's executor uses as many), {os.cpu_count()} CPUs; torch {torch.__version__}\n")
    print(f"## T = {T}, N = {N}: medians of interleaved calls (25-75 % range), {args.reps} rounds of "
          f"{args.in_a_row} calls in a row\n")
    table = []
    for r in sorted(large, key=lambda r: (r["mode"] != "train", r["after"] != "another")):
        sj = by(large, mode=r["mode"], after=r["after"], implementation="SpikingJelly")["wall_ms"]
        table.append([r["mode"], r["after"], r["implementation"], fmt(r["wall_ms"]),
                      f"{fmt(r['wall_p25_ms'])}-{fmt(r['wall_p75_ms'])}", fmt(r["cpu_ms"]),
                      fmt(r["minor_faults"]), f"{sj / r['wall_ms']:.2f}x"])
    print(markdown_table(["mode", "after a call of", "implementation", "wall ms", "25-75 %", "CPU ms",
                          "minor faults", "speed-up vs SpikingJelly"], table))
    lim = by(limit, mode="train")
    print(f"\n## Limits\n\nCopy bandwidth (256 MiB, read + written): {lim['copy_bandwidth_gbs']:.1f} GB/s. "
          f"A fresh [{T}, {N}] fp32 tensor: allocate + fill {lim['fresh_fill_ms']:.2f} ms "
          f"({lim['faults_per_fresh']:.0f} page faults) against {lim['reused_fill_ms']:.2f} ms to fill a reused one.\n")
    table = []
    for r in limit:
        for after in ("another", "its own kind"):
            ours = by(large, mode=r["mode"], after=after, implementation="spikejit")["wall_ms"]
            table.append([r["mode"], after, f"{r['minimal_bytes'] / 2**20:.0f} MiB", fmt(r["floor_ms"]), fmt(ours),
                          f"{100 * r['floor_ms'] / ours:.0f} %"])
    print(markdown_table(["mode", "after a call of", "minimal bytes", "floor ms at copy bandwidth", "spikejit ms",
                          "spikejit at % of the floor"], table))
    print(f"\n## Per-call overhead, N = {args.overhead_neurons}: microseconds per call (median of {args.bursts} "
          f"bursts of {args.calls})\n")
    table = []
    for T in args.overhead_steps:
        for mode in ("infer", "train"):
            ours = by(calls, T=T, mode=mode, implementation="spikejit")["us_per_call"]
            theirs = by(calls, T=T, mode=mode, implementation="SpikingJelly")["us_per_call"]
            table.append([T, mode, fmt(ours), fmt(theirs), f"{theirs / ours:.1f}x"])
    print(markdown_table(["T", "mode", "spikejit µs", "SpikingJelly µs", "speed-up"], table))


def write_csv(path, rows):
    fields = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    large = large_case(args)
    limit = limits(args)
    calls = overhead(args)
    report(args, large, limit, calls)
    if args.csv:
        write_csv(args.csv, large + limit + calls)


if __name__ == "__main__":
    main()
