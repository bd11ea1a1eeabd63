"""The checkpoint save policy (checkpoint_every = k): the training forward keeps one state every
k steps and the backward recomputes the steps between. Gradients equal the per-step policy's
(bit for bit in fp32 / fp64 storage), autograd saves less, opcheck and torch.compile work, bad
values are rejected. CUDA cases skip without a GPU unless SPIKEJIT_REQUIRE_CUDA=1."""
import math
import re

import pytest
import torch
import torch._dynamo
from torch import nn

import spikejit
from spikejit import _core, _kernel_calls
from conftest import device_params, random_input, require_cuda
from spikejit.functional import builtin_handle

T = 10  # not a multiple of 3 or 7
INTERVALS = [1, 2, 3, 7, T, T + 5]
DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


def adaptive_flexsn(checkpoint_every, neurons, device="cpu", dtype=torch.float64):
    """Two states and a per-neuron learnable threshold (a closure tensor): (module, theta)."""
    theta = torch.full((neurons,), 0.9, dtype=dtype, device=device, requires_grad=True)

    def core(x, v, a):
        h = v + (x - v) * 0.5
        s = spikejit.surrogate.Sigmoid(alpha=4.0)(h - theta - a)
        return s, h * (1.0 - s), 0.8 * a + 0.2 * s

    node = spikejit.FlexSN(core, num_inputs=1, num_states=2, num_outputs=1, store_state_seqs=True,
                           checkpoint_every=checkpoint_every, strict=True,
                           example_inputs=[torch.zeros(neurons, dtype=dtype, device=device)] * 3)
    return node, theta


def builtin_case(kind, x, checkpoint_every):
    """(results, leaves) of one training forward of a built-in through the functional API."""
    v0 = (random_input(*x.shape[1:], device=x.device, scale=0.3).to(x.dtype)).requires_grad_()
    sg = spikejit.surrogate.ATan()
    if kind == "if":
        s, v_last, v_seq = spikejit.if_multi_step(x, v0, 1.0, None, sg, False, True,
                                                  checkpoint_every=checkpoint_every)
        leaves = [x, v0]
    elif kind == "lif":
        s, v_last, v_seq = spikejit.lif_multi_step(x, v0, 3.0, False, 0.8, 0.0, sg, True, True,
                                                   checkpoint_every=checkpoint_every)
        leaves = [x, v0]
    else:
        w = torch.tensor(0.3, dtype=x.dtype, device=x.device, requires_grad=True)
        s, v_last, v_seq = spikejit.plif_multi_step(x, v0, w, True, 1.0, -0.1, sg, False, True,
                                                    checkpoint_every=checkpoint_every)
        leaves = [x, v0, w]
    return [s, v_last, v_seq], leaves


def gradients(results, leaves, cotangents):
    used = [(r, c) for r, c in zip(results, cotangents) if c is not None]
    return torch.autograd.grad([r for r, _ in used], leaves, [c for _, c in used], allow_unused=True)


def assert_same(a, b, exact, what):
    if exact:
        assert torch.equal(a, b), f"{what}: max difference {(a - b).abs().max().item()}"
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("kind", ["if", "lif", "plif"])
@pytest.mark.parametrize("k", INTERVALS)
def test_builtin_gradients_equal_the_per_step_policy(kind, k, device):
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    x_data = random_input(T, 3, 37, device=device, dtype=dtype)
    torch.manual_seed(k)
    base, base_leaves = builtin_case(kind, x_data.clone().requires_grad_(), 0)
    torch.manual_seed(k)
    ck, ck_leaves = builtin_case(kind, x_data.clone().requires_grad_(), k)
    # Some results unused (absent gradients), rotating with k.
    cotangents = [torch.randn_like(r) if (i + k) % 3 != 2 else None for i, r in enumerate(base)]
    exact = device.type == "cpu"
    for i, (a, b) in enumerate(zip(base, ck)):
        assert_same(b, a, True, f"result {i}")  # the forward is the same either way
    for i, (a, b) in enumerate(zip(gradients(base, base_leaves, cotangents), gradients(ck, ck_leaves, cotangents))):
        assert (a is None) == (b is None)
        if a is not None:
            assert_same(b, a, exact, f"gradient {i}")


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("k", [1, 3, 7, 15])
def test_modules_and_flexsn_gradients_equal_the_per_step_policy(k, device):
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    exact = device.type == "cpu"
    x = random_input(T, 4, 33, device=device, dtype=dtype)
    grads = {}
    for policy in (0, k):
        nodes = [spikejit.IFNode(step_mode="m", v_reset=None, store_v_seq=True, checkpoint_every=policy),
                 spikejit.LIFNode(tau=2.5, step_mode="m", checkpoint_every=policy),
                 spikejit.ParametricLIFNode(step_mode="m", detach_reset=True, checkpoint_every=policy)]
        flex, theta = adaptive_flexsn(policy, 33, device, dtype)
        nodes = [n.to(device=device, dtype=dtype) for n in nodes]
        xg = x.clone().requires_grad_()
        torch.manual_seed(5)
        loss = sum((n(xg) * torch.randn_like(xg)).sum() + n.v.sum() for n in nodes)
        loss = loss + nodes[0].v_seq.square().sum()
        s = flex(xg)
        loss = loss + (s * torch.randn_like(s)).sum() + flex.states[1].sum() + flex.state_seqs[0].sum()
        loss.backward()
        grads[policy] = [xg.grad, nodes[2].w.grad, theta.grad]
    for i, (a, b) in enumerate(zip(grads[0], grads[k])):
        assert_same(b, a, exact, f"gradient {i}")


@pytest.mark.parametrize("steps", [0, 1])
def test_empty_and_single_step_sequences(steps):
    x = random_input(steps, 50, dtype=torch.float64)
    for kind in ("lif", "plif"):
        torch.manual_seed(1)
        base, base_leaves = builtin_case(kind, x.clone().requires_grad_(), 0)
        torch.manual_seed(1)
        ck, ck_leaves = builtin_case(kind, x.clone().requires_grad_(), 4)
        cotangents = [torch.randn_like(r) for r in base]
        for a, b in zip(gradients(base, base_leaves, cotangents), gradients(ck, ck_leaves, cotangents)):
            assert (a is None and b is None) or torch.equal(a, b)


def test_half_storage_gradients_follow_the_fp32_computation():
    """fp16 storage: checkpoints are fp32 and the recomputed values are never rounded, so the
    backward sees the forward's own spikes and its gradients equal an fp32 run on the same
    inputs up to the rounding of what is stored. (Per step, the saved h is rounded to fp16, and
    a spike recomputed from it can flip where h lies within an fp16 ulp of the threshold.)"""
    x = random_input(T, 2000, dtype=torch.float16)
    grads = {}
    for dtype, k in ((torch.float32, 0), (torch.float16, 3)):
        xg = x.to(dtype).clone().requires_grad_()
        s, v_last, v_seq = spikejit.lif_multi_step(xg, None, 2.0, True, 1.0, 0.0, spikejit.surrogate.Sigmoid(),
                                                   False, True, checkpoint_every=k)
        (s.float().sum() + v_seq.float().square().sum()).backward()
        grads[dtype] = xg.grad.float()
    torch.testing.assert_close(grads[torch.float16], grads[torch.float32], rtol=1e-2, atol=1e-2)


def registry_program(handle):
    return spikejit.registry.program(handle)


def test_saved_layout_matches_the_core():
    flexsn = adaptive_flexsn(0, 8)[0]  # owns its handle while the test runs
    handles = [builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0),
               builtin_handle("plif", 1.0, None, True, "atan", (2.0,), False), flexsn.handle]
    for handle in handles:
        program = registry_program(handle)
        for dtype in DTYPE_CODES:
            for steps in (0, 1, 9, 10):
                for k in (0, 1, 3, 10, 256):
                    x = torch.empty(0, dtype=dtype)
                    ours = _kernel_calls.training_call(handle, False, k).saved_buffers(x, [steps, 4, 5])
                    core = _core.saved_layout(program, steps, [4, 5], DTYPE_CODES[dtype], k)
                    written = [(list(s), d) for s, d, input, _ in core if input < 0]  # inputs are not copied
                    assert [(list(t.shape), DTYPE_CODES[t.dtype]) for t in ours] == written


class SavedBytes:
    """Bytes of the distinct storages autograd saves while active, and of those that are not
    the caller's own tensors (inputs, parameters)."""

    def __init__(self, own):
        self.own = {t.untyped_storage().data_ptr() for t in own}
        self.storages = {}

    def pack(self, t):
        storage = t.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return t

    def total(self):
        return sum(self.storages.values())

    def extra(self):
        return sum(n for p, n in self.storages.items() if p not in self.own)


def saved_bytes(make_node, x, k):
    """`make_node(k)` -> (module, the caller's other tensors it reads)."""
    node, own = make_node(k)
    xg = x.clone().requires_grad_()
    counter = SavedBytes([xg, *node.parameters(), *own])
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        node(xg).sum().backward()
    return counter


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_autograd_saves_less(device):
    steps, neurons, k = 64, 4096, 8
    x = random_input(steps, neurons, device=device)
    rows = math.ceil(steps / k)
    # PLIF keeps x (the caller's, read again by the backward) and v per step; with checkpoints
    # x itself and [T/k, N].
    plif = lambda k: (spikejit.ParametricLIFNode(step_mode="m", checkpoint_every=k).to(device), [])  # noqa: E731
    per_step, checkpointed = saved_bytes(plif, x, 0), saved_bytes(plif, x, k)
    assert per_step.extra() == steps * neurons * 4
    assert checkpointed.extra() == rows * neurons * 4  # the checkpoints; x and w are the caller's
    assert checkpointed.total() < per_step.total()
    # LIF saves one [T, N] value per step: what it adds besides the caller's x shrinks by T/k.
    lif = lambda k: (spikejit.LIFNode(step_mode="m", checkpoint_every=k).to(device), [])  # noqa: E731
    assert saved_bytes(lif, x, 0).extra() == steps * neurons * 4
    assert saved_bytes(lif, x, k).extra() == rows * neurons * 4
    # A two-state neuron: two checkpoints.
    def flex(k):
        node, theta = adaptive_flexsn(k, neurons, device, torch.float32)
        return node, [theta]

    per_step, checkpointed = saved_bytes(flex, x, 0), saved_bytes(flex, x, k)
    assert checkpointed.extra() == 2 * rows * neurons * 4
    assert checkpointed.total() < per_step.total()


@pytest.mark.parametrize("case, expected", [
    (dict(), 4), (dict(neuron="lif"), 0), (dict(neuron="if"), 0),
    (dict(dtype=torch.float16), 0), (dict(dtype=torch.bfloat16), 0), (dict(device="cpu"), 0),
    (dict(steps=7), 0), (dict(neurons=65535), 0), (dict(store_state_seqs=True), 0),
    (dict(packed_outputs=1), 0), (dict(pack_spikes=True), 0), (dict(policy=0), 0), (dict(policy=9), 9),
    (dict(neuron="two states"), 0), (dict(neuron="two inputs"), 0),
])
def test_auto_policy_choice(case, expected):
    """The "auto" policy checkpoints every 4 steps only for float32 CUDA training with T >= 8 and
    N >= 65536, nothing stored per step and nothing packed, of one-input, one-state neurons that
    save more than x per step (PLIF: x and v; IF and LIF save h alone, which takes less memory
    than keeping x and checkpoints). Fake tensors: the CUDA rule is checked anywhere."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    neuron = case.get("neuron", "plif")
    keep = None
    if neuron == "lif":
        handle = builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0)
    elif neuron == "if":
        handle = builtin_handle("if", 1.0, None, False, "atan", (2.0,))
    elif neuron == "plif":
        handle = builtin_handle("plif", 1.0, None, True, "atan", (2.0,), False)
    elif neuron == "two states":
        keep = adaptive_flexsn(0, 1)[0]
        handle = keep.handle
    else:
        keep = spikejit.FlexSN(lambda x, m, v: (spikejit.surrogate.spike(v + x * m - 1), (v + x * m) * 0.5),
                               2, 1, 1, strict=True)
        handle = keep.handle
    with FakeTensorMode():
        x = torch.empty(case.get("steps", 8), case.get("neurons", 65536) // 256, 256,
                        dtype=case.get("dtype", torch.float32), device=case.get("device", "cuda"))
        chosen = _kernel_calls.resolve_checkpoint_every(case.get("policy", "auto"), handle, x,
                                                        case.get("store_state_seqs", False),
                                                        case.get("packed_outputs", 0), case.get("pack_spikes", False))
    assert chosen == expected


@pytest.mark.cuda
def test_auto_policy_checkpoints_large_float32_cuda_calls():
    """The default policy of a PLIF module large enough for checkpoints saves what
    checkpoint_every=4 saves and gives the per-step policy's gradients (equal up to fp32
    rounding, as above); LIF's saves per step."""
    require_cuda()
    steps, neurons = 12, 65536
    x = random_input(steps, neurons, device="cuda")
    lif = lambda k: (spikejit.LIFNode(step_mode="m", checkpoint_every=k).cuda(), [])  # noqa: E731
    assert saved_bytes(lif, x, "auto").extra() == saved_bytes(lif, x, 0).extra() == steps * neurons * 4
    plif = lambda k: (spikejit.ParametricLIFNode(step_mode="m", checkpoint_every=k).cuda(), [])  # noqa: E731
    assert saved_bytes(plif, x, "auto").extra() == saved_bytes(plif, x, 4).extra() == 3 * neurons * 4
    grads = {}
    for policy in (0, "auto"):
        node = spikejit.ParametricLIFNode(step_mode="m", checkpoint_every=policy).cuda()
        xg = x.clone().requires_grad_()
        torch.manual_seed(3)
        (node(xg) * torch.randn_like(xg)).sum().backward()
        grads[policy] = [xg.grad, node.w.grad]
    for i, (a, b) in enumerate(zip(grads[0], grads["auto"])):
        assert_same(b, a, False, f"gradient {i}")


def test_auto_policy_traces_without_graph_breaks(monkeypatch):
    """Under torch.compile the C++ rule is asked while tracing (a graph constant, no graph break),
    and the sizes are compared symbolically: T and N stay dynamic."""
    plif = builtin_handle("plif", 1.0, None, True, "atan", (2.0,), False)
    torch._dynamo.reset()
    node = spikejit.ParametricLIFNode(step_mode="m")

    def step(x):  # a new call kind: the rule is asked while tracing
        node.reset()
        return node(x).sum()

    x = random_input(8, 4, dtype=torch.float64).requires_grad_()
    # Forget the answer earlier tests may have cached, so that tracing asks the extension.
    spikejit.registry.program_and_cache(node._program_handle)[1].pop(
        ("auto", False, DTYPE_CODES[torch.float64], False, False), None)
    assert torch._dynamo.explain(step)(x).graph_break_count == 0
    # The size comparison, with the rule answering 4 as it would on CUDA.
    monkeypatch.setattr(_kernel_calls, "_auto_interval", lambda *args: 4)
    torch._dynamo.reset()

    def chosen(x):
        return x.new_full((), 1.0) * _kernel_calls.resolve_checkpoint_every("auto", plif, x, False, 0, False)

    compiled = torch.compile(chosen, fullgraph=True, dynamic=True)
    for steps, neurons, expected in ((8, 65536, 4), (9, 70000, 4), (7, 65536, 0), (8, 65535, 0)):
        assert compiled(torch.empty(steps, neurons)).item() == expected, (steps, neurons)
    torch._dynamo.reset()


@pytest.mark.cuda
def test_auto_policy_compiles_large_cuda_calls_without_graph_breaks():
    """fullgraph torch.compile of a PLIF training step large enough for "auto" to checkpoint on
    CUDA: no graph break, the eager step's results and gradients."""
    require_cuda()
    torch._dynamo.reset()
    node = spikejit.ParametricLIFNode(step_mode="m").cuda()
    x = random_input(8, 65536, device="cuda")

    def step(x):
        node.reset()
        return node(x).sum() + node.v.square().sum()

    assert torch._dynamo.explain(step)(x.clone().requires_grad_()).graph_break_count == 0
    torch._dynamo.reset()
    grads = []
    for run in (step, torch.compile(step, fullgraph=True)):
        xg = x.clone().requires_grad_()
        node.w.grad = None
        run(xg).backward()
        grads.append((xg.grad, node.w.grad))
    for i, (a, b) in enumerate(zip(*grads)):
        assert_same(b, a, False, f"gradient {i}")
    torch._dynamo.reset()


def opcheck_cases(device):
    lif = builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0)
    plif = builtin_handle("plif", 0.5, None, True, "atan", (2.0,), False)
    x = random_input(7, 4, 5, device=device)
    v0 = random_input(4, 5, device=device, scale=0.3)
    w = torch.tensor([0.2], device=device)
    xg, vg, wg = (t.clone().requires_grad_() for t in (x, v0, w))
    cases = [
        (torch.ops.spikejit.neuron_forward.default, (lif, [xg], [vg], [], False, 3)),
        (torch.ops.spikejit.neuron_forward.default, (plif, [xg], [], [wg], True, 7)),
        (torch.ops.spikejit.neuron_forward.default, (plif, [xg], [vg], [wg], False, 12)),
    ]
    checkpoints = torch.ops.spikejit.neuron_forward(plif, [x], [v0], [w], False, 3)[2:]
    assert [list(c.shape) for c in checkpoints] == [[3, 4, 5]]
    cases.append((torch.ops.spikejit.neuron_backward.default,
                  (plif, [7, 4, 5], x.dtype, x.device, [*checkpoints, x], [w], [torch.randn_like(x)],
                   [torch.randn_like(v0)], [], 3)))
    cases.append((torch.ops.spikejit.neuron_backward.default,
                  (plif, [7, 4, 5], x.dtype, x.device, [*checkpoints, x], [w], [None], [None], [], 3)))
    return cases


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("index", range(5))
def test_opcheck(index, device):
    op, args = opcheck_cases(device)[index]
    torch.library.opcheck(op, args)


class Net(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.lif = spikejit.LIFNode(step_mode="m", surrogate_function=spikejit.surrogate.ATan(), checkpoint_every=k)
        self.plif = spikejit.ParametricLIFNode(step_mode="m", checkpoint_every=k + 1 if k else 0)

    def forward(self, x):
        self.lif.reset()
        self.plif.reset()
        return self.fc2(self.plif(self.lif(self.fc1(x)))).square().mean()


@pytest.mark.parametrize("device", device_params(), indirect=True)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    model = Net(3).to(device)
    reference = Net(0).to(device)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(10, 5, 16, device=device) * 2
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for steps in (10, 7):  # dynamic: a new T reuses the graph
        x = torch.randn(steps, 5, 16, device=device) * 2
        loss_c = compiled(x)
        loss_r = reference(x)
        loss_c.backward()
        loss_r.backward()
        torch.testing.assert_close(loss_c, loss_r)
        for (n, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=lambda m: f"grad of {n}: {m}")
            p.grad = q.grad = None
    torch._dynamo.reset()


def test_bad_policy_values_are_rejected():
    x = random_input(5, 8).requires_grad_()
    for bad, error in ((-1, ValueError), (257, ValueError), (2.0, TypeError), (True, TypeError), ("3", TypeError),
                       ("Auto", TypeError), (None, TypeError)):
        with pytest.raises(error, match="checkpoint_every"):
            spikejit.LIFNode(step_mode="m", checkpoint_every=bad)
        with pytest.raises(error, match="checkpoint_every"):
            spikejit.multistep_lif(x, None, checkpoint_every=bad)
        with pytest.raises(error, match="checkpoint_every"):
            spikejit.FlexSN(lambda x, v: (spikejit.surrogate.spike(v + x - 1), (v + x) * 0.5), 1, 1, 1,
                            checkpoint_every=bad)
    with pytest.raises(ValueError, match="from 1 to 256, got 300"):
        spikejit.if_multi_step(x, checkpoint_every=300)
    with pytest.raises(TypeError, match=re.escape("checkpoint_every: expected 'auto' or an int (0: save per step, "
                                                  "k >= 1: checkpoints every k steps), got 'Auto'")):
        spikejit.LIFNode(step_mode="m", checkpoint_every="Auto")  # docs/errors.md quotes it
    # The per-policy cache of the ops keys True like 1: a bool still fails after an int was cached.
    lif = builtin_handle("lif", 1.0, 0.0, False, "sigmoid", (4.0,), True, 2.0)
    spikejit.ops.training_forward(lif, [x.detach()], [], [], False, 1)
    for name, args in (("checkpoint_every", (True, 0, False)), ("packed_outputs", (0, True, False)),
                       ("pack_spikes", (0, 0, 1))):
        with pytest.raises(TypeError, match=name):
            spikejit.ops.training_forward(lif, [x.detach()], [], [], False, *args)
    # An attribute changed after construction is checked when it is used.
    node = spikejit.IFNode(step_mode="m")
    node.checkpoint_every = -2
    with pytest.raises(ValueError, match="checkpoint_every"):
        node(x)
    # The op: the saved tensors must be the checkpoints and then the inputs.
    plif = builtin_handle("plif", 0.5, None, True, "atan", (2.0,), False)
    w = torch.tensor([0.2])
    checkpoints = torch.ops.spikejit.neuron_forward(plif, [x.detach()], [], [w], False, 2)[2:]
    with pytest.raises(ValueError, match="1 checkpoints, then the 1 inputs"):
        torch.ops.spikejit.neuron_backward(plif, [5, 8], x.dtype, x.device, checkpoints, [w], [None], [None], [], 2)
    with pytest.raises(ValueError, match=r"saved\[1\]: expected an input of shape \[5, 8\]"):
        torch.ops.spikejit.neuron_backward(plif, [5, 8], x.dtype, x.device, [*checkpoints, x[:3].detach()], [w],
                                           [None], [None], [], 2)
    # Checkpoints for another interval: the C++ validation names the argument and the shape.
    with pytest.raises(_core.ArgumentError, match=r"saved\[0\].*\[ceil\(T/k\), \*S\] = \[2, 8\]"):
        torch.ops.spikejit.neuron_backward(plif, [5, 8], x.dtype, x.device, [*checkpoints, x.detach()], [w],
                                           [None], [None], [], 4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_checkpoints_equal_the_cpu_checkpoints(dtype):
    """The same semantics on both (fp32 checkpoints, unrounded recomputation): GPU gradients
    match the CPU executor's checkpoint mode for odd N and T not a multiple of k."""
    require_cuda()
    x = random_input(11, 3, 333, dtype=dtype)
    tolerance = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
                 torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]
    for kind in ("if", "lif", "plif"):
        for k in (2, 4, 13):
            torch.manual_seed(k)
            cpu, cpu_leaves = builtin_case(kind, x.clone().requires_grad_(), k)
            torch.manual_seed(k)
            gpu, gpu_leaves = builtin_case(kind, x.cuda().requires_grad_(), k)
            cotangents = [torch.randn_like(r) for r in cpu]
            for a, b in zip(cpu, gpu):
                torch.testing.assert_close(b.cpu(), a, **tolerance)
            for i, (a, b) in enumerate(zip(gradients(cpu, cpu_leaves, cotangents),
                                           gradients(gpu, gpu_leaves, [c.cuda() for c in cotangents]))):
                torch.testing.assert_close(b.cpu(), a, **tolerance, msg=lambda m: f"{kind} k={k} gradient {i}: {m}")
