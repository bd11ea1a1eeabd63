"""SpikingJelly's other neurons through the modules (QIF, EIF, Izhikevich, I-LIF, CLIF, KLIF, CUBA
LIF, LIAF, GLIF, RAF, ternary LIF, activation-aware IF, STBIF, few-spikes, DSR IF and LIF, MPBN LIF):
spikejit against SpikingJelly's, side by side in one run (its
registered ops: a per-step torch loop on the CPU; on CUDA its own multi-step kernels for QIF, EIF,
Izhikevich, I-LIF, and for the inference of activation-aware IF and STBIF, one fused kernel per
step for CLIF, a per-step torch loop otherwise).

    python3 bench/python/bench_nonlinear_neurons.py [--device cuda] [--steps 32] [--neurons 1048576]

fp32, multi-step modules with their default options (Izhikevich with a = 0.2, b = 0.3, so that
its adaptation current works; LIAF with act = ReLU; GLIF with SpikingJelly's random gates loaded
into spikejit's, on steps of [N, 1, 1, 1] (its gates broadcast over 4-D steps); STBIF with q_threshold = 0.1, 16 symmetric
levels; STBIF is inference only; the few-spikes neuron with a binary table of K = T steps,
theta = h = d = 2^-k, on inputs summed over the T steps; MPBN LIF after a layer of 32 features,
its inference in evaluation mode (one kernel), its training in training mode (batch statistics:
SpikingJelly's per-step loop on both sides)). Milliseconds per inference call (no autograd, then reset) and per
training step (forward, backward against a gradient, reset), median of bursts; spikejit's
speed-up; on CUDA the inference's fraction of the copy bandwidth (8 bytes per neuron-step: x
read, s written). Also the count of spikes (LIAF, STBIF: outputs) that differ between the two on
the measured input: 0 expected, but for a few of EIF's, whose exp is not bit-equal to PyTorch's
in float32, and on CUDA a few of STBIF's, whose SpikingJelly Triton kernel divides with up to 2 ulp
of error (Triton's float32 `/`) where spikejit rounds as IEEE and PyTorch do.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (cuda_copy_bandwidth, device_name, flexsn_bench_args, fmt, markdown_table,  # noqa: E402
                          inference_ms, reset, training_step_ms)

import spikejit  # noqa: E402

NEURONS = {"QIF": ("QIFNode", {}), "EIF": ("EIFNode", {}), "Izhikevich": ("IzhikevichNode", dict(a=0.2, b=0.3)),
           "I-LIF": ("ILIFNode", {}), "CLIF": ("ComplementaryLIFNode", {}), "KLIF": ("KLIFNode", {}),
           "CUBA LIF": ("CUBALIFNode", {}), "LIAF": ("LIAFNode", dict(act=torch.nn.ReLU(), threshold_related=False)),
           "GLIF": ("GatedLIFNode", {}), "RAF": ("RAFNode", {}), "ternary LIF": ("TernaryLIFNode", {}),
           "activation-aware IF": ("ActivationAwareIFNode", {}),
           "STBIF": ("STBIFNode", dict(q_threshold=0.1, level=16, sym=True)),
           "few-spikes": ("FewSpikeNode", {}), "DSR IF": ("DSRIFNode", {}), "DSR LIF": ("DSRLIFNode", {}),
           "MPBN LIF": ("MPBNLIFNode", dict(out_features=32))}
INFERENCE_ONLY = {"STBIF"}
# SpikingJelly 2.0's LIAFNode, multi step without store_v_seq, runs LIFNode's kernel and returns
# its spikes instead of act(h); with store_v_seq it runs its LIAF step.
REFERENCE_OPTIONS = {"LIAF": dict(store_v_seq=True)}
TAKES_STEPS = {"GLIF", "DSR IF", "DSR LIF"}  # constructed for exactly T steps, parameters shared
RUNS_ON_4D = {"GLIF"}  # its random gates broadcast over steps of [N, 1, 1, 1]
TAKES_TABLE = {"few-spikes"}  # a table of K = T steps, of the module's own FewSpikeTable class
RUNS_ON_FEATURES = {"MPBN LIF": 32}  # steps of [N / 32, 32]: a batch norm over 32 features
INFERS_IN_EVAL_MODE = {"MPBN LIF"}  # its inference (and the spikes compared) in evaluation mode


def options_for(label, options, module, steps):
    """The constructor options of `label` for spikejit's or SpikingJelly's module."""
    if label in TAKES_TABLE:
        row = [2.0 ** -k for k in range(steps)]
        return dict(options, table=module.FewSpikeTable(row, row, row))
    return options


def multi_step(module, class_name, options, device):
    """The module, multi step (set after: SpikingJelly's CUBALIFNode takes no step_mode)."""
    node = getattr(module, class_name)(**options).to(device)
    node.step_mode = "m"
    return node


def differing_spikes(ours, theirs, x):
    with torch.no_grad():
        ours.eval()
        theirs.eval()
        reset(ours)
        reset(theirs)
        count = int((ours(x) != theirs(x)).sum())
    reset(ours)
    reset(theirs)
    ours.train()
    theirs.train()
    return count


def modes(node, label):
    """(inference's mode, training's mode) callables for `label`'s module."""
    eval_mode = node.eval if label in INFERS_IN_EVAL_MODE else node.train
    return eval_mode, node.train


def main(argv=None):
    args = flexsn_bench_args(__doc__.splitlines()[0], argv)
    device = torch.device(args.device)
    try:
        from spikingjelly.activation_based import neuron as sj_neuron
    except ImportError:
        sj_neuron = None
    print(f"# SpikingJelly's other neurons as modules, fp32, T = {args.steps}, N = {args.neurons}, {device_name(device)}, "
          f"torch {torch.__version__}")
    print(f"ms per call, median of {args.bursts} bursts of {args.calls} calls; SpikingJelly: "
          f"{'installed' if sj_neuron else 'not installed'}\n")
    torch.manual_seed(0)
    x_flat = torch.randn(args.steps, args.neurons, device=device) * 0.8 + 0.3
    grad_flat = torch.randn_like(x_flat)
    bandwidth = cuda_copy_bandwidth(device, 1 << 26)
    rows = []
    for label, (class_name, options) in NEURONS.items():
        x = x_flat.view(args.steps, -1, 1, 1, 1) if label in RUNS_ON_4D else x_flat
        if label in RUNS_ON_FEATURES:
            x = x_flat.view(args.steps, -1, RUNS_ON_FEATURES[label])
        grad = grad_flat.view_as(x)
        if label in TAKES_STEPS:
            options = dict(options, T=args.steps)
        ours = multi_step(spikejit, class_name, options_for(label, options, spikejit, args.steps), device)
        trains = label not in INFERENCE_ONLY
        for_inference, for_training = modes(ours, label)
        for_inference()
        infer = inference_ms(ours, x, args, device)
        for_training()
        train = training_step_ms(ours, x, grad, args, device) if trains else None
        copy = "–" if bandwidth is None else f"{100 * 8 * x.numel() / (infer * 1e-3) / bandwidth:.0f} %"
        row = [label, fmt(infer), copy, fmt(train) if trains else "–"]
        if sj_neuron is not None:
            theirs = multi_step(sj_neuron, class_name, options_for(label, dict(options, **REFERENCE_OPTIONS.get(label, {})),
                                                                   sj_neuron, args.steps), device)
            if label in TAKES_STEPS:
                ours.load_state_dict(theirs.state_dict())
            if label in INFERS_IN_EVAL_MODE:  # the running statistics that spikejit's training steps moved
                theirs.load_state_dict(ours.state_dict())
            differ = differing_spikes(ours, theirs, x)
            for_inference, for_training = modes(theirs, label)
            for_inference()
            sj_infer = inference_ms(theirs, x, args, device)
            for_training()
            row += [fmt(sj_infer), f"{sj_infer / infer:.1f}x"]
            if trains:
                sj_train = training_step_ms(theirs, x, grad, args, device)
                row += [fmt(sj_train), f"{sj_train / train:.1f}x"]
            else:
                row += ["–", "–"]
            row.append(str(differ))
        else:
            row += ["–"] * 5
        rows.append(row)
    print(markdown_table(["neuron", "inference ms", "% of copy BW", "training ms", "SJ inference ms", "speed-up",
                          "SJ training ms", "speed-up", "differing spikes"], rows))


if __name__ == "__main__":
    main()
