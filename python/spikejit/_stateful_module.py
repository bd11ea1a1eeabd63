"""The base of spikejit's neuron modules: state attributes assigned on every call, cheaply."""
import torch
from torch import Tensor, nn

_PLAIN_STATE_TYPES = (Tensor, float, list, type(None))


class StatefulModule(nn.Module):
    """An nn.Module whose attributes named in `_STATE_NAMES` (a neuron's state, set on every
    forward and reset) are stored without nn.Module.__setattr__'s checks once they exist.

    At small sizes the host is the limit of a step, and those checks (isinstance against
    Parameter goes through its metaclass) cost microseconds per assignment. Once a state is a
    plain attribute (in __dict__: no parameter, buffer or submodule of that name exists),
    nn.Module.__setattr__ would end in the same dict store for anything but a Parameter or a
    Module, so only those take the full path. The usual values are told by their exact type.
    A subclass that checks other assignments (options) overrides `_set_attribute`, so that a
    state's assignment stays one call.
    """

    _STATE_NAMES = frozenset()

    def __setattr__(self, name, value):
        if name in self._STATE_NAMES and name in self.__dict__ and (
                type(value) in _PLAIN_STATE_TYPES or not isinstance(value, (nn.Parameter, nn.Module))):
            self.__dict__[name] = value
            return
        self._set_attribute(name, value)

    def _set_attribute(self, name, value):
        """Every other assignment (a subclass checks its options here, then calls this)."""
        nn.Module.__setattr__(self, name, value)

    def __getstate__(self):
        """A copy (copy.deepcopy, pickle) takes the state as it is, detached: a state computed in
        a forward with autograd is not a leaf, and a copy cannot share its graph anyway."""
        return self._with_detached_state(super().__getstate__())

    def _with_detached_state(self, state: dict) -> dict:
        state = state.copy()
        for name in self._STATE_NAMES:
            if name in state:
                state[name] = _detached(state[name])
        return state


def appended_step(sequence, step: Tensor) -> Tensor:
    """A recorded sequence with one more step [1, *S] at its end, as single steps record v_seq;
    a step of another shape, device or dtype (or no sequence yet) starts it again."""
    if (isinstance(sequence, Tensor) and sequence.shape[1:] == step.shape[1:] and sequence.device == step.device
            and sequence.dtype == step.dtype):
        return torch.cat((sequence, step))
    return step


def _detached(value):
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value
