"""SLTTLIFNode and OTTTLIFNode against SpikingJelly's over T single steps in training, on the CPU
and on CUDA: spikes and OTTT's traces exactly, v and the input gradients (each step's gradient
within its step) within rounding. Also: eval mode returns the spikes alone and leaves the trace,
multi step is refused, reset, torch.compile without graph breaks, pickling."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input
from module_checks import assert_close_to_reference, check_compiles_like_eager, check_pickled_module_runs

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate


def grid():
    for name, (v_reset, detach_reset) in itertools.product(["SLTTLIFNode", "OTTTLIFNode"],
                                                           [(0.0, True), (None, True), (-0.1, False)]):
        yield name, dict(v_reset=v_reset, detach_reset=detach_reset, decay_input=v_reset is not None,
                         tau=2.0 if detach_reset else 3.0)
    yield "OTTTLIFNode", dict(v_threshold=0.8, surrogate=("ATan", {"alpha": 3.0}))


def case_id(case):
    name, opts = case
    return name + "-" + "-".join(f"{k}={v[0] if k == 'surrogate' else v}" for k, v in opts.items())


def run(module, surrogates, name, opts, x):
    """Spikes (and traces) of T single steps, the last v, and x's gradient of one loss over them."""
    opts = dict(opts)
    surrogate = opts.pop("surrogate", None)
    extra = {} if surrogate is None else dict(surrogate_function=getattr(surrogates, surrogate[0])(**surrogate[1]))
    node = getattr(module, name)(**opts, **extra).to(x.device)
    xr = x.clone().requires_grad_()
    outputs, loss = [], 0
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(x)
    for t in range(x.shape[0]):
        out = node(xr[t])
        spike = out[0] if isinstance(out, list) else out
        outputs += [o.detach() for o in out] if isinstance(out, list) else [out.detach()]
        loss = loss + (spike * cotangent[t]).sum()
    loss.backward()
    return outputs, node.v.detach(), xr.grad


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_training_steps_match_spikingjelly(case, device, dtype=torch.float32):
    x = random_input(10, 3, 37, device=device, dtype=dtype, scale=1.0)
    (outputs, v, grad), (outputs_ref, v_ref, grad_ref) = (run(spikejit, spikejit.surrogate, *case, x),
                                                          run(sj_neuron, sj_surrogate, *case, x))
    for t, (a, b) in enumerate(zip(outputs, outputs_ref)):
        assert torch.equal(a, b), f"output {t} differs"
    assert 0 < float(torch.stack(outputs_ref[::2 if case[0] == "OTTTLIFNode" else 1]).mean()) < 1
    assert_close_to_reference(v, v_ref)
    assert_close_to_reference(grad, grad_ref)


@pytest.mark.parametrize("case", [list(grid())[i] for i in (0, 4)], ids=case_id)
def test_float64_matches_spikingjelly(case):
    test_training_steps_match_spikingjelly(case, torch.device("cpu"), torch.float64)


def test_each_step_gradient_stays_within_its_step():
    """The gradient of x[t] is that of one step from the (detached) potential the steps before left."""
    x = random_input(5, 40, scale=1.0)
    node, single = spikejit.SLTTLIFNode(), spikejit.LIFNode()
    xr = x.clone().requires_grad_()
    for t in range(5):
        v_before = node.v.detach().clone() if isinstance(node.v, torch.Tensor) else node.v
        node(xr[t]).sum().backward()
        xt = x[t].clone().requires_grad_()
        single.v = v_before
        single(xt).sum().backward()
        torch.testing.assert_close(xr.grad[t], xt.grad, rtol=0, atol=0)


def test_eval_mode_multi_step_and_reset():
    node = spikejit.OTTTLIFNode()
    x = random_input(4, 2, 9, scale=1.0)
    spike, trace = node(x[0])
    node.eval()
    assert isinstance(node(x[1]), torch.Tensor) and node.trace is trace  # eval: no trace update
    with pytest.raises(ValueError, match="step_mode: OTTTLIFNode trains online, one step at a time, so expected 's'"):
        spikejit.OTTTLIFNode(step_mode="m")
    node.step_mode = "m"
    with pytest.raises(ValueError, match="step_mode: OTTTLIFNode trains online"):
        node(x)
    node.reset()
    assert node.trace is None and node.v == 0.0
    assert (spikejit.OTTTLIFNode().decay_input, spikejit.OTTTLIFNode().v_reset) == (False, None)
    assert spikejit.SLTTLIFNode().detach_reset is True


def test_compiles_and_pickles():
    x = random_input(4, 16, scale=1.0)
    check_compiles_like_eager(spikejit.SLTTLIFNode(), x)
    check_pickled_module_runs(spikejit.SLTTLIFNode(), x)
