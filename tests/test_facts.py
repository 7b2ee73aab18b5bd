"""The floating-point facts of the stock constructions (``lsrl.targets.facts``): they hold on the CPU capability
these tests run on (run them under ``ATEN_CPU_CAPABILITY=default`` / ``avx2`` / natively), they state the constants
the constructions use, and a fact made false stops a build, and a first run on a new dtype, with a ``FactError``
naming the fact, the device and the capability."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lsrl
import lsrl.hf as H
from lsrl.errors import FactError
from lsrl.targets import facts

DTYPES = (torch.float32, torch.float64)
CAPABILITY = f"CPU capability {torch.backends.cpu.get_cpu_capability()}"


@pytest.fixture
def unchecked(monkeypatch):
    """A process that has checked no facts yet (they are checked once per target, device and dtype)."""
    monkeypatch.setattr(facts, "CHECKED", set())


def _counter() -> lsrl.CompiledProgram:
    x = lsrl.Input(1, name="x", bounds=(0, 1), integer=True)
    return lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="count"), name="counter"), progress=False)


def _broken(function: str, where: torch.dtype, wrong=lambda x: x * 2):
    """``function`` of the facts, made false on ``|x| < 1`` in ``where`` (elsewhere torch's own)."""
    real = facts.FUNCTIONS[function]

    def computed(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x.abs() < 1, wrong(x), real(x)) if x.dtype == where else real(x)

    return computed


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("target", sorted(facts.FACTS))
def test_every_fact_holds_on_this_capability(target, dtype):
    """Every fact of every target, its values and their neighbours inside its margin, on every code path (and the
    stock cells' own kernels), on the capability the tests run on."""
    facts.check_facts(target, "cpu", dtype)


def _fact(target: str, name: str, dtype: str | None = None) -> facts.Fact:
    return next(f for f in facts.FACTS[target] if f.name == name and f.model_dtype in (None, dtype))


def test_the_facts_state_the_constants_the_constructions_use():
    """The facts' values and margins are the constants of ``lsrl.targets.stock`` and ``lsrl.hf``: the data
    says what the proofs use."""
    from lsrl.hf import mamba, mamba2, recurrentgemma
    from lsrl.targets.stock import scales

    for target in ("stock_lstm", "stock_gru"):
        assert _fact(target, "sigmoid(x) == 1").margin == (scales.EXACT_SATURATION, math.inf)
        assert _fact(target, "sigmoid(x) == 0").margin == (-math.inf, -scales.EXACT_SATURATION)
        assert _fact(target, "tanh(TANH_ONE) == 1").values == (scales.TANH_ONE,)
        assert facts.PROBE_GATE in _fact(target, "sigmoid(x) == 1").values
        for dtype, limit in scales.TANH_IDENTITY.items():
            fact = _fact(target, "tanh(x) == x", str(dtype).removeprefix("torch."))
            assert fact.margin == (-limit, limit) and limit in fact.values and -limit in fact.values
    for target in ("mamba", "mamba2"):
        assert _fact(target, "silu(x) == relu(x)").margin == (mamba.SILU_EXACT, math.inf)
        assert _fact(target, "silu(64) == 64").values == (mamba.GATE,) == (mamba.CONSTANT,)
        assert _fact(target, "softplus(32) == 32").values == (mamba.DT_ON,)
        assert _fact(target, "softplus(-1000) == 0").values == (mamba.DT_OFF,)
        assert _fact(target, "exp(x) == 0 for x <= -200").margin[1] == mamba.EXACT_DECAY_LOG
    small = _fact("mamba2", "silu(x) == x/2 for small powers of two").values
    assert 2 * mamba2.SMALL_GATE == max(small) and 2 * mamba2.SMALLEST_SHRINK == min(small)
    for target in ("hawk", "griffin"):
        assert _fact(target, "sigmoid(x) == 1").margin == (recurrentgemma.SATURATE, math.inf)
        assert _fact(target, "softplus(1024) == 1024").values == (recurrentgemma.SATURATE,)
        assert _fact(target, "exp(x) == 0 for x <= -8192").margin[1] == -8 * recurrentgemma.SATURATE
        assert _fact(target, "gelu_tanh(x) == relu(x)").margin == (recurrentgemma.GELU_EXACT, math.inf)
        assert recurrentgemma.Y_GAIN in _fact(target, "gelu_tanh(x) == relu(x)").values
        for dtype in DTYPES:
            param, m = recurrentgemma.unit_decay(dtype)
            name = str(dtype).removeprefix("torch.")
            assert _fact(target, "RG-LRU unit decay: a == 1", name).values == (param,)
            assert _fact(target, f"RG-LRU unit decay: m == {m:g}", name).expected == m


def test_the_neighbours_stay_inside_the_margin():
    """A fact is checked on its values and the floats next to them that its margin still holds (the construction
    may feed those too), and on no value outside it."""
    fact = _fact("stock_lstm", "tanh(x) == x", "float32")
    x = facts._inputs(fact, torch.float32, torch.device("cpu"))
    limit = 2.0 ** -12
    assert float(x.abs().max()) == limit
    assert float(np.nextafter(np.float32(limit), np.float32(0))) in x.tolist()
    saturated = facts._inputs(_fact("stock_gru", "sigmoid(x) == 1"), torch.float32, torch.device("cpu"))
    assert float(saturated.min()) == 1024.0 and float(np.nextafter(np.float32(1024), np.float32(2000))) in saturated


def test_a_false_fact_stops_the_build_naming_fact_device_and_capability(unchecked, monkeypatch):
    monkeypatch.setitem(facts.FUNCTIONS, "tanh", _broken("tanh", torch.float64))
    with pytest.raises(FactError) as raised:
        _counter().to_torch("stock_lstm", max_len=8, dtype=torch.float64)
    message = str(raised.value)
    assert "'tanh(x) == x'" in message and "stock_lstm" in message and "TANH_IDENTITY" in message
    assert "on cpu" in message and CAPABILITY in message and "torch.float64" in message
    assert "\n" not in message and isinstance(raised.value, lsrl.LsrlError)
    _counter().to_torch("stock_lstm", max_len=8, dtype=torch.float32)  # the float32 facts still hold


@pytest.mark.parametrize("cell", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
def test_a_recurrent_kernel_whose_tanh_is_no_identity_stops_the_build(unchecked, monkeypatch, cell):
    """The stock cells' kernels compute their own activations (oneDNN's in a float32 LSTM): a kernel whose tanh
    is off by one ulp where the identity units feed it is caught, though ``torch.tanh`` is right."""
    forward = cell.forward

    def off_by_an_ulp(self, x, state):
        output, final = forward(self, x, state)
        if isinstance(final, tuple):  # the LSTM's (h, c): its cell holds tanh(g)
            h, c = final
            return output, (h, torch.where((c.abs() < 1e-3) & (c != 0), torch.nextafter(c, 2 * c), c))
        return output, torch.where((final.abs() < 1e-3) & (final != 0), torch.nextafter(final, 2 * final), final)

    monkeypatch.setattr(cell, "forward", off_by_an_ulp)
    arch = "stock_lstm" if cell is torch.nn.LSTM else "stock_gru"
    with pytest.raises(FactError, match=rf"'tanh\(x\) == x'.*nn\.{arch[6:].upper()}'s kernel computes tanh"):
        _counter().to_torch(arch, max_len=8, dtype=torch.float32)


def test_a_stock_target_checks_its_facts_where_it_runs_and_never_runs_in_another_dtype(unchecked, monkeypatch):
    """A stock target is built for one dtype: moving it to another is refused before anything moves, so it never
    runs where its facts were not checked. Its runs check the facts of a (device, dtype) not checked in this
    process before (here: the record of checked ones emptied, as on a device first used), and a false one
    raises."""
    net = _counter().to_torch("stock_gru", max_len=8, dtype=torch.float32)
    xs = torch.ones(1, 4, 1)
    assert net(xs)[0, -1, 0].item() == 4
    with pytest.raises(lsrl.LsrlError, match=r"stock_gru: built for torch.float32"):
        net.to(torch.float64)
    monkeypatch.setitem(facts.FUNCTIONS, "tanh", _broken("tanh", torch.float32))
    assert net(xs)[0, -1, 0].item() == 4  # checked when built: nothing new to check
    monkeypatch.setattr(facts, "CHECKED", set())
    with pytest.raises(FactError, match=rf"stock_gru: .*'tanh\(x\) == x'.* on cpu \({CAPABILITY}\) in torch.float32"):
        net(xs)


@pytest.mark.slow
def test_a_transformers_model_checks_its_facts_before_it_runs_on_a_new_dtype(unchecked, monkeypatch):
    """``lsrl.hf.to_hf`` checks the model's facts and leaves one forward pre-hook, which checks them the first time
    it runs in another dtype; ``lsrl.hf.inputs`` of a model without the hook (a loaded folder) adds it."""
    hf = H.to_hf(_counter(), "mamba", 8, torch.float32)
    hooks = [hook for hook in hf._forward_pre_hooks.values() if isinstance(hook, facts.FactHook)]
    assert hooks == [facts.FactHook("mamba")]
    facts.watch(hf, "mamba")
    assert len([hook for hook in hf._forward_pre_hooks.values() if isinstance(hook, facts.FactHook)]) == 1
    feed = H.inputs(hf, np.ones((1, 3, 1)))
    monkeypatch.setitem(facts.FUNCTIONS, "silu", _broken("silu", torch.float64, lambda x: x + 1))
    with torch.no_grad():
        hf(**feed)  # float32: checked when built
        hf.to(torch.float64)
        with pytest.raises(FactError, match=r"mamba: .*'silu\(0\) == 0'.* in torch.float64"):
            hf(**feed)
    hf.to(torch.float32)
    hf._forward_pre_hooks.clear()  # as loaded from a folder: plain transformers
    monkeypatch.setattr(facts, "CHECKED", set())
    with pytest.raises(FactError, match="'silu"):
        H.inputs(hf.to(torch.float64), np.ones((1, 3, 1)))
