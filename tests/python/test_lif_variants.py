"""KLIFNode, CUBALIFNode and LIAFNode against SpikingJelly's (its torch implementation, a per-step
loop) over option grids, on the CPU and on CUDA: spikes exactly (LIAF's analog outputs within
rounding), v_seq, the final states and the gradients (of x, of the initial states, KLIF's k and
the weight of a LIAF act with parameters) within rounding. Also: single and multi step from the
state a call left, reset, option checks, torch.compile without graph breaks, checkpoints,
pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import (assert_close_to_reference, assert_run_matches_reference, backward_with_random_cotangents,
                           check_checkpoints_give_per_step_gradients, check_compiles_like_eager,
                           check_behaves_like_reference, check_pickled_module_runs, run_from_states)

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

FP32 = dict(rtol=1e-5, atol=1e-5)


def klif_grid():
    for scale_reset, v_reset, decay_input, detach_reset in itertools.product(
            [False, True], [0.0, None], [True, False], [False, True]):
        yield dict(scale_reset=scale_reset, v_reset=v_reset, decay_input=decay_input, detach_reset=detach_reset,
                   tau=3.0 if detach_reset else 2.0, k=1.3 if decay_input else 0.8)
    yield dict(scale_reset=True, v_reset=-0.2, decay_input=True, detach_reset=False, tau=2.5, k=1.1,
               v_threshold=0.7, surrogate=("ATan", {"alpha": 3.0}))


def cubalif_grid():
    for v_reset, detach_reset, decays in itertools.product([0.0, None, -0.1], [False, True],
                                                           [(0.5, 0.75), (0.2, 0.9)]):
        yield dict(v_reset=v_reset, detach_reset=detach_reset, c_decay=decays[0], v_decay=decays[1])
    yield dict(v_reset=0.0, detach_reset=False, c_decay=0.5, v_decay=0.75, v_threshold=1.0,
               surrogate=("Sigmoid", {"alpha": 3.0}))


def case_id(opts):
    return "-".join(f"{k}={v[0] if k == 'surrogate' else v}" for k, v in opts.items())


def make(module, surrogates, kind, opts):
    """The module `kind` of `module` (spikejit or SpikingJelly's) with `opts`, multi step, storing
    v_seq. SpikingJelly's CUBALIFNode takes only its dynamics' arguments: the rest are set after."""
    opts = dict(opts)
    surrogate = opts.pop("surrogate", None)
    extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
    k = opts.pop("k", None)
    if kind == "klif":
        node = module.KLIFNode(**opts, **extra, step_mode="m", store_v_seq=True)
        with torch.no_grad():
            node.k.fill_(k)
        return node
    detach_reset = opts.pop("detach_reset")
    node = module.CUBALIFNode(**opts, **extra)
    node.step_mode, node.store_v_seq, node.detach_reset = "m", True, detach_reset
    return node


def compare(kind, opts, device, dtype=torch.float32, shape=(14, 3, 37)):
    """Spikes, v_seq, the final states and the gradients (of x, the initial states and KLIF's k)
    of one multi-step call against SpikingJelly's."""
    x = random_input(*shape, device=device, dtype=dtype, scale=1.0)
    names = ("v", "c") if kind == "cubalif" else ("v",)
    states = {name: random_input(*shape[1:], device=device, dtype=dtype, scale=0.3) for name in names}
    params = ("k",) if kind == "klif" else ()
    ours = run_from_states(make(spikejit, spikejit.surrogate, kind, opts).to(device=device, dtype=dtype), x, states,
                           params)
    theirs = run_from_states(make(sj_neuron, sj_surrogate, kind, opts).to(device=device, dtype=dtype), x, states,
                             params)
    assert_run_matches_reference(ours, theirs)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(klif_grid()), ids=case_id)
def test_klif_option_grid_matches_spikingjelly(opts, device):
    compare("klif", opts, device)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(cubalif_grid()), ids=case_id)
def test_cubalif_option_grid_matches_spikingjelly(opts, device):
    compare("cubalif", opts, device)


@pytest.mark.parametrize("kind, opts", [("klif", list(klif_grid())[i]) for i in (0, 7, 16)]
                         + [("cubalif", list(cubalif_grid())[i]) for i in (0, 6)])
def test_float64_matches_spikingjelly(kind, opts):
    compare(kind, opts, torch.device("cpu"), dtype=torch.float64)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["klif", "cubalif"])
def test_long_sequences_of_many_neurons_match_spikingjelly(kind, device):
    opts = next(klif_grid()) if kind == "klif" else next(cubalif_grid())
    compare(kind, opts, device, shape=(64, 4, 1001))


@pytest.mark.parametrize("kind", ["klif", "cubalif"])
def test_the_module_behaves_like_spikingjellys(kind):
    """Default options: single step, then multi step from the state it left, v_seq, reset."""
    name = dict(klif="KLIFNode", cubalif="CUBALIFNode")[kind]
    check_behaves_like_reference(getattr(spikejit, name)(), getattr(sj_neuron, name)(),
                                 states=("v", "c") if kind == "cubalif" else ("v",))


def test_options_are_checked():
    assert spikejit.KLIFNode().k.requires_grad and float(spikejit.KLIFNode().k.detach()) == 1.0
    with pytest.raises(ValueError, match="tau: expected a float > 1, got 1.0"):
        spikejit.KLIFNode(tau=1.0)
    with pytest.raises(TypeError, match="scale_reset: expected a bool"):
        spikejit.KLIFNode(scale_reset=1)
    node = spikejit.KLIFNode(step_mode="m")
    node.k = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"k: expected a one-element tensor \(f = relu\(k h\)\), got shape \[3\]"):
        node(random_input(4, 3))
    cuba = spikejit.CUBALIFNode()
    assert type(cuba.surrogate_function).__name__ == "Rect" and cuba.v_threshold == 0.5
    with pytest.raises(TypeError, match="c_decay: expected a float, got str"):
        spikejit.CUBALIFNode(c_decay="0.5")
    with pytest.raises(TypeError, match="c: expected a tensor or a float"):
        cuba.c = "state"
        cuba(random_input(3))


def test_options_can_change_between_calls():
    """Reassigned options rebuild the program, as a new module with them would run."""
    x = random_input(10, 2, 16, scale=1.0)
    node = spikejit.KLIFNode(step_mode="m")
    node(x)
    node.reset()
    node.scale_reset, node.v_reset, node.tau = True, None, 3.0
    fresh = spikejit.KLIFNode(scale_reset=True, v_reset=None, tau=3.0, step_mode="m")
    assert torch.equal(node(x), fresh(x))
    cuba = spikejit.CUBALIFNode(step_mode="m")
    cuba(x)
    cuba.reset()
    cuba.c_decay, cuba.v_decay = 0.3, 0.6
    assert torch.equal(cuba(x), spikejit.CUBALIFNode(c_decay=0.3, v_decay=0.6, step_mode="m")(x))


def test_compiles_without_graph_breaks():
    check_compiles_like_eager(spikejit.KLIFNode(step_mode="m"), random_input(8, 4, 16, scale=1.0))
    check_compiles_like_eager(spikejit.CUBALIFNode(step_mode="m"), random_input(8, 4, 16, scale=1.0))


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_checkpoints_give_the_per_step_gradients(device):
    x = random_input(13, 2, 50, device=device, scale=1.0)
    check_checkpoints_give_per_step_gradients(
        lambda k: spikejit.KLIFNode(scale_reset=True, step_mode="m", checkpoint_every=k).to(device), x)
    check_checkpoints_give_per_step_gradients(
        lambda k: spikejit.CUBALIFNode(step_mode="m", checkpoint_every=k), x, states=("v", "c"))


def test_a_pickled_module_runs_where_it_is_loaded():
    x = random_input(6, 3, 8, scale=1.0)
    check_pickled_module_runs(spikejit.KLIFNode(surrogate_function=spikejit.surrogate.ATan(), step_mode="m"), x)
    check_pickled_module_runs(spikejit.CUBALIFNode(step_mode="m"), x, states=("v", "c"))


# -- LIAFNode: LIF with an analog output act(h), its step traced like a FlexSN core -----------------

LIAF_ACTS = {"relu": torch.nn.ReLU, "tanh": lambda: torch.tanh, "sigmoid": torch.nn.Sigmoid, "prelu": torch.nn.PReLU}


def liaf_grid():
    for act, threshold_related, v_reset in itertools.product(["relu", "tanh", "prelu"], [False, True], [0.0, None]):
        yield dict(act=act, threshold_related=threshold_related, v_reset=v_reset, decay_input=v_reset is None,
                   detach_reset=threshold_related, tau=2.0 if act == "relu" else 3.0)
    yield dict(act="sigmoid", threshold_related=True, v_reset=-0.1, decay_input=True, detach_reset=False, tau=2.0,
               surrogate=("ATan", {"alpha": 3.0}))


def compare_liaf(opts, device, dtype=torch.float32, shape=(14, 3, 37)):
    """Outputs, v_seq, v and the gradients (of x, the initial v and a PReLU's weight) against
    SpikingJelly's LIAFNode with the same act (one module, its gradient taken twice)."""
    opts = dict(opts)
    act = LIAF_ACTS[opts.pop("act")]()
    if isinstance(act, torch.nn.Module):
        act = act.to(device=device, dtype=dtype)
    surrogate = opts.pop("surrogate", None)
    x = random_input(*shape, device=device, dtype=dtype, scale=1.0)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.3)
    results = []
    for module, surrogates in ((spikejit, spikejit.surrogate), (sj_neuron, sj_surrogate)):
        extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
        node = module.LIAFNode(act, opts["threshold_related"], step_mode="m", store_v_seq=True, tau=opts["tau"],
                               decay_input=opts["decay_input"], v_reset=opts["v_reset"],
                               detach_reset=opts["detach_reset"], **extra)
        xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
        node.v = vr
        y = node(xr)
        outputs = [y, node.v_seq, node.v]
        backward_with_random_cotangents(outputs, seed=5)
        grads = [xr.grad, vr.grad]
        if isinstance(act, torch.nn.PReLU):
            grads.append(act.weight.grad.clone())
            act.weight.grad = None
        results.append(([t.detach() for t in outputs], grads))
    (values, grads), (values_ref, grads_ref) = results
    assert float(values_ref[0].abs().sum()) > 0
    for i, (a, b) in enumerate(zip(values + grads, values_ref + grads_ref)):  # then PReLU's weight's gradient
        assert_close_to_reference(a, b, terms=x.numel() // b.numel() if i >= len(values) + 2 else 1)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("opts", list(liaf_grid()), ids=case_id)
def test_liaf_option_grid_matches_spikingjelly(opts, device):
    compare_liaf(opts, device)


@pytest.mark.parametrize("opts", [list(liaf_grid())[i] for i in (0, 7, 12)], ids=case_id)
def test_liaf_float64_matches_spikingjelly(opts):
    compare_liaf(opts, torch.device("cpu"), dtype=torch.float64)


def test_liaf_behaves_like_spikingjellys():
    """Single step from v_reset = -0.1 (a state the traced program does not start from), then
    multi step from the state it left, v_seq, reset; the act module is a child, the traced
    step is not in the state dict."""
    act = torch.nn.PReLU()
    ours = spikejit.LIAFNode(act, True, v_reset=-0.1)
    theirs = sj_neuron.LIAFNode(act, True, v_reset=-0.1)
    x = random_input(6, 2, 9, scale=1.0)
    for t in range(3):
        torch.testing.assert_close(ours(x[t]), theirs(x[t]), **FP32)
        torch.testing.assert_close(ours.v, theirs.v, **FP32)
    ours.step_mode = theirs.step_mode = "m"
    ours.store_v_seq = theirs.store_v_seq = True
    torch.testing.assert_close(ours(x[3:]), theirs(x[3:]), **FP32)
    torch.testing.assert_close(ours.v_seq, theirs.v_seq, **FP32)
    ours.reset()
    assert ours.v == -0.1 and ours.v_seq is None
    assert list(ours.state_dict()) == ["act.weight"]


def test_liaf_options_are_checked_and_rebuild_the_step():
    with pytest.raises(TypeError, match="act: expected a callable"):
        spikejit.LIAFNode(1.0, False)
    with pytest.raises(TypeError, match="threshold_related: expected a bool"):
        spikejit.LIAFNode(torch.tanh, 1)
    with pytest.raises(spikejit.UnsupportedCoreError, match="i0") as error:
        spikejit.LIAFNode(torch.special.i0, False)
    assert "i0" in error.value.op
    x = random_input(8, 2, 16, scale=1.0)
    node = spikejit.LIAFNode(torch.nn.ReLU(), False, step_mode="m")
    node(x)
    node.reset()
    node.act, node.threshold_related, node.tau = torch.tanh, True, 3.0
    torch.testing.assert_close(node(x), spikejit.LIAFNode(torch.tanh, True, tau=3.0, step_mode="m")(x), rtol=0, atol=0)
    with pytest.raises(TypeError, match="act: expected a callable"):
        node.act = None
    assert node.act is torch.tanh  # a rejected value leaves the old one


def test_liaf_compiles_checkpoints_and_pickles():
    x = random_input(8, 4, 16, scale=1.0)
    check_compiles_like_eager(spikejit.LIAFNode(torch.nn.PReLU(), True, step_mode="m"), x)
    check_checkpoints_give_per_step_gradients(
        lambda k: spikejit.LIAFNode(torch.nn.ReLU(), False, step_mode="m", checkpoint_every=k), x)
    check_pickled_module_runs(spikejit.LIAFNode(torch.nn.ReLU(), False, step_mode="m"), x)


def test_liaf_multi_step_outputs_act_as_spikingjellys_single_step():
    """Multi step without store_v_seq too gives act(h): SpikingJelly's single step (its own
    multi step there returns LIFNode's spikes instead)."""
    act = torch.nn.ReLU()
    x = random_input(16, 3, 40, scale=0.8)
    ours = spikejit.LIAFNode(act, False, step_mode="m")(x)
    theirs = sj_neuron.LIAFNode(act, False)
    torch.testing.assert_close(ours, torch.stack([theirs(step) for step in x]), **FP32)
    assert not torch.equal(ours, ours.round()), "the outputs should be analog"
