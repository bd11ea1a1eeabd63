"""A SpikingJelly model before and after spikejit.from_spikingjelly: SpikingJelly's own spiking VGG
or SEW-ResNet with its LIF neurons, against the same network converted, side by side in one run.

    .venv/bin/python bench/python/bench_converted_model.py [--model vgg11_bn] [--device cpu]
        [--steps 4] [--batch 8] [--size 32] [--sj-backend torch] [--rounds 7] [--dry-run]

Three networks with the same weights, called in turn each round (training step, in train mode:
forward, y.sum().backward(), reset_net, zero_grad; inference, in eval mode: forward under
no_grad, reset_net):
- SpikingJelly: the model as SpikingJelly builds it (LIFNode, tau 2, ATan, detach_reset; on CUDA
  its implementation from --sj-backend, triton by default);
- spikejit: the same model after spikejit.from_spikingjelly;
- no neurons: every neuron replaced by nn.Identity, the time of everything else (convolutions,
  batch norms, pooling, the classifier). A step minus this is the time of its neurons.
The converted model's outputs are checked against SpikingJelly's first. Medians over --rounds
(CUDA events on a GPU, wall time on the CPU).
"""
import argparse
import copy
import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import burst_ms, check_counts, device_name, fmt, markdown_table  # noqa: E402

MODELS = ("vgg11_bn", "sew_resnet18")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="vgg11_bn")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=4, help="T")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--sj-backend", choices=("torch", "cupy", "triton"), default=None,
                        help="SpikingJelly's LIF implementation on CUDA (default triton; the CPU has torch only)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, two rounds (a check that it runs)")
    args = parser.parse_args(argv)
    if args.sj_backend is None:
        args.sj_backend = "torch" if args.device == "cpu" else "triton"
    if args.device == "cpu" and args.sj_backend != "torch":
        parser.error(f"--sj-backend: SpikingJelly runs its torch implementation on the CPU, got {args.sj_backend!r}")
    if args.dry_run:
        args.steps, args.batch, args.size, args.rounds = 2, 1, 32, 2
    check_counts(parser, args, "steps", "batch", "size", "rounds")
    return args


def spikingjelly_model(name, backend, device):
    """SpikingJelly's model, its LIF neurons on `backend` (SpikingJelly 2.0 reads the choice from
    SJ_LIF_CUDA_IMPLEMENTATION; it is checked here)."""
    os.environ["SJ_LIF_CUDA_IMPLEMENTATION"] = backend
    from spikingjelly.activation_based import functional, neuron, surrogate
    from spikingjelly.activation_based.model import sew_resnet, spiking_vgg
    if device.type == "cuda":
        chosen = functional.neuron_implementation("lif", device)
        if chosen["implementation"] != backend:
            sys.exit(f"--sj-backend {backend}: SpikingJelly selected {chosen['implementation']!r} "
                     f"(unavailable: {chosen['unavailable']})")
    options = dict(num_classes=10, spiking_neuron=neuron.LIFNode, tau=2.0, surrogate_function=surrogate.ATan(),
                   detach_reset=True)
    model = spiking_vgg.spiking_vgg11_bn(**options) if name == "vgg11_bn" else sew_resnet.sew_resnet18(cnf="ADD",
                                                                                                        **options)
    functional.set_step_mode(model, "m")
    return model


def without_neurons(model):
    """A copy with every spiking neuron replaced by nn.Identity."""
    import spikejit
    copy_ = copy.deepcopy(model)
    for parent in list(copy_.modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, spikejit.LIFNode):
                setattr(parent, name, nn.Identity())
    return copy_


def steps_of(model, x):
    from spikingjelly.activation_based import functional

    def train():
        model.train()
        model(x).sum().backward()
        functional.reset_net(model)
        model.zero_grad(set_to_none=True)

    def infer():
        model.eval()
        with torch.no_grad():
            model(x)
        functional.reset_net(model)

    return train, infer


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import spikejit
    from spikingjelly.activation_based import functional
    device = torch.device(args.device)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SpikingJelly's notes on optional packages
        theirs = spikingjelly_model(args.model, args.sj_backend, device).to(device)
    ours = spikejit.from_spikingjelly(copy.deepcopy(theirs))
    bare = without_neurons(ours)
    x = torch.rand(args.steps, args.batch, 3, args.size, args.size, device=device)

    with torch.no_grad():  # in eval mode: no dropout masks
        y_ref, y = theirs.eval()(x), ours.eval()(x)
    functional.reset_net(theirs)
    functional.reset_net(ours)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)  # the same network, or the times mean nothing

    implementations = {"SpikingJelly": theirs, "spikejit": ours, "no neurons": bare}
    calls = {name: steps_of(model, x) for name, model in implementations.items()}
    times = {(name, mode): [] for name in implementations for mode in ("train", "infer")}
    for _ in range(1 + args.rounds):  # the first round warms up (kernel compiles, caches)
        for mode_index, mode in enumerate(("train", "infer")):
            for name in implementations:
                times[(name, mode)].append(burst_ms(calls[name][mode_index], device, 1))
    median = {key: sorted(values[1:])[len(values[1:]) // 2] for key, values in times.items()}

    neurons = sum(isinstance(m, spikejit.LIFNode) for m in ours.modules())
    print(f"SpikingJelly's {args.model} (LIF, tau 2, ATan, detach_reset; SpikingJelly's "
          f"{args.sj_backend} implementation), {neurons} neuron layers, input [T, B, C, H, W] = "
          f"[{args.steps}, {args.batch}, 3, {args.size}, {args.size}], fp32, {device_name(device)}, "
          f"{torch.get_num_threads()} torch threads; medians of {args.rounds} rounds, ms\n")
    rows = []
    for mode in ("train", "infer"):
        floor = median[("no neurons", mode)]
        sj_ms, ours_ms = median[("SpikingJelly", mode)], median[("spikejit", mode)]
        sj_neurons, our_neurons = sj_ms - floor, ours_ms - floor
        rows.append([mode, fmt(sj_ms), fmt(ours_ms), f"{sj_ms / ours_ms:.2f}x", fmt(floor), fmt(sj_neurons),
                     fmt(our_neurons), f"{sj_neurons / our_neurons:.1f}x" if our_neurons > 0 else "–"])
    print(markdown_table(["mode", "SpikingJelly", "converted", "speed-up", "no neurons", "SpikingJelly's neurons",
                          "spikejit's neurons", "neurons' speed-up"], rows))


if __name__ == "__main__":
    main()
