#!/usr/bin/env python3
"""Plots of the GPU benchmark: reads the CSV of `bench_cuda_neurons --csv FILE` and writes PNGs.

    python bench/plot_benchmarks.py gpu-out/bench_cuda_neurons.csv --out docs/img

writes
    bandwidth_vs_T.png           % of the measured copy bandwidth against T, one panel per neuron,
                                 a line per (dtype, mode) for the large-N cases, markers for the
                                 small-N long-T cases, and the 80 % bar of the design
    speedup_vs_spikingjelly.png  spikejit's speed-up over SpikingJelly's Triton backend for the
                                 rows that carry a SpikingJelly time (0 in the CSV means none)

Columns read: neuron, dtype, mode, T, N, ms, fraction_of_copy_bw, spikingjelly_triton_ms.
Needs matplotlib (the Agg backend: no display).
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

COLUMNS = ("neuron", "dtype", "mode", "T", "N", "ms", "fraction_of_copy_bw", "spikingjelly_triton_ms")
LARGE_N = 1 << 20          # "N >= 1M": the bandwidth-bound cases of the performance bar
BANDWIDTH_BAR = 80.0       # % of copy bandwidth (design, section 7)
STYLE = {("float32", "infer"): ("tab:blue", "-"), ("float32", "train"): ("tab:blue", "--"),
         ("float16", "infer"): ("tab:orange", "-"), ("float16", "train"): ("tab:orange", "--"),
         ("bfloat16", "infer"): ("tab:green", "-"), ("bfloat16", "train"): ("tab:green", "--")}


def read_rows(path):
    """The CSV's rows with numbers converted; exits with a message naming what is wrong."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: expected the columns of bench_cuda_neurons --csv; missing {', '.join(missing)}")
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                rows.append({
                    "neuron": row["neuron"], "dtype": row["dtype"], "mode": row["mode"],
                    "T": int(row["T"]), "N": int(row["N"]), "ms": float(row["ms"]),
                    "bw": 100.0 * float(row["fraction_of_copy_bw"]),
                    "sj_ms": float(row["spikingjelly_triton_ms"]),
                })
            except ValueError as e:
                sys.exit(f"{path}:{line}: {e}")
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


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


def plot_speedup(rows, path):
    compared = [r for r in rows if r["sj_ms"] > 0 and r["ms"] > 0]
    if not compared:
        print(f"no SpikingJelly times in the CSV; {path} not written")
        return False
    cases = sorted({(r["neuron"], r["T"], r["N"]) for r in compared}, key=lambda c: (c[0], c[2] < LARGE_N, c[1]))
    series = sorted({(r["dtype"], r["mode"]) for r in compared})
    by_key = {(r["neuron"], r["T"], r["N"], r["dtype"], r["mode"]): r["sj_ms"] / r["ms"] for r in compared}
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
    ax.set_ylabel("speed-up over SpikingJelly Triton (x)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("spikejit vs SpikingJelly's Triton backend, same GPU model (higher is better)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="the CSV written by bench_cuda_neurons --csv")
    parser.add_argument("--out", default="docs/img", help="folder for the PNGs (default docs/img)")
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    os.makedirs(args.out, exist_ok=True)
    bandwidth = os.path.join(args.out, "bandwidth_vs_T.png")
    plot_bandwidth(rows, bandwidth)
    print(f"wrote {bandwidth}")
    speedup = os.path.join(args.out, "speedup_vs_spikingjelly.png")
    if plot_speedup(rows, speedup):
        print(f"wrote {speedup}")


if __name__ == "__main__":
    main()
