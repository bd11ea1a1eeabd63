"""What is alive at the memory peak of one training step of a bench_memory workload (CUDA).

    python bench/python/profile_memory.py [--variant spikejit-recompute] [--workload vgg] [--top 20]

Runs the workload's model as bench_memory builds it (two warm-up steps), records the CUDA caching
allocator's history over one more step, replays it to find the peak of allocated bytes and
prints the allocations alive there, largest first, each with the Python frames that made it
(innermost first, torch internals left out). Profile before tuning: this is how the tensors of a
recomputed block were found.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_memory  # noqa: E402


def live_at_peak(trace):
    """(peak bytes over the trace, {addr: (bytes, frames)} alive at that peak)."""
    live, total, peak, at_peak = {}, 0, 0, {}
    for event in trace:
        action, addr = event["action"], event["addr"]
        if action == "alloc":
            live[addr] = (event["size"], event.get("frames", []))
            total += event["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif action == "free_requested" and addr in live:
            total -= live.pop(addr)[0]
    return peak, at_peak


def where(frames, depth=4):
    own = [f for f in frames if "/torch/" not in f["filename"] and f["filename"] != "??"]
    return " < ".join(f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in own[:depth]) or "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="spikejit-recompute", choices=list(bench_memory.VARIANTS))
    parser.add_argument("--workload", default="vgg")
    parser.add_argument("--top", type=int, default=20, help="allocations to list")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_memory: needs CUDA (it reads the CUDA caching allocator's history)")
    shapes = bench_memory.workloads(False)
    if args.workload not in shapes:
        parser.error(f"--workload: expected one of {list(shapes)}, got {args.workload!r}")
    variant = bench_memory.VARIANTS[args.variant]
    device = torch.device("cuda")
    step = bench_memory.prepared_step(args.workload, shapes[args.workload], variant, device)
    step(), step()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    step()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak, alive = live_at_peak(snapshot["device_traces"][device.index or 0])
    mib = 2 ** 20
    print(f"{args.workload} / {args.variant}: {before / mib:.0f} MiB allocated before the step, "
          f"peak {(before + peak) / mib:.0f} MiB ({peak / mib:.0f} MiB made during the step, "
          f"{len(alive)} allocations alive at the peak)")
    for size, frames in sorted(alive.values(), key=lambda a: -a[0])[:args.top]:
        print(f"{size / mib:8.1f} MiB  {where(frames)}")


if __name__ == "__main__":
    main()
