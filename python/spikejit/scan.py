"""Scans of a one-step core over time: the reference semantics of FlexSN, on any device.

A core maps one step `(*inputs_t, *states) -> (*outputs_t, *next_states)` (a single tensor when
it returns one value). Inputs are sequences [T, ...]; states are the initial states.

    eager_scan(core, inputs, states)             -> (outputs [T, ...], state_seqs [T, ...])
    eager_scan_final_state(core, inputs, states) -> (outputs [T, ...], final_states)
    lowerable_scan / lowerable_scan_final_state  the same on torch's higher-order `scan` operator
                                                 (one graph node under torch.compile) when
                                                 lowerable_scan_available()

With T = 0 the core is never called: `num_outputs` must then be given, outputs are empty
[0, *inputs[0].shape[1:]], state sequences are empty and final states are copies of the
initial ones.
"""
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["eager_scan", "eager_scan_final_state", "lowerable_scan", "lowerable_scan_final_state",
           "lowerable_scan_available"]


def _as_tuple(results) -> tuple:
    return tuple(results) if isinstance(results, (tuple, list)) else (results,)


def _check(inputs: Sequence[Tensor], states: Sequence[Tensor]) -> int:
    if len(inputs) == 0:
        raise ValueError("inputs: expected at least one sequence [T, ...]")
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise ValueError(f"inputs[{i}]: expected a tensor [T, ...]")
        if x.shape[0] != inputs[0].shape[0]:
            raise ValueError(f"inputs[{i}]: expected T = {inputs[0].shape[0]} (that of inputs[0]), got {x.shape[0]}")
    for i, s in enumerate(states):
        if not isinstance(s, Tensor):
            raise TypeError(f"states[{i}]: expected a tensor, got {type(s).__name__}")
    return inputs[0].shape[0]


def _empty_outputs(inputs, num_outputs: Optional[int]) -> List[Tensor]:
    if num_outputs is None:
        raise ValueError("num_outputs: required when T = 0 (the core is not called)")
    return [inputs[0].new_empty((0, *inputs[0].shape[1:])) for _ in range(num_outputs)]


def core_results(results, num_outputs: Optional[int], num_states: int) -> Tuple[List[Tensor], List[Tensor]]:
    """(outputs, next states) of one call of a core, checked: as many tensors as expected
    (num_outputs None: whatever precedes the states)."""
    results = _as_tuple(results)
    expected = len(results) - num_states if num_outputs is None else num_outputs
    if expected < 0 or len(results) != expected + num_states:
        raise ValueError(f"core: expected {max(expected, 0)} outputs and {num_states} next states "
                         f"({max(expected, 0) + num_states} values), got {len(results)}")
    for i, r in enumerate(results):
        if not isinstance(r, Tensor):
            raise TypeError(f"core: expected tensors (outputs, then next states), got {type(r).__name__} "
                            f"as value {i}")
    return list(results[:expected]), list(results[expected:])


def _step(core, x_t, states, num_outputs):
    return core_results(core(*x_t, *states), num_outputs, len(states))


def _eager(core, inputs, states, num_outputs, keep_sequences):
    steps = _check(inputs, states)
    if steps == 0:
        outputs = _empty_outputs(inputs, num_outputs)
        if keep_sequences:
            return outputs, [s.new_empty((0, *s.shape)) for s in states]
        return outputs, [s.clone() for s in states]
    per_step_outputs, per_step_states = [], []
    states = list(states)
    for t in range(steps):
        outputs, states = _step(core, [x[t] for x in inputs], states, num_outputs)
        per_step_outputs.append(outputs)
        if keep_sequences:
            per_step_states.append(states)
    outputs = [torch.stack(seq) for seq in zip(*per_step_outputs)]
    if keep_sequences:
        return outputs, [torch.stack(seq) for seq in zip(*per_step_states)]
    return outputs, states


def eager_scan(core: Callable, inputs: Sequence[Tensor], states: Sequence[Tensor],
               num_outputs: Optional[int] = None) -> Tuple[List[Tensor], List[Tensor]]:
    """A Python loop over time: (output sequences, state sequences)."""
    return _eager(core, inputs, states, num_outputs, True)


def eager_scan_final_state(core: Callable, inputs: Sequence[Tensor], states: Sequence[Tensor],
                           num_outputs: Optional[int] = None) -> Tuple[List[Tensor], List[Tensor]]:
    """A Python loop over time: (output sequences, final states)."""
    return _eager(core, inputs, states, num_outputs, False)


def _scan_function():
    try:
        from torch._higher_order_ops.scan import scan
    except ImportError:
        return None
    return scan


def lowerable_scan_available() -> bool:
    """True when the installed torch has the higher-order scan operator."""
    return _scan_function() is not None


def _lowerable(core, inputs, states, num_outputs, keep_sequences):
    scan = _scan_function()
    if scan is None:
        raise RuntimeError("lowerable_scan: this torch has no torch._higher_order_ops.scan; use eager_scan")
    steps = _check(inputs, states)
    if steps == 0:
        return _eager(core, inputs, states, num_outputs, keep_sequences)
    num_states = len(states)
    if num_outputs is None:
        num_outputs = len(_as_tuple(core(*[x[0] for x in inputs], *states))) - num_states

    def combine(carry, x_t):
        outputs, next_states = _step(core, x_t, carry, num_outputs)
        per_step = [o.clone() for o in outputs]
        if keep_sequences:
            per_step += [s.clone() for s in next_states]
        return [s.clone() for s in next_states], per_step

    states = list(states)
    if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
        # torch's scan drops the gradient carried between steps when the initial carry does not
        # require one; asking for it (and discarding it) keeps the inputs' gradients right.
        states = [s if s.requires_grad else s.detach().requires_grad_() for s in states]
    final, stacked = scan(combine, states, list(inputs))
    outputs = list(stacked[:num_outputs])
    return outputs, (list(stacked[num_outputs:]) if keep_sequences else list(final))


def lowerable_scan(core: Callable, inputs: Sequence[Tensor], states: Sequence[Tensor],
                   num_outputs: Optional[int] = None) -> Tuple[List[Tensor], List[Tensor]]:
    """torch's scan operator: (output sequences, state sequences)."""
    return _lowerable(core, inputs, states, num_outputs, True)


def lowerable_scan_final_state(core: Callable, inputs: Sequence[Tensor], states: Sequence[Tensor],
                               num_outputs: Optional[int] = None) -> Tuple[List[Tensor], List[Tensor]]:
    """torch's scan operator: (output sequences, final states)."""
    return _lowerable(core, inputs, states, num_outputs, False)
