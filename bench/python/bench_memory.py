"""Training memory and step time, side by side in one run: SpikingJelly's LIF implementations
(plain, and with its memopt search, optimize_memory at levels 1 and 4, configured as its
tutorial) against spikejit (default, with packed-spike layers, with checkpoint_every where
LIFNode has it, and with every block a spikejit.Recompute block with packed-spike layers inside;
no search) on two workloads:

  (a) vgg: the spiking VGG of SpikingJelly's memopt tutorial (CIFAR10-DVS, 8 Conv-BN-LIF blocks,
      average pooling before blocks 3, 5, 7 and at the end, dropout, a linear classifier; LIF with
      tau=1.333, decay_input=False, detach_reset=True, ATan) on [T=10, B=8, 2, 48, 48];
  (b) linear-<n>: two Linear(n, n)+LIF blocks (LIF with SpikingJelly's defaults) on input spikes
      [T=500, B=16, n], n = 4096, 8192, 16384 (two blocks, so that the second Linear's input is
      spikes the network made; the first one's is the data, which stays alive anyway).

One training step is forward + cross-entropy (vgg) or mean (linear) + backward, gradients set to
None before each step, no optimizer. Reported: the peak of torch.cuda.max_memory_allocated over
the timed steps (after reset_peak_memory_stats; it includes the parameters, the input and the
gradients), the allocation before a step (parameters + input), and the median step time (CUDA
events). Packed-spike layers replace the Conv2d / Linear layers whose input is a neuron's output
(blocks 2, 4, 6, 8 and the second Linear; the others follow an average pool or take raw data).

Each variant runs in its own process: SpikingJelly picks its CUDA implementation once, from
SJ_LIF_CUDA_IMPLEMENTATION (torch, triton or cuda, the last one only when built from source), and
a fresh process gives each variant the same empty allocator.

    python bench/python/bench_memory.py [--steps 5] [--csv FILE] [--variants a,b] [--workloads a,b]
    python bench/python/bench_memory.py --dry-run     # tiny sizes on the CPU, no memory figures
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

# Published by SpikingJelly's memopt tutorial for (a), not measured here.
PUBLISHED_VGG = "SpikingJelly memopt tutorial (published figures): 1022 MB baseline, 589 MB after its memory_optimization search"

VARIANTS = {
    "sj-torch": {"library": "spikingjelly", "implementation": "torch"},
    "sj-triton": {"library": "spikingjelly", "implementation": "triton"},
    "sj-cuda": {"library": "spikingjelly", "implementation": "cuda"},
    "spikejit": {"library": "spikejit"},
    "spikejit-packed": {"library": "spikejit", "packed": True},
    "spikejit-ckpt8": {"library": "spikejit", "checkpoint_every": 8},
    "spikejit-packed-ckpt8": {"library": "spikejit", "packed": True, "checkpoint_every": 8},
    "sj-triton-memopt1": {"library": "spikingjelly", "implementation": "triton", "memopt": 1},
    "sj-triton-memopt4": {"library": "spikingjelly", "implementation": "triton", "memopt": 4},
    "spikejit-recompute": {"library": "spikejit", "recompute": True, "packed": True},
}

# sj-cuda needs SpikingJelly built from source; sj-torch's memory is sj-triton's (only slower);
# checkpoint_every without packing only adds the checkpoints here (LIF's saved h and the input it
# keeps instead cost the same).
DEFAULT_VARIANTS = ("sj-triton", "sj-triton-memopt1", "sj-triton-memopt4", "spikejit", "spikejit-packed",
                    "spikejit-packed-ckpt8", "spikejit-recompute")


def workloads(dry_run):
    if dry_run:
        return {"vgg": {"T": 2, "B": 2, "size": 16, "width": 8},
                "linear-64": {"T": 8, "B": 2, "n": 64}, "linear-128": {"T": 8, "B": 2, "n": 128}}
    return {"vgg": {"T": 10, "B": 8, "size": 48, "width": 1},
            **{f"linear-{n}": {"T": 500, "B": 16, "n": n} for n in (4096, 8192, 16384)}}


# ---------------------------------------------------------------------------------------------
# Worker: one variant, every workload, results as JSON lines


def neuron_factory(variant, **options):
    """A function making one multi-step LIF node of the variant's library, or raises
    LookupError saying why the variant cannot run here."""
    if variant["library"] == "spikingjelly":
        from spikingjelly.activation_based import neuron, surrogate
        sg = {"atan": surrogate.ATan, "sigmoid": surrogate.Sigmoid}[options.pop("surrogate")]
        return lambda: neuron.LIFNode(surrogate_function=sg(), step_mode="m", **options)
    import spikejit
    sg = {"atan": spikejit.surrogate.ATan, "sigmoid": spikejit.surrogate.Sigmoid}[options.pop("surrogate")]
    k = variant.get("checkpoint_every")
    if k:
        try:
            spikejit.LIFNode(checkpoint_every=k)
        except TypeError as e:
            raise LookupError(f"this spikejit's LIFNode has no checkpoint_every ({e})")
        options["checkpoint_every"] = k
    return lambda: spikejit.LIFNode(surrogate_function=sg(), step_mode="m", **options)


def recomputed(module, spikes_in, enabled):
    """`module` as a spikejit.Recompute block (input saved packed when it is spikes) if enabled."""
    import spikejit
    return spikejit.Recompute(module, spikes=spikes_in) if enabled else module


def build_vgg(make_neuron, packed, width, recompute=False):
    from torch import nn
    import spikejit

    class PerStep(nn.Sequential):
        """Its layers on [T, B, ...] with time folded into the batch (SpikingJelly's SeqToANNContainer)."""

        def forward(self, x):
            T, B = x.shape[:2]
            return super().forward(x.flatten(0, 1)).unflatten(0, (T, B))

    class Block(nn.Sequential):
        """[AvgPool] Conv BN, then the neuron. A Sequential, so that nothing holds a block's input
        while its neuron runs (a Recompute block's input then lives only as long as its conv needs it)."""

        def __init__(self, cin, cout, pool, pack):
            conv = nn.Conv2d(cin, cout, 3, 1, 1)
            layers = ([nn.AvgPool2d(2)] if pool else []) + [spikejit.packed_spikes(conv) if pack else conv,
                                                            nn.BatchNorm2d(cout)]
            super().__init__(PerStep(*layers), make_neuron())

    class VGG(nn.Module):
        def __init__(self):
            super().__init__()
            c = [2] + [w // width for w in (64, 128, 256, 256, 512, 512, 512, 512)]
            pools = (False, False, True, False, True, False, True, False)
            # A conv may save its input packed when that input is a neuron's spikes: every block
            # but the first (raw data) and those after an average pool.
            # Recomputed blocks save only their input: packed from block 2 on (the spikes of the block
            # before), the raw data as it is for block 1.
            self.blocks = nn.Sequential(*[recomputed(Block(c[i], c[i + 1], pools[i], packed and i > 0 and not pools[i]),
                                                     i > 0, recompute) for i in range(8)])
            self.pool, self.dropout = nn.AvgPool2d(2), nn.Dropout(0.25)
            self.fc = None  # sized on first use (input size / 16)

        def forward(self, x):
            T, B = x.shape[:2]
            y = self.pool(self.blocks(x).flatten(0, 1)).unflatten(0, (T, B)).flatten(2)
            return self.fc(self.dropout(y)).mean(0)

    model = VGG()
    model.block_type = Block  # what SpikingJelly's memopt may checkpoint
    return model


def build_linear(make_neuron, packed, n, recompute=False):
    from torch import nn
    import spikejit
    first, second = nn.Linear(n, n), nn.Linear(n, n)
    # Inside a recomputed block the first Linear's input is the block's unpacked input spikes.
    first = spikejit.packed_spikes(first) if packed and recompute else first
    layers = [first, make_neuron(), spikejit.packed_spikes(second) if packed else second, make_neuron()]
    if recompute:  # both blocks take spikes (the input is spikes too)
        return nn.Sequential(recomputed(nn.Sequential(*layers[:2]), True, True),
                             recomputed(nn.Sequential(*layers[2:]), True, True))
    return nn.Sequential(*layers)


def c_last(model):
    """Channels out of the last VGG block (recomputed or not)."""
    from torch import nn
    return [m for m in model.blocks.modules() if isinstance(m, nn.BatchNorm2d)][-1].num_features


def reset_neurons(model):
    for m in model.modules():
        if callable(getattr(m, "reset", None)):
            m.reset()


def memory_optimized(model, level, x, workload):
    """SpikingJelly's memopt search applied to the VGG as its tutorial does (checkpointed blocks,
    binary inputs compressed, blocks split into projection and neuron, neurons chunked in time)."""
    if workload != "vgg":
        raise LookupError("memopt runs on the VGG only (its blocks are the search's targets)")
    if x.device.type != "cuda" and level > 1:
        raise LookupError("memopt levels 2-4 measure CUDA memory")
    from spikingjelly.activation_based import memopt, neuron

    def example(current):
        reset_neurons(current)
        return current(x)

    memopt.optimize_memory(model, model.block_type, example, level=level, compress=True,
                           split_fn=lambda m: (m[0], m[1]) if isinstance(m, model.block_type) else (),
                           can_chunk=lambda module: isinstance(module, neuron.BaseNode))


def prepared_step(name, shape, variant, device):
    """One training step of the workload's model for the variant, as a function."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    if name == "vgg":
        make = neuron_factory(variant, tau=1.333, decay_input=False, detach_reset=True, surrogate="atan")
        model = build_vgg(make, variant.get("packed", False), shape["width"], variant.get("recompute", False))
        d = shape["size"] // 16
        model.fc = nn.Linear(c_last(model) * d * d, 10)
        x = torch.randint(0, 4, (shape["T"], shape["B"], 2, shape["size"], shape["size"])).float()
        labels = torch.randint(0, 10, (shape["B"],), device=device)
        loss_of = lambda out: nn.functional.cross_entropy(out, labels)  # noqa: E731
    else:
        make = neuron_factory(variant, surrogate="sigmoid")
        model = build_linear(make, variant.get("packed", False), shape["n"], variant.get("recompute", False))
        x = (torch.rand(shape["T"], shape["B"], shape["n"]) < 0.2).float()
        loss_of = lambda out: out.mean()  # noqa: E731
    model, x = model.to(device), x.to(device)
    if variant.get("memopt"):
        memory_optimized(model, variant["memopt"], x, name)

    def step():
        for p in model.parameters():
            p.grad = None
        reset_neurons(model)
        loss_of(model(x)).backward()

    step.model = model
    return step


def run_workload(name, shape, variant, device, steps):
    import torch
    step = prepared_step(name, shape, variant, device)
    model = step.model
    cuda = device.type == "cuda"
    step()  # warm-up: kernel compiles, autotuning, cuDNN plans
    step()
    times, baseline, peak = [], None, None
    if cuda:
        torch.cuda.synchronize(device)
        for p in model.parameters():
            p.grad = None
        reset_neurons(model)
        torch.cuda.empty_cache()
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    if cuda:
        peak = torch.cuda.max_memory_allocated(device)
    return {"step_ms": statistics.median(times), "baseline_mib": None if baseline is None else baseline / 2**20,
            "peak_mib": None if peak is None else peak / 2**20}


def implementation_note(variant, device):
    """What SpikingJelly actually ran (its selection's own diagnostics)."""
    if variant["library"] != "spikingjelly" or device.type != "cuda":
        return ""
    from spikingjelly._ops.lif import _selection
    return "ran: " + _selection.diagnostics(device)["implementation"]


def worker(name, dry_run, steps, wanted):
    import torch
    variant = VARIANTS[name]
    device = torch.device("cpu" if dry_run else "cuda")
    for workload, shape in workloads(dry_run).items():
        if wanted and workload not in wanted:
            continue
        row = {"workload": workload, "variant": name, "step_ms": None, "baseline_mib": None, "peak_mib": None,
               "note": ""}
        try:
            if variant.get("implementation", "torch") != "torch" and device.type != "cuda":
                raise LookupError("needs CUDA")
            row.update(run_workload(workload, shape, variant, device, steps))
            row["note"] = implementation_note(variant, device)
        except LookupError as e:
            row["note"] = f"not run: {e}"
        except Exception as e:  # an implementation that is missing, out of memory, ...: reported
            row["note"] = f"failed: {str(e).splitlines()[0][:160]}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print("RESULT " + json.dumps(row), flush=True)


# ---------------------------------------------------------------------------------------------
# Driver


def run_variant(name, args):
    env = dict(os.environ)
    implementation = VARIANTS[name].get("implementation")
    if implementation:
        env["SJ_LIF_CUDA_IMPLEMENTATION"] = implementation
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--steps", str(args.steps),
           "--workloads", args.workloads]
    if args.dry_run:
        cmd.append("--dry-run")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    rows = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not rows:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        rows = [{"workload": w, "variant": name, "step_ms": None, "baseline_mib": None, "peak_mib": None,
                 "note": f"process failed (rc {done.returncode}): {why}"}
                for w in workloads(args.dry_run) if not args.wanted or w in args.wanted]
    return rows


def number(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows, dry_run):
    print("| workload | variant | peak MiB | before step MiB | step ms | note |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['variant']} | {number(r['peak_mib'], 0)} | {number(r['baseline_mib'], 0)} | "
              f"{number(r['step_ms'], 2)} | {r['note']} |")
    print()
    print(f"(a) vgg: {PUBLISHED_VGG}.")
    print("SpikingJelly 2.0.0 has no cupy backend: its LIF implementations are cuda (native, built from source "
          "only), triton and torch, chosen by SJ_LIF_CUDA_IMPLEMENTATION.")
    if dry_run:
        print("dry run: tiny sizes on the CPU; no memory figures.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per case (after 2 warm-ups)")
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="comma-separated, from: " + ", ".join(VARIANTS) + " (default: " + ",".join(DEFAULT_VARIANTS) + ")")
    parser.add_argument("--workloads", default="", help="comma-separated workload names (default: all)")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, to check the script")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps: expected at least 1")
    args.wanted = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in args.wanted if w not in workloads(args.dry_run)]
    if unknown:
        parser.error(f"--workloads: unknown {unknown}; expected names from {list(workloads(args.dry_run))}")
    if args.worker:
        worker(args.worker, args.dry_run, args.steps, args.wanted)
        return
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; expected names from {list(VARIANTS)}")
    rows = []
    for name in names:
        rows += run_variant(name, args)
    order = list(workloads(args.dry_run))
    rows.sort(key=lambda r: (order.index(r["workload"]), names.index(r["variant"])))
    print_table(rows, args.dry_run)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=["workload", "variant", "peak_mib", "baseline_mib", "step_ms", "note"])
            out.writeheader()
            out.writerows(rows)
    if not any(r["step_ms"] is not None for r in rows):
        sys.exit("bench_memory: no case ran")


if __name__ == "__main__":
    main()
