"""Moving a SpikingJelly network to spikejit in one call, and checking that nothing changed.

    python examples/convert_spikingjelly.py                  # SEW-ResNet-18, CPU (or --device cuda)
    python examples/convert_spikingjelly.py --model vgg11_bn --iterations 3
    python examples/convert_spikingjelly.py --neuron flexsn  # its neurons written as FlexSN cores
    python examples/convert_spikingjelly.py --neuron custom  # ... as a neuron class of one's own

Needs SpikingJelly (`pip install spikingjelly`). The network is SpikingJelly's own SEW-ResNet-18 (or
spiking VGG-11 with batch norms) with its LIF neurons, multi step, or with `--neuron flexsn` the
same LIF written as one step for SpikingJelly 2.0's FlexSN (`lif_step` below), or with `--neuron
custom` as a neuron class of the user's own (`StepLIF` below, a BaseNode subclass).
`spikejit.from_spikingjelly` replaces each neuron by spikejit's LIFNode with the same options (or
by a StaticInputsFlexSN, or a CompiledSpikingJellyNeuron, compiling the same step); the
convolutions, batch norms and the rest stay.
The example then trains the original and the converted network side by side, from the same
weights on the same batches (random images and labels: the point is the arithmetic, not the
task), and prints how far apart their outputs and weights are, and the time of a training step
of each.
"""
import argparse
import copy
import time

import torch
import torch.nn.functional as F

import spikejit
from spikingjelly.activation_based import functional, neuron, surrogate
from spikingjelly.activation_based.model import sew_resnet, spiking_vgg


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("sew_resnet18", "vgg11_bn"), default="sew_resnet18")
    p.add_argument("--neuron", choices=("lif", "flexsn", "custom"), default="lif",
                   help="SpikingJelly's LIFNode, or the same LIF as a step of its FlexSN, or as a class of one's own")
    p.add_argument("--steps", type=int, default=4, help="time steps T")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--size", type=int, default=32, help="image height and width")
    p.add_argument("--iterations", type=int, default=5, help="training steps of each network")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def lif_step(x, v):
    """LIFNode(tau=2.0, surrogate_function=ATan(), detach_reset=True) as one step for FlexSN: its
    surrogate as a function (SpikingJelly's FlexSN refuses cores that close over modules)."""
    h = v + (x - v) / 2.0
    s = surrogate.atan.apply(h - 1.0, 2.0)
    return s, h * (1.0 - s.detach())


def flexsn_lif(**_options):
    """The models pass their neuron's options; the step holds them."""
    return neuron.FlexSN(lif_step, num_states=1)


class StepLIF(neuron.BaseNode):
    """The same LIF as a neuron class of one's own, written the SpikingJelly 2.0 way: a BaseNode
    with its one step over its memory v."""

    def __init__(self, tau: float = 2.0, **options):
        super().__init__(**options)
        self.tau = tau

    def single_step_functional_forward(self, inputs, states, **kwargs):
        x, v = inputs[0], states[0]
        h = v + (x - v) / self.tau
        s = self.surrogate_function(h - self.v_threshold)
        r = s.detach() if self.detach_reset else s
        return (s,), (h * (1.0 - r),)


def spikingjelly_network(model, neuron_kind):
    options = dict(num_classes=10, spiking_neuron=neuron.LIFNode, tau=2.0, surrogate_function=surrogate.ATan(),
                   detach_reset=True)
    if neuron_kind == "flexsn":
        options = dict(num_classes=10, spiking_neuron=flexsn_lif)
    if neuron_kind == "custom":
        options["spiking_neuron"] = StepLIF
    if model == "sew_resnet18":
        net = sew_resnet.sew_resnet18(cnf="ADD", **options)
    else:
        net = spiking_vgg.spiking_vgg11_bn(**options)
    functional.set_step_mode(net, "m")
    return net


def train_step(net, optimizer, images, labels):
    """One SGD step on the time-averaged logits; returns (logits, seconds)."""
    start = time.perf_counter()
    logits = net(images).mean(0)
    F.cross_entropy(logits, labels).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    functional.reset_net(net)
    if images.is_cuda:
        torch.cuda.synchronize()
    return logits.detach(), time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    theirs = spikingjelly_network(args.model, args.neuron).to(device)
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    converted = [m for m in ours.modules() if type(m).__module__.startswith("spikejit")]
    kinds = sorted({type(m).__name__ for m in converted})
    eager = [m.fallback_reason for m in converted if getattr(m, "fallback_reason", None)]  # (FlexSN's)
    print(f"{args.model}: {len(converted)} SpikingJelly neurons converted to spikejit's {', '.join(kinds)}, "
          + (f"{len(eager)} of them eager scans ({eager[0]})" if eager else "all running as kernels"))

    initial = [p.detach().clone() for p in theirs.parameters()]
    optimizers = [torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) for net in (theirs, ours)]
    generator = torch.Generator(device=device).manual_seed(args.seed)
    seconds, output_gap = [[], []], 0.0
    for _ in range(args.iterations):
        images = torch.rand(args.steps, args.batch_size, 3, args.size, args.size, generator=generator, device=device)
        labels = torch.randint(10, (args.batch_size,), generator=generator, device=device)
        torch.manual_seed(args.seed)  # the same dropout masks in both (VGG's classifier)
        logits_theirs, t_theirs = train_step(theirs, optimizers[0], images, labels)
        torch.manual_seed(args.seed)
        logits_ours, t_ours = train_step(ours, optimizers[1], images, labels)
        output_gap = max(output_gap, float((logits_ours - logits_theirs).abs().max()))
        seconds[0].append(t_theirs)
        seconds[1].append(t_ours)
    with torch.no_grad():
        weight_gap = max(float((a - b).abs().max()) for a, b in zip(theirs.parameters(), ours.parameters()))
        moved = max(float((a - b).abs().max()) for a, b in zip(theirs.parameters(), initial))

    print(f"side by side for {args.iterations} training steps (T = {args.steps}, batch {args.batch_size}, "
          f"{args.size}x{args.size}, {device.type}):")
    print(f"  outputs differ by at most {output_gap:.2e}; weights after training differ by at most {weight_gap:.2e} "
          f"(training moved them by up to {moved:.2e})")
    best = [min(s[1:] or s) for s in seconds]  # (the first step of each warms up)
    print(f"  training step: SpikingJelly {best[0] * 1e3:.1f} ms, converted {best[1] * 1e3:.1f} ms "
          f"({best[0] / best[1]:.2f}x; the convolutions, PyTorch's in both, take most of it)")


if __name__ == "__main__":
    main()
