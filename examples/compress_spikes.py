"""Spike compression: 8 spikes per byte, and a layer that keeps its input spikes compressed for
the backward pass.

    python examples/compress_spikes.py                 # CPU, or --device cuda

`spikejit.bit_spike_compress(s)` packs any tensor of spikes (nonzero counts as a spike) into
uint8[ceil(n / 8)], element 8j+i at bit i of byte j; `bit_spike_decompress(c, shape)` gives back
the 0/1 tensor. A linear layer after a spiking layer must keep its input for the backward pass
(grad_weight = grad_out^T @ input); `SpikeLinear` keeps it packed, 32 times smaller than float32,
and computes exactly the same gradients as torch.nn.functional.linear.
"""
import argparse

import torch
import torch.nn.functional as F

import spikejit


class SpikeLinearFunction(torch.autograd.Function):
    """y = s @ weight^T + bias for spikes s, saving s bit-packed instead of as floats."""

    @staticmethod
    def forward(ctx, s, weight, bias):
        ctx.shape, ctx.dtype = s.shape, s.dtype
        ctx.save_for_backward(spikejit.bit_spike_compress(s), weight)
        return F.linear(s, weight, bias)

    @staticmethod
    def backward(ctx, grad_y):
        packed, weight = ctx.saved_tensors
        s = spikejit.bit_spike_decompress(packed, ctx.shape).to(ctx.dtype)
        grad_s = grad_y @ weight
        grad_weight = grad_y.reshape(-1, grad_y.shape[-1]).t() @ s.reshape(-1, s.shape[-1])
        grad_bias = grad_y.reshape(-1, grad_y.shape[-1]).sum(0)
        return grad_s, grad_weight, grad_bias


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=16, help="time steps T")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--neurons", type=int, default=1000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    shape = (args.steps, args.batch_size, args.neurons)

    # Spikes from a LIF layer driven by random currents.
    x_seq = 0.7 + torch.randn(shape, device=device)
    lif = spikejit.LIFNode(tau=2.0, step_mode="m")
    s_seq = lif(x_seq)
    packed = spikejit.bit_spike_compress(s_seq)
    restored = spikejit.bit_spike_decompress(packed, s_seq.shape)
    exact = torch.equal(restored.to(s_seq.dtype), s_seq)
    print(f"spikes {list(s_seq.shape)} (firing rate {s_seq.mean().item():.3f}): "
          f"{s_seq.numel() * s_seq.element_size()} bytes as float32 -> {packed.numel()} bytes packed "
          f"({s_seq.numel() * s_seq.element_size() / packed.numel():.1f}x smaller)")
    print(f"round trip: {'exact' if exact else 'NOT exact'} "
          f"({int((restored.to(s_seq.dtype) != s_seq).sum())} of {s_seq.numel()} elements differ)")

    # A layer after the spikes, with its input saved packed; gradients against F.linear.
    weight = torch.randn(10, args.neurons, device=device, requires_grad=True)
    bias = torch.randn(10, device=device, requires_grad=True)
    grad_y = torch.randn(args.steps, args.batch_size, 10, device=device)
    s_in = s_seq.detach().requires_grad_()
    grads = []
    for layer in (SpikeLinearFunction.apply, F.linear):
        y = layer(s_in, weight, bias)
        y.backward(grad_y)
        grads.append([y.detach()] + [t.grad.clone() for t in (s_in, weight, bias)])
        for t in (s_in, weight, bias):
            t.grad = None
    diff = max((a - b).abs().max().item() for a, b in zip(*grads))
    print(f"SpikeLinear against F.linear: outputs and gradients differ by at most {diff:.1e}; it saves "
          f"{packed.numel()} bytes for backward instead of {s_in.numel() * s_in.element_size()}")


if __name__ == "__main__":
    main()
