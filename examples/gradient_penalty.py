"""Training with a gradient penalty: second derivatives through spikejit's neuron kernels.

    python examples/gradient_penalty.py         # CPU, or --device cuda

A small spiking classifier (Linear -> spikejit.LIFNode -> Linear, averaged over T steps) learns
noisy class prototypes with the cross-entropy plus lambda times the squared gradient of the
cross-entropy with respect to the input (input-gradient regularisation, a robustness technique).
That penalty's gradient is a second derivative: the forward runs inside
`spikejit.double_backward()`, so the LIF neuron's backward runs its adjoint neuron, which autograd
differentiates again. The script first checks one step's parameter gradients against the same
network with the neuron written as a plain PyTorch loop over time, then trains and prints the
loss, the penalty and the accuracy.
"""
import argparse

import torch
from torch import nn

import spikejit


class LoopLIF(nn.Module):
    """The LIF neuron (tau 2, threshold 1, hard reset to 0, Sigmoid surrogate) as a PyTorch loop."""

    def __init__(self):
        super().__init__()
        self.spike = spikejit.surrogate.Sigmoid(alpha=4.0)  # eager: differentiable twice

    def forward(self, x_seq):
        v, spikes = torch.zeros_like(x_seq[0]), []
        for x in x_seq:
            h = v + (x - v) / 2.0
            s = self.spike(h - 1.0)
            v = h * (1.0 - s)
            spikes.append(s)
        return torch.stack(spikes)


class Classifier(nn.Module):
    def __init__(self, features, hidden, classes, neuron):
        super().__init__()
        self.encode, self.neuron, self.readout = nn.Linear(features, hidden), neuron, nn.Linear(hidden, classes)

    def forward(self, x_seq):  # [T, B, features] -> [B, classes]
        if hasattr(self.neuron, "reset"):
            self.neuron.reset()
        return self.readout(self.neuron(self.encode(x_seq))).mean(0)


def penalised_loss(model, x_seq, labels, penalty_weight):
    """(cross-entropy + penalty_weight * mean squared input gradient, the penalty); the forward
    inside double_backward(), so that the penalty can be differentiated."""
    x_seq = x_seq.detach().requires_grad_()
    with spikejit.double_backward():
        logits = model(x_seq)
    losses = nn.functional.cross_entropy(logits, labels, reduction="none")
    # Each sample's loss depends on its own input only: one gradient gives them all.
    (grad_x,) = torch.autograd.grad(losses.sum(), x_seq, create_graph=True)
    penalty = grad_x.square().sum(dim=(0, 2)).mean()  # the mean over samples of |d loss_i / d x_i|^2
    return losses.mean() + penalty_weight * penalty, penalty


def make_data(prototypes, count, steps, noise, generator):
    labels = torch.randint(len(prototypes), (count,), generator=generator)
    x = prototypes[labels] + noise * torch.randn(count, prototypes.shape[1], generator=generator)
    return x.unsqueeze(0).expand(steps, -1, -1).contiguous(), labels  # the same current at every step


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--steps", type=int, default=16, help="time steps T")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--penalty", type=float, default=1.0, help="lambda, the weight of the gradient penalty")
    p.add_argument("--noise", type=float, default=1.0, help="standard deviation of the input noise")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    prototypes = 1.5 * torch.randn(args.classes, args.features, generator=generator)
    model = Classifier(args.features, args.hidden, args.classes, spikejit.LIFNode(step_mode="m")).to(device)

    # One step's gradients against the same network with the neuron as a PyTorch loop.
    reference = Classifier(args.features, args.hidden, args.classes, LoopLIF()).to(device)
    reference.load_state_dict(model.state_dict())
    x, labels = (t.to(device) for t in make_data(prototypes, args.batch_size, args.steps, args.noise, generator))
    grads = []
    for net in (model, reference):
        total, _ = penalised_loss(net, x, labels, args.penalty)
        grads.append(torch.autograd.grad(total, list(net.parameters())))
    worst = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() for a, b in zip(*grads))
    print(f"parameter gradients (second derivatives included) against the PyTorch loop: they differ by at most "
          f"{worst:.2e} (relative)")

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    history = []
    for _ in range(args.iterations):
        x, labels = (t.to(device) for t in make_data(prototypes, args.batch_size, args.steps, args.noise, generator))
        total, penalty = penalised_loss(model, x, labels, args.penalty)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        history.append((total.item(), penalty.item()))
    first, last = history[:5], history[-5:]
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    print(f"loss (mean of 5 iterations): {mean(first, 0):.4f} at the start -> {mean(last, 0):.4f} at the end")
    print(f"gradient penalty (mean of 5 iterations): {mean(first, 1):.3e} at the start -> {mean(last, 1):.3e} "
          f"at the end")
    x, labels = (t.to(device) for t in make_data(prototypes, 512, args.steps, args.noise, generator))
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == labels).float().mean().item() * 100
    print(f"accuracy after training: {accuracy:.1f}% ({args.classes} classes)")


if __name__ == "__main__":
    main()
