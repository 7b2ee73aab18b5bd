"""The floating-point facts the stock constructions rest on, as data, checked where a model runs.

A construction in a stock module (``lsrl.targets.stock``'s ``nn.LSTM`` / ``nn.GRU``, ``lsrl.hf``'s
``transformers`` models) is exact, or keeps its stated tolerance, only because the activations it feeds
return exact numbers on the values it feeds them: ``sigmoid(1024) == 1``, ``tanh(x) == x`` for small ``x``,
``silu(x) == relu(x)`` outside a window, ``softplus(32) == 32``, ``exp(-200) == 0`` in float32, the RMSNorm's
``rsqrt`` of a power of 4, the RG-LRU's rounded unit decay. These are facts about the kernels torch picks for
a device, a dtype and (on the CPU) an instruction set, ``torch.backends.cpu.get_cpu_capability()``: the
boundary of ``tanh(x) == x`` in float32 lies at ``0x1.717268p-12`` on AVX2 and was reported 7,590 ulps lower
on AVX512 (``benchmarks/activation_identities.py`` measures the boundaries per capability).

Each ``Fact`` names the function, the values the construction feeds it, the exact result it relies on and
the margin it keeps (the region its inputs stay in); ``FACTS`` lists them per target. ``check_facts``
evaluates every fact on its values and their float neighbours inside the margin, on the device and dtype
asked, by every code path a model's kernels take there: torch's elementwise op on a contiguous run (the
vectorised body), on a strided view (the scalar loop that also runs a tensor's tail) and on lone elements;
and, for the stock ``nn.LSTM`` / ``nn.GRU``, through a one-step cell of that class whose other gates are
saturated, so that the recurrent kernel's own activations are checked (oneDNN's on the CPU in float32,
cuDNN's on a GPU). A fact that fails raises ``FactError`` naming the fact, the device, the capability (the
CPU capability, or the GPU's name) and the value.

``ensure_facts`` runs them when a model is built and again the first time a model runs on a new
``(device, dtype)``, once per process for each target (torch's kernels are fixed for a process):
``StockRNNModel`` calls it when built and in its run paths; a ``transformers`` model built by ``lsrl.hf.to_hf``
(or read by ``lsrl.hf.inputs``) gets a forward pre-hook (``watch``), which is not saved with the model (a saved
folder stays plain ``transformers``: loaded elsewhere without lsrl, nothing checks it). A check costs a few
milliseconds to a tenth of a second (the cell probes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import FactError, LsrlError

LANES = 64  # a contiguous run this long fills whole vectors on every CPU capability (AVX512: 4 x 16 float32)
PROBE_GATE = 1024.0  # a cell probe's saturated gate; sigmoid(+-PROBE_GATE) is itself a checked fact


@dataclass(frozen=True)
class Fact:
    """``function(x) == expected`` exactly, for every ``x`` in ``values`` and their float neighbours inside
    ``margin`` (``(low, high)``: the region the construction keeps its inputs in; None where it feeds exactly
    these values). ``expected``: a number, or ``"x"``, ``"relu(x)"``, ``"x/2"``, ``"x**-1/2"`` (a power of 4's exact
    reciprocal square root). ``used_by``: the construction and its constant. ``computed_in``: the dtype the stock
    code computes it in whatever the model's (its float32 norms and scans); ``model_dtype``: the one model dtype
    the fact belongs to (None: every dtype). ``cells``: also checked through that stock recurrent kernel."""

    name: str
    function: str
    values: tuple[float, ...]
    expected: float | str
    margin: tuple[float, float] | None
    used_by: str
    computed_in: str | None = None
    model_dtype: str | None = None
    cells: tuple[str, ...] = ()


def _rglru_log_a(x: torch.Tensor) -> torch.Tensor:
    """``log a = -8 sigmoid(1024) softplus(L)``, in the stock RG-LRU's order, with a saturated recurrence gate."""
    return -8.0 * torch.sigmoid(torch.full_like(x, 1024.0)) * F.softplus(x)


FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu, "softplus": F.softplus, "exp": torch.exp,
    "rsqrt": torch.rsqrt, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    # the RG-LRU's decay as the float32 scan reads it, and its input scale m = sqrt(1 - a**2)
    "rglru_a": lambda x: torch.exp(_rglru_log_a(x)).to(torch.float32).to(x.dtype),
    "rglru_m": lambda x: torch.sqrt(1 - torch.exp(2 * _rglru_log_a(x))),
}
EXPECTED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "x": lambda x: x, "relu(x)": torch.relu, "x/2": lambda x: x / 2,
    "x**-1/2": lambda x: (1 / torch.sqrt(x.double())).to(x.dtype),  # exact for powers of 4
}


def _both_signs(values: tuple[float, ...]) -> tuple[float, ...]:
    return values + tuple(-v for v in values)


def _small(limit: float) -> tuple[float, ...]:
    """Values of ``|x| <= limit``, both signs: the limit and 15 points below it (a construction's lattice values
    reach it), and the powers of two below it down to ``limit 2^-80``."""
    return _both_signs(tuple(limit * (1 - k / 16) for k in range(16)) + tuple(limit * 2.0 ** -k for k in range(1, 81)))


def _tanh_identity(limit: float, used_by: str, dtype: str | None = None, cells: tuple[str, ...] = ()) -> Fact:
    return Fact("tanh(x) == x", "tanh", _small(limit), "x", (-limit, limit), used_by, model_dtype=dtype, cells=cells)


def _saturation(side: float, used_by: str, cells: tuple[str, ...] = ()) -> list[Fact]:
    """``sigmoid(x)`` exactly 1 for ``x >= side`` and exactly 0 for ``x <= -side``."""
    values = (side, side * 2, 2.0 ** 20, 2.0 ** 64, 2.0 ** 120)
    return [Fact("sigmoid(x) == 1", "sigmoid", values, 1.0, (side, math.inf), used_by, cells=cells),
            Fact("sigmoid(x) == 0", "sigmoid", tuple(-v for v in values), 0.0, (-math.inf, -side), used_by,
                 cells=cells)]


def _relu_outside(function: str, side: float, used_by: str) -> list[Fact]:
    """``function(x) == relu(x)`` for ``|x| >= side`` (and at 0)."""
    values = (side, side * 2, 2.0 ** 16, 2.0 ** 40, 2.0 ** 100, 2.0 ** 121)
    return [Fact(f"{function}(x) == relu(x)", function, values, "relu(x)", (side, math.inf), used_by),
            Fact(f"{function}(x) == relu(x)", function, tuple(-v for v in values), "relu(x)", (-math.inf, -side),
                 used_by),
            Fact(f"{function}(0) == 0", function, (0.0,), 0.0, None, used_by)]


def _stock_rnn(cell: str) -> list[Fact]:
    """``lsrl.targets.stock``: threshold and identity units (docs/stock.md, "Threshold units")."""
    cells = (cell,)
    return [*_saturation(1024.0, "stock_rnn EXACT_SATURATION (threshold and identity units' gates)", cells),
            Fact("tanh(0) == 0", "tanh", (0.0,), 0.0, None, "stock_rnn threshold units (g = tanh(0))",
                 cells=cells),
            Fact("tanh(TANH_ONE) == 1", "tanh", (64.0,), 1.0, None, "stock_rnn TANH_ONE (threshold units)",
                 cells=cells),
            _tanh_identity(2.0 ** -12, "stock_rnn TANH_IDENTITY (identity units)", "float32", cells),
            _tanh_identity(2.0 ** -27, "stock_rnn TANH_IDENTITY (identity units)", "float64", cells)]


# the RMSNorm of every stock transformers model: mean(h**2) is a power of 4 (lsrl.hf.stream), its rsqrt exact
_NORM = Fact("rsqrt(4**k) == 2**-k", "rsqrt", tuple(4.0 ** k for k in range(-63, 64)), "x**-1/2", None,
             "hf.stream (RMSNorm of the anchored stream)", computed_in="float32")
_MAMBA = [
    *_relu_outside("silu", 710.0, "hf.mamba SILU_EXACT"),
    Fact("silu(64) == 64", "silu", (64.0,), 64.0, None, "hf.mamba GATE, CONSTANT"),
    Fact("softplus(32) == 32", "softplus", (32.0,), 32.0, None, "hf.mamba DT_ON"),
    Fact("softplus(-1000) == 0", "softplus", (-1000.0,), 0.0, None, "hf.mamba DT_OFF"),
    Fact("exp(x) == 0 for x <= -200", "exp", (-200.0, -400.0), 0.0, (-math.inf, -200.0),
         "hf.mamba EXACT_DECAY_LOG (A = -exp(A_log) == -0.0)", computed_in="float32"),
    Fact("exp(-0.0) == 1", "exp", (-0.0, 0.0), 1.0, None, "hf.mamba (exp(dt A) with A == -0.0)",
         computed_in="float32"),
    _NORM,
]
# Mamba-2's gated group norm: silu(2 g) == g for powers of two g <= SMALL_GATE, in float32
_MAMBA2 = [*_MAMBA, Fact("silu(x) == x/2 for small powers of two", "silu", tuple(2.0 ** -k for k in range(25, 60)),
                         "x/2", None, "hf.mamba2 SMALL_GATE", computed_in="float32")]
_RGLRU_UNIT = {  # the rounding trick (hf.recurrentgemma.unit_decay): recurrent_param, m
    "float32": (float.fromhex("-0x1.3b2202p+4"), 2.0 ** -12),
    "float64": (float.fromhex("-0x1.4cb5ecee8965p+4"), 2.0 ** -13),
}
_RECURRENT_GEMMA = [
    *_saturation(1024.0, "hf.recurrentgemma SATURATE (the RG-LRU's gates)"),
    Fact("softplus(1024) == 1024", "softplus", (1024.0,), 1024.0, None,
         "hf.recurrentgemma SATURATE (a pass channel's decay)"),
    Fact("exp(x) == 0 for x <= -8192", "exp", (-8192.0, -16384.0), 0.0, (-math.inf, -8192.0),
         "hf.recurrentgemma SATURATE (a pass channel: a = 0, m = 1)"),
    *_relu_outside("gelu_tanh", 8.0, "hf.recurrentgemma GELU_EXACT, Y_GAIN"),
    _tanh_identity(2.0 ** -27, "hf.recurrentgemma soft cap"),
    _NORM,
    *[Fact(f"RG-LRU unit decay: {name}", f"rglru_{name.split()[0]}", (param,), value, None,
           "hf.recurrentgemma unit_decay (the rounding trick)", model_dtype=dtype)
      for dtype, (param, m) in _RGLRU_UNIT.items() for name, value in (("a == 1", 1.0), (f"m == {m:g}", m))],
]
FACTS: dict[str, list[Fact]] = {
    "stock_lstm": _stock_rnn("lstm"), "stock_gru": _stock_rnn("gru"), "mamba": _MAMBA, "mamba2": _MAMBA2,
    "hawk": _RECURRENT_GEMMA, "griffin": _RECURRENT_GEMMA,
}


# ---- evaluation on every code path ---------------------------------------------------------------------


def on_every_path(function: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
    """``function`` of each element of the 1-D ``x`` as each code path of torch's elementwise kernels computes
    it: the vectorised body (a contiguous run of ``LANES`` copies), the scalar loop of a strided input (what a
    tensor's tail also runs), and lone elements."""
    run = function(x.repeat_interleave(LANES))[::LANES]
    spread = function(x.repeat_interleave(2 * LANES)[::2])[::LANES]  # strided: no element's neighbour is in it
    lone = torch.cat([function(x[i:i + 1]) for i in range(x.numel())])
    return [run, spread, lone]


def _lstm_probe(function: str, x: torch.Tensor, width: int) -> torch.Tensor:
    """One step of an ``nn.LSTM`` of ``width`` units on the batch ``x`` (a ``(B, width)`` result) whose cell
    ``c = f c0 + i g`` is ``function(x)`` in every unit: ``sigmoid`` as the forget gate with ``c0 = 1``
    (``i tanh(0) = 0``), ``tanh`` as ``g`` with ``i = sigmoid(PROBE_GATE) = 1`` and ``c0 = 0``."""
    cell = nn.LSTM(1, width, batch_first=True, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        for parameter in cell.parameters():
            parameter.zero_()
        weight, bias = cell.get_parameter("weight_ih_l0"), cell.get_parameter("bias_ih_l0")
        gate = {"sigmoid": 1, "tanh": 2}[function]  # rows i, f, g, o
        weight[gate * width:(gate + 1) * width] = 1.0
        if function == "tanh":
            bias[:width] = PROBE_GATE
        c0 = torch.full((1, x.numel(), width), 1.0 if function == "sigmoid" else 0.0, dtype=x.dtype, device=x.device)
        _, (_, c) = cell(x.reshape(-1, 1, 1), (torch.zeros_like(c0), c0))
    return c[0]


def _gru_probe(function: str, x: torch.Tensor, width: int) -> torch.Tensor:
    """One step of an ``nn.GRU`` of ``width`` units on the batch ``x`` (a ``(B, width)`` result) whose output
    ``h = (1 - z) n + z h0`` is ``function(x)`` in every unit: ``sigmoid`` as ``z`` with ``h0 = 1`` and
    ``n = tanh(0)``, ``tanh`` as ``n`` with ``z = sigmoid(-PROBE_GATE) = 0`` and ``h0 = 0``."""
    cell = nn.GRU(1, width, batch_first=True, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        for parameter in cell.parameters():
            parameter.zero_()
        weight, bias = cell.get_parameter("weight_ih_l0"), cell.get_parameter("bias_ih_l0")
        if function == "sigmoid":  # rows r, z, n
            weight[width:2 * width] = 1.0
        else:
            weight[2 * width:] = 1.0
            bias[width:2 * width] = -PROBE_GATE
        h0 = torch.full((1, x.numel(), width), 1.0 if function == "sigmoid" else 0.0, dtype=x.dtype, device=x.device)
        _, h = cell(x.reshape(-1, 1, 1), h0)
    return h[0]


PROBES = {"lstm": _lstm_probe, "gru": _gru_probe}
PROBE_WIDTHS = (LANES, 1, 3)  # a unit's gates in whole vectors, and interleaved with the other gates' (tails)


def _through_cell(cell: str, function: str, x: torch.Tensor) -> list[torch.Tensor]:
    """``function(x)`` as the stock ``cell``'s kernel computes it: one ``(B, width)`` result per probe width, each
    sequence of the batch holding one value."""
    return [PROBES[cell](function, x, width) for width in PROBE_WIDTHS]


def _inputs(fact: Fact, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The fact's values in ``dtype`` (those it represents finitely) and their neighbours inside the margin."""
    values = torch.tensor([v for v in fact.values if math.isfinite(v)], dtype=torch.float64).to(dtype)
    values = values[torch.isfinite(values)]
    neighbours = [values, torch.nextafter(values, torch.full_like(values, math.inf)),
                  torch.nextafter(values, torch.full_like(values, -math.inf))]
    x = torch.cat(neighbours)
    if fact.margin is None:
        return values.to(device)
    low, high = fact.margin
    return x[(x >= low) & (x <= high)].to(device)


def _expected(fact: Fact, x: torch.Tensor) -> torch.Tensor:
    if isinstance(fact.expected, str):
        return EXPECTED[fact.expected](x)
    return torch.full_like(x, fact.expected)


def capability(device: torch.device) -> str:
    """What picks a device's kernels: the CPU capability torch dispatches to, or the GPU's name."""
    if device.type == "cpu":
        return f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def check_facts(target: str, device: Any, dtype: torch.dtype) -> None:
    """Every fact ``target``'s construction rests on holds on ``device`` for a model in ``dtype``: ``FactError``
    naming the first that fails (module docstring)."""
    if target not in FACTS:
        raise LsrlError(f"no floating-point facts are known for the target {target!r}; expected one of {tuple(FACTS)}")
    device = torch.device(device)
    name = str(dtype).removeprefix("torch.")
    for fact in FACTS[target]:
        if fact.model_dtype not in (None, name):
            continue
        computed = getattr(torch, fact.computed_in) if fact.computed_in else dtype
        x = _inputs(fact, computed, device)
        expected = _expected(fact, x)
        function = FUNCTIONS[fact.function]
        results = [("torch", result) for result in on_every_path(function, x)]
        results += [(f"nn.{cell.upper()}'s kernel", result)
                    for cell in fact.cells for result in _through_cell(cell, fact.function, x)]
        for how, result in results:
            result = result.reshape(x.numel(), -1)  # a cell probe's units: one row per value
            wrong = ~(result == expected[:, None])
            if bool(wrong.any()):
                at, unit = (int(i) for i in wrong.nonzero()[0])
                raise FactError(
                    f"{target}: the floating-point fact {fact.name!r} ({fact.used_by}) does not hold on {device} "
                    f"({capability(device)}) in {computed}: {how} computes {fact.function}({float(x[at])!r}) = "
                    f"{float(result[at, unit])!r}, not {float(expected[at])!r}; the construction is not exact here")


CHECKED: set[tuple[str, torch.device, torch.dtype]] = set()  # (target, device, dtype) whose facts hold here


def ensure_facts(target: str, reference: Any) -> None:
    """Check ``target``'s facts for ``reference``'s device and dtype (a tensor, or a module: its first
    parameter's) unless this process did already: the kernels torch dispatches to are fixed for a process (the
    CPU capability is chosen once), so a fact that held holds again."""
    tensor = next(reference.parameters()) if isinstance(reference, nn.Module) else reference
    key = (target, tensor.device, tensor.dtype)
    if key not in CHECKED and tensor.device.type != "meta":  # a meta tensor computes no numbers
        check_facts(*key)
        CHECKED.add(key)


@dataclass(frozen=True)
class FactHook:
    """A forward pre-hook: ``target``'s facts for the module's device and dtype before it runs."""

    target: str

    def __call__(self, module: nn.Module, args: Any) -> None:
        ensure_facts(self.target, module)


def watch(model: nn.Module, target: str) -> None:
    """Check ``target``'s facts for ``model`` now and, by a forward pre-hook (registered once per model), before
    every run, so that a new device or dtype is checked the first time it runs."""
    ensure_facts(target, model)
    if not any(isinstance(hook, FactHook) for hook in model._forward_pre_hooks.values()):
        model.register_forward_pre_hook(FactHook(target))
