"""Checks every neuron module of the SpikingJelly family passes the same way (its tests pass
their module and input): torch.compile without graph breaks, pickling, checkpoints; and the
tolerance of a comparison with SpikingJelly's torch reference where the step has
transcendentals."""
import io

import torch

FP32 = dict(rtol=1e-5, atol=1e-5)


def assert_close_to_reference(ours, theirs, terms: int = 1, exp_differs: bool = False):
    """Potentials or gradients against SpikingJelly's: float64 within 1e-12; float32 within its
    rounding on the CPU; on CUDA, whose exp and sigmoid differ from PyTorch's by an ulp that a
    recurrence may grow along the sequence, within 1e-4 of the largest value, and so on the CPU
    where the step's own exp is not PyTorch's (`exp_differs`: the executor's float32 exp, as in
    EIF's forward). NaN must be where
    the reference has NaN (a neuron driven to overflow gives it in both). `terms`: how many values
    each element sums (the gradient of a parameter shared by many neuron-steps); a sum's rounding
    depends on its order and grows with the count (the worst case in float32 at 1554 terms:
    1.8e-5 where the float64 sum lies between the two), so the absolute tolerance grows with its
    square root."""
    scale = terms ** 0.5
    if theirs.dtype == torch.float64:
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12 * scale, equal_nan=True)
    elif theirs.device.type == "cuda" or exp_differs:
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * float(theirs.abs().max()) * scale,
                                   equal_nan=True)
    else:
        torch.testing.assert_close(ours, theirs, rtol=FP32["rtol"], atol=FP32["atol"] * scale, equal_nan=True)


def backward_with_random_cotangents(outputs, seed: int) -> None:
    """Backward of sum(y * g) over `outputs`, with cotangents g drawn from `seed` (the same for
    the module under test and its reference)."""
    generator = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(y.shape, generator=generator, dtype=torch.float64).to(y) for y in outputs]
    sum((y * g).sum() for y, g in zip(outputs, cotangents)).backward()


def run_from_states(node, x, states: dict, params=()):
    """One multi-step call of `node` (storing v_seq) from the initial `states` ({name: tensor}, v
    first), with random cotangents on its spikes, v_seq and final states: ((spikes, v_seq, *final
    states), (x's gradient, the initial states', then those of the parameters named in
    `params`))."""
    xr = x.clone().requires_grad_()
    initial = {name: t.clone().requires_grad_() for name, t in states.items()}
    for name, t in initial.items():
        setattr(node, name, t)
    s = node(xr)
    outputs = [s, node.v_seq] + [getattr(node, name) for name in states]
    backward_with_random_cotangents(outputs, seed=7)
    grads = [xr.grad] + [t.grad for t in initial.values()] + [getattr(node, name).grad for name in params]
    return [y.detach() for y in outputs], grads


def assert_run_matches_reference(ours, theirs):
    """A run's ((spikes, *values), gradients) against SpikingJelly's: spikes exactly (and the case
    fires some, not all), values and gradients by assert_close_to_reference (the parameters'
    gradients as sums of s.numel() / their numel() terms per element)."""
    (s, *values), grads = ours
    (s_ref, *values_ref), grads_ref = theirs
    assert torch.equal(s, s_ref), "spikes differ"
    assert 0 < float(s_ref.abs().mean()) < 1, "the case should fire some spikes, not all"  # (ternary: -1 too)
    assert len(values + grads) == len(values_ref + grads_ref)
    # run_from_states' values are v_seq and the final states; its gradients x's, the initial
    # states' and then the parameters'.
    parameters = 1 + (len(values) - 1)
    for i, (a, b) in enumerate(zip(values + grads, values_ref + grads_ref)):
        is_parameter = i >= len(values) + parameters
        assert_close_to_reference(a, b, terms=s.numel() // b.numel() if is_parameter else 1)


def check_behaves_like_reference(ours, theirs, states=("v",)):
    """Two modules with their default options (single step): three single steps, then multi step
    with store_v_seq from the state they left, then reset: equal spikes, states (`states`) and
    v_seq, and the states back to 0 (v_seq to None)."""
    x = torch.randn(6, 2, 9, dtype=torch.float64).float() + 0.3
    for t in range(3):
        assert torch.equal(ours(x[t]), theirs(x[t]))
        for state in states:
            torch.testing.assert_close(getattr(ours, state), getattr(theirs, state), **FP32)
    ours.step_mode = theirs.step_mode = "m"
    ours.store_v_seq = theirs.store_v_seq = True
    assert torch.equal(ours(x[3:]), theirs(x[3:]))
    torch.testing.assert_close(ours.v_seq, theirs.v_seq, **FP32)
    ours.reset()
    theirs.reset()
    for state in states:
        assert getattr(ours, state) == getattr(theirs, state) == 0.0
    assert ours.v_seq is None


def check_inference_compiles_like_eager(step, x):
    """step(x) (no backward: inference-only modules) has no graph break under
    torch.compile(fullgraph=True) and gives eager's output."""
    torch._dynamo.reset()
    assert torch._dynamo.explain(step)(x).graph_break_count == 0
    assert torch.equal(torch.compile(step, fullgraph=True)(x), step(x))


def check_compiles_like_eager(node, x):
    """Linear -> node, reset first (a node that has reset()): no graph break under
    torch.compile(fullgraph=True), and the compiled step's outputs and weight gradient equal
    eager's."""
    torch._dynamo.reset()
    layer = torch.nn.Linear(x.shape[-1], x.shape[-1]).to(device=x.device, dtype=x.dtype)

    def step(x):
        if hasattr(node, "reset"):
            node.reset()
        return node(layer(x))

    assert torch._dynamo.explain(step)(x).graph_break_count == 0
    compiled = torch.compile(step, fullgraph=True)(x)
    compiled.sum().backward()
    grad = layer.weight.grad.clone()
    layer.weight.grad = None
    eager = step(x)
    eager.sum().backward()
    assert torch.equal(compiled, eager)
    torch.testing.assert_close(grad, layer.weight.grad, **FP32)


def check_pickled_module_runs(node, x, states=("v",)):
    """torch.save / torch.load of a module that has run: its states come along, and it runs on
    as the original does."""
    node(x)
    buffer = io.BytesIO()
    torch.save(node, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for name in states:
        assert torch.equal(getattr(loaded, name), getattr(node, name)), name
    assert torch.equal(loaded(x), node(x))


def check_checkpoints_give_per_step_gradients(make_node, x, states=("v",)):
    """Saving the states every 4 steps and recomputing between (the checkpointed backward) gives
    the outputs and input gradients of saving every step; make_node(checkpoint_every) makes a
    multi-step module."""
    weights = torch.linspace(-1, 1, x.shape[-1], device=x.device)
    results = []
    for checkpoint_every in (0, 4):
        node = make_node(checkpoint_every)
        xr = x.clone().requires_grad_()
        y = node(xr)
        ((y + sum(getattr(node, name).unsqueeze(0) for name in states)) * weights).sum().backward()
        results.append((y.detach(), xr.grad))
    assert torch.equal(results[0][0], results[1][0])
    torch.testing.assert_close(results[1][1], results[0][1], **FP32)
