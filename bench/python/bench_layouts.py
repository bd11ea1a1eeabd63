"""Channels-last and strided arguments through spikejit's neurons: in place against a copy, alone and in a network.

    python3 bench/python/bench_layouts.py [--device cuda] [--steps-t 8] [--batch 32] [--channels 128] [--size 32]

1. The neuron alone, LIF fp32 over x = [T, B, C, H, W]: a contiguous x; a channels-last x, which
   the kernels run in place (results in the same layout); and `x.contiguous()` of the channels-last
   x before the call, what every call did before it ran in place (a copy of x, results contiguous).
   Milliseconds per call (CUDA events, median of bursts), inference and training (forward,
   backward against a gradient in x's layout), and the fraction of the measured copy bandwidth
   for the minimal bytes (bench_common.minimal_bytes). Also an input repeated over T
   (`frame.expand(T, ...)`: a strided view the kernels read in place, one frame of memory) against
   its `contiguous()` copy.
2. GatedLIFNode(T, inplane=C) on x: its seven per-channel gates and per-step conductance read in
   place as broadcast views, against copying them to the neurons' shape first (what it did before
   the kernels read strided views; here by patching its broadcast, in this process only).
3. A training step of a small channels-last spiking conv net (conv-BN-LIF twice, pooling,
   linear; the model and its input in torch.channels_last), eager and torch.compile, with the
   neurons in place and with the copy path of before (selected by making the layout check answer
   "no layout", in this process only).
"""
import argparse
import contextlib
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (check_counts, cuda_copy_bandwidth, device_name, fmt,  # noqa: E402
                          markdown_table, median_ms, minimal_bytes)

import spikejit  # noqa: E402
from spikejit import functional  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps-t", type=int, default=8, help="time steps T")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--size", type=int, default=32, help="H = W")
    parser.add_argument("--calls", type=int, default=20, help="calls per burst")
    parser.add_argument("--bursts", type=int, default=7)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, few calls (a check that it runs)")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.steps_t, args.batch, args.channels, args.size, args.calls, args.bursts = 2, 2, 4, 4, 2, 2
    check_counts(parser, args, "steps_t", "batch", "channels", "size", "calls", "bursts")
    return args


def channels_last(x):
    steps, batch = x.shape[:2]
    return x.reshape(steps * batch, *x.shape[2:]).contiguous(memory_format=torch.channels_last).view(x.shape)


@contextlib.contextmanager
def copy_path():
    """Neuron calls copy non-contiguous inputs, as before they ran in memory order."""
    in_place = functional._call_memory_order
    functional._call_memory_order = lambda *args: None
    try:
        yield
    finally:
        functional._call_memory_order = in_place


def neuron_rows(args, device):
    shape = (args.steps_t, args.batch, args.channels, args.size, args.size)
    x = torch.randn(shape, device=device) + 0.5
    g = torch.randn(shape, device=device)
    node = spikejit.LIFNode(step_mode="m").to(device)
    frame = x[0]
    inputs = {
        "contiguous": lambda: (x, g),
        "channels-last, in place": lambda: (channels_last(x), channels_last(g)),
        "channels-last, copied first": lambda: (channels_last(x), channels_last(g)),
        "repeated over T, in place": lambda: (frame.expand(x.shape), g),
        "repeated over T, copied first": lambda: (frame.expand(x.shape), g),
    }
    neurons = x[0].numel()
    bandwidth = cuda_copy_bandwidth(device, x.numel())
    rows = []
    for case, make in inputs.items():
        xs, gs = make()
        copies = case.endswith("copied first")
        xt = xs.detach().requires_grad_()

        def infer():
            with torch.no_grad():
                node.reset()
                node(xs.contiguous() if copies else xs)

        def train():
            node.reset()
            xt.grad = None
            node(xt.contiguous() if copies else xt).backward(gs)

        for mode, call in (("infer", infer), ("train", train)):
            ms = median_ms(call, device, args.calls, args.bursts)
            share = None if bandwidth is None else minimal_bytes(mode, args.steps_t, neurons, 4) / (ms * 1e-3) / bandwidth
            rows.append([mode, case, fmt(ms), "–" if share is None else f"{100 * share:.0f} %"])
    return rows, bandwidth


@contextlib.contextmanager
def glif_copies_gates():
    """GatedLIFNode hands its gates and conductance over as contiguous copies."""
    broadcast = spikejit.GatedLIFNode._per_neuron
    spikejit.GatedLIFNode._per_neuron = lambda self, *a: broadcast(self, *a).contiguous()
    try:
        yield
    finally:
        spikejit.GatedLIFNode._per_neuron = broadcast


def glif_rows(args, device):
    shape = (args.steps_t, args.batch, args.channels, args.size, args.size)
    x = torch.randn(shape, device=device) + 0.5
    g = torch.randn(shape, device=device)
    node = spikejit.GatedLIFNode(T=args.steps_t, inplane=args.channels).to(device)
    xt = x.detach().requires_grad_()

    def infer():
        with torch.no_grad():
            node.reset()
            node(x)

    def train():
        node.reset()
        node.zero_grad(set_to_none=True)
        xt.grad = None
        node(xt).backward(g)

    rows = []
    for path, context in (("in place", contextlib.nullcontext), ("copied first", glif_copies_gates)):
        for mode, call in (("infer", infer), ("train", train)):
            with context():
                rows.append([mode, path, fmt(median_ms(call, device, args.calls, args.bursts))])
    return rows


class ConvSNN(nn.Module):
    def __init__(self, channels, size):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.lif1 = spikejit.LIFNode(step_mode="m")
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.lif2 = spikejit.LIFNode(step_mode="m")
        self.fc = nn.Linear(channels, 10)

    def forward(self, x):
        self.lif1.reset()
        self.lif2.reset()
        steps, batch = x.shape[:2]
        y = self.bn1(self.conv1(x.flatten(0, 1)))
        y = self.lif1(y.view(steps, batch, *y.shape[1:]))
        y = self.bn2(self.conv2(y.flatten(0, 1)))
        y = self.lif2(y.view(steps, batch, *y.shape[1:]))
        return self.fc(y.mean((0, 3, 4)))


def network_rows(args, device):
    model = ConvSNN(args.channels, args.size).to(device).to(memory_format=torch.channels_last)
    x = channels_last(torch.randn(args.steps_t, args.batch, 3, args.size, args.size, device=device))
    rows = []
    for mode in ("eager", "compile"):
        for path, context in (("in place", contextlib.nullcontext), ("copied (before)", copy_path)):
            torch._dynamo.reset()
            forward = model if mode == "eager" else torch.compile(model, fullgraph=True)

            def step():
                model.zero_grad(set_to_none=True)
                forward(x).square().mean().backward()

            with context():
                ms = median_ms(step, device, args.calls, args.bursts)
            rows.append([mode, path, fmt(ms)])
    torch._dynamo.reset()
    return rows


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    name = device_name(device)
    print(f"# Channels-last activations, {name}, torch {torch.__version__}")
    print(f"T = {args.steps_t}, x = [T, {args.batch}, {args.channels}, {args.size}, {args.size}], fp32, "
          f"median of {args.bursts} bursts of {args.calls} calls\n")
    rows, bandwidth = neuron_rows(args, device)
    if bandwidth is not None:
        print(f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s\n")
    print(markdown_table(["mode", "input", "ms per call", "of copy bandwidth"], rows))
    print("\n## GatedLIFNode: per-channel gates and per-step conductance as broadcast views\n")
    print(markdown_table(["mode", "gates", "ms per call"], glif_rows(args, device)))
    print("\n## A training step of a channels-last conv SNN (conv-BN-LIF x2, linear)\n")
    print(markdown_table(["mode", "neurons' layouts", "ms per step"], network_rows(args, device)))


if __name__ == "__main__":
    main()
