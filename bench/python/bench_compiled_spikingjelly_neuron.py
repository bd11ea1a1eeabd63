"""SpikingJelly neurons of a user's own class, run by SpikingJelly (its loop over the step) against
the same neurons compiled by spikejit (CompiledSpikingJellyNeuron, what from_spikingjelly makes of
them), side by side in one run: inference and training (forward + y.sum().backward()), in step
mode 'm' (a sequence a call) and 's' (a step a call, SpikingJelly's default).

The neurons: a LIF with an adaptive threshold written the SpikingJelly 2.0 way (a BaseNode
subclass with single_step_functional_forward over two memories, a learnable time constant), and
an IF with a tanh-squashed input written the SimpleBaseNode way (neuronal_charge).

    python bench/python/bench_compiled_spikingjelly_neuron.py            # CUDA when available, else CPU
    python bench/python/bench_compiled_spikingjelly_neuron.py --dry-run  # tiny sizes, a few repetitions
"""
import argparse
import functools

import torch
from torch import nn
from spikingjelly.activation_based import neuron, surrogate

import spikejit
from bench_common import infer_and_train, interleaved_ms, markdown_table


class AdaptiveLIF(neuron.BaseNode):
    def __init__(self):
        super().__init__(surrogate_function=surrogate.Sigmoid(alpha=4.0), step_mode="m")
        self.register_memory("a", 0.0)
        self.w = nn.Parameter(torch.tensor(0.0))  # 1 / tau = sigmoid(w)

    def materialize_states(self, inputs, states, step_mode):
        states = super().materialize_states(inputs, states, step_mode)
        a = states[1] if isinstance(states[1], torch.Tensor) else torch.zeros_like(states[0])
        return (states[0], a)

    def single_step_functional_forward(self, inputs, states, **kwargs):
        x, (v, a) = inputs[0], states
        h = v + (x - v) * torch.sigmoid(self.w)
        s = self.surrogate_function(h - self.v_threshold - a)
        return (s,), (h * (1.0 - s), 0.9 * a + 0.1 * s)


class SquashedIF(neuron.SimpleBaseNode):
    def neuronal_charge(self, x):
        self.v = self.v + torch.tanh(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and spikejit.cuda_available() else "cpu")
    sizes = [(8, 4096), (32, 1024)] if args.dry_run else \
        [(8, 4096), (32, 65536)] if device.type == "cpu" else [(8, 1048576), (32, 4194304)]
    bursts, calls = (3, 2) if args.dry_run else (9, 5)
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; ms per call, "
          f"median of {bursts} interleaved bursts of {calls} calls")
    header = ["neuron", "step mode", "mode", "T", "N", "SpikingJelly ms", "compiled ms", "speed-up"]
    print(markdown_table(header, []), flush=True)  # then each row as it is measured
    for cls in (AdaptiveLIF, SquashedIF):
        theirs = cls().to(device)
        ours = spikejit.CompiledSpikingJellyNeuron(theirs, strict=True)
        nodes = {"theirs": theirs, "ours": ours}
        for step_mode in ("m", "s"):  # a sequence a call, or one step a call (SpikingJelly's default)
            theirs.step_mode = ours.step_mode = step_mode
            for steps, neurons in sizes:
                for mode, step in infer_and_train(torch.rand(steps, neurons, device=device) * 2):
                    ms = interleaved_ms({name: functools.partial(step, node) for name, node in nodes.items()},
                                        device, bursts, calls)
                    row = [cls.__name__, step_mode, mode, steps, neurons, f"{ms['theirs']:.4f}", f"{ms['ours']:.4f}",
                           f"{ms['theirs'] / ms['ours']:.1f}x"]
                    print(markdown_table(header, [row]).splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
