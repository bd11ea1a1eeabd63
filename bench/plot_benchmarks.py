#!/usr/bin/env python3
"""Plots of the GPU benchmarks: reads their CSVs and writes PNGs.

    python bench/plot_benchmarks.py gpu-out/bench_cuda_neurons.csv \
        --against-spikingjelly gpu-out/bench_python_gpu.csv --out docs/img

writes
    bandwidth_vs_T.png           from `bench_cuda_neurons --csv` (the kernels): % of the measured
                                 copy bandwidth against T, one panel per neuron, a line per
                                 (dtype, mode) for the large-N cases, markers for the small-N
                                 long-T cases, and the 80 % bar of the design
    speedup_vs_spikingjelly.png  from `bench_gpu_vs_spikingjelly.py --csv` (the modules, side by
                                 side in one run): spikejit's speed-up over SpikingJelly's Triton
                                 backend for every case both measured

Columns read: neuron, dtype, mode, T, N, ms, fraction_of_copy_bw (kernels); implementation,
neuron, dtype, mode, T, N, section, ms (modules). Needs matplotlib (the Agg backend: no display).
"""
import argparse
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

COLUMNS = ("neuron", "dtype", "mode", "T", "N", "ms", "fraction_of_copy_bw")
MODULE_COLUMNS = ("implementation", "neuron", "dtype", "mode", "T", "N", "section", "ms")
DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # the modules' CSV names
LARGE_N = 1 << 20          # "N >= 1M": the bandwidth-bound cases of the performance bar
BANDWIDTH_BAR = 80.0       # % of copy bandwidth (design, section 7)
STYLE = {("float32", "infer"): ("tab:blue", "-"), ("float32", "train"): ("tab:blue", "--"),
         ("float16", "infer"): ("tab:orange", "-"), ("float16", "train"): ("tab:orange", "--"),
         ("bfloat16", "infer"): ("tab:green", "-"), ("bfloat16", "train"): ("tab:green", "--")}


def read_csv(path, columns, producer, convert):
    """convert(row) of each CSV row it does not return None for; exits with a message naming what
    is wrong (a missing file or column, a bad number, no rows)."""
    try:
        f = open(path, newline="")
    except OSError as e:
        sys.exit(f"{path}: cannot read it ({e.strerror})")
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: expected the columns of {producer}; missing {', '.join(missing)}")
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                converted = convert(row)
            except ValueError as e:
                sys.exit(f"{path}:{line}: {e}")
            if converted is not None:
                rows.append(converted)
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def kernel_row(row):
    return {"neuron": row["neuron"], "dtype": row["dtype"], "mode": row["mode"], "T": int(row["T"]),
            "N": int(row["N"]), "ms": float(row["ms"]), "bw": 100.0 * float(row["fraction_of_copy_bw"])}


def module_row(row):
    """A timed case of the modules' CSV (not the host-overhead, bandwidth or skipped rows)."""
    if row["section"] or not row["ms"]:
        return None
    return {"implementation": row["implementation"], "neuron": row["neuron"].lower(),
            "dtype": DTYPE_NAMES.get(row["dtype"], row["dtype"]), "mode": row["mode"], "T": int(row["T"]),
            "N": int(row["N"]), "ms": float(row["ms"])}


def side_by_side(rows):
    """[(neuron, dtype, mode, T, N, SpikingJelly Triton ms / spikejit ms)] for the cases both measured."""
    times = {(r["implementation"], r["neuron"], r["dtype"], r["mode"], r["T"], r["N"]): r["ms"] for r in rows}
    return [(*key[1:], times[("SJ triton", *key[1:])] / ms) for key, ms in times.items()
            if key[0] == "spikejit" and ms > 0 and ("SJ triton", *key[1:]) in times]


def style(dtype, mode):
    return STYLE.get((dtype, mode), ("tab:gray", "-" if mode == "infer" else "--"))


def short(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else (f"{n >> 10}K" if n % 1024 == 0 else str(n))


def plot_bandwidth(rows, path):
    neurons = sorted({r["neuron"] for r in rows}, key=lambda n: ("if", "lif", "plif").index(n)
                     if n in ("if", "lif", "plif") else 99)
    fig, axes = plt.subplots(1, len(neurons), figsize=(4.6 * len(neurons), 4.2), sharey=True, squeeze=False)
    for ax, neuron in zip(axes[0], neurons):
        lines = defaultdict(list)
        small = defaultdict(list)
        for r in rows:
            if r["neuron"] != neuron:
                continue
            (lines if r["N"] >= LARGE_N else small)[(r["dtype"], r["mode"])].append(r)
        for (dtype, mode), points in sorted(lines.items()):
            points.sort(key=lambda r: r["T"])
            color, dash = style(dtype, mode)
            n = short(points[0]["N"])
            ax.plot([r["T"] for r in points], [r["bw"] for r in points], dash, color=color, marker="o",
                    label=f"{dtype} {mode} (N={n})")
        tops = {}
        for (dtype, mode), points in sorted(small.items()):
            color, _ = style(dtype, mode)
            ax.scatter([r["T"] for r in points], [r["bw"] for r in points], color=color,
                       marker="^" if mode == "train" else "v", zorder=3)
            for r in points:
                tops[(r["T"], r["N"])] = max(tops.get((r["T"], r["N"]), 0.0), r["bw"])
        for (T, N), top in tops.items():  # one label per small-N case, above its markers
            ax.annotate(f"N={short(N)}", (T, top), textcoords="offset points", xytext=(0, 8),
                        ha="center", fontsize=7)
        ax.axhline(BANDWIDTH_BAR, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_title(neuron.upper())
        ax.set_xlabel("time steps T")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("% of measured copy bandwidth")
    axes[0][0].set_ylim(0, 100)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("spikejit CUDA kernels: share of copy bandwidth (minimal bytes); "
                 "dotted: the 80 % bar; triangles: small-N long-T cases (train ^, infer v)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_speedup(compared, path):
    cases = sorted({(n, T, N) for n, _, _, T, N, _ in compared}, key=lambda c: (c[0], c[2] < LARGE_N, c[1]))
    series = sorted({(d, m) for _, d, m, _, _, _ in compared})
    by_key = {(n, T, N, d, m): ratio for n, d, m, T, N, ratio in compared}
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(cases) + 2), 4.4))
    for k, (dtype, mode) in enumerate(series):
        color, dash = style(dtype, mode)
        xs, ys = [], []
        for i, (neuron, T, N) in enumerate(cases):
            value = by_key.get((neuron, T, N, dtype, mode))
            if value is not None:
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(value)
        ax.bar(xs, ys, width, color=color, hatch="//" if mode == "train" else None, edgecolor="white",
               label=f"{dtype} {mode}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(2.0, color="gray", linewidth=0.9, linestyle=":", label="2x (training bar, N >= 1M)")
    ax.axhline(5.0, color="gray", linewidth=0.9, linestyle="-.", label="5x (small-N long-T bar)")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{n.upper()}\nT={T}\nN={short(N)}" for n, T, N in cases], fontsize=8)
    ax.set_ylabel("SpikingJelly Triton ms / spikejit ms")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("spikejit's modules against SpikingJelly's Triton backend, side by side in one run\n"
                 "(infer: forward; train: forward + backward; higher is better)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", help="the CSV written by bench_cuda_neurons --csv (the bandwidth plot)")
    parser.add_argument("--against-spikingjelly", metavar="CSV",
                        help="the CSV written by bench_gpu_vs_spikingjelly.py --csv (the speed-up plot)")
    parser.add_argument("--out", default="docs/img", help="folder for the PNGs (default docs/img)")
    args = parser.parse_args(argv)
    if not args.csv and not args.against_spikingjelly:
        parser.error("expected a CSV of bench_cuda_neurons, --against-spikingjelly CSV or both; got neither")
    kernels = args.csv and read_csv(args.csv, COLUMNS, "bench_cuda_neurons --csv", kernel_row)
    compared = None
    if args.against_spikingjelly:
        compared = side_by_side(read_csv(args.against_spikingjelly, MODULE_COLUMNS,
                                         "bench_gpu_vs_spikingjelly.py --csv", module_row))
        if not compared:
            sys.exit(f"{args.against_spikingjelly}: no case that both spikejit and SpikingJelly's Triton backend timed")
    os.makedirs(args.out, exist_ok=True)
    if kernels:
        bandwidth = os.path.join(args.out, "bandwidth_vs_T.png")
        plot_bandwidth(kernels, bandwidth)
        print(f"wrote {bandwidth}")
    if compared:
        speedup = os.path.join(args.out, "speedup_vs_spikingjelly.png")
        plot_speedup(compared, speedup)
        print(f"wrote {speedup}")


if __name__ == "__main__":
    main()
