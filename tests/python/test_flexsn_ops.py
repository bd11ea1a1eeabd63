"""FlexSN's op coverage beyond the reference table: the math ops with IR rules of their own,
in-place ops (traced functionalized) and the ops FlexSN compiles through PyTorch's
decompositions. Each core compiles under strict=True, and its values and gradients equal an
eager loop of the same core: in fp64 on the CPU (to rounding: the translations are exact
formulas) and in fp32 on CUDA."""
import copy

import pytest
import torch
import torch.nn.functional as F

import spikejit
from spikejit import _trace
from conftest import device_params, random_input

# f(x, v) -> the step's value; the arguments are kept inside each op's domain (|v| < 0.25).
OWN_RULES = {
    "log1p": lambda x, v: torch.log1p(x.abs()) + v,
    "expm1": lambda x, v: torch.expm1(torch.tanh(x)) * (1 + v),
    "exp2": lambda x, v: torch.exp2(torch.tanh(x) + v),
    "log10": lambda x, v: torch.log10(x.abs() + 1 + v),
    "tan": lambda x, v: torch.tan(torch.tanh(x) + v),
    "atan": lambda x, v: torch.atan(x) + v,
    "asin": lambda x, v: torch.asin(0.6 * torch.tanh(x) + v),
    "acos": lambda x, v: torch.acos(0.6 * torch.tanh(x) + v),
    "sinh": lambda x, v: torch.sinh(x + v),
    "cosh": lambda x, v: torch.cosh(x) - v,
    "asinh": lambda x, v: torch.asinh(x) * v + x,
    "acosh": lambda x, v: torch.acosh(x.abs() + 1.3 + v),
    "atanh": lambda x, v: torch.atanh(0.6 * torch.tanh(x) + v),
    "erfc": lambda x, v: torch.erfc(x + v),
    "erfinv": lambda x, v: torch.erfinv(0.7 * torch.tanh(x) + v),
    "special.erfinv": lambda x, v: torch.special.erfinv(0.5 * torch.sigmoid(x) + v),
    "special.ndtri": lambda x, v: torch.special.ndtri(0.5 * torch.sigmoid(x) + 0.25 + 0.5 * v),
    "atan2": lambda x, v: torch.atan2(x, v + 0.5),
    "hypot": lambda x, v: torch.hypot(x, v + 0.5),
    "isnan and isinf": lambda x, v: torch.where(torch.isnan(x) | torch.isinf(x), v, x),
    "remainder": lambda x, v: torch.remainder(2 * x, torch.where(x < 0.3, v - 0.45, v + 0.55)),  # both signs
    "remainder by a negative number": lambda x, v: torch.remainder(x, -0.7) + v,
    "copysign": lambda x, v: torch.copysign(x, v) + v,
    "copysign by a number": lambda x, v: torch.copysign(x, -1.0) * (1 + v),
    "signbit": lambda x, v: torch.where(torch.signbit(x - v), v, x),
    "fmax and fmin": lambda x, v: torch.fmax(x, v) + torch.fmin(x, -v),
    "round to decimals": lambda x, v: torch.round(x, decimals=2) + torch.round(30 * x, decimals=-1) + v,
}

DECOMPOSED = {
    "softplus": lambda x, v: F.softplus(x) + v,
    "softplus with beta and threshold": lambda x, v: F.softplus(x, beta=2.0, threshold=3.0) + v,
    "silu": lambda x, v: F.silu(x) + v,
    "gelu": lambda x, v: F.gelu(x) + v,
    "gelu tanh": lambda x, v: F.gelu(x, approximate="tanh") + v,
    "elu": lambda x, v: F.elu(x) + v,
    "selu": lambda x, v: F.selu(x) + v,
    "celu": lambda x, v: F.celu(x, alpha=0.5) + v,
    "mish": lambda x, v: F.mish(x) + v,
    "hardtanh": lambda x, v: F.hardtanh(x, -0.8, 0.9) + v,
    "relu6": lambda x, v: F.relu6(x * 4) + v,
    "hardsigmoid": lambda x, v: F.hardsigmoid(x * 3) + v,
    "hardswish": lambda x, v: F.hardswish(x * 3) + v,
    "logsigmoid": lambda x, v: F.logsigmoid(x) + v,
    "softsign": lambda x, v: F.softsign(x) + v,
    "threshold": lambda x, v: F.threshold(x, 0.1, 2.0) + v,
    "hardshrink": lambda x, v: F.hardshrink(x) + v,
    "softshrink": lambda x, v: F.softshrink(x) + v,
    "tanhshrink": lambda x, v: F.tanhshrink(x) + v,
    "lerp": lambda x, v: torch.lerp(v, x, 0.3),
    "lerp with a tensor weight": lambda x, v: torch.lerp(v, x, torch.sigmoid(x)),
    "addcmul": lambda x, v: torch.addcmul(v, x, x, value=0.5),
    "addcdiv": lambda x, v: torch.addcdiv(v, x, x.abs() + 1, value=0.5),
    "logaddexp": lambda x, v: torch.logaddexp(x, v),
    "xlogy": lambda x, v: torch.xlogy(x.abs(), v + 1.5),
    "nan_to_num": lambda x, v: torch.nan_to_num(x, nan=0.5, posinf=2.0, neginf=-2.0) + v,
    "square": lambda x, v: torch.square(x) + v,
    "logit": lambda x, v: torch.logit(0.8 * torch.sigmoid(x) + 0.1) + v,
    # Away from 0, where sinc's gradient cancels catastrophically in fp32 (the eager reference's too).
    "sinc": lambda x, v: torch.sinc(x.abs() + 0.25) + v,
}


def in_place(x, v):
    h = x * 1.0
    h.mul_(0.5)
    h += v
    h.clamp_(-1.5, 1.5)
    return torch.sigmoid_(h)


def in_place_without_a_functional_form(x, v):
    """square_ and float_power_ have no form functionalization knows: decomposed first."""
    h = x * 0.5
    h.square_()
    g = (h + 1.0).double().float_power_(0.5).to(x.dtype)
    h.copy_(g + v)
    return h


aten = torch.ops.aten


def constants(x, v):
    made = (torch.ones_like(x) + torch.zeros_like(v) + torch.full_like(x, 0.3) + x.new_ones(x.shape)
            + torch.ones(x.shape, dtype=x.dtype, device=x.device) + torch.zeros(x.shape, dtype=x.dtype, device=x.device)
            + torch.full(x.shape, 0.2, dtype=x.dtype, device=x.device))
    return x * made * v


def reference_table_math(x, v):
    rounded = torch.floor(3 * x) + torch.ceil(3 * x) + torch.round(3 * x)
    a = x.abs() + 1
    positive = torch.sqrt(a) + torch.rsqrt(a) + torch.log2(a) + torch.reciprocal(a)
    return (torch.cos(x) + rounded + positive + torch.relu(x - v) + torch.maximum(x, v) + aten.div.Scalar(x, 2.0)
            + torch.fmod(x, 0.7) + (1 - x) + v)


def backward_helpers(x, v):
    g = v + 1
    return (aten.sigmoid_backward(g, torch.sigmoid(x)) + aten.tanh_backward(g, torch.tanh(x))
            + aten.threshold_backward(g, x, 0.5))


# Overloads and forms no other core here traces (each rule of the translation is exercised).
FORMS = {
    "add, sub and mul with a number": lambda x, v: aten.mul.Scalar(aten.sub.Scalar(aten.add.Scalar(x, 0.5), 0.25), 3.0)
                                                   + v,
    "rsub of tensors": lambda x, v: torch.rsub(x, v),
    "alias": lambda x, v: aten.alias(x) + v,
    "comparisons of tensors": lambda x, v: (torch.where((x > v) & (x <= 2 * v + 0.3), x, v)
                                            + torch.where((x < v) | (x != v), 0.5 * x, v)),
    "xor": lambda x, v: torch.where(torch.logical_xor(x > 0, v > 0) ^ (x > 1), x, v),
    "clamp by tensors": lambda x, v: (torch.clamp(x, min=v - 0.5, max=v + 0.5) + torch.clamp_min(x, v)
                                      + torch.clamp_max(x, v)),
    "clamp by numbers": lambda x, v: torch.clamp_min(x, 0.2) + torch.clamp_max(x, 0.6) + v,
    "div with rounding": lambda x, v: (torch.div(3 * x, v + 0.5, rounding_mode="floor")
                                       + aten.div.Scalar_mode(3 * x, 0.7, rounding_mode="trunc") + v),
    "fmod of tensors": lambda x, v: torch.fmod(2 * x, v + 0.5),
    "pow of tensors and of a number": lambda x, v: torch.pow(x.abs() + 1, v) + 2.0 ** x,
    "constants": constants,
    "a tensor made in the core": lambda x, v: x * torch.tensor(0.5) + v,
    "where with numbers": lambda x, v: torch.where(x > 0, 1.0, 0.0) + torch.where(x > 0.5, x, 0.0) + v,
    "masked_fill with a tensor": lambda x, v: x.masked_fill(x > 0.5, torch.tensor(0.25)) + v,
    "logic": lambda x, v: torch.where(torch.logical_or(~(x > 0.5), v > 0.1), x, v).masked_fill(x > 1.5, 0.3),
    "leaky_relu": lambda x, v: F.leaky_relu(x - 0.5, 0.1) + v,
    "sgn and trunc": lambda x, v: torch.sgn(x - 0.5) * v + torch.trunc(3 * x),
    "heaviside": lambda x, v: x * torch.heaviside((x - 0.5).detach(), torch.zeros_like(x)) + v,
    "the reference table's math": reference_table_math,
    "backward helpers": backward_helpers,
}

IN_PLACE = {"in-place ops on a local": in_place,
            "in-place ops without a functional form": in_place_without_a_functional_form}
OPS = {**OWN_RULES, **DECOMPOSED, **FORMS, **IN_PLACE}
SPECIAL_VALUES = {"isnan and isinf", "nan_to_num", "fmax and fmin", "signbit"}
# ATen's fp64 hardsigmoid multiplies by a float32 1/6 (relative error 3e-8); the kernels by the
# double 1/6 of PyTorch's decomposition.
FLOAT32_CONSTANTS = {"hardsigmoid"}


def make_core(f):
    def core(x, v):
        y = f(x, v)
        return y, 0.5 * v + 0.1 * torch.tanh(y)
    return core


def eager_loop(core, x):
    v = torch.zeros_like(x[0])
    ys = []
    for t in range(x.shape[0]):
        y, v = core(x[t], v)
        ys.append(y)
    return torch.stack(ys), v


def random_sequence(name, device, dtype):
    x = random_input(6, 40, device=device, dtype=dtype)
    if name in SPECIAL_VALUES:
        x[1, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    return x


@pytest.mark.parametrize("device", device_params(), indirect=True)
@pytest.mark.parametrize("name", list(OPS))
def test_op_compiles_and_matches_an_eager_loop(name, device):
    core = make_core(OPS[name])
    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    x = random_sequence(name, device, dtype)
    grad_y = torch.randn_like(x)
    results = []
    for run in ("kernel", "eager"):
        xr = x.clone().requires_grad_()
        if run == "kernel":
            node.reset()
            y, v = node(xr), node.states[0]
        else:
            y, v = eager_loop(core, xr)
        ((y * grad_y).sum() + v.sum()).backward()
        results.append((y.detach(), v.detach(), xr.grad))
    tolerance = dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    if dtype == torch.float64 and name in FLOAT32_CONSTANTS:
        tolerance = dict(rtol=1e-7, atol=1e-9)
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, equal_nan=True, **tolerance)


def test_a_core_that_updates_its_state_in_place_equals_the_out_of_place_core():
    def in_place_core(x, v):
        s = spikejit.surrogate.ATan()(v * 0.5 + x - 1.0)
        v.mul_(0.5).add_(x).mul_(1.0 - s)
        return s, v

    def core(x, v):
        s = spikejit.surrogate.ATan()(v * 0.5 + x - 1.0)
        return s, (v * 0.5 + x) * (1.0 - s)

    node, reference = (spikejit.FlexSN(c, 1, 1, 1, strict=True) for c in (in_place_core, core))
    body = [n.program.canonical().split("\n", 1)[1] for n in (node, reference)]  # after the name line
    assert body[0] == body[1]
    x = random_input(8, 30)
    assert torch.equal(node(x), reference(x))


def test_an_op_whose_decomposition_needs_an_unsupported_op_is_named_itself():
    """i0 decomposes into prims.bessel_i0, which has no rule: the error names i0."""
    def core(x, v):
        return torch.i0(x), v * 0.5

    with pytest.raises(spikejit.UnsupportedCoreError) as info:
        spikejit.FlexSN(core, 1, 1, 1, strict=True)
    assert info.value.op == "aten.i0.default"


class InPlaceCoreWithParameters(torch.nn.Module):
    """A learnable scalar decay and per-neuron threshold, the state updated in place."""

    def __init__(self, neurons):
        super().__init__()
        self.decay = torch.nn.Parameter(torch.tensor(0.6))
        self.threshold = torch.nn.Parameter(torch.linspace(0.5, 1.2, neurons))

    def forward(self, x, v):
        h = v.clone()
        h.mul_(self.decay).add_(x)
        s = spikejit.surrogate.Sigmoid()(h - self.threshold)
        h.mul_(1.0 - s)
        return s, h


class SquaringCoreWithParameters(InPlaceCoreWithParameters):
    """The same with square_, which is traced decomposed before it is functionalized."""

    def forward(self, x, v):
        h = v.clone()
        h.mul_(self.decay).add_(x)
        g = h.clone().square_()
        s = spikejit.surrogate.Sigmoid()(g - self.threshold)
        h.mul_(1.0 - s)
        return s, h


@pytest.mark.parametrize("core_class", [InPlaceCoreWithParameters, SquaringCoreWithParameters])
def test_an_in_place_core_keeps_its_module_parameters_learnable(core_class):
    """Functionalization must not turn the core's parameters into constants: they stay IR
    parameters, read at each call, with the gradients of eager autograd."""
    neurons = 12
    core = core_class(neurons)
    node = spikejit.FlexSN(core, 1, 1, 1, strict=True, example_inputs=[torch.zeros(neurons)] * 2)
    assert node.program.canonical().count("param ") == 2
    x = random_input(7, neurons, dtype=torch.float64)
    node.double()
    reference = copy.deepcopy(core)
    node(x).sum().backward()
    v = torch.zeros(neurons, dtype=torch.float64)
    spikes = []
    for t in range(x.shape[0]):
        s, v = reference(x[t], v)
        spikes.append(s)
    torch.stack(spikes).sum().backward()
    for got, want in ((core.decay.grad, reference.decay.grad), (core.threshold.grad, reference.threshold.grad)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_a_core_with_float32_tensors_that_float64_rejects_compiles():
    """torch.lerp will not take a float32 weight of several elements with float64 inputs, so the
    check of the compiled core against eager PyTorch runs in float32 for it instead of falling
    back to the eager scan."""
    weight = torch.linspace(0.1, 0.9, 50)  # a per-neuron parameter of the neuron, float32

    def core(x, v):
        h = torch.lerp(v, x, weight)
        s = spikejit.surrogate.Sigmoid()(h - 1.0)
        return s, h * (1.0 - s)

    node = spikejit.FlexSN(core, 1, 1, 1, strict=True)
    x = (random_input(8, 50) + 0.5).requires_grad_()
    reference = x.detach().clone().requires_grad_()
    v = torch.zeros(50)
    spikes = []
    for t in range(x.shape[0]):
        s, v = core(reference[t], v)
        spikes.append(s)
    y, want = node(x), torch.stack(spikes)
    torch.testing.assert_close(y, want)
    y.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-5, atol=1e-6)


RANDOM_FORMS = [
    lambda x, v: torch.rand_like(x) + torch.rand(x.shape, dtype=x.dtype) + v,
    lambda x, v: torch.randn_like(x) + torch.randn(x.shape, dtype=x.dtype) + v,
    lambda x, v: torch.bernoulli(torch.sigmoid(x)) + torch.bernoulli(x, 0.3) + x.clone().bernoulli_(torch.sigmoid(v)),
    lambda x, v: torch.empty_like(x).uniform_(-1.0, 2.0) + torch.empty_like(x).normal_(0.5, 2.0) + v,
    lambda x, v: torch.normal(x, 0.5) + torch.normal(0.2, x.abs() + 0.5) + torch.normal(x, v.abs() + 0.5),
    lambda x, v: spikejit.surrogate.ATan()(x - v),
    lambda x, v: F.dropout(x, 0.2) + v,
]


def test_every_rule_of_the_translation_is_exercised(monkeypatch):
    """Each ATen op FlexSN translates is traced by some core of this file (their values are
    compared with eager loops above; the random forms' statistics in test_random_neurons.py), so
    that a rule cannot be wrong unseen (remainder's was: it wrote a type error)."""
    used = set()

    def recording(name, rule):
        def record(*args, **kwargs):
            used.add(name)
            return rule(*args, **kwargs)
        return record

    for name, rule in list(_trace.RULES.items()):
        monkeypatch.setitem(_trace.RULES, name, recording(name, rule))
    examples = [torch.zeros(8), torch.zeros(8)]
    for f in [*OPS.values(), *RANDOM_FORMS]:
        _trace.trace_core(make_core(f), 1, 1, 1, examples)
    missing = sorted(set(_trace.RULES) - used)
    assert not missing, ", ".join(missing)
