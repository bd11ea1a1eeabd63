"""Training a spiking network with spikejit.LIFNode in plain PyTorch.

    python examples/train_lif.py                       # CPU, or --device cuda
    python examples/train_lif.py --iterations 20 --steps 8

The task: tell 4 classes of spike trains apart. Each class fires its 32 input channels with its
own random rates; a sample is Bernoulli spikes [T, 32] drawn from its class's rates. The network
is Linear -> LIFNode -> Linear -> LIFNode, and its output is the firing rate of the 4 output
neurons, trained towards the one-hot label with a mean squared error (SpikingJelly's classic
recipe). LIFNode takes SpikingJelly's arguments; with step_mode="m" it runs all T steps of a
layer in one fused call, forward and backward.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

import spikejit

CHANNELS, CLASSES = 32, 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--steps", type=int, default=16, help="time steps T")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class SpikeTrains:
    """Random batches of the task: (spikes [T, B, CHANNELS], labels [B])."""

    def __init__(self, steps, device, seed):
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.rates = 0.4 * torch.rand(CLASSES, CHANNELS, generator=self.generator, device=device)
        self.steps = steps

    def batch(self, size):
        labels = torch.randint(CLASSES, (size,), generator=self.generator, device=self.rates.device)
        p = self.rates[labels].expand(self.steps, size, CHANNELS)
        spikes = (torch.rand(p.shape, generator=self.generator, device=p.device) < p).float()
        return spikes, labels


def make_network(hidden):
    surrogate = spikejit.surrogate.ATan()
    return nn.Sequential(
        nn.Linear(CHANNELS, hidden),
        spikejit.LIFNode(tau=2.0, surrogate_function=surrogate, step_mode="m"),
        nn.Linear(hidden, CLASSES),
        spikejit.LIFNode(tau=2.0, surrogate_function=surrogate, step_mode="m"),
    )


def reset(network):
    """Clears the neurons' states, as SpikingJelly's functional.reset_net does."""
    for module in network.modules():
        if isinstance(module, spikejit.LIFNode):
            module.reset()


def evaluate(network, data, size=512):
    with torch.no_grad():
        spikes, labels = data.batch(size)
        reset(network)
        return (network(spikes).mean(0).argmax(1) == labels).float().mean().item()


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    data = SpikeTrains(args.steps, device, args.seed)
    network = make_network(args.hidden).to(device)
    optimizer = torch.optim.Adam(network.parameters(), lr=args.lr)
    print(f"task: {CLASSES} classes of {CHANNELS}-channel spike trains, T = {args.steps}, on {device}")
    print(f"accuracy before training: {100 * evaluate(network, data):.1f}%")

    losses = []
    for iteration in range(1, args.iterations + 1):
        spikes, labels = data.batch(args.batch_size)
        reset(network)
        rate = network(spikes).mean(0)                   # [B, CLASSES] output firing rates
        loss = F.mse_loss(rate, F.one_hot(labels, CLASSES).float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if iteration % max(1, args.iterations // 10) == 0 or iteration == 1:
            print(f"iteration {iteration:4d}: loss {loss.item():.4f}")

    first, last = sum(losses[:5]) / len(losses[:5]), sum(losses[-5:]) / len(losses[-5:])
    print(f"loss (mean of 5 iterations): {first:.4f} at the start -> {last:.4f} at the end")
    print(f"accuracy after training: {100 * evaluate(network, data):.1f}%")


if __name__ == "__main__":
    main()
