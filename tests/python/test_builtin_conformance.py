"""IF / LIF / PLIF against SpikingJelly's torch reference (per-step autograd through SpikingJelly's
surrogates) over the option grid of the reference's conformance suite: spikes exactly equal,
potentials and gradients within fp32 rounding; fp16/bf16 within stated bounds."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input

# SpikingJelly is a pinned test requirement: imported, not skipped.
from spikingjelly._ops.if_ import reference as sj_if
from spikingjelly._ops.lif import reference as sj_lif
from spikingjelly._ops.plif import reference as sj_plif
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate

RESETS = [0.0, -0.2, None]
THRESHOLDS = [1.0, 0.5]
SURROGATES = [("Sigmoid", {}), ("ATan", {}), ("Sigmoid", {"alpha": 2.5}), ("PiecewiseQuadratic", {}),
              ("Erf", {}), ("SoftSign", {}), ("SuperSpike", {}), ("PiecewiseExp", {}),
              ("PiecewiseLeakyReLU", {"w": 0.7, "c": 0.02}), ("Rect", {}), ("QPseudoSpike", {}),
              ("S2NN", {}), ("NonzeroSignLogAbs", {}), ("LeakyKReLU", {"leak": 0.1, "k": 0.9}),
              ("LogTailedReLU", {"alpha": 0.1}), ("SquarewaveFourierSeries", {"n": 4, "T_period": 6.0}),
              ("FakeNumericalGradient", {})]

FP32 = dict(rtol=1e-5, atol=1e-5)


def sj_surrogate_of(name, kwargs):
    return getattr(sj_surrogate, name)(**kwargs)


def reference(kind, x, v0, w, opts, surrogate):
    """(spikes, v_seq) of SpikingJelly's per-step torch implementation."""
    if kind == "if":
        s, _, v_seq = sj_if.multi_step(x, v0, opts["v_threshold"], opts["v_reset"], surrogate,
                                       opts["detach_reset"], True)
    elif kind == "lif":
        s, _, v_seq = sj_lif.multi_step(x, v0, opts["tau"], opts["decay_input"], opts["v_threshold"],
                                        opts["v_reset"], surrogate, opts["detach_reset"], True)
    else:
        s, _, v_seq = sj_plif.multi_step(x, v0, w, opts["decay_input"], opts["v_threshold"], opts["v_reset"],
                                         surrogate, opts["detach_reset"], True)
    return s, v_seq


def ours(kind, x, v0, w, opts, surrogate):
    if kind == "if":
        s, v_last, v_seq = spikejit.if_multi_step(x, v0, opts["v_threshold"], opts["v_reset"], surrogate,
                                                  opts["detach_reset"], True)
    elif kind == "lif":
        s, v_last, v_seq = spikejit.lif_multi_step(x, v0, opts["tau"], opts["decay_input"], opts["v_threshold"],
                                                   opts["v_reset"], surrogate, opts["detach_reset"], True)
    else:
        s, v_last, v_seq = spikejit.plif_multi_step(x, v0, w, opts["decay_input"], opts["v_threshold"],
                                                    opts["v_reset"], surrogate, opts["detach_reset"], True)
    return s, v_seq


def grid():
    for v_reset, v_threshold, detach in itertools.product(RESETS, THRESHOLDS, [False, True]):
        base = dict(v_reset=v_reset, v_threshold=v_threshold, detach_reset=detach)
        yield "if", base
        for decay in (True, False):
            for tau in (2.0, 5.0, 10.0):
                yield "lif", dict(base, decay_input=decay, tau=tau)
            yield "plif", dict(base, decay_input=decay)


def case_id(case):
    kind, opts = case
    return kind + "-" + "-".join(f"{k}={v}" for k, v in opts.items())


def compare(kind, opts, surrogate_name, surrogate_kwargs, device, shape=(12, 3, 37), dtype=torch.float32,
            tolerance=FP32):
    x = random_input(*shape, device=device, dtype=dtype)
    v0 = random_input(*shape[1:], device=device, dtype=dtype, scale=0.5)
    w = torch.tensor(-0.4 + 0.8 * torch.rand(()).item(), device=device)
    g_s, g_v = torch.randn_like(x), torch.randn_like(x)

    results = []
    for run, surrogate in ((reference, sj_surrogate_of(surrogate_name, surrogate_kwargs)),
                           (ours, getattr(spikejit.surrogate, surrogate_name)(**surrogate_kwargs))):
        xr, vr, wr = x.clone().requires_grad_(), v0.clone().requires_grad_(), w.clone().requires_grad_()
        s, v_seq = run(kind, xr, vr, wr, opts, surrogate)
        ((s * g_s).sum() + (v_seq * g_v).sum()).backward()
        results.append((s.detach(), v_seq.detach(), xr.grad, vr.grad, wr.grad))

    (s_ref, v_ref, gx_ref, gv_ref, gw_ref), (s, v, gx, gv, gw) = results
    assert torch.equal(s, s_ref), "spikes differ"
    torch.testing.assert_close(v, v_ref, **tolerance)
    torch.testing.assert_close(gx, gx_ref, **tolerance)
    torch.testing.assert_close(gv, gv_ref, **tolerance)
    if kind == "plif":
        torch.testing.assert_close(gw, gw_ref, rtol=tolerance["rtol"] * 10, atol=tolerance["atol"] * 10)


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
def test_option_grid_matches_spikingjelly(case, device):
    kind, opts = case
    compare(kind, opts, "Sigmoid", {}, device)


@pytest.mark.parametrize("surrogate", SURROGATES, ids=lambda s: s[0] + str(s[1] or ""))
@pytest.mark.parametrize("kind", ["if", "lif", "plif"])
def test_surrogates_match_spikingjelly(kind, surrogate):
    opts = dict(v_threshold=0.5, v_reset=None, detach_reset=False, decay_input=True, tau=2.0)
    compare(kind, opts, surrogate[0], surrogate[1], "cpu")


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["if", "lif", "plif"])
def test_cuda_and_cpu_match_spikingjelly(kind, device):
    opts = dict(v_threshold=1.0, v_reset=-0.2, detach_reset=True, decay_input=False, tau=5.0)
    compare(kind, opts, "ATan", {}, device, shape=(33, 5, 301))


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, dict(rtol=1e-2, atol=1e-2)),
                                              (torch.bfloat16, dict(rtol=5e-2, atol=5e-2))])
def test_half_precision_storage_matches_fp32_reference(dtype, tolerance, device):
    """fp16/bf16 storage, fp32 arithmetic: equal to the fp32 reference run on the rounded inputs,
    up to the rounding of the stored results (a spike may flip only where h is within that
    rounding of the threshold, so we compare spike rates and potentials loosely)."""
    x = random_input(8, 64, dtype=dtype, device=device)
    v0 = random_input(64, dtype=dtype, scale=0.5, device=device)
    s, v_last, v_seq = spikejit.lif_multi_step(x, v0, 2.0, True, 1.0, 0.0, None, False, True)
    assert s.dtype == dtype and v_seq.dtype == dtype
    s_ref, _, v_ref = sj_lif.multi_step(x.float(), v0.float(), 2.0, True, 1.0, 0.0, sj_surrogate.Sigmoid(),
                                        False, True)
    assert (s.float() != s_ref).float().mean() < 0.02
    torch.testing.assert_close(v_seq.float()[s.float() == s_ref], v_ref[s.float() == s_ref], **tolerance)


# ---- modules ---------------------------------------------------------------------------------

def module_pair(kind, opts, step_mode):
    common = dict(v_threshold=opts["v_threshold"], v_reset=opts["v_reset"], detach_reset=opts["detach_reset"],
                  step_mode=step_mode, store_v_seq=True)
    if kind == "if":
        return sj_neuron.IFNode(**common), spikejit.IFNode(**common)
    if kind == "lif":
        extra = dict(tau=opts["tau"], decay_input=opts["decay_input"])
        return sj_neuron.LIFNode(**extra, **common), spikejit.LIFNode(**extra, **common)
    extra = dict(init_tau=opts.get("init_tau", 2.0), decay_input=opts["decay_input"])
    return sj_neuron.ParametricLIFNode(**extra, **common), spikejit.ParametricLIFNode(**extra, **common)


@pytest.mark.parametrize("step_mode", ["m", "s"])
@pytest.mark.parametrize("case", [c for i, c in enumerate(grid()) if i % 5 == 0], ids=case_id)
def test_modules_match_spikingjelly_modules(case, step_mode):
    """Two consecutive calls (the state carries over), v, v_seq, then reset(); training gradients."""
    kind, opts = case
    if kind == "plif":
        opts = dict(opts, init_tau=3.0)
    reference_node, node = module_pair(kind, opts, step_mode)
    x1, x2 = random_input(6, 4, 10), random_input(5, 4, 10)

    def run(n, x1, x2):
        if step_mode == "m":
            out = [n(x1), n(x2)]
        else:
            out = [torch.stack([n(x) for x in x1]), torch.stack([n(x) for x in x2])]
        return out, n.v, n.v_seq

    inputs = [(x1.clone().requires_grad_(), x2.clone().requires_grad_()) for _ in range(2)]
    (out_ref, v_ref, vs_ref), (out, v, vs) = run(reference_node, *inputs[0]), run(node, *inputs[1])
    for a, b in zip(out, out_ref):
        assert torch.equal(a, b)
    torch.testing.assert_close(v, v_ref, **FP32)
    torch.testing.assert_close(vs, vs_ref, **FP32)
    g = [torch.randn_like(o) for o in out]
    sum((o * gi).sum() for o, gi in zip(out_ref, g)).backward()
    sum((o * gi).sum() for o, gi in zip(out, g)).backward()
    for (a_ref, b_ref), (a, b) in zip([inputs[0]], [inputs[1]]):
        torch.testing.assert_close(a.grad, a_ref.grad, **FP32)
        torch.testing.assert_close(b.grad, b_ref.grad, **FP32)
    if kind == "plif":
        torch.testing.assert_close(node.w.grad, reference_node.w.grad, rtol=1e-4, atol=1e-5)
    node.reset()
    assert node.v == (0.0 if opts["v_reset"] is None else opts["v_reset"]) and node.v_seq is None


def test_plif_seed_signature_takes_r_tau_with_gradient():
    """multistep_plif(x, v, r_tau, ...) runs with r = r_tau itself and d/dr_tau = d/dw / (r (1 - r))."""
    x = random_input(10, 50)
    w = torch.tensor(0.3, requires_grad=True)
    r_tau = w.sigmoid().detach().requires_grad_()
    g = torch.randn(10, 50)
    s1, v1 = spikejit.multistep_plif(x, None, r_tau.reshape(1), True, 1.0, 0.0, False, None)
    ((s1 * g).sum() + v1.sum()).backward()
    s2, _, v2 = spikejit.plif_multi_step(x, None, w, True, 1.0, 0.0, None, False, True)
    ((s2 * g).sum() + v2.sum()).backward()
    assert torch.equal(s1, s2)
    torch.testing.assert_close(v1, v2, **FP32)
    r = r_tau.detach()
    torch.testing.assert_close(r_tau.grad * r * (1 - r), w.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cpp_calls", [True, False], ids=["C++ path", "Python path"])
def test_plif_w_reaches_the_training_node_without_a_view(cpp_calls, monkeypatch):
    """w (shape [], as SpikingJelly's) goes to the kernels as it is: a reshape would add a view
    and its backward node to every training step. Its gradient keeps w's shape."""
    monkeypatch.setattr(spikejit._kernel_calls, "CPP_CALLS", cpp_calls)
    node = spikejit.ParametricLIFNode(step_mode="m")
    y = node(random_input(6, 4, 10).requires_grad_())
    assert node.w.shape == ()
    assert any(getattr(fn, "variable", None) is node.w for fn, _ in y.grad_fn.next_functions)
    y.sum().backward()
    assert node.w.grad.shape == () and torch.isfinite(node.w.grad)


def test_seed_return_contracts():
    x = random_input(7, 3, 5)
    v0 = torch.zeros(3, 5)
    s, v_seq = spikejit.multistep_if(x, v0, 1.0, 0.0, False, None, True)
    assert s.shape == v_seq.shape == x.shape
    s, v_last = spikejit.multistep_if(x, v0, 1.0, 0.0, False, None, False)
    assert v_last.shape == (3, 5)
    torch.testing.assert_close(v_last, v_seq[-1])
    s, v_last = spikejit.multistep_lif(x, v0, True, 2.0, 1.0, None, True, None, store_v_seq=False)
    assert v_last.shape == (3, 5)
    s, v_seq = spikejit.multistep_plif(x, v0, torch.tensor([0.5]), True, 1.0, 0.0, False, None)
    assert v_seq.shape == x.shape
    # v_init needs N elements only (read in memory order); v_last comes back in v_init's shape
    flat = random_input(15, scale=0.3)
    s_flat, v_last = spikejit.multistep_lif(x, flat, store_v_seq=False)
    s, v_seq = spikejit.multistep_lif(x, flat.reshape(3, 5), store_v_seq=True)
    assert v_last.shape == (15,) and torch.equal(s_flat, s) and torch.equal(v_last, v_seq[-1].flatten())


@pytest.mark.parametrize("step_mode", ["m", "s"])
def test_store_v_seq_toggled_between_calls_matches_spikingjelly(step_mode):
    """Assigning store_v_seq forgets v_seq (SpikingJelly's setter); single steps append to it."""
    nodes = [sj_neuron.LIFNode(step_mode=step_mode, store_v_seq=True), spikejit.LIFNode(step_mode=step_mode,
                                                                                        store_v_seq=True)]
    x = random_input(6, 3, 4)
    seen = []
    for node in nodes:
        calls = [x[:2], x[2:4], x[4:]] if step_mode == "m" else [x[t] for t in range(6)]
        history = []
        for i, xi in enumerate(calls):
            if i == len(calls) // 3:
                node.store_v_seq = False
            if i == 2 * len(calls) // 3:
                node.store_v_seq = True
            node(xi)
            history.append(None if node.v_seq is None else node.v_seq.clone())
        seen.append(history)
    for a, b in zip(*seen):
        assert (a is None and b is None) or torch.allclose(a, b, **FP32), (a, b)


def test_zero_steps_and_zero_neurons():
    x = torch.empty(0, 4, 3)
    v0 = torch.randn(4, 3)
    s, v_last, v_seq = spikejit.lif_multi_step(x, v0, store_v_seq=True)
    assert s.shape == (0, 4, 3) and v_seq.shape == (0, 4, 3)
    torch.testing.assert_close(v_last, v0)
    x = torch.empty(5, 0, requires_grad=True)
    s, v_last, _ = spikejit.if_multi_step(x, None)
    assert s.shape == (5, 0) and v_last.shape == (0,)
    s.sum().backward()
    assert x.grad.shape == (5, 0)


def test_one_step_equals_single_step_mode():
    x = random_input(1, 8, 8)
    m = spikejit.LIFNode(step_mode="m")
    s_m = m(x)
    n = spikejit.LIFNode(step_mode="s")
    s_s = n(x[0])
    assert torch.equal(s_m[0], s_s)
    torch.testing.assert_close(m.v, n.v)
