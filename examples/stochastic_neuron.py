"""A stochastic spiking neuron (escape noise) compiled by spikejit.FlexSN, trained to target rates.

    python examples/stochastic_neuron.py         # CPU, or --device cuda

The neuron is one time step written in PyTorch: a LIF that fires at random, with probability
sigmoid(beta (h - theta)) for a threshold theta learned per neuron, and learns through the
straight-through form s = p + (bernoulli(p) - p).detach() (forward a Bernoulli spike, backward
p's gradient). torch.bernoulli becomes a draw of the kernels' own generator (`uniform()` in the
neuron format, printed below): no eager fallback, no [T, N] noise tensor. The script shows that
torch.manual_seed reproduces the spikes, checks the kernels' gradients against a PyTorch loop fed
the same spikes, trains each neuron's threshold to its own target rate, and times a training step
against the eager scan of the same core.
"""
import argparse
import time

import torch
from torch import nn

import spikejit

BETA = 4.0


class EscapeNoiseLIF(nn.Module):
    """One step: h = v + (x - v) / 2; p = sigmoid(beta (h - theta)); s ~ Bernoulli(p); v = h (1 - s)."""

    def __init__(self, neurons: int):
        super().__init__()
        self.theta = nn.Parameter(torch.ones(neurons))  # per-neuron threshold

    def forward(self, x, v):
        h = v + (x - v) * 0.5
        p = torch.sigmoid(BETA * (h - self.theta))
        s = p + (torch.bernoulli(p) - p).detach()        # straight through
        return s, h * (1.0 - s)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--neurons", type=int, default=256)
    p.add_argument("--steps", type=int, default=32, help="time steps T")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def replayed_gradient(core, x_seq, s_seq, weights):
    """The threshold's gradient of sum(weights * s) from a plain PyTorch loop that takes the
    kernels' own spikes s_seq as its Bernoulli outcomes."""
    theta = core.theta.detach().clone().requires_grad_()
    v, spikes = torch.zeros_like(x_seq[0]), []
    for t in range(x_seq.shape[0]):
        h = v + (x_seq[t] - v) * 0.5
        p = torch.sigmoid(BETA * (h - theta))
        s = p + (s_seq[t] - p).detach()
        spikes.append(s)
        v = h * (1.0 - s)
    (torch.stack(spikes) * weights).sum().backward()
    return theta.grad


def step_ms(node, x_seq, device, calls=5):
    def step():
        node.reset()
        node(x_seq).mean().backward()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / calls * 1e3


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    core = EscapeNoiseLIF(args.neurons).to(device)
    node = spikejit.FlexSN(core, num_inputs=1, num_states=1, num_outputs=1, strict=True)  # strict: no fallback
    print("the core as spikejit compiled it:")
    print(node.program.canonical())

    def inputs():
        return 0.8 + 0.6 * torch.randn(args.steps, args.batch_size, args.neurons, device=device)

    x_seq = inputs()
    runs = []
    for _ in range(2):
        torch.manual_seed(args.seed + 1)
        node.reset()
        runs.append(node(x_seq).detach())
    node.reset()
    fresh = node(x_seq).detach()
    print(f"the same torch.manual_seed, the same spikes: {torch.equal(runs[0], runs[1])}; "
          f"a fresh call, other spikes: {not torch.equal(runs[0], fresh)}; firing rate {fresh.mean().item():.3f}")

    weights = torch.randn_like(x_seq)  # a random linear loss, so that every gradient is exercised
    node.reset()
    core.zero_grad(set_to_none=True)
    s_seq = node(x_seq)
    (s_seq * weights).sum().backward()
    want = replayed_gradient(core, x_seq, s_seq.detach(), weights)
    difference = ((core.theta.grad - want).abs().max() / want.abs().max()).item()
    print(f"threshold gradients against a PyTorch loop fed the same spikes: differ by at most "
          f"{difference:.1e} (relative)")

    # Each neuron has its own target firing rate; the thresholds must learn them through the noise.
    target = torch.linspace(0.05, 0.5, args.neurons, device=device)
    optimizer = torch.optim.Adam(core.parameters(), lr=args.lr)
    errors = []
    for iteration in range(1, args.iterations + 1):
        node.reset()
        rate = node(inputs()).mean(dim=(0, 1))  # per-neuron firing rate
        loss = ((rate - target) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        errors.append((rate - target).abs().mean().item())
        if iteration % max(1, args.iterations // 5) == 0 or iteration == 1:
            print(f"iteration {iteration:4d}: mean |rate - target| {errors[-1]:.4f}")
    print(f"rate error: {errors[0]:.4f} at the start -> {errors[-1]:.4f} at the end")

    eager = spikejit.FlexSN(core, num_inputs=1, num_states=1, num_outputs=1, backend="torch")
    compiled_ms, eager_ms = step_ms(node, x_seq, device), step_ms(eager, x_seq, device)
    print(f"training step, T = {args.steps}, {args.batch_size} x {args.neurons} neurons: compiled {compiled_ms:.2f} ms, "
          f"eager scan {eager_ms:.2f} ms ({eager_ms / compiled_ms:.1f}x)")


if __name__ == "__main__":
    main()
