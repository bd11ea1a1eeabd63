"""SLTTLIFNode and OTTTLIFNode: SpikingJelly's LIF neurons for online training through time (SLTT,
ICCV 2023; OTTT, NeurIPS 2022), with its constructor arguments and behaviour, on LIFNode's kernels.

    node = spikejit.SLTTLIFNode()                 # single step only
    for t in range(T):
        loss = criterion(head(node(x[t])), y)     # one step's graph: memory does not grow with T
        loss.backward()

Both run one step at a time. In training the potential carried from the last step is detached,
so a step's gradient stays within the step (and its graph can be freed at once). OTTTLIFNode also
keeps a presynaptic trace, trace <- trace (1 - 1/tau) + spike (without a gradient), and in
training returns [spike, trace]. Their defaults are SpikingJelly's (detach_reset=True; OTTT:
decay_input=False, v_reset=None). In eval mode SpikingJelly fires through heaviside; the spikes
here are the same, and their surrogate gradient is there should one be asked for.
"""
from typing import Optional, Union

import torch
from torch import Tensor

from .neuron import LIFNode

__all__ = ["SLTTLIFNode", "OTTTLIFNode"]


class SLTTLIFNode(LIFNode):
    """LIF for online training: single step, the carried potential detached in training."""

    def __init__(self, tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: Optional[float] = 0.0, surrogate_function=None, detach_reset: bool = True,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        if step_mode != "s":
            raise ValueError(f"step_mode: {type(self).__name__} trains online, one step at a time, so expected 's', "
                             f"got {step_mode!r}")
        super().__init__(tau, decay_input, v_threshold, v_reset, surrogate_function, detach_reset,
                         step_mode=step_mode, backend=backend, store_v_seq=store_v_seq,
                         checkpoint_every=checkpoint_every)

    def _initial_states(self, x_seq: Tensor) -> list:
        states = super()._initial_states(x_seq)
        return [s.detach() if self.training and s is not None else s for s in states]

    def multi_step_forward(self, x_seq: Tensor) -> Tensor:
        raise ValueError(f"step_mode: {type(self).__name__} trains online, one step at a time, so expected 's', "
                         f"got {self.step_mode!r}")


class OTTTLIFNode(SLTTLIFNode):
    """SLTT's LIF with a presynaptic trace, returned with the spikes in training."""

    _STATE_NAMES = SLTTLIFNode._STATE_NAMES | {"trace"}

    def __init__(self, tau: float = 2.0, decay_input: bool = False, v_threshold: float = 1.0,
                 v_reset: Optional[float] = None, surrogate_function=None, detach_reset: bool = True,
                 step_mode: str = "s", store_v_seq: bool = False, backend: str = "spikejit",
                 checkpoint_every: Union[int, str] = "auto"):
        super().__init__(tau, decay_input, v_threshold, v_reset, surrogate_function, detach_reset,
                         step_mode=step_mode, store_v_seq=store_v_seq, backend=backend,
                         checkpoint_every=checkpoint_every)
        self.trace = None

    def reset(self) -> None:
        super().reset()
        self.trace = None

    def single_step_forward(self, x: Tensor):
        spike = super().single_step_forward(x)
        if not self.training:
            return spike
        trace = self.trace if isinstance(self.trace, Tensor) and self.trace.shape == spike.shape else None
        with torch.no_grad():
            self.trace = (torch.zeros_like(spike) if trace is None else trace) * (1.0 - 1.0 / self.tau) + spike
        return [spike, self.trace]
