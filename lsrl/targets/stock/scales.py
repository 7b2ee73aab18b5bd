"""The stock construction's constants and scales (docs/stock.md, "Layers" and "Error bound"): the amplitudes
a value and a product's gate are held at, the saturations and identities of sigmoid and tanh it relies on, and the
dtype's roundoff."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lsrl.errors import LsrlError

GATES = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}
DTYPES = {torch.float32: "float32", torch.float64: "float64"}
AMPLITUDE = {torch.float32: 2.0 ** -14, torch.float64: 2.0 ** -28}  # delta: |h| of a value unit
GATE_AMPLITUDE = {torch.float32: 2.0 ** -7, torch.float64: 2.0 ** -17}  # eta M_Q of a product's gate
SATURATION = 128.0  # pre-activation of a constant gate
RELU_KNEE = 0.2785  # max over x >= 0 of x sigmoid(-x)
ACTIVATION_ULPS = 4.0  # psi: relative error of one sigmoid / tanh, in units of u
# runtime="onnxruntime" (float32): its GRU / LSTM kernels' activations, sampled by
# benchmarks/rnn_activations.py (docs/results/benchmarks/rnn_activations.csv): tanh within 10.1 u
# relative, sigmoid within 2.74 u absolute, the GRU's reset gate (a sigmoid of its own) within 5.04 u absolute:
# psi charges their sum with room
ONNX_ACTIVATION_ULPS = 24.0
# the GRU kernel's reset gate is -2^-22 or 1 + 2^-22 at -+1024, and tanh(TANH_ONE) = 1 + 2^-21: a GRU threshold unit's
# flag is within ONNX_FLAG_ERROR of 0 or 1 there (-2^-16 or 1 + 2^-21); the LSTM's are exact (sigmoid exactly 0 / 1
# beyond +-18.1, tanh(TANH_ONE) = 1)
ONNX_FLAG_ERROR = 2.0 ** -15
RUNTIMES = ("torch", "onnxruntime")
MARGIN = 17.0 / 16.0  # phi: decoded values stay within phi M
POWER_SLACK = 1.0 + 2.0 ** -20  # covers the float64 rounding of the |A^k| sums
HEADROOM = 16.0  # weights and pre-activations stay below finfo.max / HEADROOM
EXACT_SATURATION = 1024.0  # |pre-activation| of a threshold unit's gate: sigmoid exactly 0 or 1 (both dtypes)
TANH_ONE = 64.0  # tanh(TANH_ONE) is exactly 1 in float32 and float64 (a threshold unit's constant factor)
MAX_THRESHOLDS = 256  # per component: a value with more lattice points in its range is not thresholded
# |x| <= TANH_IDENTITY: tanh(x) == x exactly (float32 by enumeration, float64 sampled: activation_identities.csv)
TANH_IDENTITY = {torch.float32: 2.0 ** -12, torch.float64: 2.0 ** -27}


def unit_roundoff(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2.0


def gamma(n: np.ndarray, u: float) -> np.ndarray:
    return n * u / (1.0 - n * u)


def power_floor(x: np.ndarray) -> np.ndarray:
    """The largest power of two ``<= x`` (elementwise, ``x > 0``)."""
    return np.exp2(np.floor(np.log2(x)))


def power_ceil(x: np.ndarray) -> np.ndarray:
    return np.exp2(np.ceil(np.log2(x)))


def power_sum(A: np.ndarray, steps: int) -> np.ndarray:
    """``sum_{k < steps} |A^k|`` (elementwise absolute values), times ``POWER_SLACK``.

    Stops early when a power is zero (nothing more to add) or repeats an earlier one exactly (the
    rest of the sum is periodic, e.g. a permutation or a counter's shift), and at the first power that
    overflows: the sum is then infinite (where it overflowed), which every check refuses."""
    n = A.shape[0]
    total, power = np.zeros((n, n)), np.eye(n)
    seen: dict[bytes, int] = {}
    sums: list[np.ndarray] = []
    for k in range(steps):
        key = power.tobytes()
        if key in seen:  # powers k, k+1, ... repeat powers seen[key], ...: add whole periods, then the rest
            start = seen[key]
            period = k - start
            per_period = total - sums[start]
            full, rest = divmod(steps - k, period)
            total = total + full * per_period + (sums[start + rest] - sums[start])
            break
        seen[key] = k
        sums.append(total.copy())
        total = total + np.abs(power)
        with np.errstate(over="ignore", invalid="ignore"):
            power = A @ power
        if not np.isfinite(power).all():
            return np.where(np.isfinite(power) & np.isfinite(total), total, np.inf) * POWER_SLACK
        if not power.any():
            break
    return total * POWER_SLACK


@dataclass
class Scales:
    """The construction's scales for one dtype (docs/stock.md)."""

    dtype: torch.dtype
    amplitude: float
    gate_amplitude: float
    gain: float  # multiplies every ReLU gain K
    runtime: str = "torch"  # whose activations the bound charges: "torch" or "onnxruntime" (docs/stock.md)

    @property
    def psi(self) -> float:
        """``psi``: the activations' error in units of ``u`` (docs/stock.md)."""
        return ONNX_ACTIVATION_ULPS if self.runtime == "onnxruntime" else ACTIVATION_ULPS

    @property
    def u(self) -> float:
        return unit_roundoff(self.dtype)

    def eps(self, M: np.ndarray) -> np.ndarray:
        """Per component, the power of two that scales ``|v| <= M`` into ``amplitude`` (``amplitude`` itself
        where ``M = 0``: the value is 0)."""
        return power_floor(self.amplitude / np.where(M > 0, M, 1.0))

    def eta(self, M: np.ndarray) -> np.ndarray:
        """The same for a product's gate factor, into ``gate_amplitude``."""
        return power_floor(self.gate_amplitude / np.where(M > 0, M, 1.0))

    def relu_gain(self, M: np.ndarray) -> np.ndarray:
        """``K``: the smallest power of two with ``RELU_KNEE / K <= u M`` (times ``gain``); 1 where ``M = 0``
        (the input is 0, and so is the knee's error)."""
        return np.where(M > 0, power_ceil(RELU_KNEE / (self.u * np.where(M > 0, M, 1.0))), 1.0) * self.gain


def advice(dtype: torch.dtype, otherwise: str) -> str:
    """What a refusal suggests: float64 where the module is float32, and ``otherwise``."""
    return f"use float64 or {otherwise}" if dtype == torch.float32 else f"use {otherwise}"


def stock_dtype(name: str) -> torch.dtype:
    """The torch dtype named ``"float32"`` or ``"float64"``."""
    dtypes = {value: key for key, value in DTYPES.items()}
    if name not in dtypes:
        raise LsrlError(f"stock targets: dtype must be 'float32' or 'float64', got {name!r}")
    return dtypes[name]


def checked_scales(dtype: Any, amplitude: float | None, gate_amplitude: float | None, gain: float, name: str,
                   runtime: Any = "torch") -> Scales:
    """The ``Scales`` of a stock module's options, each checked (``LsrlError`` naming the option)."""
    if not isinstance(dtype, torch.dtype) or dtype not in DTYPES:
        raise LsrlError(f"{name}: dtype must be torch.float32 or torch.float64, got {dtype!r}")
    if not isinstance(runtime, str) or runtime not in RUNTIMES:
        raise LsrlError(f"{name}: runtime must be one of {RUNTIMES} (whose sigmoid and tanh the tolerance charges), "
                        f"got {runtime!r}")
    if runtime == "onnxruntime" and dtype != torch.float32:
        raise LsrlError(f"{name}: runtime='onnxruntime' needs dtype=torch.float32 (onnxruntime has no float64 GRU / "
                        f"LSTM kernels), got {dtype}")
    for option, value in (("amplitude", amplitude), ("gate_amplitude", gate_amplitude), ("gain", gain)):
        if (value is not None or option == "gain") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                        or not 0 < value < math.inf):
            raise LsrlError(f"{name}: {option} must be a positive finite number, got {value!r}")
    return Scales(dtype, float(amplitude or AMPLITUDE[dtype]), float(gate_amplitude or GATE_AMPLITUDE[dtype]),
                  float(gain), runtime)
