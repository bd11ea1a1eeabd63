"""Where the device time of a training step goes under each of spikejit's save policies.

A step is forward + y.sum().backward() + reset through a module (`--neuron`), as in
bench_gpu_vs_spikingjelly.py (FlexSN2: the sum of both outputs). For each size and policy (0:
the forward saves per step; k: a checkpoint every k steps, the backward recomputes the steps
between) it prints the mean
device microseconds per step of spikejit's forward kernel, its backward kernel and everything
else (the sum, its gradient, fills), from torch.profiler's device activity, and the step's
speed-up over per-step saving. This separates the kernels from the host time that
bench_gpu_vs_spikingjelly.py's step times include at small sizes.

On the CPU there are no device kernels: `--dry-run` (CPU, tiny sizes) reports the wall time of
a step only, to check the script where there is no GPU.
"""
import argparse
import collections
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import NEURONS, check_counts, fmt, markdown_table, spikejit_node  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--neuron", choices=NEURONS + ("FlexSN2",), default="LIF",
                        help="FlexSN2: the reference's FlexSN example (two inputs, two states, two outputs)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--sizes", nargs="+", default=["4:4194304", "16:4194304", "32:4194304", "64:4194304",
                                                        "256:16384"], metavar="T:N")
    parser.add_argument("--policies", type=int, nargs="+", default=[0, 2, 4, 8, 16], metavar="K",
                        help="checkpoint_every values (0: per-step saving, the reference of the speed-up)")
    parser.add_argument("--steps", type=int, default=20, help="steps measured per case (after 5 warm-up steps)")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, wall time only")
    args = parser.parse_args()
    try:
        args.sizes = [tuple(int(v) for v in size.split(":")) for size in args.sizes]
    except ValueError:
        parser.error(f"--sizes: expected T:N pairs of integers, got {args.sizes}")
    if any(len(size) != 2 or min(size) < 1 for size in args.sizes):
        parser.error(f"--sizes: expected T:N pairs with T, N >= 1, got {args.sizes}")
    if any(k < 0 for k in args.policies):
        parser.error(f"--policies: expected intervals >= 0, got {args.policies}")
    check_counts(parser, args, "steps")
    if args.dry_run:
        args.sizes = [(4, 256), (16, 64)]
        args.steps = min(args.steps, 3)
    return args


def kernel_class(name):
    if name.startswith("spikejit_training_forward"):
        return "forward"
    if name.startswith("spikejit_backward"):
        return "backward"
    return "other"


def device_us(step, steps):
    """Mean device microseconds per step of each kernel class."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    times = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[kernel_class(event.name)] += event.device_time / steps
    return times


def wall_us(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e6


def modulated_core(x, m, v, a):
    """The reference's FlexSN example: the second input modulates through a sigmoid."""
    import spikejit
    gate = torch.sigmoid(m)
    h = v + (x * gate - v) / 2.0 - a
    s = spikejit.surrogate.ATan(alpha=2.0)(h - 1.0)
    return s, s * gate, h * (1.0 - s), 0.9 * a + 0.1 * s


def make_node(kind, device, dtype):
    """(module, its number of inputs)."""
    if kind == "FlexSN2":
        import spikejit
        node = spikejit.FlexSN(modulated_core, num_inputs=2, num_states=2, num_outputs=2, strict=True)
        return node.to(device=device, dtype=dtype), 2
    return spikejit_node(kind, device, dtype), 1


def measure(args, device, steps, neurons, policy):
    node, num_inputs = make_node(args.neuron, device, DTYPES[args.dtype])
    node.checkpoint_every = policy
    xs = [torch.rand(steps, neurons, device=device, dtype=DTYPES[args.dtype], requires_grad=True)
          for _ in range(num_inputs)]

    def step():
        for x in xs:
            x.grad = None
        outputs = node(*xs)
        sum(o.sum() for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])).backward()
        node.reset()

    for _ in range(5):
        step()
    if device.type == "cuda":
        times = device_us(step, args.steps)
        return times["forward"], times["backward"], times["other"], sum(times.values())
    return None, None, None, wall_us(step, args.steps)


def main():
    args = parse_args()
    device = torch.device("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (wall time)"
    print(f"# {args.neuron} {args.dtype} training step by save policy on {where}, torch {torch.__version__}\n")
    rows = []
    # The first case of a process runs slow beyond its warm-up steps (thread pools, the allocator
    # growing): measured once and dropped.
    measure(args, device, *args.sizes[0], args.policies[0])
    for steps, neurons in args.sizes:
        per_step = None
        for policy in args.policies:
            if policy > steps:
                continue
            forward, backward, other, total = measure(args, device, steps, neurons, policy)
            if policy == 0:
                per_step = total
            speedup = None if per_step is None else per_step / total
            rows.append([steps, neurons, policy, fmt(forward), fmt(backward), fmt(other), fmt(total),
                         "–" if speedup is None else f"{speedup:.2f}x"])
    unit = "device µs" if device.type == "cuda" else "wall µs"
    print(markdown_table(["T", "N", "checkpoint_every", f"forward {unit}", f"backward {unit}", f"other {unit}",
                          f"step {unit}", "vs per step"], rows))


if __name__ == "__main__":
    main()
