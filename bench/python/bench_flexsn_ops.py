"""FlexSN cores that compile through in-place ops and PyTorch's decompositions, against the eager scan they ran as before.

    python3 bench/python/bench_flexsn_ops.py [--device cuda] [--steps 32] [--neurons 1048576]

Each core uses ops that FlexSN used to refuse (it then warned and ran the core as an eager scan,
one PyTorch call per op per step): in-place updates, softplus, gelu, elu. Milliseconds per
training step (forward, backward against a gradient, reset; median of bursts) of the compiled
kernels and of the eager scan of the same core (backend="torch"), and their ratio; the built-in
LIFNode beside them as the yardstick of a fused neuron.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import device_name, flexsn_bench_args, fmt, markdown_table, training_step_ms  # noqa: E402

import spikejit  # noqa: E402

SURROGATE = spikejit.surrogate.Sigmoid()


def in_place_lif(x, v):
    v = v.clone()
    v.mul_(0.5).add_(x, alpha=0.5)
    s = SURROGATE(v - 1.0)
    v.mul_(1.0 - s)
    return s, v


def softplus_adaptive(x, v, a):
    h = v + (x - v) * 0.5
    s = SURROGATE(h - 1.0 - F.softplus(a, beta=4.0))
    return s, h * (1.0 - s), 0.9 * a + 0.1 * s


def gelu_elu(x, v):
    h = 0.7 * v + F.gelu(x)
    s = SURROGATE(h - 1.0)
    return s, (h - s) + 0.1 * F.elu(-h)


CORES = {"in-place LIF": (in_place_lif, 1), "softplus adaptive threshold": (softplus_adaptive, 2),
         "gelu input, elu leak": (gelu_elu, 1)}


def parse_args(argv=None):
    return flexsn_bench_args(__doc__.splitlines()[0], argv)


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    name = device_name(device)
    print(f"# FlexSN cores through decompositions, fp32, T = {args.steps}, N = {args.neurons}, {name}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"training step (forward, backward, reset), ms, median of {args.bursts} bursts of {args.calls} calls\n")
    x = torch.randn(args.steps, args.neurons, device=device) + 0.5
    grad = torch.randn_like(x)
    builtin = spikejit.LIFNode(step_mode="m", surrogate_function=SURROGATE).to(device)
    rows = [["built-in LIFNode", fmt(training_step_ms(builtin, x, grad, args, device)), "–", "–"]]
    for label, (core, states) in CORES.items():
        compiled = spikejit.FlexSN(core, 1, states, 1, strict=True)
        eager = spikejit.FlexSN(core, 1, states, 1, backend="torch")
        kernel_ms = training_step_ms(compiled, x, grad, args, device)
        eager_ms = training_step_ms(eager, x, grad, args, device)
        rows.append([label, fmt(kernel_ms), fmt(eager_ms), f"{eager_ms / kernel_ms:.1f}x"])
    print(markdown_table(["core", "compiled ms", "eager scan ms (before)", "speed-up"], rows))


if __name__ == "__main__":
    main()
