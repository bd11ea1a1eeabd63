"""The spiking network of the digits demo, in two implementations with the same parameters:

- `DigitsSNN("spikejit")`: Linear -> spikejit.LIFNode (built-in) -> Linear -> a FlexSN neuron
  defined below in Python -> Linear readout; each neuron layer runs all T steps in one fused call.
- `DigitsSNN("loop")`: the same layers with the neurons written as plain PyTorch, a Python loop
  over the time steps (what one writes without spikejit), for the speed comparison.

Both take inputs [T, B, 64] and return logits [B, 10] (the readout averaged over time); their
state_dicts are interchangeable, so the loop model can be loaded with the spikejit model's weights.
"""
import math

import torch
from torch import nn

import spikejit

TAU = 2.0          # LIF time constant of the first spiking layer
V_THRESHOLD = 1.0
ATAN_ALPHA = 2.0   # SpikingJelly's ATan surrogate default


class ATanSpike(torch.autograd.Function):
    """Plain PyTorch spike: Heaviside forward, SpikingJelly's ATan surrogate gradient backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (ATAN_ALPHA / 2) / (1 + (math.pi / 2 * ATAN_ALPHA * x) ** 2)


class AdaptiveLIFCore(nn.Module):
    """One step of an adaptive LIF neuron with a learnable time constant per neuron:

        h = v + (x - v) * sigmoid(w)          # 1/tau = sigmoid(w), tau starts at 2
        s = spike(h - (V_THRESHOLD + a))      # the threshold rises by `a` after spikes
        v = h * (1 - s)                       # hard reset to 0
        a = 0.9 * a + 0.2 * s

    `spike` is spikejit's ATan surrogate for FlexSN (it traces to the IR's spike op) or the plain
    PyTorch ATanSpike for the loop model.
    """

    def __init__(self, size: int, spike):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(size))
        self.spike = spike

    def forward(self, x, v, a):
        h = v + (x - v) * torch.sigmoid(self.w)
        s = self.spike(h - (V_THRESHOLD + a))
        return s, h * (1.0 - s), 0.9 * a + 0.2 * s


class LoopLIF(nn.Module):
    """SpikingJelly's LIFNode (decay_input, hard reset to 0) as a Python loop over time."""

    def __init__(self):
        super().__init__()
        self.v_seq = None

    def forward(self, x_seq):
        v = torch.zeros_like(x_seq[0])
        spikes, potentials = [], []
        for x in x_seq:
            h = v + (x - v) / TAU
            s = ATanSpike.apply(h - V_THRESHOLD)
            v = h * (1.0 - s)
            spikes.append(s)
            potentials.append(v)
        self.v_seq = torch.stack(potentials)
        return torch.stack(spikes)


class LoopNeuron(nn.Module):
    """Runs a one-step core (x, *states) -> (s, *states) in a Python loop over time, states from 0."""

    def __init__(self, core: nn.Module, num_states: int):
        super().__init__()
        self.core = core
        self.num_states = num_states
        self.state_seqs = None

    def forward(self, x_seq):
        states = [torch.zeros_like(x_seq[0]) for _ in range(self.num_states)]
        spikes, history = [], []
        for x in x_seq:
            s, *states = self.core(x, *states)
            spikes.append(s)
            history.append(states)
        self.state_seqs = [torch.stack([h[j] for h in history]) for j in range(self.num_states)]
        return torch.stack(spikes)


class DigitsSNN(nn.Module):
    """64 pixels -> hidden LIF layer -> hidden adaptive-LIF layer -> 10 classes."""

    def __init__(self, impl: str = "spikejit", hidden: int = 128, record: bool = False):
        super().__init__()
        if impl not in ("spikejit", "loop"):
            raise ValueError(f"impl: expected 'spikejit' or 'loop', got {impl!r}")
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)
        if impl == "spikejit":
            self.lif = spikejit.LIFNode(tau=TAU, v_threshold=V_THRESHOLD,
                                        surrogate_function=spikejit.surrogate.ATan(alpha=ATAN_ALPHA),
                                        step_mode="m", store_v_seq=record)
            core = AdaptiveLIFCore(hidden, spikejit.surrogate.ATan(alpha=ATAN_ALPHA))
            # strict: the demo must run the compiled kernels, never an eager fallback.
            self.alif = spikejit.FlexSN(core, num_inputs=1, num_states=2, num_outputs=1,
                                        step_mode="m", store_state_seqs=record, strict=True)
        else:
            self.lif = LoopLIF()
            self.alif = LoopNeuron(AdaptiveLIFCore(hidden, ATanSpike.apply), num_states=2)

    def reset(self):
        """Forgets the neurons' states between batches (the loop model keeps none)."""
        for node in (self.lif, self.alif):
            if hasattr(node, "reset"):
                node.reset()

    def forward(self, x_seq):
        self.reset()
        self.spikes1 = self.lif(self.fc1(x_seq))        # [T, B, hidden]
        self.spikes2 = self.alif(self.fc2(self.spikes1))
        return self.fc3(self.spikes2).mean(0)           # [B, 10]

    def membrane(self):
        """The first layer's potentials [T, B, hidden] of the last call (needs record=True)."""
        return self.lif.v_seq
