"""Random FlexSN cores against an eager loop of the same core: each case draws a core (inputs,
states, outputs, a learnable parameter, and a random program over them of arithmetic,
transcendentals, comparisons, surrogate spikes, where, min/max, rounding and detach) and checks
that the kernels give the loop's outputs, final states, state sequences, requires_grad flags and
gradients (None where the loop gives None), in float64 on the CPU, on the eager paths, with
checkpoints or packed spikes saved, and (a few) under torch.compile. The cores change with the test seed (conftest:
SPIKEJIT_TEST_SEED replays one)."""
import random

import pytest
import torch
import torch._dynamo
from torch._inductor.utils import fresh_cache

import spikejit
from conftest import random_input

STEPS, SHAPE = 6, (3, 8)
CASES = 24

# name -> (arity, f); every f keeps values bounded when applied step after step.
UNARY = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "neg": torch.neg,
    "half": lambda a: a * 0.5,
    "floor": torch.floor,  # a zero gradient, not None (as PyTorch's)
    "detach": torch.detach,
    "relu": torch.relu,
    "exp of minus abs": lambda a: torch.exp(-a.abs()),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul by tanh": lambda a, b: a * torch.tanh(b),
    "div by 1 + square": lambda a, b: a / (1.0 + b * b),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "spike": lambda a, b: spikejit.surrogate.ATan()(a - b),
    "comparison": lambda a, b: (a >= b).to(a.dtype),
}
TERNARY = {
    "where": lambda a, b, c: torch.where(a > 0.2, b, c),
}


def draw_core(rng: random.Random, theta: torch.Tensor):
    """(core, num_inputs, num_states, num_outputs, description) of a random core."""
    ni, ns, no = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 2)
    program = []  # (name, f, operand indices into the values so far)
    num_leaves = ni + ns + 1  # inputs, states, theta
    for _ in range(rng.randint(3, 9)):
        table = rng.choice([UNARY, BINARY, BINARY, TERNARY])
        name = rng.choice(sorted(table))
        arity = {id(UNARY): 1, id(BINARY): 2, id(TERNARY): 3}[id(table)]
        size = num_leaves + len(program)
        program.append((name, table[name], [rng.randrange(size) for _ in range(arity)]))
    size = num_leaves + len(program)
    # Results: any value; a next state goes through tanh or not (bounded either way: every
    # operation above grows a value by a bounded amount).
    results = [(rng.randrange(size), rng.random() < 0.5) for _ in range(no + ns)]

    def core(*args):
        values = [*args, theta]
        for _, f, operands in program:
            values.append(f(*(values[i] for i in operands)))
        picked = [torch.tanh(values[i]) if squash else values[i] * 1.0 for i, squash in results]
        return tuple(picked)

    description = [f"{name}{operands}" for name, _, operands in program] + [f"results {results}"]
    return core, ni, ns, no, "; ".join(description)


def eager_loop(core, num_outputs, inputs, states):
    """(outputs, final states, state sequences) of the core over the steps (a result computed
    from theta alone broadcast to the neurons, as FlexSN's are)."""
    per_step = []
    for t in range(inputs[0].shape[0]):
        results = [r.expand(inputs[0].shape[1:]) for r in core(*(x[t] for x in inputs), *states)]
        states = list(results[num_outputs:])
        per_step.append(results)
    sequences = [torch.stack(seq) for seq in zip(*per_step)]
    return sequences[:num_outputs], states, sequences[num_outputs:]


# The eager paths (C++ and Python), and the C++ path saving checkpoints or packed spikes.
PATHS = {"cpp": {}, "python": {}, "checkpoints": dict(checkpoint_every=2), "packed spikes": dict(pack_spikes=True)}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", range(CASES))
def test_a_random_core_equals_an_eager_loop(case, path, seed, monkeypatch):
    rng = random.Random(seed * CASES + case)
    theta = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    core, ni, ns, no, description = draw_core(rng, theta)
    node = spikejit.FlexSN(core, ni, ns, no, store_state_seqs=True, strict=True, **PATHS[path])
    monkeypatch.setattr(spikejit._kernel_calls, "CPP_CALLS", path != "python")
    check_against_the_loop(node.multi_step_functional_forward, core, ni, ns, no, theta, rng, description)


@pytest.mark.parametrize("case", range(3))
def test_a_random_core_compiled_equals_an_eager_loop(case, seed):
    """The custom op under torch.compile(fullgraph=True), traced afresh."""
    rng = random.Random(seed * CASES + case)
    theta = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    core, ni, ns, no, description = draw_core(rng, theta)
    node = spikejit.FlexSN(core, ni, ns, no, store_state_seqs=True, strict=True)
    torch._dynamo.reset()
    with fresh_cache():
        compiled = torch.compile(node.multi_step_functional_forward, fullgraph=True)
        check_against_the_loop(compiled, core, ni, ns, no, theta, rng, description)


def check_against_the_loop(forward, core, ni, ns, no, theta, rng, description):
    """forward(*inputs, states=...) -> (outputs, finals, seqs) against eager_loop: values,
    requires_grad, gradients (of a random half of the inputs and initial states, and theta)."""
    print(description)
    inputs = [random_input(STEPS, *SHAPE, dtype=torch.float64) for _ in range(ni)]
    states = [random_input(*SHAPE, dtype=torch.float64, scale=0.5) for _ in range(ns)]
    arguments = [*inputs, *states]
    for i, t in enumerate(arguments):
        if i == 0 or rng.random() < 0.5:
            t.requires_grad_()
    leaves = [t for t in arguments if t.requires_grad] + [theta]

    outputs, finals, seqs = forward(*inputs, states=states)
    got = [*outputs, *finals, *seqs]
    want_outputs, want_finals, want_seqs = eager_loop(core, no, inputs, states)
    want = [*want_outputs, *want_finals, *want_seqs]
    assert [r.requires_grad for r in got] == [r.requires_grad for r in want], description
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10, msg=lambda m: f"{description}: {m}")
    differentiable = [i for i, r in enumerate(want) if r.requires_grad]
    if not differentiable:
        return
    cotangents = [torch.randn_like(want[i]) for i in differentiable]
    grads = torch.autograd.grad([got[i] for i in differentiable], leaves, cotangents, allow_unused=True)
    want_grads = torch.autograd.grad([want[i] for i in differentiable], leaves, cotangents, allow_unused=True)
    for g, w in zip(grads, want_grads):
        assert (g is None) == (w is None), description
        if g is not None:
            torch.testing.assert_close(g, w, rtol=1e-8, atol=1e-10, msg=lambda m: f"{description}: {m}")
