"""Second derivatives: a gradient-penalty training step through spikejit's neurons (calls inside
`spikejit.double_backward()`, the adjoint neuron) against SpikingJelly's torch backend, which
autograd differentiates twice through its per-step loop; spikejit's ordinary first-order step
beside them for scale.

    python3 bench/python/bench_double_backward.py [--device cuda] [--steps 32] [--neurons 65536 1048576]

The step: forward, g = d(sum(s * r))/dx with create_graph=True, then (g^2).sum().backward() (the
second derivatives of x and, for PLIF, of w). The first-order step: forward and sum(s * r).backward().
Both implementations must agree first (first and second derivatives within rounding). Each case
runs the implementations in turn, `--bursts` times `--calls` calls; reported: the median ms per
step and the ratios.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import burst_ms, device_name, fmt, markdown_table, spikejit_node, spikingjelly_node  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--neurons-kinds", nargs="+", default=["LIF", "PLIF"], choices=["IF", "LIF", "PLIF"])
    parser.add_argument("--steps", type=int, nargs="+", default=[32])
    parser.add_argument("--neurons", type=int, nargs="+", default=None,
                        help="N per case (default: 65536 and 1048576 on CUDA, 4096 and 65536 on the CPU)")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, one burst of one call")
    args = parser.parse_args(argv)
    if args.neurons is None:
        args.neurons = [65536, 1 << 20] if args.device.startswith("cuda") else [4096, 65536]
    if args.dry_run:
        args.steps, args.neurons, args.calls, args.bursts = [4], [64], 1, 1
    return args


def penalty_step(node, x, r, mode):
    """One gradient-penalty step; returns (x's first derivative, the parameters' and x's grads)."""
    import spikejit
    x.grad = None
    node.zero_grad(set_to_none=True)
    node.reset()
    with (spikejit.double_backward() if mode == "spikejit" else torch.enable_grad()):
        s = node(x)
    (g,) = torch.autograd.grad((s * r).sum(), x, create_graph=True)
    g.square().sum().backward()
    return g.detach(), [p.grad for p in node.parameters()], x.grad


def first_order_step(node, x, r):
    x.grad = None
    node.zero_grad(set_to_none=True)
    node.reset()
    (node(x) * r).sum().backward()


def check_same(kind, ours, theirs, x, r):
    g1, p1, x1 = penalty_step(ours, x, r, "spikejit")
    g2, p2, x2 = penalty_step(theirs, x, r, "SpikingJelly")
    for a, b in [(g1, g2), (x1, x2), *zip(p1, p2)]:
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3 * (1 + b.abs().max().item()),
                                   msg=lambda m: f"{kind}: spikejit and SpikingJelly differ: {m}")


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    rows = []
    for kind in args.neurons_kinds:
        for steps in args.steps:
            for neurons in args.neurons:
                x = (torch.randn(steps, neurons, device=device) * 1.5 + 0.5).requires_grad_()
                r = torch.randn_like(x)
                ours = spikejit_node(kind, device, torch.float32)
                theirs = spikingjelly_node(kind, device, torch.float32)
                check_same(kind, ours, theirs, x, r)
                steps_of = {"spikejit": lambda: penalty_step(ours, x, r, "spikejit"),
                            "SpikingJelly": lambda: penalty_step(theirs, x, r, "SpikingJelly"),
                            "spikejit, first order": lambda: first_order_step(ours, x, r)}
                times = {name: [] for name in steps_of}
                for fn in steps_of.values():
                    fn()  # warm-up (kernels compiled, caches filled)
                for _ in range(args.bursts):
                    for name, fn in steps_of.items():
                        times[name].append(burst_ms(fn, device, args.calls))
                ms = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
                rows.append([kind, steps, neurons, fmt(ms["spikejit"]), fmt(ms["SpikingJelly"]),
                             fmt(ms["SpikingJelly"] / ms["spikejit"]) + "x", fmt(ms["spikejit, first order"]),
                             fmt(ms["spikejit"] / ms["spikejit, first order"]) + "x"])
    print(f"# gradient-penalty step (second derivatives), fp32, {device_name(device)}, torch {torch.__version__}, "
          f"median of {args.bursts} bursts of {args.calls} calls, ms per step")
    print(markdown_table(["neuron", "T", "N", "spikejit", "SpikingJelly torch", "speed-up",
                          "spikejit first-order step", "second / first order"], rows))


if __name__ == "__main__":
    main()
