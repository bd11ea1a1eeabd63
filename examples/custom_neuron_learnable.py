"""A neuron of your own with learnable parameters, compiled by spikejit.FlexSN.

    python examples/custom_neuron_learnable.py         # CPU, or --device cuda

The neuron is one time step written in PyTorch: a LIF whose threshold is learned per neuron and
whose time constant is learned as one scalar (1/tau = sigmoid(w)). FlexSN traces it, translates it
into spikejit's neuron format (printed below) and compiles it into the same fused kernels as the
built-in neurons; the module's parameters become the kernel's learnable parameters, with
gradients reduced inside the kernel. The script then checks one step against the same core run
eagerly by PyTorch, and trains the parameters so that each neuron fires at its own target rate.
"""
import argparse
import copy

import torch
from torch import nn

import spikejit


class LearnableLIF(nn.Module):
    """One step: h = v + (x - v) * sigmoid(w); s = spike(h - theta); v = h * (1 - s)."""

    def __init__(self, neurons: int):
        super().__init__()
        self.theta = nn.Parameter(torch.ones(neurons))      # per-neuron threshold
        self.w = nn.Parameter(torch.tensor(0.0))            # scalar: tau = 1 + exp(-w), 2 at w = 0
        self.spike = spikejit.surrogate.Sigmoid(alpha=4.0)  # traces to the IR's spike op

    def forward(self, x, v):
        h = v + (x - v) * torch.sigmoid(self.w)
        s = self.spike(h - self.theta)
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


def compare_with_eager(node, x_seq):
    """Runs the compiled neuron and the same core through PyTorch's eager loop on x_seq and
    returns (spike mismatches, largest difference of the parameters' gradients relative to the
    largest gradient).

    Both run on float64 copies on the CPU (where spikejit's float64 kernels run): the scalar time
    constant's gradient is a sum over every neuron and step whose terms largely cancel, and in
    float32 the eager loop's own rounding error in that sum can reach 1e-4 of the result (the
    kernel's is smaller), which would hide the kernel's."""
    kernel = copy.deepcopy(node).to(device="cpu", dtype=torch.float64)
    eager = spikejit.FlexSN(kernel.core, num_inputs=1, num_states=1, num_outputs=1, backend="torch")
    x_seq = x_seq.to(device="cpu", dtype=torch.float64)
    weights = torch.randn_like(x_seq)  # a random linear loss, so every gradient is exercised
    results = []
    for module in (kernel, eager):
        module.reset()
        kernel.core.zero_grad(set_to_none=True)
        s_seq = module(x_seq)
        (s_seq * weights).sum().backward()
        results.append((s_seq.detach(), [p.grad.clone() for p in kernel.core.parameters()]))
    (s_kernel, g_kernel), (s_eager, g_eager) = results
    mismatches = int((s_kernel != s_eager).sum())
    return mismatches, max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(g_kernel, g_eager))


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    node = spikejit.FlexSN(LearnableLIF(args.neurons), num_inputs=1, num_states=1, num_outputs=1,
                           step_mode="m", strict=True).to(device)  # strict: fail rather than run eagerly
    print("the core as spikejit compiled it:")
    print(node.program.canonical())

    def inputs():
        return 0.8 + 0.6 * torch.randn(args.steps, args.batch_size, args.neurons, device=device)

    mismatches, grad_diff = compare_with_eager(node, inputs())
    print(f"in float64 on the CPU, compiled kernels against PyTorch's eager loop: {mismatches} different spikes, "
          f"parameter gradients differ by at most {grad_diff:.1e} (relative)")

    # Each neuron has its own target firing rate; the thresholds (and tau) must learn them.
    target = torch.linspace(0.05, 0.5, args.neurons, device=device)
    optimizer = torch.optim.Adam(node.parameters(), lr=args.lr)
    errors = []
    for iteration in range(1, args.iterations + 1):
        node.reset()
        rate = node(inputs()).mean(dim=(0, 1))               # per-neuron firing rate
        loss = ((rate - target) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        errors.append((rate - target).abs().mean().item())
        if iteration % max(1, args.iterations // 5) == 0 or iteration == 1:
            print(f"iteration {iteration:4d}: mean |rate - target| {errors[-1]:.4f}")
    theta = node.core.theta.detach()
    tau = 1.0 / torch.sigmoid(node.core.w.detach()).item()
    print(f"rate error: {errors[0]:.4f} at the start -> {errors[-1]:.4f} at the end")
    print(f"learned: thresholds from {theta.min().item():.3f} (neurons that should fire most) to "
          f"{theta.max().item():.3f}, tau {tau:.3f}")


if __name__ == "__main__":
    main()
