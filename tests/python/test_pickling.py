"""Pickled neuron modules (torch.save of a whole model, multiprocessing): a module carries its
options or its core, not a registry handle, and makes its program again where it is loaded,
in another process too."""
import importlib
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

import spikejit
from conftest import random_input

CORES = '''
import torch
import spikejit


def adaptive_core(x, v, a):
    s = spikejit.surrogate.ATan()(v + x - 1.0 - a)
    return s, (v + x) * (1.0 - s) * 0.7, 0.9 * a + 0.2 * s


class LearnableThreshold(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.threshold = torch.nn.Parameter(torch.linspace(0.5, 1.5, 12))

    def forward(self, x, v):
        h = 0.5 * v + x
        s = spikejit.surrogate.Sigmoid()(h - self.threshold)
        return s, h * (1.0 - s)
'''


@pytest.fixture
def cores(tmp_path, monkeypatch):
    """A module of cores importable by this process and by a child process (pickle stores a
    function by its module and name)."""
    (tmp_path / "pickled_cores.py").write_text(CORES)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("pickled_cores", None)
    return importlib.import_module("pickled_cores")


def make_model(cores):
    return torch.nn.Sequential(
        spikejit.LIFNode(tau=3.0, v_threshold=0.6, v_reset=None, step_mode="m"),
        spikejit.ParametricLIFNode(init_tau=4.0, detach_reset=True, step_mode="m",
                                   surrogate_function=spikejit.surrogate.ATan(alpha=3.0)),
        spikejit.FlexSN(cores.adaptive_core, 1, 2, 1, strict=True),
        spikejit.FlexSN(cores.LearnableThreshold(), 1, 1, 1, strict=True),
        spikejit.IFNode(v_threshold=0.4, step_mode="m"))


def outputs_and_grads(model, x):
    x = x.clone().requires_grad_()
    for m in model:
        m.reset()
    y = model(x)
    y.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return y.detach(), x.grad, grads


def test_a_pickled_model_equals_the_original(cores):
    model = make_model(cores)
    x = random_input(6, 12)
    before = spikejit.registry.info()
    loaded = pickle.loads(pickle.dumps(model))
    assert [m.handle for m in loaded[2:4]] == [m.handle for m in model[2:4]]  # the same programs
    for got, want in zip(outputs_and_grads(loaded, x), outputs_and_grads(model, x)):
        if isinstance(got, list):
            assert len(got) == len(want) == 2
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
        else:
            torch.testing.assert_close(got, want)
    del loaded
    assert spikejit.registry.info()["owner_refs"] == before["owner_refs"]  # the copies' owners released


def test_a_model_saved_whole_loads_in_a_fresh_process(cores, tmp_path):
    """In another process no handle of this one is registered: the loaded modules must make
    their programs again (before, a loaded model failed: 'kernel handle ... is not registered')."""
    model = make_model(cores)
    x = random_input(6, 12)
    torch.save({"model": model, "x": x, "expected": outputs_and_grads(model, x)}, tmp_path / "model.pt")
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import torch
        import spikejit
        saved = torch.load({str(tmp_path / "model.pt")!r}, weights_only=False)
        model, x = saved["model"], saved["x"]
        for m in model:
            m.reset()
        x_grad = x.clone().requires_grad_()
        y = model(x_grad)
        y.sum().backward()
        y_ref, x_grad_ref, param_grads_ref = saved["expected"]
        assert torch.equal(y, y_ref)
        torch.testing.assert_close(x_grad.grad, x_grad_ref)
        for p, g in zip(model.parameters(), param_grads_ref):
            torch.testing.assert_close(p.grad, g)
        print("ok", spikejit.registry.info()["entries"])
    """)
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ok", "5"]  # LIF, PLIF, two FlexSN programs, IF


def test_a_flexsn_with_a_lambda_core_cannot_be_pickled():
    node = spikejit.FlexSN(lambda x, v: (x + v, 0.5 * v), 1, 1, 1, strict=True)
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(node)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_model_copied_mid_training_keeps_its_state_detached(cores, how):
    """After a forward with autograd the states are not leaves (torch cannot deepcopy those);
    the copy takes them detached, with their values, and goes on from them like the original."""
    import copy
    model = make_model(cores)
    for m in model:
        m.reset()
    x = random_input(6, 12).requires_grad_()
    model(x).sum().backward()
    assert all(not s.is_leaf for s in (model[0].v, model[1].v, *model[2].states))
    copied = copy.deepcopy(model) if how == "deepcopy" else pickle.loads(pickle.dumps(model))
    for original, twin in zip(model, copied):
        states = [original.v, twin.v] if hasattr(original, "v") else [*original.states, *twin.states]
        pairs = list(zip(states[:len(states) // 2], states[len(states) // 2:]))
        for want, got in pairs:
            assert not got.requires_grad
            assert torch.equal(got, want.detach())
    x2 = random_input(6, 12)
    assert torch.equal(copied(x2), model(x2))  # both go on from the same states
