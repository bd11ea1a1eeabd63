"""RAFNode, TernaryIFNode and TernaryLIFNode against SpikingJelly's (its torch implementation, a
per-step loop) over option grids, on the CPU and on CUDA: spikes exactly, v_seq, the final states
(RAF's u too) and the gradients of x and the initial states within rounding. Also: single and
multi step from the state a call left, reset, option checks, torch.compile without graph breaks,
checkpoints, pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (assert_run_matches_reference, check_behaves_like_reference,
                           check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_pickled_module_runs, run_from_states)

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

CLASSES = {"raf": "RAFNode", "ternary_if": "TernaryIFNode", "ternary_lif": "TernaryLIFNode"}


def grid():
    for v_reset, detach_reset in itertools.product([0.0, None, -0.1], [False, True]):
        yield "raf", dict(v_reset=v_reset, detach_reset=detach_reset)
        yield "ternary_if", dict(v_reset=v_reset, detach_reset=detach_reset)
        yield "ternary_lif", dict(v_reset=v_reset, detach_reset=detach_reset, decay_input=not detach_reset,
                                  tau=3.0 if v_reset is None else 2.0)
    yield "raf", dict(b=-0.5, omega=2.0, dt=0.5, v_threshold=0.8, v_reset=None, detach_reset=False,
                      surrogate=("ATan", {"alpha": 3.0}))
    yield "ternary_lif", dict(v_threshold=0.7, v_reset=0.3, detach_reset=False, surrogate=("ATan", {"alpha": 3.0}))


def case_id(case):
    kind, opts = case
    return kind + "-" + "-".join(f"{k}={v[0] if k == 'surrogate' else v}" for k, v in opts.items())


def make(module, surrogates, kind, opts, **kwargs):
    opts = dict(opts)
    surrogate = opts.pop("surrogate", None)
    extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
    return getattr(module, CLASSES[kind])(**opts, **extra, **kwargs)


def compare(kind, opts, device, dtype=torch.float32, shape=(14, 3, 37)):
    x = random_input(*shape, device=device, dtype=dtype, scale=1.0)
    names = ("v", "u") if kind == "raf" else ("v",)
    states = {name: random_input(*shape[1:], device=device, dtype=dtype, scale=0.3) for name in names}
    runs = [run_from_states(make(module, surrogates, kind, opts, step_mode="m", store_v_seq=True), x, states)
            for module, surrogates in ((spikejit, spikejit.surrogate), (sj_neuron, sj_surrogate))]
    assert_run_matches_reference(*runs)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(case, device):
    compare(*case, device)


@pytest.mark.parametrize("case", [list(grid())[i] for i in (0, 1, 5, 19)], ids=case_id)
def test_float64_matches_spikingjelly(case):
    compare(*case, torch.device("cpu"), dtype=torch.float64)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", list(CLASSES))
def test_long_sequences_of_many_neurons_match_spikingjelly(kind, device):
    compare(kind, dict(v_reset=0.0, detach_reset=False), device, shape=(64, 4, 1001))


@pytest.mark.parametrize("kind", list(CLASSES))
def test_the_module_behaves_like_spikingjellys(kind):
    """Default options: single step, then multi step from the state it left, v_seq, reset."""
    check_behaves_like_reference(make(spikejit, None, kind, {}), make(sj_neuron, None, kind, {}),
                                 states=("v", "u") if kind == "raf" else ("v",))


def test_options_are_checked():
    for name, value, condition in (("b", 0.1, "< 0"), ("omega", 0.0, "> 0"), ("dt", -1.0, "> 0")):
        with pytest.raises(ValueError, match=f"{name}: expected a float {condition}, got {value}"):
            spikejit.RAFNode(**{name: value})
    with pytest.raises(ValueError, match=r"v_reset: expected a float strictly between -v_threshold and v_threshold = "
                                         r"1.0, got 1.0"):
        spikejit.TernaryIFNode(v_reset=1.0)
    node = spikejit.TernaryLIFNode()
    with pytest.raises(ValueError, match="v_threshold: expected a float > 0, got -1.0"):
        node.v_threshold = -1.0
    assert node.v_threshold == 1.0  # a rejected value leaves the old one
    with pytest.raises(ValueError, match="tau: expected a float > 1"):
        spikejit.TernaryLIFNode(tau=0.5)


def test_options_can_change_between_calls():
    x = random_input(10, 2, 16, scale=1.0)
    node = spikejit.RAFNode(step_mode="m")
    node(x)
    node.reset()
    node.omega, node.b, node.v_reset = 0.5, -0.1, None
    assert torch.equal(node(x), spikejit.RAFNode(omega=0.5, b=-0.1, v_reset=None, step_mode="m")(x))


@pytest.mark.parametrize("kind", list(CLASSES))
def test_compiles_checkpoints_and_pickles(kind):
    x = random_input(8, 4, 16, scale=1.0)
    states = ("v", "u") if kind == "raf" else ("v",)
    check_compiles_like_eager(make(spikejit, None, kind, {}, step_mode="m"), x)
    check_checkpoints_give_per_step_gradients(
        lambda k: make(spikejit, None, kind, {}, step_mode="m", checkpoint_every=k), x, states=states)
    check_pickled_module_runs(make(spikejit, None, kind, {}, step_mode="m"), x, states=states)
