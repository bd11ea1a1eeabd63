"""Second and higher derivatives through the kernels (`with spikejit.double_backward():`, the adjoint
neuron): IF / LIF / PLIF against SpikingJelly's per-step torch reference differentiated twice by
autograd, a smooth FlexSN neuron against gradgradcheck and a third derivative of its PyTorch loop,
several inputs, states and outputs, and the calls the mode refuses."""
import itertools

import pytest
import torch

import spikejit
from conftest import device_params, random_input

# SpikingJelly is a pinned test requirement: imported, not skipped (a missing install fails).
from spikingjelly._ops.if_ import reference as sj_if
from spikingjelly._ops.lif import reference as sj_lif
from spikingjelly._ops.plif import reference as sj_plif
from spikingjelly.activation_based import neuron as sj_neuron
from spikingjelly.activation_based import surrogate as sj_surrogate


def precision(device):
    """fp64 on the CPU (its executor computes in fp64), fp32 on CUDA with a looser bound."""
    if device.type == "cpu":
        return torch.float64, dict(rtol=1e-9, atol=1e-9)
    return torch.float32, dict(rtol=2e-3, atol=2e-3)


def builtin_call(kind, module, opts, surrogate):
    """(x, v0, w) -> (spikes, v_seq) of spikejit (module = spikejit) or SpikingJelly's reference."""
    def run(x, v0, w):
        if module is spikejit:
            calls = {"if": spikejit.if_multi_step, "lif": spikejit.lif_multi_step, "plif": spikejit.plif_multi_step}
        else:
            calls = {"if": sj_if.multi_step, "lif": sj_lif.multi_step, "plif": sj_plif.multi_step}
        first = () if kind == "if" else (opts["tau"] if kind == "lif" else w, opts["decay_input"])
        s, _, v_seq = calls[kind](x, v0, *first, opts["v_threshold"], opts["v_reset"], surrogate,
                                  opts["detach_reset"], True)
        return s, v_seq
    return run


def second_derivatives(run, x, v0, w, g_s, g_v, q):
    """The gradients of a loss on the first derivatives (of x, v0, w), with respect to x, v0, w and
    the incoming gradient g_s; and those first derivatives."""
    x, v0, w, g_s = (t.clone().requires_grad_() for t in (x, v0, w, g_s))
    s, v_seq = run(x, v0, w)
    first = torch.autograd.grad((s * g_s).sum() + (v_seq * g_v).sum() + (v_seq[-1] ** 2).sum(), (x, v0, w),
                                create_graph=True, allow_unused=True)
    first = [torch.zeros_like(t) if g is None else g for g, t in zip(first, (x, v0, w))]
    loss = (first[0] * q).sum() + (first[1] ** 2).sum() + first[2] ** 2 + (first[0] ** 2 * first[0].tanh()).sum()
    second = torch.autograd.grad(loss, (x, v0, w, g_s), allow_unused=True)
    return [g.detach() for g in first], [torch.zeros_like(t) if g is None else g for g, t in zip(second, (x, v0, w, g_s))]


def grid():
    for v_reset, detach in itertools.product([0.0, None], [False, True]):
        base = dict(v_reset=v_reset, v_threshold=1.0, detach_reset=detach)
        yield "if", base
        for decay in (True, False):
            yield "lif", dict(base, decay_input=decay, tau=3.0)
            yield "plif", dict(base, decay_input=decay)


def case_id(case):
    return case[0] + "-" + "-".join(f"{k}={v}" for k, v in case[1].items())


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", list(grid()), ids=case_id)
@pytest.mark.parametrize("surrogate", ["Sigmoid", "ATan", "PiecewiseQuadratic"])
def test_second_derivatives_equal_spikingjellys(case, surrogate, device):
    kind, opts = case
    dtype, tolerance = precision(device)
    x = random_input(7, 3, 11, device=device, dtype=dtype)
    v0 = random_input(3, 11, device=device, dtype=dtype, scale=0.5)
    w = torch.tensor(-0.4 + 0.8 * torch.rand(()).item(), device=device, dtype=dtype)
    g_s, g_v, q = (torch.randn_like(x) for _ in range(3))
    reference = builtin_call(kind, None, opts, getattr(sj_surrogate, surrogate)())
    ours = builtin_call(kind, spikejit, opts, getattr(spikejit.surrogate, surrogate)())
    first_ref, second_ref = second_derivatives(reference, x, v0, w, g_s, g_v, q)
    with spikejit.double_backward():
        first, second = second_derivatives(ours, x, v0, w, g_s, g_v, q)
    for name, got, want in zip(("x", "v0", "w"), first, first_ref):
        torch.testing.assert_close(got, want, **tolerance, msg=lambda m: f"first derivative of {name}: {m}")
    for name, got, want in zip(("x", "v0", "w", "the incoming gradient"), second, second_ref):
        scale = want.abs().max().item() + 1
        torch.testing.assert_close(got, want, rtol=tolerance["rtol"], atol=tolerance["atol"] * scale,
                                   msg=lambda m: f"second derivative with respect to {name}: {m}")
    assert second[0].abs().max() > 0  # a path the test must exercise: second derivatives not all zero


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_modules_give_the_usual_first_derivatives_and_second_ones(device):
    dtype, tolerance = precision(device)
    x = random_input(9, 4, 6, device=device, dtype=dtype)
    usual = spikejit.ParametricLIFNode(step_mode="m").to(device, dtype)
    twice = spikejit.ParametricLIFNode(step_mode="m").to(device, dtype)
    reference = sj_neuron.ParametricLIFNode(step_mode="m").to(device, dtype)
    xs = [x.clone().requires_grad_() for _ in range(3)]
    usual(xs[0]).sum().backward()
    with spikejit.double_backward():
        y = twice(xs[1])
    (gx,) = torch.autograd.grad(y.sum(), xs[1], create_graph=True)
    torch.testing.assert_close(gx, xs[0].grad, **tolerance)
    (gx * gx).sum().backward()
    (gx_ref,) = torch.autograd.grad(reference(xs[2]).sum(), xs[2], create_graph=True)
    (gx_ref * gx_ref).sum().backward()
    torch.testing.assert_close(xs[1].grad, xs[2].grad, **tolerance)
    torch.testing.assert_close(twice.w.grad, reference.w.grad, **tolerance)


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_single_step_modules_carry_second_derivatives_through_their_state(device):
    """step_mode "s": each call's final state is the next call's initial state, so the second
    derivatives run back through every call."""
    dtype, tolerance = precision(device)
    x = random_input(6, 3, 8, device=device, dtype=dtype)
    q = torch.randn_like(x)

    def second(node, mode):
        node.reset()
        xr = x.clone().requires_grad_()
        with mode():
            s = torch.stack([node(xr[t]) for t in range(x.shape[0])])
        (g,) = torch.autograd.grad((s * q).sum() + (node.v ** 2).sum(), xr, create_graph=True)
        (gg,) = torch.autograd.grad((g ** 2).sum(), xr)
        return g.detach(), gg

    ours = second(spikejit.LIFNode(tau=3.0, step_mode="s").to(device, dtype), spikejit.double_backward)
    reference = second(sj_neuron.LIFNode(tau=3.0, step_mode="s").to(device, dtype), torch.enable_grad)
    assert reference[1].abs().max() > 0
    for got, want in zip(ours, reference):
        torch.testing.assert_close(got, want, rtol=tolerance["rtol"], atol=tolerance["atol"] * (1 + want.abs().max()))


def smooth_core(x, u, v, p, a):
    """Two inputs, two states, two outputs, no spike: finite differences see every derivative."""
    h = v + (x - v) * torch.sigmoid(a) + 0.3 * u * torch.tanh(p)
    return torch.tanh(h), h * u, h - 0.2 * torch.tanh(h), 0.9 * p + 0.1 * torch.sin(h)


class SmoothNeuron(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(features, dtype=torch.float64))

    def forward(self, x, u, v, p):
        return smooth_core(x, u, v, p, self.a)


def smooth_loop(core, x, u_seq, states):
    outs = []
    for t in range(x.shape[0]):
        y, z, *states = core(x[t], u_seq[t], *states)
        outs.append((y, z))
    return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs]), states


def test_gradgradcheck_of_a_flexsn_neuron_with_two_inputs_states_and_outputs():
    core = SmoothNeuron(5)
    node = spikejit.FlexSN(core, num_inputs=2, num_states=2, num_outputs=2, strict=True)
    x, u = (random_input(6, 2, 5, dtype=torch.float64).requires_grad_() for _ in range(2))

    def run(x, u):
        node.reset()
        with spikejit.double_backward():
            y, z = node(x, u)
        return y, z, *node.states

    assert torch.autograd.gradcheck(run, (x, u))
    assert torch.autograd.gradgradcheck(run, (x, u))


def test_third_derivative_equals_the_pytorch_loops():
    core = SmoothNeuron(5)
    node = spikejit.FlexSN(core, num_inputs=2, num_states=2, num_outputs=2, strict=True)
    x = random_input(6, 2, 5, dtype=torch.float64)
    u = random_input(6, 2, 5, dtype=torch.float64)
    r = torch.randn_like(x)

    def third(run):
        xr = x.clone().requires_grad_()
        y, z, states = run(xr)
        (g,) = torch.autograd.grad((y * r).sum() + (z ** 2).sum() + sum((s ** 2).sum() for s in states), xr,
                                   create_graph=True)
        (gg,) = torch.autograd.grad((g ** 3).sum(), xr, create_graph=True)
        ggg_x, ggg_a = torch.autograd.grad((gg * r).sum(), (xr, core.a))
        return ggg_x, ggg_a

    def ours(xr):
        node.reset()
        with spikejit.double_backward():
            y, z = node(xr, u)
        return y, z, node.states

    zeros = [torch.zeros(2, 5, dtype=torch.float64)] * 2
    got = third(ours)
    want = third(lambda xr: smooth_loop(core, xr, u, zeros))
    assert want[0].abs().max() > 0 and want[1].abs().max() > 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("steps", [0, 1])
def test_short_sequences(steps):
    x = random_input(steps, 4, dtype=torch.float64).requires_grad_()
    v0 = random_input(4, dtype=torch.float64, scale=0.5).requires_grad_()
    with spikejit.double_backward():
        s, v_last, _ = spikejit.lif_multi_step(x, v0, 2.0, True, 1.0, 0.0, spikejit.surrogate.Sigmoid(), False,
                                               False)
    gx, gv = torch.autograd.grad(s.sum() + (v_last ** 2).sum(), (x, v0), create_graph=True)
    assert gx.shape == x.shape
    (ggv,) = torch.autograd.grad((gv ** 2).sum(), v0)
    if steps == 0:  # v_last = v0: the loss is 4 v0^2 (SpikingJelly's reference stacks no steps)
        torch.testing.assert_close(ggv, 8 * v0.detach())
        return
    s_ref, v_ref, _ = sj_lif.multi_step(x, v0, 2.0, True, 1.0, 0.0, sj_surrogate.Sigmoid(), False, False)
    gv_ref = torch.autograd.grad(s_ref.sum() + (v_ref ** 2).sum(), v0, create_graph=True)[0]
    torch.testing.assert_close(ggv, torch.autograd.grad((gv_ref ** 2).sum(), v0)[0])


def test_calls_outside_the_mode_still_refuse_a_second_derivative():
    node, x = spikejit.LIFNode(step_mode="m"), random_input(5, 7).requires_grad_()
    with spikejit.double_backward():
        pass
    (first,) = torch.autograd.grad(node(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="spikejit.double_backward"):
        first.sum().backward()


def noisy_core(x, v):
    """A neuron that draws: a noisy, smooth step (finite differences see every derivative)."""
    h = 0.7 * v + x + 0.5 * torch.rand_like(x) - 0.25
    return torch.tanh(h), h - 0.1 * torch.sin(h)


def test_a_neuron_that_draws_has_second_derivatives_with_the_calls_numbers():
    """With a fixed seed the call is a function: gradgradcheck holds, and the first derivatives
    inside the mode equal the usual path's (whose backward reads the forward's saved draws)."""
    node = spikejit.FlexSN(noisy_core, num_inputs=1, num_states=1, num_outputs=1, strict=True,
                           example_inputs=[torch.zeros(7, dtype=torch.float64)] * 2)
    seed = torch.tensor([12345], dtype=torch.int64)
    x = random_input(6, 7, dtype=torch.float64)
    v0 = random_input(7, dtype=torch.float64, scale=0.5)

    def run(x, v0):
        y, finals, _ = spikejit.functional.run_neuron(node.handle, 1, 1, [x], [v0], [], False, seed=seed)
        return y[0], finals[0]

    xr, vr = x.clone().requires_grad_(), v0.clone().requires_grad_()
    usual = torch.autograd.grad(sum(t.sum() for t in run(xr, vr)), (xr, vr))
    with spikejit.double_backward():
        twice = torch.autograd.grad(sum(t.sum() for t in run(xr, vr)), (xr, vr), create_graph=True)
        for got, want in zip(twice, usual):
            torch.testing.assert_close(got.detach(), want, rtol=1e-12, atol=1e-12)
        assert torch.autograd.gradgradcheck(run, (xr, vr))
    other = spikejit.functional.run_neuron(node.handle, 1, 1, [x], [v0], [], False,
                                           seed=torch.tensor([54321], dtype=torch.int64))[0][0]
    assert not torch.equal(other, run(x, v0)[0]), "the draws must depend on the seed"


def test_the_mode_refuses_what_it_cannot_differentiate():
    x = random_input(5, 7).requires_grad_()
    with spikejit.double_backward():
        with pytest.raises(ValueError, match="^packed_outputs: expected 0"):
            spikejit.functional.run_neuron(spikejit.LIFNode(step_mode="m")._program_handle, 1, 1, [x], [None], [],
                                           False, packed_outputs=1)
        with pytest.raises(RuntimeError, match="not under torch.func"):
            torch.func.grad(lambda x: spikejit.LIFNode(step_mode="m")(x).sum())(x.detach())


def test_the_mode_is_per_thread_and_restored():
    import threading

    seen = []
    with spikejit.double_backward():
        with spikejit.double_backward():
            pass
        assert spikejit._double_backward.enabled()
        worker = threading.Thread(target=lambda: seen.append(spikejit._double_backward.enabled()))
        worker.start()
        worker.join()
    assert seen == [False] and not spikejit._double_backward.enabled()

    @spikejit.double_backward()
    def inside(depth):
        return spikejit._double_backward.enabled() and (depth == 0 or inside(depth - 1))

    assert inside(2) and not spikejit._double_backward.enabled()

    # Another thread inside the mode does not put this one in it; leaving it counts it out again.
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with spikejit.double_backward():
            entered.set()
            leave.wait()

    worker = threading.Thread(target=hold)
    worker.start()
    entered.wait()
    assert spikejit._double_backward._threads_inside == 1 and not spikejit._double_backward.enabled()
    leave.set()
    worker.join()
    assert spikejit._double_backward._threads_inside == 0


def test_a_recompute_block_inside_the_mode_keeps_its_own_path(monkeypatch):
    """spikejit.Recompute steers its neurons' calls (a hook): inside the mode they stay its own
    (none takes the mode's path), with the same first derivatives as outside."""
    taken = []
    mode_run = spikejit._double_backward.run
    monkeypatch.setattr(spikejit._double_backward, "run", lambda *a: taken.append(a) or mode_run(*a))
    block = spikejit.Recompute(torch.nn.Sequential(torch.nn.Linear(8, 8), spikejit.LIFNode(step_mode="m")),
                               spikes=False)
    x = random_input(4, 3, 8)
    grads = []
    for mode in (torch.enable_grad, spikejit.double_backward):
        xr = x.clone().requires_grad_()
        block.module[1].reset()
        with mode():
            block(xr).sum().backward()
        grads.append(xr.grad)
    assert taken == []
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.cuda)], indirect=True)
def test_a_neuron_that_draws_has_the_cpus_second_derivatives_on_cuda(device):
    """The same seed draws the same numbers on both (counter-based), at every order."""
    node = spikejit.FlexSN(noisy_core, num_inputs=1, num_states=1, num_outputs=1, strict=True,
                           example_inputs=[torch.zeros(7)] * 2)
    x, v0 = random_input(9, 3, 7), random_input(3, 7, scale=0.5)
    q = torch.randn_like(x)

    def second(where):
        seed = torch.tensor([777], dtype=torch.int64, device=where)
        xr, vr = x.to(where).requires_grad_(), v0.to(where).requires_grad_()
        with spikejit.double_backward():
            y, finals, _ = spikejit.functional.run_neuron(node.handle, 1, 1, [xr], [vr], [], False, seed=seed)
        gx, gv = torch.autograd.grad((y[0] * q.to(where)).sum() + (finals[0] ** 2).sum(), (xr, vr), create_graph=True)
        return [t.cpu() for t in (gx, gv, *torch.autograd.grad((gx ** 2).sum() + (gv ** 2).sum(), (xr, vr)))]

    for got, want in zip(second(device), second(torch.device("cpu"))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
