"""IF / LIF / PLIF on one GPU: spikejit's modules against SpikingJelly's, side by side in one run.

    python3 bench/python/bench_gpu_vs_spikingjelly.py [--csv F] [--rep-ms 20] [--budget-s 160]
    python3 bench/python/bench_gpu_vs_spikingjelly.py --dry-run      # CPU, tiny sizes: checks the script

Implementations: spikejit's IFNode / LIFNode / ParametricLIFNode (step_mode "m"), and SpikingJelly
2.0.0's through each CUDA implementation it can select (SJ_{IF,LIF,PLIF}_CUDA_IMPLEMENTATION =
torch, triton, cuda; one worker process each, because SpikingJelly reads that choice at import).
One that cannot run prints why (the PyPI wheel has no native "cuda" build; fp16 states run fused
only on Triton, configured with prepare_model_for_precision). SpikingJelly 2.0.0 has
no cupy backend: its LIF figures come from spikingjelly_h200_reference.csv (an earlier H200
measurement, not this run) and are labelled so.

Sizes of anchor-h200.md: fp32 and fp16; T = 4..64 with N = 4 194 304, T = 256 with N = 16 384,
T = 1024 with N = 4096. infer: forward under no_grad + reset; train: forward + y.sum().backward()
+ reset with x requiring grad. Timed with triton.testing.do_bench (median) when triton imports,
else CUDA events (median). % of copy BW: the minimal bytes (infer: x + s; train: x, s, h forward,
grad s, h, grad x backward) over the time, against a 1 GiB device-to-device copy of this run.
Host overhead: microseconds per call seen from Python over many calls without synchronising
(small N, no CUDA graphs). SpikingJelly's torch loop runs only at N = 4 194 304 (as in the anchor).
`--checkpoint-every auto 0 8` also times spikejit's training saving per step and with a checkpoint
every 8 steps (the backward recomputes the steps between from x: fewer bytes than saving h per
step) beside the first policy given (default: auto, the modules' default), which is the one
compared with SpikingJelly; the column after each such policy is its speed-up over the first.
The bytes behind "% of copy BW" are the per-step policy's whatever the policy.
`--rounds R` measures every implementation R times in turn (spikejit, each SpikingJelly worker,
again), each round within its share of the budget, and reports per case the median over the
rounds: at host-bound sizes a step's time is the host's, which drifts during a run.
Stops measuring when --budget-s is used up and says what it left out.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import (NEURONS, check_counts, fmt, markdown_table, minimal_bytes, quartiles,  # noqa: E402
                          spikejit_node, spikingjelly_node)

SIZES = [(4, 4194304), (8, 4194304), (16, 4194304), (32, 4194304), (64, 4194304), (256, 16384), (1024, 4096)]
DRY_SIZES = [(4, 4096), (32, 512)]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
MODES = ("infer", "train")
SJ_BACKENDS = ("triton", "torch", "cuda")  # the order they run in: the most telling first
BUDGET_SHARES = {"triton": 0.6, "torch": 0.85, "cuda": 1.0}  # of the time left when each starts
OVERHEAD_SIZE = (8, 1024)
REFERENCE = os.path.join(HERE, "spikingjelly_h200_reference.csv")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="write every measurement to this CSV file")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU only, tiny sizes, CPU timers: checks the script where there is no GPU")
    parser.add_argument("--neurons", nargs="+", choices=NEURONS, default=["LIF", "PLIF", "IF"])
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--sj-backends", nargs="*", choices=SJ_BACKENDS, default=list(SJ_BACKENDS),
                        help="SpikingJelly implementations to run live (none: spikejit only)")
    parser.add_argument("--warmup-ms", type=float, default=5.0, help="do_bench warm-up time")
    parser.add_argument("--rep-ms", type=float, default=20.0, help="do_bench measuring time per case")
    parser.add_argument("--calls", type=int, default=300, help="calls per host-overhead measurement")
    parser.add_argument("--budget-s", type=float, default=160.0,
                        help="wall-time budget; cases left when it is spent are skipped and listed")
    parser.add_argument("--checkpoint-every", type=save_policy, nargs="+", default=["auto"], metavar="K",
                        help="spikejit's training save policies to time (auto: the modules' default, 0: per step, "
                             "k: a checkpoint every k steps, recomputed in the backward); the first is the one "
                             "compared")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every implementation this many times in turn (spikejit, then each "
                             "SpikingJelly one, again) and report medians: the host's speed drifts during a run")
    parser.add_argument("--worker", choices=SJ_BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(k != "auto" and k < 0 for k in args.checkpoint_every):
        parser.error(f"--checkpoint-every: expected intervals >= 0, got {args.checkpoint_every}")
    if args.rep_ms <= 0 or args.warmup_ms < 0:
        parser.error(f"--rep-ms / --warmup-ms: expected > 0 / >= 0, got {args.rep_ms} / {args.warmup_ms}")
    check_counts(parser, args, "calls", "rounds")
    if args.budget_s <= 0:
        parser.error(f"--budget-s: expected seconds > 0, got {args.budget_s}")
    return args


def save_policy(text):
    return text if text == "auto" else int(text)


def device_of(args):
    if args.dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu_vs_spikingjelly: no CUDA device (use --dry-run to check the script on a CPU)")
    return torch.device("cuda", torch.cuda.current_device())


def sizes_of(args):
    return DRY_SIZES if args.dry_run else SIZES


def cases(args, implementation):
    """(neuron, dtype, mode, T, N) to measure; SpikingJelly's torch loop only at the large N, other
    save policies of spikejit only in training (inference saves nothing)."""
    large = max(n for _, n in sizes_of(args))
    return [(kind, dtype, mode, T, N) for kind in args.neurons for dtype in args.dtypes for T, N in sizes_of(args)
            for mode in MODES if (implementation != "SJ torch" or N == large)
            and (not implementation.startswith("spikejit ") or mode == "train")]


def policy_name(checkpoint_every):
    """The implementation name of a spikejit save policy (the first one given is "spikejit")."""
    return f"spikejit checkpoint_every={checkpoint_every}"


def policy_node(checkpoint_every):
    def make_node(kind, device, dtype):
        node = spikejit_node(kind, device, dtype)
        node.checkpoint_every = checkpoint_every
        return node
    return make_node


# ---------------------------------------------------------------------------------------------
# Timing


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn, device, args):
    """Median milliseconds of fn()."""
    if device.type == "cpu":
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return quartiles(times)[0]
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median"))
    fn()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    once = max(time.perf_counter() - start, 1e-6) * 1e3
    times = []
    for _ in range(max(5, min(1000, int(args.rep_ms / once)))):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return quartiles(times)[0]


def timer_name(device):
    if device.type == "cpu":
        return "CPU timer (dry run)"
    try:
        import triton.testing  # noqa: F401
        return "triton.testing.do_bench"
    except ImportError:
        return "CUDA events"


def copy_bandwidth(device, args):
    """Bytes read + written per second by a device-to-device copy of 1 GiB (64 MiB in a dry run)."""
    nbytes = (64 << 20) if device.type == "cpu" else (1 << 30)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, args)
    del src, dst
    return 2 * nbytes / (ms * 1e-3)


def host_us_per_call(step, device, calls):
    """Host microseconds per call over `calls` calls with no synchronisation in between."""
    for _ in range(10):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        step()
    elapsed = time.perf_counter() - start
    synchronize(device)
    return elapsed / calls * 1e6


# ---------------------------------------------------------------------------------------------
# Measuring one implementation (in this process for spikejit, in a worker for SpikingJelly)


def steps_for(node, x):
    def infer():
        with torch.no_grad():
            node(x)
        node.reset()

    def train():
        x.grad = None
        node(x).sum().backward()
        node.reset()

    return {"infer": infer, "train": train}


def measure(implementation, make_node, device, args, deadline, emit):
    """Times every case of `implementation`; emit(row) for each result or skip. The host overhead
    first: it takes seconds, and it is what limits the small cases."""
    for kind in args.neurons if not implementation.startswith("spikejit ") else ():
        for mode in MODES:
            row = {"implementation": implementation, "neuron": kind, "dtype": "fp32", "mode": mode,
                   "T": OVERHEAD_SIZE[0], "N": OVERHEAD_SIZE[1], "section": "host overhead"}
            if time.monotonic() > deadline:
                emit(dict(row, skipped="time budget spent"))
                continue
            try:
                node = make_node(kind, device, torch.float32)
                x = (torch.randn(*OVERHEAD_SIZE, device=device) * 1.5 + 0.5).requires_grad_(mode == "train")
                emit(dict(row, host_us=host_us_per_call(steps_for(node, x)[mode], device, args.calls)))
            except Exception as error:
                emit(dict(row, skipped=f"{type(error).__name__}: {error}".splitlines()[0][:300]))
    nodes = {}
    for kind, dtype, mode, T, N in cases(args, implementation):
        row = {"implementation": implementation, "neuron": kind, "dtype": dtype, "mode": mode, "T": T, "N": N}
        if time.monotonic() > deadline:
            emit(dict(row, skipped="time budget spent"))
            continue
        try:
            node = nodes.get((kind, dtype))
            if node is None:
                node = nodes[(kind, dtype)] = make_node(kind, device, DTYPES[dtype])
            torch.manual_seed(T * 7 + N)
            x = (torch.randn(T, N, device=device) * 1.5 + 0.5).to(DTYPES[dtype])
            x.requires_grad_(mode == "train")
            step = steps_for(node, x)[mode]
            if mode == "infer":  # outside timing: a check that both compute the same
                with torch.no_grad():
                    row["spikes"] = int(node(x).float().sum().item())
                node.reset()
            emit(dict(row, ms=time_ms(step, device, args)))
            del x, step
        except Exception as error:  # an implementation that cannot run this case says why
            emit(dict(row, skipped=f"{type(error).__name__}: {error}".splitlines()[0][:300]))


def check_spikingjelly_backend(backend, device):
    """None when SpikingJelly selects `backend` for every neuron asked for, else why not."""
    if device.type == "cpu":
        return None if backend == "torch" else "CPU (dry run): only SpikingJelly's torch implementation runs there"
    from spikingjelly.activation_based.functional import neuron_implementation
    for kind in ("if", "lif", "plif"):
        try:
            chosen = neuron_implementation(kind, device)
        except Exception as error:
            return f"{kind}: {type(error).__name__}: {error}".splitlines()[0][:300]
        if chosen["implementation"] != backend:
            return f"{kind}: SpikingJelly selected {chosen['implementation']!r}; unavailable: {chosen['unavailable']}"
    return None


def spikingjelly_backend_node(backend, kind, device, dtype):
    """SpikingJelly's module for `backend`. Its modules keep the state in the input's dtype, and
    SpikingJelly 2.0.0 runs its fused kernels only for fp32 states, unless Triton is told the
    storage dtype (prepare_model_for_precision), which is done here for fp16 on Triton."""
    node = spikingjelly_node(kind, device, dtype)
    if backend == "triton" and dtype != torch.float32:
        from spikingjelly.activation_based.precision.api import prepare_model_for_precision
        from spikingjelly.activation_based.precision.config import PrecisionConfig
        storage = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
        node = prepare_model_for_precision(node, device, PrecisionConfig(mode="fp32", neuron_storage=storage)).model
    return node


def worker(args):
    """Runs in a subprocess with SJ_*_CUDA_IMPLEMENTATION set: one JSON object per line."""
    device = device_of(args)
    name = f"SJ {args.worker}"

    def emit(row):
        print(json.dumps(row), flush=True)

    why = check_spikingjelly_backend(args.worker, device)
    if why is not None:
        emit({"implementation": name, "unavailable": why})
        return
    def make_node(kind, device, dtype):
        return spikingjelly_backend_node(args.worker, kind, device, dtype)

    measure(name, make_node, device, args, time.monotonic() + args.budget_s, emit)


def run_worker(backend, args, budget_s):
    """SpikingJelly with one implementation selected, in its own process; its rows."""
    env = dict(os.environ)
    for kind in ("IF", "LIF", "PLIF"):
        env[f"SJ_{kind}_CUDA_IMPLEMENTATION"] = backend
    command = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--budget-s", f"{max(budget_s, 1):.0f}",
               "--rep-ms", str(args.rep_ms), "--warmup-ms", str(args.warmup_ms), "--calls", str(args.calls),
               "--neurons", *args.neurons, "--dtypes", *args.dtypes]
    if args.dry_run:
        command.append("--dry-run")
    name = f"SJ {backend}"
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=budget_s + 60)
    except subprocess.TimeoutExpired:
        return [{"implementation": name, "unavailable": f"worker timed out after {budget_s + 60:.0f} s"}]
    rows = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    if done.returncode != 0 or not rows:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        rows.append({"implementation": name, "unavailable": f"worker exit code {done.returncode}: {tail}"})
    return rows


# ---------------------------------------------------------------------------------------------
# Report


def reference_rows():
    """SpikingJelly's LIF figures of the earlier H200 run (not this run)."""
    rows = []
    with open(REFERENCE) as f:
        for record in csv.DictReader(line for line in f if not line.startswith("#")):
            for backend in ("triton", "cupy", "torch"):
                for mode in MODES:
                    value = record[f"{backend}_{mode}"]
                    if value:
                        rows.append({"implementation": f"SJ {backend} (reference file)", "neuron": "LIF",
                                     "dtype": record["dtype"], "mode": mode, "T": int(record["T"]),
                                     "N": int(record["N"]), "ms": float(value)})
    return rows


def lookup(rows, implementation, key, field="ms"):
    for r in rows:
        if r["implementation"] == implementation and (r["neuron"], r["dtype"], r["mode"], r["T"], r["N"]) == key:
            return r.get(field)
    return None


def report(args, device, bandwidth, rows, unavailable):
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    print(f"# spikejit against SpikingJelly on {name}\n")
    print(f"torch {torch.__version__}; timer: {timer_name(device)} (rep {args.rep_ms:g} ms); "
          f"copy bandwidth (device-to-device, read + written): {bandwidth / 1e12:.3f} TB/s"
          + (f"; medians of {args.rounds} rounds" if args.rounds > 1 else "") + "\n")
    for implementation, why in unavailable:
        print(f"- {implementation}: not run: {why}")
    live = [b for b in (f"SJ {b}" for b in args.sj_backends) if b not in dict(unavailable)]
    policies = [policy_name(k) for k in args.checkpoint_every[1:]]
    columns = policies + live + ["SJ cupy (reference file)"]
    headers = ["neuron", "dtype", "mode", "T", "N", "spikejit ms", "% of copy BW"]
    for c in columns:
        headers += [f"{c} ms", "its speed-up" if c in policies else "speed-up"]
    if policies:
        print("speed-up: spikejit's over the implementation before it; its speed-up: that save policy's over "
              "spikejit's first one")
    table = []
    for key in [(k, d, m, T, N) for (k, d, m, T, N) in cases(args, "spikejit")]:
        ours = lookup(rows, "spikejit", key)
        element = torch.tensor([], dtype=DTYPES[key[1]]).element_size()
        share = None if ours is None else 100 * minimal_bytes(key[2], key[3], key[4], element) / (ours * 1e-3) / bandwidth
        line = list(key) + [fmt(ours, 4), fmt(share)]
        for c in columns:
            theirs = lookup(rows, c, key)
            ratio = None if theirs is None or ours is None else ours / theirs if c in policies else theirs / ours
            line += [fmt(theirs, 4), "–" if ratio is None else f"{ratio:.2f}x"]
        table.append(line)
    print()
    print(markdown_table(headers, table))
    mismatches = [(key, lookup(rows, "spikejit", key, "spikes"), lookup(rows, c, key, "spikes"), c)
                  for key in cases(args, "spikejit") for c in live if key[2] == "infer"]
    for key, ours, theirs, c in mismatches:
        if ours is not None and theirs is not None and ours != theirs:
            print(f"\nwarning: {key}: spikejit fired {ours} spikes, {c} {theirs}")
    print(f"\n## Host overhead per call, T = {OVERHEAD_SIZE[0]}, N = {OVERHEAD_SIZE[1]}, fp32 "
          f"(µs from Python over {args.calls} calls without synchronising)\n")
    table = []
    for kind in args.neurons:
        for mode in MODES:
            key = (kind, "fp32", mode, OVERHEAD_SIZE[0], OVERHEAD_SIZE[1])
            ours = lookup(rows, "spikejit", key, "host_us")
            line = [kind, mode, fmt(ours)]
            for c in live:
                theirs = lookup(rows, c, key, "host_us")
                line += [fmt(theirs), "–" if theirs is None or ours is None else f"{theirs / ours:.1f}x"]
            table.append(line)
    print(markdown_table(["neuron", "mode", "spikejit µs"] + [h for c in live for h in (f"{c} µs", "ratio")], table))
    skipped = {}
    for r in rows:
        if "skipped" in r:
            skipped.setdefault((r["implementation"], r["skipped"]), []).append(
                f"{r['neuron']} {r['dtype']} {r['mode']} T={r['T']} N={r['N']}")
    for (implementation, why), which in skipped.items():
        print(f"\n{implementation}: {len(which)} cases skipped ({why}): {', '.join(which)}")


def write_csv(path, rows):
    fields = ["implementation", "neuron", "dtype", "mode", "T", "N", "section", "ms", "pct_copy_bw", "host_us",
              "rounds", "spikes", "skipped", "unavailable", "copy_bytes_per_s"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def measure_round(args, device, deadline):
    """Every implementation once, within `deadline`: its rows."""
    rows = []
    # spikejit first and alone in this process's GPU memory; then each SpikingJelly worker.
    first, *others = args.checkpoint_every
    measure("spikejit", policy_node(first), device, args, deadline, rows.append)
    for k in others:
        measure(policy_name(k), policy_node(k), device, args, deadline, rows.append)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    for backend in [b for b in SJ_BACKENDS if b in args.sj_backends]:
        rows += run_worker(backend, args, BUDGET_SHARES[backend] * (deadline - time.monotonic()))
    return rows


def median_of_rounds(rounds):
    """One row per implementation and case: the median of the rounds that measured it ("rounds"
    says how many), else the first round's skip or unavailability."""
    merged = {}
    for rows in rounds:
        for row in rows:
            key = tuple(row.get(f) for f in ("implementation", "section", "neuron", "dtype", "mode", "T", "N"))
            merged.setdefault(key, []).append(row)
    out = []
    for versions in merged.values():
        measured = [v for v in versions if "ms" in v or "host_us" in v]
        if not measured:
            out.append(versions[0])
            continue
        row = {k: v for k, v in measured[0].items() if k not in ("ms", "host_us")}
        for field in ("ms", "host_us"):
            values = [v[field] for v in measured if field in v]
            if values:
                row[field] = statistics.median(values)
        row["rounds"] = len(measured)
        out.append(row)
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    start = time.monotonic()
    deadline = start + args.budget_s
    device = device_of(args)
    bandwidth = copy_bandwidth(device, args)
    rounds = []
    for r in range(args.rounds):
        rounds.append(measure_round(args, device, start + (deadline - start) * (r + 1) / args.rounds))
    rows = median_of_rounds(rounds)
    unavailable = [(r["implementation"], r["unavailable"]) for r in rows if "unavailable" in r]
    rows = [r for r in rows if "unavailable" not in r] + reference_rows()
    for r in rows:
        if r.get("ms") and r["implementation"] == "spikejit":
            element = torch.tensor([], dtype=DTYPES[r["dtype"]]).element_size()
            r["pct_copy_bw"] = 100 * minimal_bytes(r["mode"], r["T"], r["N"], element) / (r["ms"] * 1e-3) / bandwidth
    report(args, device, bandwidth, rows, unavailable)
    print(f"\n(wall time {time.monotonic() - start:.0f} s)")
    if args.csv:
        write_csv(args.csv, [{"implementation": "device copy 1 GiB", "section": "bandwidth",
                              "copy_bytes_per_s": bandwidth}]
                  + rows + [{"implementation": i, "unavailable": w} for i, w in unavailable])


if __name__ == "__main__":
    main()
