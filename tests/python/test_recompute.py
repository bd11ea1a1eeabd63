"""Recompute blocks: the outputs, gradients, neuron states and batch-norm statistics of the plain
module, bit for bit on the CPU (within rounding on CUDA, where cuDNN may pick other algorithms);
only the packed input saved; clear errors for what a recomputed block cannot do."""
import copy
import weakref

import pytest
import torch
from torch import nn

import spikejit
from conftest import device_params
from test_flexsn import AdaptiveCore  # a FlexSN core with learnable parameters (two states)


def spikes(*shape, device="cpu", p=0.3):
    return (torch.rand(*shape, device=device) < p).float()


class ConvBlock(nn.Module):
    """Conv-BN-LIF over [T, B, C, H, W], as the blocks of a spiking VGG (dropout optional)."""

    def __init__(self, cin, cout, dropout=0.0):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout)
        self.dropout = nn.Dropout(dropout)
        self.neuron = spikejit.LIFNode(tau=1.5, detach_reset=True, step_mode="m", store_v_seq=True)

    def forward(self, x):
        T, B = x.shape[:2]
        y = self.dropout(self.bn(self.conv(x.flatten(0, 1)))).unflatten(0, (T, B))
        return self.neuron(y)


def step(model, x, grad, seed=0):
    """Output, x.grad, every parameter's grad, after one forward + backward from a fixed RNG."""
    for p in model.parameters():
        p.grad = None
    x = x.detach().requires_grad_()
    torch.manual_seed(seed)
    y = model(x)
    y.backward(grad)
    return [y.detach(), x.grad] + [p.grad for p in model.parameters()]


def assert_same(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a is not None and b is not None, f"item {i}"
        if a.is_cuda:
            eps = torch.finfo(b.dtype).eps
            torch.testing.assert_close(a, b, rtol=8 * eps, atol=8 * eps * b.abs().max().item(), msg=f"item {i}")
        else:
            assert torch.equal(a, b), f"item {i}: max difference {(a - b).abs().max()}"


def reset(model):
    for m in model.modules():
        if isinstance(m, (spikejit.neuron.BaseNode, spikejit.FlexSN)):
            m.reset()


@pytest.fixture(autouse=True)
def no_tf32():
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gradients_states_and_statistics_equal_the_plain_module(device, dropout):
    torch.manual_seed(1)
    plain = nn.Sequential(ConvBlock(3, 8, dropout), ConvBlock(8, 6, dropout)).to(device)
    blocks = copy.deepcopy(plain)
    recomputed = nn.Sequential(spikejit.Recompute(blocks[0], spikes=False), spikejit.Recompute(blocks[1]))
    x = torch.randn(4, 2, 3, 7, 5, device=device)  # raw data into the first block
    grad = torch.randn(4, 2, 6, 7, 5, device=device)
    for _ in range(2):  # twice: the running statistics advance once per step in both
        reset(plain), reset(recomputed)
        assert_same(step(recomputed, x, grad), step(plain, x, grad))
        def of(model, kind):
            return [m for m in model.modules() if isinstance(m, kind)]

        for a, b in zip(of(recomputed, nn.BatchNorm2d), of(plain, nn.BatchNorm2d)):
            assert_same([a.running_mean, a.running_var], [b.running_mean, b.running_var])
            assert a.num_batches_tracked.item() == b.num_batches_tracked.item()
        for a, b in zip(of(recomputed, spikejit.LIFNode), of(plain, spikejit.LIFNode)):  # the states the forward left
            assert_same([a.v, a.v_seq], [b.v.detach(), b.v_seq.detach()])


def saved_bytes(model, x):
    """Bytes autograd saves for one forward of `model` (saved_tensors_hooks see every save)."""
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(sizes)


def test_saves_only_the_packed_input():
    block = ConvBlock(8, 16)
    x = spikes(6, 4, 8, 9, 9).requires_grad_()
    recomputed = spikejit.Recompute(block)
    n = x.numel()
    assert saved_bytes(recomputed, x) == (n + 7) // 8
    reset(block)
    assert saved_bytes(block, x) > 8 * n  # the plain block keeps conv input, BN input and LIF values
    assert saved_bytes(spikejit.Recompute(ConvBlock(8, 16), spikes=False), x) == 4 * n


def test_frozen_module_and_no_grad_run_the_plain_module():
    block = ConvBlock(2, 3)
    recomputed = spikejit.Recompute(block)
    x = spikes(3, 2, 2, 4, 4)
    with torch.no_grad():
        y = recomputed(x)
    reset(block)
    assert torch.equal(y, block(x)) and not y.requires_grad
    # Only x requires a gradient: the block is recomputed for x.grad alone.
    block.requires_grad_(False)
    grad = torch.randn(3, 2, 3, 4, 4)
    reset(block)
    got = step(recomputed, x, grad)[:2]
    reset(block)
    assert_same(got, step(block, x, grad)[:2])


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="module: expected an nn.Module"):
        spikejit.Recompute(lambda x: x)
    with pytest.raises(TypeError, match="spikes: expected a bool"):
        spikejit.Recompute(nn.Identity(), spikes=1)
    single = spikejit.Recompute(nn.Sequential(nn.Linear(4, 4), spikejit.LIFNode(step_mode="s")))
    with pytest.raises(ValueError, match=r"module: Recompute needs multi-step neurons.*1 \(LIFNode\)"):
        single(torch.randn(2, 4))
    node = spikejit.LIFNode(step_mode="m")
    carried = spikejit.Recompute(nn.Sequential(nn.Linear(4, 4), node))
    carried(torch.randn(3, 2, 4, requires_grad=True))
    node.v = torch.randn(2, 4, requires_grad=True) * 1.0
    with pytest.raises(ValueError, match=r"module: 1\.v carries a gradient"):
        carried(torch.randn(3, 2, 4, requires_grad=True))

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x), x

    with pytest.raises(TypeError, match="module: Recompute expects a module that returns one tensor"):
        spikejit.Recompute(Pair())(torch.randn(2, 4, requires_grad=True))


@pytest.mark.parametrize("make", [lambda: spikejit.LIFNode(step_mode="m", store_v_seq=True),
                                  lambda: spikejit.FlexSN(AdaptiveCore(), 1, 2, 1, step_mode="m")])
def test_a_state_left_by_the_block_refuses_a_gradient_instead_of_giving_zero(make):
    # The block's forward runs without autograd: its neurons' states have no graph. A second
    # call starting from them, or a loss on them, would drop their gradient; both are errors.
    neuron = make()
    block = spikejit.Recompute(nn.Sequential(nn.Linear(4, 4), neuron), spikes=False)
    x = torch.randn(3, 2, 4, requires_grad=True)
    block(x).sum().backward()
    with pytest.raises(ValueError, match=r"module: 1\.\w+ carries a gradient from an earlier call"):
        block(x)
    state = neuron.v if isinstance(neuron, spikejit.LIFNode) else neuron.states[0]
    with pytest.raises(RuntimeError, match=r"^spikejit.Recompute: the neuron state 1\.\w+(\[0\])? was computed"):
        state.sum().backward()
    neuron.detach()  # truncated BPTT on purpose: the next call starts from the values
    block(x).sum().backward()
    neuron.reset()
    block(x).sum().backward()


class Doubled(nn.Module):
    """Returns twice the neuron's spikes: not the neuron's own output."""

    def __init__(self, n):
        super().__init__()
        self.fc, self.neuron = nn.Linear(n, n), spikejit.LIFNode(step_mode="m")

    def forward(self, x):
        return self.neuron(self.fc(x)) * 2.0


def ending_blocks(n):
    """(block, whether it returns its last neuron's only output as it is)"""
    return [
        (nn.Sequential(nn.Linear(n, n), spikejit.LIFNode(tau=1.5, step_mode="m", store_v_seq=True)), True),
        (nn.Sequential(nn.Linear(n, n), spikejit.ParametricLIFNode(init_tau=1.7, step_mode="m")), True),
        (nn.Sequential(nn.Linear(n, n), spikejit.FlexSN(AdaptiveCore(), 1, 2, 1, step_mode="m")), True),
        (nn.Sequential(nn.Linear(n, n), spikejit.IFNode(step_mode="m"), nn.Linear(n, n)), False),
        (Doubled(n), False),
    ]


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("case", range(5))
def test_a_block_returning_its_neurons_spikes_recomputes_them_packed(device, case):
    """The recomputation of a block that returns its last neuron's spikes writes them as bits with a
    gradient carrier in their place (they are needed only for their gradient): same outputs and
    gradients (PLIF's w and FlexSN core parameters included) as the plain module."""
    torch.manual_seed(2)
    n = 12
    plain, exits = ending_blocks(n)[case]
    plain = plain.to(device)
    recomputed = spikejit.Recompute(copy.deepcopy(plain))
    x = spikes(5, 3, n, device=device)
    grad = torch.randn(5, 3, n, device=device)
    y = recomputed(x.detach().requires_grad_())
    assert (y.grad_fn.exit_call is not None) == exits
    reset(plain), reset(recomputed)
    assert_same(step(recomputed, x, grad), step(plain, x, grad))


def test_a_module_taking_another_path_in_the_recomputation_is_an_error():
    class Fickle(nn.Module):
        """Returns its neuron's spikes on the first call, twice them afterwards."""

        def __init__(self):
            super().__init__()
            self.fc, self.neuron, self.calls = nn.Linear(4, 4), spikejit.LIFNode(step_mode="m"), 0

        def forward(self, x):
            self.calls += 1
            s = self.neuron(self.fc(x))
            return s if self.calls == 1 else s * 2.0

    y = spikejit.Recompute(Fickle())(spikes(3, 2, 4).requires_grad_())
    with pytest.raises(RuntimeError, match="module: the recomputation returned another tensor"):
        y.sum().backward()


class PerStep(nn.Sequential):
    """Its layers on [T, B, ...] with time folded into the batch."""

    def forward(self, x):
        T, B = x.shape[:2]
        return super().forward(x.flatten(0, 1)).unflatten(0, (T, B))


@pytest.mark.parametrize("packed", [True, False])
def test_the_unpacked_input_is_freed_before_the_neuron_runs(packed):
    """In the recomputation of an nn.Sequential block, nothing but its layers holds the unpacked
    input: after a packed-spike conv (which keeps bits) it is gone when the neuron runs; after a
    plain conv (which keeps its input) it is not."""
    conv = nn.Conv2d(4, 6, 3, padding=1)
    block = nn.Sequential(PerStep(spikejit.packed_spikes(conv) if packed else conv, nn.BatchNorm2d(6)),
                          spikejit.LIFNode(step_mode="m"))
    inputs, alive = [], []
    block[0].register_forward_pre_hook(lambda m, args: inputs.append(weakref.ref(args[0])))
    block[1].register_forward_pre_hook(lambda m, args: alive.append(inputs[-1]() is not None))
    x = spikes(3, 2, 4, 5, 5).requires_grad_()
    spikejit.Recompute(block)(x).sum().backward()
    assert alive == [True, not packed]  # the forward's input is x itself; then the recomputation's


def checkpointed_core(x, v):
    # A program of its own: PyTorch keeps the module of a failed checkpoint backward alive (in the
    # hooks of its graph), and it must not add an owner to the handles other tests count.
    s = spikejit.surrogate.Sigmoid(alpha=3.0)(0.6 * v + x - 1.0)
    return s, (0.6 * v + x) * (1.0 - s)


STATEFUL = {
    "LIFNode": lambda: spikejit.LIFNode(step_mode="m"),
    "ParametricLIFNode": lambda: spikejit.ParametricLIFNode(step_mode="m"),
    "FlexSN": lambda: spikejit.FlexSN(checkpointed_core, 1, 1, 1, strict=True),
    "single-step LIFNode": lambda: spikejit.LIFNode(step_mode="s"),
}


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("make", list(STATEFUL))
def test_torch_checkpoint_recomputing_a_moved_on_state_is_an_error(make, reentrant):
    """torch.utils.checkpoint runs the block again in the backward, where a neuron module holds
    the state its forward ended with: an error, not silently wrong gradients."""
    from torch.utils.checkpoint import checkpoint
    linear, neuron = nn.Linear(6, 10), STATEFUL[make]()
    x = torch.randn(5, 3, 6, requires_grad=True)
    steps = [x] if neuron.step_mode == "m" else list(x)
    outputs = [checkpoint(lambda x_t: neuron(linear(x_t)), x_t, use_reentrant=reentrant) for x_t in steps]
    with pytest.raises(RuntimeError, match=f"{type(neuron).__name__}: called during a backward pass with the "
                                           "state an earlier call left"):
        torch.stack(outputs).sum().backward()


def test_torch_checkpoint_of_a_block_that_resets_its_neurons_is_right():
    from torch.utils.checkpoint import checkpoint
    linear, neuron = nn.Linear(6, 10), spikejit.LIFNode(step_mode="m")

    def block(x):
        neuron.reset()
        return neuron(linear(x))

    x = torch.randn(5, 3, 6, requires_grad=True)
    grads = []
    for run in (block, lambda x: checkpoint(block, x, use_reentrant=False)):
        x.grad = None
        run(x).sum().backward()
        grads.append(x.grad.clone())
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("packed", [False, True])
def test_a_second_derivative_through_a_block_is_an_error_not_a_missing_term(packed):
    """The block's backward runs without a graph of its own: differentiating its gradients again
    raises (with respect to the input, a parameter or the incoming gradient), even beside other
    terms that do have second derivatives; first derivatives under create_graph=True are the
    usual ones."""
    torch.manual_seed(0)
    block = spikejit.Recompute(nn.Sequential(nn.Linear(8, 8), spikejit.LIFNode(step_mode="m")), spikes=packed)
    x = (spikes(4, 3, 8) if packed else torch.randn(4, 3, 8)).requires_grad_()
    weights = torch.randn(4, 3, 8, requires_grad=True)
    (plain,) = torch.autograd.grad((block(x) * weights).sum(), x)
    block.module[1].reset()
    (first,) = torch.autograd.grad((block(x) * weights).sum(), x, create_graph=True)
    torch.testing.assert_close(first, plain)
    for loss, wrt in [((first ** 2).sum() + (x ** 3).sum(), x), (first.sum(), block.module[0].weight),
                      (first.sum(), weights)]:
        with pytest.raises(RuntimeError, match="^spikejit.Recompute: the gradients of a Recompute block have first"):
            torch.autograd.grad(loss, wrt, retain_graph=True)
