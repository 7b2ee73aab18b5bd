"""Every compiled program in one stock ``torch.nn.LSTM`` / ``torch.nn.GRU``, with its own sigmoid and tanh.

``model.to_torch("stock_lstm" | "stock_gru", max_len=T, dtype=torch.float32)`` returns a module whose
``core`` is one stacked ``nn.LSTM`` / ``nn.GRU`` (``batch_first``, every layer ``hidden_size`` wide, the
layers' units padded to the widest with all-zero units, which stay 0) and whose ``readout`` is a plain
``nn.Linear``; the program's input is the core's input (an LSTM's initial cells ``c0`` are a buffer, as ``h0``:
threshold units start at ``TANH_ONE``). ``net.tolerance`` bounds how far every output
may lie from the exact interpreter, for inputs within the declared ``Input`` bounds and sequences of at
most ``max_len`` steps (``net.tolerances``: per output component).

**Layers.** Every layer of the compiled path that is not a ``Linear`` (a ``ReLU``, ``Multi``,
``LinState`` or ``ReLUState``) becomes one layer of the core; the ``Linear`` layers between them are
folded into the next layer's input weights (or the readout). A value ``v_j`` is held *small*: a unit
holds ``h = eps_j v_j`` with ``eps_j = AMPLITUDE / M_j`` rounded down to a power of two (exact scaling),
where ``M_j`` bounds ``|v_j|`` (``relational_bounds(node, max_length=max_len)``), so ``|h| <= AMPLITUDE``.
The next layer decodes ``v = D h`` inside its weights. Constant gates are saturated: a pre-activation
``±S`` (``S = SATURATION = 128``) gives ``sigma = 1 - theta`` or ``theta`` with ``theta <= e^-S``.

    LSTM (gates i f g o; c' = f c + i g, h' = o tanh(c'))       GRU (gates r z n; h' = (1 - z) n + z h)
    value / state: i = 1, f = 0, o = 1, g = tanh(eps y)         z = 0, r = 1, n = tanh(eps y)
    ReLU:          as value, o = sigma(K w)                      a: z = sigma(-K w), r = 1, n = tanh(eps w);
                                                                 c: z = 0, r = sigma(-K w), n = tanh(r a_{t-1})
    product P Q:   h± = sigma(±eta Q) tanh(tanh(eps P))          a±, c± as the ReLU pair with
                                                                 z± = sigma(∓eta Q), n = tanh(eps P)

with ``y = A s_{t-1} + B x_t + b`` for a state (its own units read back through the recurrent weights),
``w`` the ReLU's input (for a ``ReLUState``, ``w = A s_{t-1} + u_t``). Decoding: value ``h / eps``; GRU
ReLU ``(a - c) / eps``; product ``(h+ - h-) 2 / (eta eps)`` (LSTM) or ``((a+ - c+) - (a- - c-)) 2 / (eta eps)``
(GRU), because ``sigma(a) - sigma(-a) = tanh(a / 2)``. The GRU pair cancels the term ``z h_{t-1}`` that
every GRU unit carries: ``a_t - c_t = (1 - z) n_t + z a_{t-1} - tanh(z a_{t-1})``; the two gates
``z`` (of ``a``) and ``r`` (of ``c``) have identical weight rows, so they are the same number up to their
own evaluation: torch's vectorised and scalar sigmoid round differently, so ``z`` and ``r`` may differ by both
roundings, ``2 psi u``, which the pair's ``2 psi`` below charges. Assumed, and checked by the tests: a matrix
product computes identical rows identically (the pre-activations are the same float; a gain-``K`` gate is too
steep to charge their rounding separately).

**Error bound (the proof).** Write ``u`` for the unit roundoff of ``dtype``, ``gamma_n = n u / (1 - n u)``,
``psi = ACTIVATION_ULPS`` for the relative error of one sigmoid / tanh evaluation, ``phi = 17/16``.
``psi`` is a fact about torch's kernels: ``|fl(f(x)) - f(x)| <= psi (u |f(x)| + tiny)``. In float32 it is
proved by enumeration: ``benchmarks/activation_identities.py`` evaluates sigmoid and tanh at every float32,
by the vectorised kernel and by the scalar loop (``nn.GRU`` and float64 ``nn.LSTM`` run both), against float64,
and finds at most 2.49 and 1.01 (``docs/results/benchmarks/activation_identities.csv``); the ``tiny`` term is far
below every absolute term of the bound. In float64 it is sampled (the same script against long double,
and ``tests/test_targets_stock_rnn.py``), not proved. A float32 ``nn.LSTM`` on the CPU runs oneDNN's kernel
(``aten::mkldnn_rnn_layer``) instead, whose activations are sampled, not enumerated
(``benchmarks/rnn_activations.py``, ``docs/results/benchmarks/rnn_activations.csv``): tanh within 1.32 u, sigmoid
within 1.58 u absolute and 3.38 u relative where it is at least 1/4, ``sigmoid(+-128)`` and ``sigmoid(+-1024)``
exactly 1 and 0, ``tanh(64) = 1``, ``tanh(x) == x`` for every sampled ``|x| <= 4.2e-4``: within ``psi`` and the
identities below. The constant gates need no identity: ``sigma(128)``
is 1 and ``sigma(-128)`` is 0 in float32 (the table), but ``sigma(-128) = 2.6e-56`` in float64, and the
bound charges ``e^-128`` for both. Every
decoded value ``v^`` is tracked with a bound ``E`` on ``|v^ - v|``. Every layer first raises the bounds of
what it reads by ``16`` times the errors that reach it (``M <- M + 16 E_in``, so ``|v^| <= phi M`` for its
inputs); a state also reads its own past, so by induction over the steps ``|s^| <= phi M`` needs
``E <= (phi - 1) M``: checked, else the program is refused. Facts used:
``|tanh y - y| <= |y|^3 / 3``; so ``|tanh(tanh y) - y| <= 2 |y|^3 / 3``; ``0 <= x sigma(-K x) <= 0.2785 / K``
for ``x >= 0`` (so ``|sigma(K w) w - ReLU(w)| <= 0.2785 / K``); tanh is 1-Lipschitz, sigma 1/4-Lipschitz,
ReLU 1-Lipschitz. Per decoded component, with the pre-activation rounding
``rho = gamma_{n+4} (sum of |terms|)`` (``n`` non-zero terms; the ``+4`` also covers the weights' own rounding):

* value / state (``y`` in payload units): ``|v^ - y^| <= trunc + act + leak`` with ``trunc = 2/3 eps^2 (phi M)^3``
  (LSTM; GRU 1/3), ``act = (2 psi + 1) u phi M`` (GRU ``(psi + 2)``), ``leak = 4 e^-S`` times the magnitudes;
  for a ``LinState`` the errors ``e_t = A e_{t-1} + eta_t`` add up to ``|e_t| <= sum_{k<T} |A^k| eta``
  (computed in float64 and inflated by ``1 + 2^-20``), for a ``ReLUState`` (ReLU 1-Lipschitz) to
  ``sum_{k<T} |A|^k eta``.
* ReLU: ``trunc``, ``act``, ``leak`` as above plus the knee ``min(0.2785 / K, phi M_w / 2)``; ``K`` is the
  smallest power of two with ``0.2785 / K <= u M_w`` (times the option ``gain``). GRU: plus the pair's
  remainder ``|z a - tanh(z a)| <= |a|^3 / 3``.
* product: ``|P^ Q^ - P Q| <= phi (M_P e_Q + M_Q e_P)`` propagated; ``phi^2 M_P M_Q ((eta phi M_Q)^2 / 12 +
  2/3 (eps phi M_P)^2)`` truncated (GRU: 1/3 and the pairs' remainders ``4/3 eps^2 (phi M_P)^3 / eta``);
  rounding ``2 (3 psi + 1) u phi M_P / eta`` (LSTM; GRU ``8 (2 psi + 4)``): the difference ``h+ - h-`` is
  ``eta phi M_Q / 2`` times smaller than its terms, so ``eta`` trades rounding (``u / (eta M_Q)``) against
  truncation (``(eta M_Q)^2``): ``GATE_AMPLITUDE`` sits near the optimum, ``(6 c u)^(1/3)``.
* the readout and every layer's input: ``|W| E + rho``.

The bound holds in real arithmetic with every rounding accounted as above; ``net.tolerance`` is its
largest output component. ``AMPLITUDE`` keeps the truncation below the rounding (``2/3 delta^2 <= u``);
both scales and the gains are options (``amplitude``, ``gate_amplitude``, ``gain``: the tests show the
bounds at their boundary). Overflow: every weight and every pre-activation bound must stay below
``finfo(dtype).max / 16``, and every scale ``eps`` above ``finfo.tiny / u``; checked before any module is
built, as is the finiteness of every bound at ``max_len`` (``LsrlError`` naming the node otherwise). A
module whose tolerance reaches the outputs' own bound (it would say nothing) is refused too; the refusals
name the layer where the bound grew most.

**Threshold units (how Listing 2 is proved).** The bound above is carried layer by layer, and two kinds of
layer multiply it whatever the scales: a state that integrates (``A = I``: Listing 2's stored query and output
registers) sums its input's error over ``max_len`` steps, and a comparison (``f_step``: slope 2, two ReLUs read
back with opposite signs) doubles to quadruples it; across the 27 cell layers of Listing 2 (robust, ``n = 2``) it
grows 3.5e16-fold, and float64 states 843 for outputs bounded by 24. Where that bound is refused (``check_margin``,
the overflow check or ``_check_informative``), the module is built again with *identity units* and *threshold
units*, which hold a value exactly instead of approximately, so that no error is carried through them (each layer
tries identity units first, one unit per component, or two, then threshold units, one per lattice point, then the
construction above):

* *Value lattices* (``_value_lattices``, exact rationals, over the compiled layers): a value lies in
  ``o + g Z``. An integer ``Input`` lies in ``Z``; ``A v + b`` in ``b + A o + gcd_j(a_j g_j) Z``;
  ``relu(o + g Z)`` in ``gcd(o, g) Z`` (it holds 0 and ``o + g Z``); a product in
  ``o o' + gcd(o g', o' g, g g') Z``; a state in the lattice reached from its initial state by joining
  each update's (``(o, g)`` and ``(o', g')`` join to ``(o, gcd(g, g', o' - o))``) until the update maps it
  into itself: by induction over the steps every value stays there (no such lattice within ``4 n + 8``
  rounds, e.g. ``A = 1/2``: none is claimed). With the value bounds ``[lo, hi]`` at ``max_len`` a component
  takes only the lattice points ``p_0 < ... < p_m`` in its range.
* *A value as thresholds* (``_thresholds``): ``v = f(y)`` (``f`` relu for a ``ReLU`` / ``ReLUState``, the
  identity for a ``LinState``; ``y`` its pre-activation, on a lattice) is ``f(p_0) + sum_k (f(p_k) - f(p_{k-1}))
  [y > (p_{k-1} + p_k) / 2]``, exactly, for every ``y`` on the lattice with ``f(y)`` in range (for relu ``p_0``
  is the largest point ``<= 0``: ``y`` below it gives 0, as every flag is 0). Every ``y`` is at least ``g / 2``
  from every threshold. At most ``MAX_THRESHOLDS`` per component, else the layer keeps the construction above.
* *A threshold unit* computes a flag exactly, in ``{0, 1}``: LSTM ``i = sigma(-S) = 0``, ``f = sigma(S) = 1``,
  ``g = tanh(0) = 0``, cell ``c0 = TANH_ONE``, so ``c = 1 c + 0 g = TANH_ONE`` at every step and
  ``h = o tanh(TANH_ONE) = o``; GRU ``z = sigma(-S) = 0``, ``n = tanh(0 + r TANH_ONE)`` (the recurrent bias of
  ``n``, which ``r`` multiplies), so ``h = (h - n) 0 + n = n``; in both the flag ``o`` / ``r`` is
  ``sigma(K (y^ - theta))``, exactly 0 or 1 where ``|K (y^ - theta)| >= S = EXACT_SATURATION = 1024``
  (``sigma(1024) = 1`` and ``sigma(-1024) = 0`` in float32, by enumeration, and in float64, sampled:
  ``docs/results/benchmarks/activation_identities.csv``), and ``tanh(0) = 0``, ``tanh(TANH_ONE) = 1`` exactly
  (single arguments, checked on both of torch's code paths by the tests). The computed ``y^`` differs from
  ``y`` by at most ``e = |W| E`` (the errors of what it reads; 0 from threshold units) plus the rounding
  ``gamma_{n+4} (sum |terms| + |b - theta|)``; with ``margin = g / 2 - e - rounding > 0`` (else the layer
  keeps the construction above), ``K`` is the smallest power of two with ``K margin >= S`` (times ``gain``;
  a ``gain`` that leaves it short is refused). So the sign of the pre-activation is that of ``y - theta``
  and the flag is exact. A state's units read their own flags back (``A`` times the decode): by induction
  over the steps, starting from the flags of its initial state (``h0``; a state whose initial value is no
  point of its thresholds keeps the construction above), every flag is exact at every step, and the
  decoded value has error ``E = 0``: nothing compounds, whatever ``max_len``.
* *Exact sums* (``_sums_exactly``): a unit is *exact* when its ``h`` is always a whole multiple of a power of two
  ``grid`` with ``|h| <= H`` (a threshold unit: grid 1, ``H = 1``; an identity unit, below; an integer input:
  grid 1). A sum ``sum_u w_u h_u + b`` over exact units, every weight and the bias representable, every
  ``w_u grid_u`` and ``b`` a whole multiple of one ``2^-q``, and ``(sum |w_u| H_u + |b|) 2^q <= 2^(p - 1)``
  (``p`` the significand's bits), is computed exactly in any order of the additions, fused or not: every
  product and every partial sum is such a multiple below ``2^(p - 1 - q)``, representable.
* *An identity unit* (``identity_units``) holds ``h = eps s`` exactly, for ``s = f(y)`` with ``f`` the identity
  (a ``LinState``), relu (``ReLU``, ``ReLUState``) or ``[F > 1/2] G`` (a ``Multi`` whose factor ``F`` takes only
  the values 0 and 1; ``y = G``), where every ``y`` lies on a lattice whose points are whole multiples of a
  power of two ``grid_y`` (``_dyadic_grid``; a step 1/3 has none). ``eps`` is the power of two with
  ``eps M_y <= TANH_IDENTITY`` (``M_y`` the bound of ``|y|`` at ``max_len``; ``2^-12`` in float32, where
  ``tanh(x) == x`` for every ``|x| <= 3.5e-4`` by enumeration; ``2^-27`` in float64, sampled:
  ``activation_identities.csv``). Its constant gates are at ``±EXACT_SATURATION``, exactly 0 and 1, and the
  pre-activation of its value gate, ``eps y`` (LSTM ``g``, GRU ``n``), reads exact units only and is an exact
  sum (checked; else no identity units), so it is ``eps y`` exactly, within ``TANH_IDENTITY``. Then LSTM:
  ``c = 0 c + 1 tanh(eps y) = eps y`` and ``h = o tanh(c) = o eps y``; GRU (``r = 1``, ``z = 0``):
  ``h = n = eps y`` (``(1 - z) n + z h`` or ``n + z (h - n)``). The gate ``o`` (LSTM) or ``1 - z`` (GRU) is
  ``[y > theta]``, computed as a threshold unit's flag (``sigma(K (y^ - theta))``, margin less rounding, the
  smallest power of two ``K`` reaching ``EXACT_SATURATION``): relu's ``theta`` lies halfway between the
  largest lattice point below 0 and the next, ``>= 0``, from where relu is the identity (margin half the
  step); a product's ``theta = 1/2`` (margin 1/2). A shut GRU gate keeps ``z a_{t-1}``; the unit's partner
  ``c`` (``z = 0``, ``r`` the same gate, ``n = tanh(r a_{t-1})``) holds ``r a_{t-1}`` exactly (``a_{t-1}``
  within ``TANH_IDENTITY``), so ``a - c = [y > theta] eps y`` exactly (``(a - n) + n = a`` as both are
  multiples of the grid with ``2 H <= 2^(p - 1) grid``: checked). A state's units read their own back through the
  same exact sums; by induction over the steps (from ``h0 = eps s0``, a multiple of the grid) every unit is
  exact at every step: the decoded value ``h / eps`` (GRU ``(a - c) / eps``) has error ``E = 0``, whatever
  ``max_len``, and a component takes one unit (a gated GRU one two) however many values it has: the limit is
  ``2 M_y / grid_y <= 2^(p - 1)`` (values up to 4e6 in float32).
* *A product* ``F G`` where ``F`` takes only the values 0 and 1 (lattice in ``Z``, bounds in ``[0, 1]``) and
  both factors are read exactly from threshold units (``F = f h + c_F``, ``G = g h + c_G``, ``h`` in
  ``{0, 1}``): ``F G = c_G [F > 1/2] + sum_u g_u [h_u + F > 3/2]`` (``h_u F`` is an AND), threshold units
  of margin 1/2; otherwise the product of the construction above, whose error the next thresholds absorb.
* *The readout* ``W h + b`` is exact where it is an exact sum (above) of exact units. Its tolerance is then 0.
  Where the outputs would still carry an error, a last memoryless layer of threshold units snaps them
  (when their lattice and margins allow).

So Listing 2 (robust, ``n = 2`` and ``3``; and the paper's, slope 1000 and ``lambda = 1e10``, in float64) is
built with ``net.tolerance = 0`` in both dtypes and answers every query exactly. The paper's in float32 is refused
at ``max_len = 256``: its ``started_on`` register's bound (3.8e15) is beyond float32's identity units (and far
too many lattice points), and its small-signal error does not fit. The output registers' value bounds grow with
``max_len`` (a
prompt that repeats the query's key reaches them: robust ``n = 3``, tokens up to 10, 420 at ``max_len = 256``,
1660 at 1000); as identity units they take one unit each whatever their bound, so the module's width does not
grow with ``max_len`` and it stays exact (``benchmarks/stock_long.py``: tolerance 0 at 256, 1000 and 4096 in
both dtypes). Programs whose
plain bound is accepted and proves their token decisions are built as before: exact units are tried only
where the plain construction is refused, or where an output on a lattice (integer inputs) has a tolerance of
half its step or more; and they are kept only if they state a smaller tolerance. (The ``ReLUState``
program ``parity``, refused beyond a few steps in float32 by the plain bound, is exact with two identity
units, LSTM, or four, GRU, at any ``max_len`` up to the limit above.)

**onnxruntime** (``runtime="onnxruntime"``, float32; ``export_stock_onnx``). onnxruntime's GRU / LSTM kernels
approximate sigmoid and tanh, sampled by ``benchmarks/rnn_activations.py``
(``docs/results/benchmarks/rnn_activations.csv``, not exhaustive): tanh within 10.1 u (relative; exactly 0
at 0, never the identity, ``tanh(64) = 1`` in the LSTM kernel but ``1 + 2^-21`` in the GRU's), sigmoid within 2.74 u
(absolute; exactly 0 and 1 beyond ``|x| >= 18.1`` and so at ``-+1024``), and the GRU's reset gate ``r``, a sigmoid
of its own, within 5.04 u (absolute) and never exactly 0 or 1 (``-2^-22`` and ``1 + 2^-22`` at ``-+1024``). The
module built for it states a tolerance that holds in both runtimes: ``psi = ONNX_ACTIVATION_ULPS = 24`` (each
activation's error in the bound above is charged as ``psi u`` times the magnitude it multiplies, and every
absolute sigmoid error multiplies a term the bound charges with that magnitude: ``10.1 + 2.74 + 5.04 <= 24``,
a reset gate of ``1 + 2^-22`` included); no identity units; the GRU's threshold units hold ``tanh(r TANH_ONE)``,
within ``ONNX_FLAG_ERROR = 2^-15`` of their flag (``-2^-16`` or ``1 + 2^-21``), so their layers carry the error
``E = |D| 2^-15``, a state's margins less its own flags' error, and their sums are not taken as exact (the LSTM's
flags are exact there too). torch computes within all of these, so ``net.tolerance`` holds in torch as well.

**Labels and patches.** ``StockRNNModel``: what every unit holds, ``patch=`` by program node and
``run_with_cache``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import DimensionError, InternalError, LsrlError, whole_number
from lsrl.ir.labels import PATCHABLE_ROLES, UnitLabel, helper_for, units_holding
from lsrl.lang import relational_bounds
from lsrl.lang.evaluate import patch_items, patch_key_name
from lsrl.numbers import to_rational
from lsrl.targets.cache import GATES as CACHE_GATES
from lsrl.targets.cache import _as_batch, _hook_values, _points
from lsrl.targets.cell_steps import Run, run_steps
from lsrl.targets.checks import checked_input, module_placement
from lsrl.targets.patch import StatePatch, _check_patchable, _values_array
from lsrl.targets.promises import BuiltForOneDtype, StockState, continued_state
from lsrl.targets.onnx_graph import ONNX_GATE_ORDER, OnnxGraph, reorder_gates, to_numpy

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram

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


def _unit_roundoff(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2.0


def _gamma(n: np.ndarray, u: float) -> np.ndarray:
    return n * u / (1.0 - n * u)


def _power_floor(x: np.ndarray) -> np.ndarray:
    """The largest power of two ``<= x`` (elementwise, ``x > 0``)."""
    return np.exp2(np.floor(np.log2(x)))


def _power_ceil(x: np.ndarray) -> np.ndarray:
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


# ---- value lattices: where a value can only take finitely many values --------------------------------
# A lattice (offset, step) of rationals says a value lies in offset + step Z (step 0: it is the offset).


def _rational_gcd(a: Any, b: Any) -> Any:
    """The largest rational ``g`` with ``a`` and ``b`` whole multiples of it (``gcd(a, 0) = |a|``)."""
    a, b = abs(gmpy2.mpq(a)), abs(gmpy2.mpq(b))
    if not a or not b:
        return a or b
    return gmpy2.mpq(gmpy2.gcd(a.numerator * b.denominator, b.numerator * a.denominator),
                     a.denominator * b.denominator)


def _exact_rows(matrix) -> list[dict]:
    """Per row of a compiled ``Matrix``, its non-zero entries as ``{column: rational}``."""
    rows: list[dict] = [{} for _ in range(matrix.shape2d[0])]
    for i, j, a in matrix.entries():
        if a != 0:
            rows[i][j] = to_rational(a)
    return rows


def _affine_lattices(rows: list[dict], bias: list, lattices: list) -> list:
    """The lattices of ``A v + b`` (None where a term's lattice is unknown): offset ``b + sum a o``, step the
    gcd of the ``a step``."""
    out: list = []
    for row, constant in zip(rows, bias):
        if any(lattices[j] is None for j in row):
            out.append(None)
            continue
        step = gmpy2.mpq(0)
        for j, a in row.items():
            step = _rational_gcd(step, a * lattices[j][1])
        out.append((constant + sum((a * lattices[j][0] for j, a in row.items()), gmpy2.mpq(0)), step))
    return out


def _relu_lattice(lattice: Any) -> Any:
    """``relu`` maps ``o + g Z`` into ``{0} ∪ (o + g Z)``, inside ``gcd(o, g) Z``."""
    return None if lattice is None else (gmpy2.mpq(0), _rational_gcd(lattice[0], lattice[1]))


def _product_lattice(q: Any, p: Any) -> Any:
    """``(o + g Z)(o' + g' Z)`` lies in ``o o' + gcd(o g', o' g, g g') Z``."""
    if q is None or p is None:
        return None
    return q[0] * p[0], _rational_gcd(_rational_gcd(q[0] * p[1], p[0] * q[1]), q[1] * p[1])


def _update_rows(layer) -> tuple[list[dict], list]:
    """A state's update ``A s + B x + b`` as rows over ``[s; x]`` and its bias (rationals)."""
    n = layer.dim
    rows = [{**own, **{n + j: b for j, b in fed.items()}} for own, fed in zip(_exact_rows(layer.A),
                                                                                 _exact_rows(layer.B))]
    return rows, [to_rational(v) for v in layer.b.values()]


def _state_lattices(layer, inputs: list) -> list:
    """A state's lattices: the least ones holding its initial state and closed under its update (iterated
    from the initial state; each round joins a component's lattice with its update's, only refining steps);
    None for every component when a step keeps shrinking (a weight 1/2 halves it), or a term is unknown."""
    n = layer.dim
    rows, bias = _update_rows(layer)
    lattices: list = [(to_rational(v), gmpy2.mpq(0)) for v in layer.init_state.values()]
    for _ in range(4 * n + 8):  # bound: a fixed point within these rounds or none claimed
        updated = _affine_lattices(rows, bias, lattices + inputs)
        if layer.kind == "ReLUState":
            updated = [_relu_lattice(lattice) for lattice in updated]
        if any(lattice is None for lattice in updated):
            return [None] * n
        joined = [(o, _rational_gcd(_rational_gcd(g, step), offset - o)) for (o, g), (offset, step) in
                  zip(lattices, updated)]
        if joined == lattices:
            return lattices
        lattices = joined
    return [None] * n


def _value_lattices(model) -> list[list]:
    """Per compiled layer (the input first), per component, a lattice ``(offset, step)`` holding every value
    it takes on inputs within the declared bounds, or None: an integer ``Input`` lies in ``Z``; ``Linear``,
    ``ReLU``, ``Multi`` and the states map lattices as above (by induction over the steps, a state's values
    stay in a lattice closed under its update that holds its initial state)."""
    lattices: list = [(gmpy2.mpq(0), gmpy2.mpq(1)) if model.input.integer else None] * model.input.dim
    out = [lattices]
    for layer in model.layers:
        if layer.kind == "Linear":
            lattices = _affine_lattices(_exact_rows(layer.A), [to_rational(v) for v in layer.b.values()], lattices)
        elif layer.kind == "ReLU":
            lattices = [_relu_lattice(lattice) for lattice in lattices]
        elif layer.kind == "Multi":
            m = layer.dim
            lattices = [_product_lattice(lattices[j], lattices[m + j]) for j in range(m)]
        else:
            lattices = _state_lattices(layer, lattices)
        out.append(lattices)
    return out


def _thresholds(lattice: Any, low: Any, high: Any, relu: bool) -> tuple[float, np.ndarray, np.ndarray] | None:
    """A value ``v = f(y)`` (``f`` relu or the identity) of a ``y`` on ``lattice``, ``low <= v <= high``, as
    ``offset + sum_k weight_k [y > threshold_k]``: the thresholds halfway between consecutive lattice points
    where ``f`` changes (for relu: from the largest point ``<= 0``, which need not be reached, to the largest
    ``<= high``); None without a lattice, or with more than ``MAX_THRESHOLDS`` of them."""
    if lattice is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    offset, step = lattice
    if not step:  # a constant
        return float(max(offset, 0) if relu else offset), np.zeros(0), np.zeros(0)
    first = (gmpy2.floor(-offset / step) if relu else gmpy2.ceil((to_rational(low) - offset) / step))
    last = gmpy2.floor((to_rational(high) - offset) / step)
    if last - first > MAX_THRESHOLDS:
        return None
    points = [offset + k * step for k in range(int(first), int(last) + 1)]
    values = [max(p, 0) if relu else p for p in points]
    if not points:
        return None
    return (float(values[0]), np.array([float((a + b) / 2) for a, b in zip(points, points[1:])]),
            np.array([float(b - a) for a, b in zip(values, values[1:])]))


# ---- what the construction builds: payloads, layers ------------------------------------------------


@dataclass
class Payload:
    """Values held by a layer's units: decoded ``v^ = D h + offset``; ``|v| <= M``, ``|v^ - v| <= E``,
    ``|h| <= H``; ``binary``: the units whose ``h`` is exactly 0 or 1 (threshold units); ``grid``: per unit, a power
    of two that its ``h`` is always a whole multiple of, exactly (1 for threshold units, ``eps`` times the lattice's
    for identity units), 0 where ``h`` is not exact."""

    D: np.ndarray
    M: np.ndarray
    E: np.ndarray
    H: np.ndarray
    offset: np.ndarray
    binary: np.ndarray
    grid: np.ndarray


@dataclass
class Scales:
    """The construction's scales for one dtype (module docstring)."""

    dtype: torch.dtype
    amplitude: float
    gate_amplitude: float
    gain: float  # multiplies every ReLU gain K
    runtime: str = "torch"  # whose activations the bound charges: "torch" or "onnxruntime" (module docstring)

    @property
    def psi(self) -> float:
        """``psi``: the activations' error in units of ``u`` (module docstring)."""
        return ONNX_ACTIVATION_ULPS if self.runtime == "onnxruntime" else ACTIVATION_ULPS

    @property
    def u(self) -> float:
        return _unit_roundoff(self.dtype)

    def eps(self, M: np.ndarray) -> np.ndarray:
        """Per component, the power of two that scales ``|v| <= M`` into ``amplitude`` (``amplitude`` itself
        where ``M = 0``: the value is 0)."""
        return _power_floor(self.amplitude / np.where(M > 0, M, 1.0))

    def eta(self, M: np.ndarray) -> np.ndarray:
        """The same for a product's gate factor, into ``gate_amplitude``."""
        return _power_floor(self.gate_amplitude / np.where(M > 0, M, 1.0))

    def relu_gain(self, M: np.ndarray) -> np.ndarray:
        """``K``: the smallest power of two with ``RELU_KNEE / K <= u M`` (times ``gain``); 1 where ``M = 0``
        (the input is 0, and so is the knee's error)."""
        return np.where(M > 0, _power_ceil(RELU_KNEE / (self.u * np.where(M > 0, M, 1.0))), 1.0) * self.gain


@dataclass
class CellLayer:
    """One layer of the core being built: per gate, input / recurrent rows and biases, per unit."""

    arch: str
    width_in: int
    gate_rows: dict = field(default_factory=dict)  # (gate, unit) -> (ih row, {unit: weight}, bias, bias_hh)
    h0: dict = field(default_factory=dict)
    H: list = field(default_factory=list)  # |h| bound per unit
    c0: dict = field(default_factory=dict)  # an LSTM unit's initial cell (threshold units: TANH_ONE)
    binary: list = field(default_factory=list)  # per unit: a threshold unit (h exactly 0 or 1)
    grid: list = field(default_factory=list)  # per unit: h is a whole multiple of it, exactly (0: not exact)
    magnitudes: list = field(default_factory=list)  # (gate pre-activation bound, where) for the overflow check
    # set by _Builder.finish: the index of the compiled layer it computes (None: the carried input); D, with
    # component j of that layer's output sum_u D[j, u] h_u; per component the value bound at max_len and the
    # bound E on the decoded value's error
    source: int | None = None
    decode: Any = None
    bound: Any = None
    error: Any = None
    offset: Any = None  # per component: the decoded value is decode @ h + offset
    thresholded: bool = False  # built of threshold units

    @property
    def units(self) -> int:
        return len(self.H)

    def new_unit(self, h_bound: float, grid: float = 0.0, saturation: float = SATURATION) -> int:
        """A unit with its constant gates saturated (LSTM i = 1, f = 0, o = 1; GRU r = 1, z = 0) at ``saturation``
        (an identity unit: ``EXACT_SATURATION``, exactly 0 and 1, and ``grid``, what its ``h`` is a multiple of)."""
        unit = len(self.H)
        self.H.append(float(h_bound))
        self.binary.append(False)
        self.grid.append(float(grid))
        constants = {"i": saturation, "f": -saturation, "o": saturation} if self.arch == "lstm" else {
            "r": saturation, "z": -saturation}
        for gate, bias in constants.items():
            self.gate(gate, unit, bias=bias)
        return unit

    def threshold_unit(self, ih: np.ndarray, hh: dict, bias: float, h0: float) -> int:
        """A unit whose ``h`` is exactly ``[ih x + hh h + bias > 0]`` when that pre-activation is at least
        ``EXACT_SATURATION`` away from 0 (module docstring, "Threshold units"): LSTM ``i = 0``, ``f = 1``,
        ``c0 = TANH_ONE`` (so ``c = TANH_ONE`` and ``tanh(c) = 1`` at every step), ``o`` the threshold;
        GRU ``z = 0``, ``r`` the threshold, ``n = tanh(r TANH_ONE)`` (``bias_hh`` of ``n``)."""
        unit = len(self.H)
        self.H.append(1.0)
        self.binary.append(True)
        self.grid.append(1.0)
        if self.arch == "lstm":
            self.gate("i", unit, bias=-EXACT_SATURATION)
            self.gate("f", unit, bias=EXACT_SATURATION)
            self.gate("o", unit, ih=ih, hh=hh, bias=bias)
            self.c0[unit] = TANH_ONE
        else:
            self.gate("z", unit, bias=-EXACT_SATURATION)
            self.gate("r", unit, ih=ih, hh=hh, bias=bias)
            self.gate("n", unit, hh_bias=TANH_ONE)
        if h0:
            self.h0[unit] = h0
        return unit

    def gate(self, gate: str, unit: int, ih: np.ndarray | None = None, bias: float = 0.0,
             hh: dict | None = None, hh_bias: float = 0.0) -> None:
        """Set ``gate`` of ``unit``: input row ``ih``, bias, recurrent weights ``hh`` ({unit: weight}), and the
        recurrent bias ``hh_bias`` (0 but in a GRU threshold unit's ``n``, where ``r`` multiplies it)."""
        self.gate_rows[(gate, unit)] = (ih, dict(hh or {}), float(bias), float(hh_bias))

    def arrays(self, hidden: int, width_in: int) -> dict:
        """PyTorch's ``weight_ih`` (``width_in`` columns: the previous layer padded), ``weight_hh``,
        ``bias_ih``, ``bias_hh`` for ``hidden`` units, ``h0`` and ``c0``."""
        gates = GATES[self.arch]
        G = len(gates)
        w_ih, w_hh = np.zeros((G * hidden, width_in)), np.zeros((G * hidden, hidden))
        b_ih, b_hh, h0, c0 = np.zeros(G * hidden), np.zeros(G * hidden), np.zeros(hidden), np.zeros(hidden)
        for (gate, unit), (ih, hh, bias, hh_bias) in self.gate_rows.items():
            row = gates.index(gate) * hidden + unit
            if ih is not None:
                w_ih[row, :len(ih)] = ih
            for column, weight in hh.items():
                w_hh[row, column] += weight
            b_ih[row], b_hh[row] = bias, hh_bias
        for unit, value in self.h0.items():
            h0[unit] = value
        for unit, value in self.c0.items():
            c0[unit] = value
        return {"weight_ih": w_ih, "weight_hh": w_hh, "bias_ih": b_ih, "bias_hh": b_hh, "h0": h0, "c0": c0}


class _Builder:
    """Walks the compiled layers, building one ``CellLayer`` per non-Linear layer and its error bound."""

    def __init__(self, arch: str, model, max_len: int, scales: Scales, thresholds: bool = False) -> None:
        self.arch, self.model, self.max_len, self.scales = arch, model, max_len, scales
        self.name = f"stock_{arch}"
        self.layers: list[CellLayer] = []
        # with thresholds: per compiled layer (the input first) the value lattices, and whether a layer of
        # threshold units was attempted (a refusal then names its own reason)
        self.thresholds = thresholds
        self.lattices = _value_lattices(model) if thresholds else []
        # onnxruntime's GRU flags: 0 or within ONNX_FLAG_ERROR of 1 (module docstring, "onnxruntime")
        self.flag_error = ONNX_FLAG_ERROR if scales.runtime == "onnxruntime" and arch == "gru" else 0.0
        self.identities = scales.runtime == "torch"  # onnxruntime's tanh is no identity anywhere
        self.thresholded = False
        d_in = model.input.dim
        M_in = self.bounds(model.input)
        # an integer input is held exactly (h = x, whole numbers): grid 1
        self.payload = Payload(np.eye(d_in), M_in, np.zeros(d_in), M_in, np.zeros(d_in), np.zeros(d_in, dtype=bool),
                               np.full(d_in, 1.0 if model.input.integer else 0.0))
        self.W, self.c = np.eye(d_in), np.zeros(d_in)  # the Linear layers since the last cell layer
        # the compiled layer being built (index, value bound): the input at first
        self.source: tuple[int | None, np.ndarray] = (None, M_in)

    # ---- bounds and errors
    def bounds(self, node) -> np.ndarray:
        """``max |v|`` per component of ``node`` at ``max_len``; ``LsrlError`` naming it when infinite."""
        low, high = relational_bounds(node, max_length=self.max_len)
        infinite = [i for i, (lo, hi) in enumerate(zip(low, high)) if math.isinf(lo) or math.isinf(hi)]
        if infinite:
            raise LsrlError(
                f"{self.name}: {node.describe()} has no finite bound on sequences of max_len={self.max_len} steps "
                f"(component {infinite[0]}); declare bounds on the Input (Input(..., bounds=(lo, hi))), or give a "
                "smaller max_len: the construction scales every value by its bound")
        return np.array([max(abs(float(lo)), abs(float(hi))) for lo, hi in zip(low, high)])

    def input_terms(self, W: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
        """For ``y = W v + c`` over the current payload: weights over ``h`` (``W D``), the bias (``c`` and
        ``W`` times the payload's offset), the magnitude of the terms, their count, and the propagated
        error ``|W| E``."""
        p = self.payload
        Wd, bias = W @ p.D, c + W @ p.offset
        magnitude = np.abs(Wd) @ p.H + np.abs(bias)
        count = np.count_nonzero(Wd, axis=1) + 1
        return Wd, bias, magnitude, count, np.abs(W) @ p.E

    def rounding(self, magnitude: np.ndarray, count: np.ndarray) -> np.ndarray:
        return _gamma(count + 4, self.scales.u) * magnitude

    def check_margin(self, node, M: np.ndarray, E: np.ndarray) -> None:
        """The induction's hypothesis ``|v^| <= phi M``: ``E <= (phi - 1) M`` (module docstring)."""
        bad = np.flatnonzero(E > (MARGIN - 1.0) * M)
        if len(bad):
            j = int(bad[0])
            raise LsrlError(
                f"{self.name}: the error bound of {node.describe()} (component {j}: {E[j]:.3g}) exceeds "
                f"1/16 of its value bound {M[j]:.3g} in {DTYPES[self.scales.dtype]}{self.steepest_growth()}; "
                f"{_advice(self.scales.dtype, 'a smaller max_len')}")

    def steepest_growth(self) -> str:
        """Where the error bound grew most so far (a layer's largest error over its input's), for refusals."""
        errors = [float(np.max(layer.error, initial=0.0)) for layer in self.layers if layer.error is not None]
        growths = [(after / before, index) for index, (before, after) in enumerate(zip(errors, errors[1:]), 1)
                   if before > 0]
        if not growths:
            return ""
        growth, index = max(growths)
        node = self.model.layers[self.layers[index].source]
        return f" (its bound grows most at {node.describe()}: {growth:.3g} times its input's)"

    def check_scale(self, node, eps: np.ndarray) -> None:
        tiny = float(torch.finfo(self.scales.dtype).tiny) / self.scales.u
        if np.any(eps < tiny):
            raise LsrlError(f"{self.name}: the values of {node.describe()} are too large for "
                            f"{DTYPES[self.scales.dtype]} (bound {1 / eps.min():.3g} times the amplitude)")

    # ---- the walk
    def walk(self) -> None:
        for index, layer in enumerate(self.model.layers):
            if layer.kind == "Linear":
                A, b = layer.A.to_numpy(), layer.b.to_numpy()
                self.W, self.c = A @ self.W, A @ self.c + b
                continue
            M_out = self.bounds(layer)
            self.source = (index, M_out)
            if self.thresholds and self.exact_layer(index, layer, M_out):
                continue
            if layer.kind == "LinState":
                self.state(layer, M_out, relu=False)
            elif layer.kind == "ReLUState":
                self.state(layer, M_out, relu=True)
            elif layer.kind == "ReLU":
                self.relu(layer, M_out)
            elif layer.kind == "Multi":
                self.product(layer, M_out)
            else:  # pragma: no cover - the compiler makes no other layer
                raise InternalError(f"{self.name}: a compiled path holds a {layer.kind} layer")
        if not self.layers:  # a program of Linear layers only: one layer of value units carries the input
            self.carry()

    def exact_layer(self, index: int, layer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` as exact units: identity units where they fit, else threshold units (module
        docstring); False (nothing built) where neither does."""
        if layer.kind == "Multi":
            return self.identity_product(index, layer) or self.threshold_product(index, layer)
        return self.identity_layer(index, layer, M_out) or self.threshold_layer(index, layer, M_out)

    def begin(self) -> CellLayer:
        layer = CellLayer(self.arch, self.payload.D.shape[1])
        self.layers.append(layer)
        return layer

    def finish(self, layer: CellLayer, D: np.ndarray, M: np.ndarray, E: np.ndarray,
               offset: np.ndarray | None = None) -> None:
        offset = np.zeros(len(M)) if offset is None else offset
        self.payload = Payload(D, M, E, np.array(layer.H), offset, np.array(layer.binary, dtype=bool),
                               np.array(layer.grid))
        layer.source, layer.bound = self.source
        layer.decode, layer.error, layer.offset = D, E, offset
        self.W, self.c = np.eye(len(M)), np.zeros(len(M))

    def carry(self) -> None:
        """The input as a state ``s_t = x_t`` (``A = 0``), for a program without other layers."""
        n = len(self.payload.M)
        M, pending = self.payload.M, (self.W, self.c)
        self.state_units(self.model.input, np.zeros((n, n)), np.eye(n), np.zeros(n), np.zeros(n), M, False, M)
        self.W, self.c = pending  # the readout computes the Linear layers from the carried input

    def state(self, layer, M_out: np.ndarray, relu: bool) -> None:
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        # the ReLU's input A s_{t-1} + B y_t + b, with y the layer's input
        M_w = np.abs(A) @ M_out + np.abs(B) @ self.bounds(layer.inputs[0]) + np.abs(b) if relu else M_out
        self.state_units(layer, A, B @ self.W, B @ self.c + b, layer.init_state.to_numpy(), M_out, relu, M_w)

    def state_units(self, node, A, W, c, s0, M, relu, M_w) -> None:
        """A (ReLU) state ``s_t = [ReLU](A s_{t-1} + W v_t + c)``, or with ``A = 0`` a ReLU / a carried value;
        ``M`` bounds ``|s|``, ``M_w`` the ReLU's input (``M`` without one)."""
        scales, lstm = self.scales, self.arch == "lstm"
        n = len(M)
        Wd, c, magnitude, count, propagated = self.input_terms(W, c)
        count = count + np.count_nonzero(A, axis=1)
        powers = np.abs(power_sum(np.abs(A) if relu else A, self.max_len))
        if not np.isfinite(powers).all():
            raise LsrlError(f"{self.name}: the errors of {node.describe()} grow beyond {DTYPES[scales.dtype]}'s range "
                            f"over max_len={self.max_len} steps (sum of |A|^k); "
                            f"{_advice(scales.dtype, 'a smaller max_len')}")
        # errors that reach this layer whatever it does: the decoded values may exceed the bounds by them
        slack = 16.0 * powers @ (propagated + self.rounding(magnitude + np.abs(A) @ (MARGIN * M), count))
        M, M_w = M + slack, M_w + slack
        eps = scales.eps(np.maximum(M, M_w))
        self.check_scale(node, eps)
        K = scales.relu_gain(M_w)
        layer = self.begin()
        pairs = relu and not lstm
        h_bound = eps * MARGIN * np.maximum(M_w, M)
        units = [layer.new_unit(h_bound[j]) for j in range(n)]
        partners = [layer.new_unit(h_bound[j]) for j in range(n)] if pairs else []
        D_own = np.zeros((n, layer.units))  # the state decoded from this layer's h
        for j in range(n):
            D_own[j, units[j]] = 1.0 / eps[j]
            if pairs:
                D_own[j, partners[j]] = -1.0 / eps[j]
        recurrent = A @ D_own
        value_gate = "g" if lstm else "n"
        for j in range(n):
            hh = {k: eps[j] * recurrent[j, k] for k in np.flatnonzero(recurrent[j])}
            layer.gate(value_gate, units[j], ih=eps[j] * Wd[j], bias=eps[j] * c[j], hh=hh)
            if relu:
                decision = {k: -K[j] * recurrent[j, k] for k in np.flatnonzero(recurrent[j])}
                if lstm:  # o = sigma(K w)
                    layer.gate("o", units[j], ih=K[j] * Wd[j], bias=K[j] * c[j],
                               hh={k: -w for k, w in decision.items()})
                else:  # a: z = sigma(-K w); c: r = sigma(-K w) (identical rows), n = tanh(r a_{t-1})
                    layer.gate("z", units[j], ih=-K[j] * Wd[j], bias=-K[j] * c[j], hh=decision)
                    layer.gate("r", partners[j], ih=-K[j] * Wd[j], bias=-K[j] * c[j], hh=decision)
                    layer.gate("n", partners[j], hh={units[j]: 1.0})
            if s0[j]:
                layer.h0[units[j]] = eps[j] * s0[j]
        recurrent_magnitude = np.abs(A) @ (MARGIN * M)
        pre = magnitude + recurrent_magnitude
        layer.magnitudes.append((float(np.max(np.maximum(K if relu else 0.0, eps) * pre, initial=0.0)), node))
        u, psi = scales.u, scales.psi
        top = MARGIN * np.maximum(M_w, M)
        local = self.rounding(pre, count) + 4 * math.exp(-SATURATION) * (pre + top)
        if lstm:
            local += 2.0 / 3.0 * (eps * top) ** 2 * top + (2 * psi + 1 + (psi if relu else 0.0)) * u * top
        else:
            local += 1.0 / 3.0 * (eps * top) ** 2 * top + (psi + 2) * u * top
        if relu:
            local += np.minimum(RELU_KNEE / K, top / 2.0)
            if pairs:
                local += 1.0 / 3.0 * (eps * top) ** 2 * top + (2 * psi + 4) * u * top
        local += u * np.abs(s0)
        E = powers @ (propagated + local)
        if A.any():  # the recurrence reads |s^| <= phi M (M inflated): the induction's hypothesis
            self.check_margin(node, M, E)
        self.finish(layer, D_own, M, E)

    def value_range(self, node) -> tuple[list, list]:
        """``(low, high)`` per component of ``node`` at ``max_len`` (rationals)."""
        low, high = relational_bounds(node, max_length=self.max_len)
        return list(low), list(high)

    def threshold_layer(self, index: int, layer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` (a ``ReLU``, ``LinState`` or ``ReLUState``) as threshold units, when every
        component has a lattice and margins (module docstring, "Threshold units"); False otherwise."""
        n = layer.dim
        inputs, own = self.lattices[index], self.lattices[index + 1]
        low, high = self.value_range(layer)
        if layer.kind == "ReLU":
            return self.threshold_units(layer, np.zeros((n, n)), self.W, self.c, np.zeros(n), True, inputs, low,
                                        high, M_out)
        A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
        s0 = layer.init_state.to_numpy()
        relu = layer.kind == "ReLUState"
        if relu:  # thresholds on the update y = A s + B x + b, before its relu; s0 must be a relu's value
            if np.any(s0 < 0):
                return False
            rows, bias = _update_rows(layer)
            lattices = _affine_lattices(rows, bias, own + inputs)
        else:  # the state's own values, s0 among them
            lattices = own
            low = [min(lo, to_rational(v)) for lo, v in zip(low, layer.init_state.values())]
            high = [max(hi, to_rational(v)) for hi, v in zip(high, layer.init_state.values())]
        return self.threshold_units(layer, A, B @ self.W, B @ self.c + b, s0, relu, lattices, low, high, M_out)

    def threshold_units(self, node, A, W, c, s0, relu, lattices, low, high, M) -> bool:
        """``s_t = f(A s_{t-1} + W v_t + c)`` (``f`` relu or the identity; ``A = 0``: a memoryless layer) as
        threshold units, each ``[y > theta]`` for a threshold of ``_thresholds``, read back exactly by the
        recurrence. False (nothing built) where a component has no lattice, too many thresholds, or a margin
        ``step / 2`` not above its input's error and rounding; ``LsrlError`` where ``gain`` leaves a gate short
        of ``EXACT_SATURATION``."""
        plans = [plan for lattice, lo, hi in zip(lattices, low, high)
                 if (plan := _thresholds(lattice, lo, hi, relu)) is not None]
        if len(plans) < len(lattices):
            return False
        held = [offset + float(weights @ (value > thresholds)) for (offset, thresholds, weights), value in
                zip(plans, s0)]
        if not np.array_equal(held, s0):  # the initial state is no point of the thresholds' values
            return False
        Wd, c, magnitude, count, propagated = self.input_terms(W, c)
        n, sizes = len(plans), [len(thresholds) for _, thresholds, _ in plans]
        D_own, offset = np.zeros((n, sum(sizes))), np.array([plan[0] for plan in plans])
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        for j, (_, _, weights) in enumerate(plans):
            D_own[j, starts[j]:starts[j + 1]] = weights
        recurrent, bias = A @ D_own, c + A @ offset  # y = Wd h_in + recurrent h_own + bias
        widest = np.array([np.max(np.abs(bias[j] - thresholds), initial=0.0)
                           for j, (_, thresholds, _) in enumerate(plans)])
        terms = np.abs(Wd) @ self.payload.H + np.abs(recurrent).sum(axis=1) + widest
        count = count + np.count_nonzero(recurrent, axis=1)
        steps = np.array([float(lattice[1]) if size else math.inf for lattice, size in zip(lattices, sizes)])
        own_error = np.abs(recurrent).sum(axis=1) * self.flag_error  # its own flags read back
        margin = steps / 2 - propagated - own_error - self.rounding(terms * (1 + self.flag_error), count)
        if np.any(margin <= 0):
            return False
        K = self.threshold_gains(node, margin)
        layer = self.begin()
        for j, (_, thresholds, _) in enumerate(plans):
            hh = {u: K[j] * w for u, w in enumerate(recurrent[j]) if w}
            for theta in thresholds:
                layer.threshold_unit(K[j] * Wd[j], hh, K[j] * (bias[j] - theta), float(s0[j] > theta))
        layer.magnitudes.append((float(np.max(K * terms, initial=0.0)), node))
        self.finish_flags(layer, D_own, M, offset)
        return True

    def threshold_gains(self, node, margin: np.ndarray) -> np.ndarray:
        """Per component, ``K``: the smallest power of two with ``K margin >= EXACT_SATURATION`` (times ``gain``;
        1 where the margin is infinite: no units); ``LsrlError`` where ``gain`` leaves it short."""
        self.thresholded = True
        K, finite = np.ones(len(margin)), np.isfinite(margin)
        K[finite] = _power_ceil(EXACT_SATURATION / margin[finite])
        K *= self.scales.gain
        short = np.flatnonzero(finite & (K * margin < EXACT_SATURATION))
        if len(short):
            j = int(short[0])
            raise LsrlError(f"{self.name}: gain={self.scales.gain:g} leaves the threshold units of {node.describe()} "
                            f"(component {j}) short of saturation: the gate's gain {K[j]:g} times the margin "
                            f"{margin[j]:.3g} is below {EXACT_SATURATION:g}; use gain >= 1")
        return K

    def threshold_product(self, index: int, node) -> bool:
        """``Multi`` as threshold units where, per component, one factor ``F`` takes only the values 0 and 1,
        and both factors are read exactly from threshold units (``F = f h + c_F``, ``G = g h + c_G``, ``h`` 0 or
        1): ``F G = c_G [F > 1/2] + sum_u g_u [h_u + F > 3/2]`` (``F h_u`` is an AND); margins 1/2. False
        (nothing built) otherwise."""
        Wd, c, _, count, propagated = self.input_terms(self.W, self.c)
        m, binary = node.dim, self.payload.binary
        exact = (propagated == 0) & ~np.any((Wd != 0) & ~binary[None, :], axis=1)
        pairs = self.flag_factors(index, node)
        if pairs is None or not all(exact[f] and exact[g] for f, g in pairs):
            return False
        rows, biases, thresholds, weights, owners = [], [], [], [], []
        for j, (f, g) in enumerate(pairs):
            units = [(None, c[g])] + [(u, Wd[g, u]) for u in np.flatnonzero(Wd[g])]
            for u, weight in units:
                row = Wd[f].copy()
                if u is not None:
                    row[u] += 1.0
                rows.append(row)
                biases.append(c[f])
                thresholds.append(0.5 if u is None else 1.5)
                weights.append(weight)
                owners.append(j)
        rows_, biases_, thresholds_ = np.array(rows), np.array(biases), np.array(thresholds)
        terms = np.abs(rows_) @ self.payload.H + np.abs(biases_ - thresholds_)
        margin = 0.5 - self.rounding(terms, np.count_nonzero(rows_, axis=1) + 1)
        if np.any(margin <= 0):
            return False
        K = self.threshold_gains(node, margin)
        layer = self.begin()
        D = np.zeros((m, len(rows)))
        for unit, (row, bias, theta, weight, j) in enumerate(zip(rows_, biases_, thresholds_, weights, owners)):
            layer.threshold_unit(K[unit] * row, {}, K[unit] * (bias - theta), 0.0)
            D[j, unit] = weight
        layer.magnitudes.append((float(np.max(K * terms, initial=0.0)), node))
        self.finish_flags(layer, D, self.source[1], np.zeros(m))
        return True

    def finish_flags(self, layer: CellLayer, D: np.ndarray, M: np.ndarray, offset: np.ndarray) -> None:
        """``finish`` a layer of threshold units: error 0, or where flags are within ``flag_error`` of 1
        (onnxruntime's GRU) ``|D| flag_error``, the flags then no exact units."""
        layer.thresholded = True
        if self.flag_error:
            layer.H = [1.0 + self.flag_error] * layer.units
            layer.grid = [0.0] * layer.units
        self.finish(layer, D, M, np.abs(D).sum(axis=1) * self.flag_error, offset)

    def flag_factors(self, index: int, node) -> list[tuple[int, int]] | None:
        """Per component of ``Multi`` ``index``, ``(f, g)``: the factor ``F`` (component ``f`` of its input) that takes
        only the values 0 and 1 (lattice in ``Z``, bounds in ``[0, 1]``) and the other; None where neither does."""
        m, lattices = node.dim, self.lattices[index]
        low, high = self.value_range(node.inputs[0])

        def exact_flag(k: int) -> bool:
            lattice = lattices[k]
            return (lattice is not None and lattice[0] == gmpy2.floor(lattice[0]) and lattice[1] in (0, 1)
                    and low[k] >= 0 and high[k] <= 1)

        pairs = []
        for j in range(m):
            flags = [(f, g) for f, g in ((j, m + j), (m + j, j)) if exact_flag(f)]
            if not flags:
                return None
            pairs.append(flags[0])
        return pairs

    def identity_layer(self, index: int, layer, M_out: np.ndarray) -> bool:
        """Compiled layer ``index`` (a ``ReLU``, ``LinState`` or ``ReLUState``) as identity units (module docstring,
        "Identity units"), where its values lie on dyadic lattices and it reads exact units only; False otherwise."""
        n = layer.dim
        inputs, own = self.lattices[index], self.lattices[index + 1]
        if layer.kind == "ReLU":
            A, W, c, s0 = np.zeros((n, n)), self.W, self.c, np.zeros(n)
            lattices, M_pre = inputs, self.bounds(layer.inputs[0])
        else:
            A, B, b = layer.A.to_numpy(), layer.B.to_numpy(), layer.b.to_numpy()
            W, c, s0 = B @ self.W, B @ self.c + b, layer.init_state.to_numpy()
            if layer.kind == "ReLUState":  # the relu's input y = A s + B x + b
                rows, bias = _update_rows(layer)
                lattices = _affine_lattices(rows, bias, own + inputs)
                M_pre = np.abs(A) @ M_out + np.abs(B) @ self.bounds(layer.inputs[0]) + np.abs(b)
            else:
                lattices, M_pre = own, M_out
        relu = layer.kind != "LinState"
        gates = [_relu_gate(lattice) if relu else None for lattice in lattices]
        return self.identity_units(layer, A, W, c, (W, c) if relu else None, gates, s0, lattices, M_pre, M_out)

    def identity_product(self, index: int, node) -> bool:
        """``Multi`` as identity units where, per component, one factor ``F`` takes only the values 0 and 1 and the
        other, ``G``, lies on a dyadic lattice, both read exactly: ``F G`` is ``G`` gated by ``[F > 1/2]``."""
        pairs = self.flag_factors(index, node)
        if pairs is None:
            return False
        f, g = (np.array(side) for side in zip(*pairs))
        m, lattices = node.dim, self.lattices[index]
        M_y = self.bounds(node.inputs[0])
        gates = [(0.5, 0.5)] * m  # threshold 1/2, margin 1/2
        return self.identity_units(node, np.zeros((m, m)), self.W[g], self.c[g], (self.W[f], self.c[f]), gates,
                                   np.zeros(m), [lattices[k] for k in g], M_y[g], self.source[1])

    def identity_units(self, node, A, W, c, gate, gates, s0, lattices, M_pre, M) -> bool:
        """``s_t = [gate_t > theta] (A s_{t-1} + W v_t + c)`` (without ``gate``: ungated) as identity units: one per
        component (the GRU's gated ones a pair ``a, c``), ``h = eps s`` exactly, with ``eps`` the power of two that
        puts the pre-activation's bound ``M_pre`` within ``TANH_IDENTITY`` and the gate ``sigma(K (gate - theta))``
        exactly 0 or 1. False (nothing built) where a value's lattice is not dyadic, a sum is not exact
        (``_sums_exactly``), a read value carries an error, or a gate's margin is not positive."""
        scales, lstm = self.scales, self.arch == "lstm"
        n, pairs = len(M), gate is not None and self.arch == "gru"
        if not self.identities:
            return False
        Wd, c, _, _, propagated = self.input_terms(W, c)
        grids = [_dyadic_grid(lattice) for lattice in lattices]
        if propagated.any() or None in grids or (gate is not None and None in gates):
            return False
        eps = _power_floor(TANH_IDENTITY[scales.dtype] / np.where(M_pre > 0, M_pre, 1.0))
        own_grid, H = eps * np.array(grids, dtype=float), eps * np.maximum(M_pre, np.abs(s0))
        # unit j holds component j (h = eps s); a GRU pair's partner n + j holds -what a latched (decoded a - c)
        units = np.arange(n)
        D_own = np.zeros((n, 2 * n if pairs else n))
        D_own[units, units] = 1.0 / eps
        if pairs:
            D_own[units, n + units] = -1.0 / eps
        unit_grid, unit_H = np.tile(own_grid, D_own.shape[1] // n), np.tile(H, D_own.shape[1] // n)
        recurrent = A @ D_own
        p = self.payload
        grid_all, H_all = np.concatenate([p.grid, unit_grid]), np.concatenate([p.H, unit_H])
        digits = 24 if scales.dtype == torch.float32 else 53
        value_rows = eps[:, None] * np.hstack([Wd, recurrent])
        held = eps * s0 / np.where(own_grid > 0, own_grid, 1.0)
        if not (_sums_exactly(value_rows, eps * c, grid_all, H_all, scales.dtype).all()
                and np.all(2 * H <= 2.0 ** (digits - 1) * own_grid) and np.all(held == np.round(held))
                and np.all(own_grid >= float(torch.finfo(scales.dtype).tiny) / scales.u)
                and not (gate is not None and np.any(s0 < 0))):
            return False
        gated: tuple[np.ndarray, np.ndarray] | None = None  # the gate's rows over [input; own] and bias, times K
        if gate is not None:
            gate_Wd, gate_c, _, _, gate_error = self.input_terms(*gate)
            if gate_error.any():
                return False
            thetas, half_gaps = (np.array(side, dtype=float) for side in zip(*gates))
            gate_rows, gate_bias = np.hstack([gate_Wd, recurrent]), gate_c - thetas
            terms = np.abs(gate_rows) @ H_all + np.abs(gate_bias)
            margin = half_gaps - self.rounding(terms, np.count_nonzero(gate_rows, axis=1) + 1)
            if np.any(margin <= 0):
                return False
            K = self.threshold_gains(node, margin)
            gated = K[:, None] * gate_rows, K * gate_bias
        layer = self.begin()
        width = Wd.shape[1]
        for j in range(D_own.shape[1]):
            layer.new_unit(unit_H[j], unit_grid[j], EXACT_SATURATION)
        value = "g" if lstm else "n"
        for j in range(n):
            layer.gate(value, j, ih=value_rows[j, :width], bias=eps[j] * c[j], hh=_nonzero(value_rows[j, width:]))
            if s0[j]:
                layer.h0[j] = eps[j] * s0[j]
            if gated is None:
                continue
            rows = dict(ih=gated[0][j, :width], bias=gated[1][j], hh=_nonzero(gated[0][j, width:]))
            if lstm:  # h = o tanh(tanh(eps y)), o = [gate > theta]
                layer.gate("o", j, **rows)
            else:  # a: 1 - z = [gate > theta], latched otherwise; c: r = z, n = tanh(r a_{t-1}): a - c = [.] eps y
                negated = dict(ih=-rows["ih"], bias=-rows["bias"], hh={k: -w for k, w in rows["hh"].items()})
                layer.gate("z", j, **negated)
                layer.gate("r", n + j, **negated)
                layer.gate("n", n + j, hh={j: 1.0})
        largest = np.abs(value_rows) @ H_all + np.abs(eps * c)
        if gated is not None:
            largest = np.maximum(largest, np.abs(gated[0]) @ H_all + np.abs(gated[1]))
        layer.magnitudes.append((float(np.max(largest, initial=0.0)), node))
        layer.thresholded = True
        self.finish(layer, D_own, M, np.zeros(n))
        return True

    def snap(self) -> None:
        """With thresholds, the outputs as threshold units where the readout would not be exact (a last
        ``Multi``, say): a memoryless layer of them, read by an exact readout (module docstring)."""
        last = self.model.layers[-1] if self.model.layers else None
        if last is None:
            return
        Wd, bias, _, _, propagated = self.input_terms(self.W, self.c)
        if not propagated.any() and self.exact_sums(Wd, bias).all():
            return
        n = last.dim
        self.source = (len(self.model.layers) - 1, self.bounds(last))
        low, high = self.value_range(last)
        self.threshold_units(last, np.zeros((n, n)), self.W, self.c, np.zeros(n), False, self.lattices[-1], low,
                             high, self.source[1])

    def relu(self, layer, M_out: np.ndarray) -> None:
        n = len(M_out)
        self.state_units(layer, np.zeros((n, n)), self.W, self.c, np.zeros(n), M_out, True,
                         self.bounds(layer.inputs[0]))

    def product(self, node, M_out: np.ndarray) -> None:
        """``Multi``: first half (Q, the gate) times second half (P, the small signal)."""
        scales, lstm = self.scales, self.arch == "lstm"
        m = node.dim
        M_y = self.bounds(node.inputs[0])
        Wd, c, magnitude, count, propagated = self.input_terms(self.W, self.c)
        e = self.rounding(magnitude, count) + propagated
        M_y = M_y + 16.0 * e  # the decoded factors may exceed their bounds by their errors
        M_Q, M_P, e_Q, e_P = M_y[:m], M_y[m:], e[:m], e[m:]
        eps, eta = scales.eps(M_P), scales.eta(M_Q)
        self.check_scale(node, eps)
        self.check_scale(node, eta)
        layer = self.begin()
        D = np.zeros((m, 0))
        decode = 2.0 / (eta * eps)
        columns = []
        for j in range(m):
            h_bound = eps[j] * MARGIN * M_P[j]
            q, p = j, m + j
            entries = []
            for sign in (1.0, -1.0):
                a = layer.new_unit(h_bound)
                value = "g" if lstm else "n"
                layer.gate(value, a, ih=eps[j] * Wd[p], bias=eps[j] * c[p])
                if lstm:  # o = sigma(±eta Q)
                    layer.gate("o", a, ih=sign * eta[j] * Wd[q], bias=sign * eta[j] * c[q])
                    entries.append((a, sign))
                else:  # 1 - z = sigma(±eta Q); the partner cancels z a_{t-1}
                    partner = layer.new_unit(h_bound)
                    layer.gate("z", a, ih=-sign * eta[j] * Wd[q], bias=-sign * eta[j] * c[q])
                    layer.gate("r", partner, ih=-sign * eta[j] * Wd[q], bias=-sign * eta[j] * c[q])
                    layer.gate("n", partner, hh={a: 1.0})
                    entries += [(a, sign), (partner, -sign)]
            columns.append(entries)
        D = np.zeros((m, layer.units))  # product j: sum of sign * decode_j * h over its units
        for j, entries in enumerate(columns):
            for unit, sign in entries:
                D[j, unit] = sign * decode[j]
        layer.magnitudes.append((float(np.max(np.concatenate([eps * magnitude[m:], eta * magnitude[:m]]))), node))
        u, psi = scales.u, scales.psi
        P, Q = MARGIN * M_P, MARGIN * M_Q
        E = MARGIN * (M_P * e_Q + M_Q * e_P)
        if lstm:
            E += P * Q * ((eta * Q) ** 2 / 12 + 2.0 / 3.0 * (eps * P) ** 2) + 2 * (3 * psi + 1) * u * P / eta
        else:
            E += (P * Q * ((eta * Q) ** 2 / 12 + 1.0 / 3.0 * (eps * P) ** 2) + 4.0 / 3.0 * (eps * P) ** 2 * P / eta
                  + 8 * (2 * psi + 4) * u * P / eta)
        E += 8 * math.exp(-SATURATION) * P * Q
        self.finish(layer, D, M_out, E)

    def readout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The readout's weights (over the last layer's ``h``, padded to the widest layer) and bias, and
        the output error bound."""
        Wd, bias, magnitude, count, propagated = self.input_terms(self.W, self.c)
        hidden = max(layer.units for layer in self.layers)
        weight = np.zeros((Wd.shape[0], hidden))
        weight[:, :Wd.shape[1]] = Wd
        rounding = np.where(self.exact_sums(Wd, bias), 0.0, self.rounding(magnitude, count))
        return weight, bias, propagated + rounding

    def exact_sums(self, Wd: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Per row of ``Wd h + bias`` over the current payload: whether its float sum is exact (``_sums_exactly``)."""
        p = self.payload
        return _sums_exactly(Wd, bias, p.grid, p.H, self.scales.dtype)


def _sums_exactly(rows: np.ndarray, bias: np.ndarray, grid: np.ndarray, H: np.ndarray,
                  dtype: torch.dtype) -> np.ndarray:
    """Per row of ``rows h + bias``: whether its float sum is exact in ``dtype``, whatever the order of the additions
    (and with or without fused multiply-adds): it reads exact units only (``h`` a whole multiple of ``grid``, a power
    of two, with ``|h| <= H``), every weight and the bias are representable, and every ``w grid`` and the bias are
    whole multiples of one ``2^-q`` with ``(sum |w| H + |bias|) 2^q <= 2^(digits - 1)``: then every product and every
    partial sum is such a multiple below ``2^(digits - 1 - q)``, representable (``digits`` the significand's bits)."""
    digits = 24 if dtype == torch.float32 else 53
    narrow = np.float32 if dtype == torch.float32 else np.float64
    exact = []
    for row, constant in zip(rows, bias):
        used = row != 0
        representable = bool(np.all(row.astype(narrow) == row)) and float(narrow(constant)) == constant
        q = _binary_exponent(np.append(row[used] * grid[used], constant)) if representable else None
        exact.append(q is not None and not np.any(used & (grid == 0))
                     and math.ldexp(float(np.abs(row) @ H + abs(constant)), q) <= 2.0 ** (digits - 1))
    return np.array(exact, dtype=bool)


def _nonzero(row: np.ndarray) -> dict:
    """``{column: weight}`` of a row's non-zero entries (recurrent weights)."""
    return {int(k): float(row[k]) for k in np.flatnonzero(row)}


def _dyadic_grid(lattice: Any) -> float | None:
    """The largest power of two that every point of ``lattice`` (``o + g Z``) is a whole multiple of, or None when
    the points are not all dyadic rationals (a step 1/3) or there is no lattice. A constant 0: 1."""
    if lattice is None:
        return None
    step = _rational_gcd(*lattice)
    if not step:
        return 1.0
    numerator, denominator = int(step.numerator), int(step.denominator)
    if denominator & (denominator - 1):
        return None
    twos = (numerator & -numerator).bit_length() - 1  # the power of two in the numerator
    return math.ldexp(1.0, twos - (denominator.bit_length() - 1))


def _relu_gate(lattice: Any) -> tuple[float, float] | None:
    """``(theta, margin)`` of an identity unit's relu gate ``[y > theta]`` for ``y`` on ``lattice``: theta halfway
    between the largest point below 0 and the next (which is ``>= 0``: ``relu`` is the identity from there, and 0
    below), margin half the step; a constant ``y = o``: theta ``o / 2``. None without a lattice."""
    if lattice is None:
        return None
    offset, step = lattice
    if not step:
        return (float(offset) / 2, abs(float(offset)) / 2) if offset else (-1.0, 1.0)
    first = offset + step * gmpy2.ceil(-offset / step)  # the smallest point >= 0
    return float(first - step / 2), float(step) / 2


def _binary_exponent(values: np.ndarray) -> int | None:
    """The least ``q <= 64`` with every value a whole multiple of ``2^-q``, or None."""
    return next((q for q in range(65) if np.all(np.ldexp(values, q) % 1 == 0)), None)


def _advice(dtype: torch.dtype, otherwise: str) -> str:
    """What a refusal suggests: float64 where the module is float32, and ``otherwise``."""
    return f"use float64 or {otherwise}" if dtype == torch.float32 else f"use {otherwise}"


def _check_informative(name: str, model, builder: _Builder, tolerances: np.ndarray) -> None:
    """Refuse a module whose tolerance is as large as every output's own bound: it would say nothing."""
    last = model.layers[-1] if model.layers else model.input
    largest = float(np.max(builder.bounds(last), initial=0.0))
    if tolerances.size and float(np.max(tolerances)) >= max(largest, float(np.finfo(np.float64).tiny)):
        raise LsrlError(
            f"{name}: the error bound of the outputs ({float(np.max(tolerances)):.3g}) is as large as their value "
            f"bound ({largest:.3g}) in {DTYPES[builder.scales.dtype]} at max_len={builder.max_len}"
            f"{builder.steepest_growth()}: the outputs would carry nothing; "
            f"{_advice(builder.scales.dtype, 'a smaller max_len or tighter Input bounds')}")


def _check_overflow(name: str, layers: list[CellLayer], readout: np.ndarray, dtype: torch.dtype) -> None:
    """Every weight and every pre-activation bound below ``finfo(dtype).max / HEADROOM``."""
    largest = float(torch.finfo(dtype).max) / HEADROOM
    for layer in layers:
        for bound, node in layer.magnitudes:
            if not bound <= largest:
                raise LsrlError(f"{name}: the gates reading {node.describe()} reach {bound:.3g}, beyond "
                                f"{DTYPES[dtype]}'s range; {_advice(dtype, 'tighter Input bounds')}")
        for ih, hh, bias, hh_bias in layer.gate_rows.values():
            weights = [abs(bias), abs(hh_bias)] + [abs(w) for w in hh.values()] + (
                [float(np.max(np.abs(ih)))] if ih is not None and ih.size else [])
            if not max(weights) <= largest:
                raise LsrlError(f"{name}: a weight reaches {max(weights):.3g}, beyond {DTYPES[dtype]}'s range; "
                                f"{_advice(dtype, 'tighter Input bounds')}")
    if readout.size and not np.max(np.abs(readout)) <= largest:
        raise LsrlError(f"{name}: a readout weight reaches {np.max(np.abs(readout)):.3g}, beyond {DTYPES[dtype]}'s "
                        f"range; {_advice(dtype, 'tighter Input bounds')}")


# ---- the module -----------------------------------------------------------------------------------


@dataclass
class UnitPlan:
    """What the units of a stock module hold (``net.labels``, ``net.unit_scales``) and how a patch sets them.

    ``layers[k]``: core layer ``k``'s ``CellLayer`` (its ``source`` compiled layer, ``decode``, ``bound``);
    ``source_labels[k]``: the compiled model's labels of that layer's components; ``output_labels``: of the
    outputs, which the readout computes (patched there when the last compiled layer is a ``Linear``)."""

    layers: list
    source_labels: list
    output_labels: list
    readout_patched: bool
    labels: dict
    unit_scales: dict
    unit_tolerances: dict
    patchable: list
    unpatchable: dict


def _unit_plan(model, layers: list[CellLayer], hidden: int, outputs: np.ndarray) -> UnitPlan | None:
    """``net.labels`` of a stock module and what its patches set (``UnitPlan``); None without model labels.

    A component held by one unit ``u`` (a value, state or LSTM ReLU unit: ``h_u = eps v``) labels it with the
    compiled label and ``unit_scales[key][u] = 1 / D[j, u] = eps``; the units of a sign pair (GRU ReLU ``a, c``)
    or of a product (``h+, h-``) hold it only together: each is a ``helper`` (scale NaN). Padding units: None.
    An LSTM layer's cell ``core.l{k}.c`` is labelled too: a state's unit has ``c = tanh(eps y)``, the same value
    as ``h = tanh(c)`` with one tanh less (its error is within the same bound); a ReLU's cell holds its input
    (``eps w``), a product's ``eps P``: helpers.
    ``unit_tolerances[key][u]``: how far a labelled unit may lie from its scale times what its label says
    (``eps E``; the readout: ``outputs``, the output tolerances). A module with threshold units holds their
    components only all together (helpers), and patches only its outputs, at the readout: the units' exactness
    rests on values on their lattices, which a patched value need not be.
    """
    if model.labels is None:
        return None
    source_labels = [model.labels[layer.source] if layer.source is not None else
                     [UnitLabel(model.input.name, j, "copy") for j in range(len(layer.bound))] for layer in layers]
    labels: dict[str, list] = {}
    scales: dict[str, np.ndarray] = {}
    tolerances: dict[str, np.ndarray] = {}
    for k, (layer, components) in enumerate(zip(layers, source_labels)):
        unit_labels: list = [None] * hidden
        unit_scales, unit_tolerances = np.full(hidden, np.nan), np.full(hidden, np.nan)
        for j, label in enumerate(components):
            units = np.flatnonzero(layer.decode[j])
            alone = len(units) == 1 and not layer.thresholded  # threshold units hold v only all together
            for unit in units:
                unit_labels[unit] = label if alone else helper_for(label)
                if alone:  # h = eps v^ exactly (a power of two), |v^ - v| <= E
                    unit_scales[unit] = 1.0 / layer.decode[j, unit]
                    unit_tolerances[unit] = unit_scales[unit] * layer.error[j]
        key = f"core.l{k}"
        labels[key], scales[key], tolerances[key] = unit_labels, unit_scales, unit_tolerances
        if layer.arch == "lstm":  # the cell c = tanh(eps y) of a state's unit holds what h does (one tanh less)
            states = layer.source is None or model.layers[layer.source].kind == "LinState"
            labels[f"{key}.c"] = unit_labels if states else [helper_for(label) for label in unit_labels]
            scales[f"{key}.c"] = unit_scales if states else np.full(hidden, np.nan)
            tolerances[f"{key}.c"] = unit_tolerances if states else np.full(hidden, np.nan)
    output_labels = list(model.labels[-1]) if model.layers else source_labels[-1]
    labels["readout"], scales["readout"], tolerances["readout"] = output_labels, np.ones(len(output_labels)), outputs
    readout_patched = bool(model.layers) and model.layers[-1].kind == "Linear"
    folded = {label.node for index, layer in enumerate(model.layers[:-1]) if layer.kind == "Linear"
              for label in model.labels[index] if label.role in PATCHABLE_ROLES}
    # threshold units hold values exactly because they lie on lattices; a patched value need not, so in a module
    # with threshold units only the outputs, which the readout overwrites, are patched
    outputs_patched = {label.node for label in output_labels} if readout_patched else set()
    thresholds = any(layer.thresholded for layer in layers)
    unpatchable = {node: "the module holds values in exact units (identity and threshold units, of values on a "
                   "lattice), whose exactness a patched value off the lattice would break" for node in model.patchable
                   if thresholds and node not in outputs_patched}
    unpatchable.update({node: "it is held by a Linear layer that the stock construction folds into the next layer's "
                        "input weights, so no unit of the core holds it" for node in model.patchable if node in folded})
    patchable = sorted(set(model.patchable) - set(unpatchable))
    return UnitPlan(layers, source_labels, output_labels, readout_patched, labels, scales, tolerances, patchable,
                    unpatchable)


def _held_patches(net: StockRNNModel, patch: Any, count: int, steps: int) -> dict:
    """``{core layer k or "readout": StatePatch}``: every unit holding a patched node set so that its layer
    decodes the patched value (``D h = v``: the component's units set to ``v D[j] / |D[j]|^2``, so a value
    unit holds ``eps v``, a GRU pair ``(eps v / 2, -eps v / 2)``, a product pair ``(eta eps v / 4, -eta eps v / 4)``).
    The values must lie within the value bounds the construction scaled them by (``net.tolerance`` rests on them)."""
    arrays = {}
    for key, values in patch_items(patch, net.architecture):
        name = patch_key_name(key)
        _check_patchable(net, name)  # refuses every node when the module has no labels (no unit_plan)
        array = _values_array(net, name, values, count, steps)
        arrays[name] = (array.shape[-1], array)
    plan = net.unit_plan
    if plan is None:
        return {}
    holders: list[tuple[Any, tuple[Any, list]]] = list(enumerate(zip(plan.layers, plan.source_labels)))
    if plan.readout_patched:
        holders.append(("readout", (None, plan.output_labels)))
    patches = {}
    for key, (layer, components) in holders:
        if layer is not None and layer.thresholded:  # only its outputs are patched (_unit_plan), at the readout
            continue
        where = f"core.l{key}" if layer is not None else "readout"
        units, columns = [], []
        for j, held in units_holding(enumerate(components), arrays, where):
            if layer is None:
                units.append(j)
                columns.append(held)
                continue
            _check_patch_bound(net, components[j], held, float(layer.bound[j]))
            row = layer.decode[j]
            for unit in np.flatnonzero(row):
                units.append(int(unit))
                columns.append(held * (row[unit] / float(row @ row)))
        if units:
            dtype, device = module_placement(net)
            patches[key] = StatePatch(torch.tensor(units, dtype=torch.long, device=device),
                                      torch.as_tensor(np.stack(columns, axis=-1), dtype=dtype, device=device))
    return patches


def _check_patch_bound(net, label, held: np.ndarray, bound: float) -> None:
    largest = float(np.max(np.abs(held), initial=0.0))
    if largest > bound:
        raise LsrlError(f"{net.architecture}: patch values for {label.node!r} reach {largest:.6g} in component "
                        f"{label.index}, beyond its value bound {bound:.6g} at max_len={net.max_len}: the construction "
                        "scales every value by its bound, and net.tolerance holds for values within it")


class StockRNNModel(BuiltForOneDtype, nn.Module):
    """A compiled program in one stock ``nn.LSTM`` / ``nn.GRU`` (``core``) and a ``nn.Linear`` ``readout``.

    ``net(x)``: ``(B, T, d_in) -> (B, T, d_out)``; ``net.run(x, state)`` also returns where it stopped, a
    ``StockState`` (the core's final state, ``h`` or ``(h, c)`` in PyTorch's layout, and the steps run so far)
    and takes one to continue from (step-by-step decoding).
    ``net.tolerance`` bounds every output's distance from the exact interpreter (module docstring of
    ``lsrl.targets.stock_rnn``) for ``T <= net.max_len`` and inputs within the declared bounds: longer
    sequences, a continued run past ``max_len`` steps and a dtype change (``lsrl.targets.promises``) are
    refused.

    ``net.labels``: ``core.l{k}`` (layer ``k``'s ``h``; an LSTM's cell ``core.l{k}.c``) and ``readout``, one
    ``UnitLabel`` per unit; a labelled
    unit of the core holds ``net.unit_scales[key][u]`` times what its label says (a power of two, the
    small-signal scale ``eps``), within ``net.unit_tolerances[key][u]`` (that times the component's error
    bound). ``net(x, patch={node: values})`` sets the units that hold the node (``_held_patches``) inside
    the recurrence: the layers it touches run one step at a time (the stock layer on one step, its state
    patched before it is carried); ``run_with_cache`` records every layer's ``h`` and gates per step.

    Both stay within ``net.tolerance`` of the program's patched run (``program(xs, patch=...)``) for patch
    values within the nodes' value bounds (others are refused): a patched unit is written as the value times
    a power of two, rounded once (relative error ``u``, below the component's own bound ``E >= u M``), and the
    value bounds of every later layer still hold, since they follow from the patched node's bound; so the
    induction of the module docstring goes through unchanged.
    """

    state_patch: dict | None = None  # {core layer or "readout": StatePatch} while a patched call runs
    h0: torch.Tensor  # per layer, the initial h (a buffer)
    c0: torch.Tensor  # per layer, an LSTM's initial cell (a buffer; 0 in a GRU)

    def __init__(self, arch: str, d_in: int, layers: list[CellLayer], readout_weight: np.ndarray,
                 readout_bias: np.ndarray, tolerances: np.ndarray, max_len: int, scales: Scales,
                 plan: UnitPlan | None = None) -> None:
        super().__init__()
        self.architecture = f"stock_{arch}"
        self.d_in = d_in
        self.max_len = max_len  # the longest sequence checked_input and run accept
        self.max_len_reason = "the length its scales and stated tolerance come from"
        self.scales = scales
        self.tolerances = np.asarray(tolerances, dtype=np.float64)
        self.tolerance = float(np.max(self.tolerances, initial=0.0))
        self.unit_plan = plan
        self.labels = None if plan is None else plan.labels
        self.unit_scales = None if plan is None else plan.unit_scales
        self.unit_tolerances = None if plan is None else plan.unit_tolerances
        dtype = scales.dtype
        hidden = max(layer.units for layer in layers)
        core = (nn.LSTM if arch == "lstm" else nn.GRU)(d_in, hidden, num_layers=len(layers), batch_first=True,
                                                       dtype=dtype)
        h0, c0 = np.zeros((len(layers), hidden)), np.zeros((len(layers), hidden))
        with torch.no_grad():
            for k, layer in enumerate(layers):
                arrays = layer.arrays(hidden, d_in if k == 0 else hidden)
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(core, f"{name}_l{k}").copy_(torch.as_tensor(arrays[name]))
                h0[k], c0[k] = arrays["h0"], arrays["c0"]
        self.core = core
        self.register_buffer("h0", torch.as_tensor(h0, dtype=dtype))
        self.register_buffer("c0", torch.as_tensor(c0, dtype=dtype))  # the LSTM's initial cell (0 in a GRU)
        self.readout = nn.Linear(hidden, readout_weight.shape[0], dtype=dtype)
        with torch.no_grad():
            self.readout.weight.copy_(torch.as_tensor(readout_weight))
            self.readout.bias.copy_(torch.as_tensor(readout_bias))

    def __call__(self, x: Any, *args: Any, patch: Any = None, **kwargs: Any) -> Any:
        """``forward``; ``patch={node: values}`` patches program nodes of ``net.patchable`` (class docstring)."""
        if not patch_items(patch, self.architecture):
            return super().__call__(x, *args, **kwargs)
        checked = checked_input(self, x, check_bounds=False)  # the shape of the patch values; forward checks bounds
        self.state_patch = _held_patches(self, patch, checked.shape[0], checked.shape[1])
        try:
            return super().__call__(x, *args, **kwargs)
        finally:
            self.state_patch = None

    def initial_state(self, batch: int) -> Any:
        """The core's initial state for ``batch`` sequences (``h0``, and ``c0`` for the LSTM)."""
        h0 = self.h0[:, None, :].expand(-1, batch, -1).contiguous()
        c0 = self.c0[:, None, :].expand(-1, batch, -1).contiguous()
        return (h0, c0) if isinstance(self.core, nn.LSTM) else h0

    def run(self, x: Any, state: StockState | None = None, check_bounds: bool = True
            ) -> tuple[torch.Tensor, StockState]:
        """``(outputs, final state)``; ``state``: the ``StockState`` of an earlier call to continue from (None: the
        initial one). A run that would pass ``max_len`` steps in all is refused (``continued_state``)."""
        x = checked_input(self, x, check_bounds)
        start, initial = continued_state(self, state, x)
        hidden, final = self.core(x, initial)
        return self.readout(hidden), StockState(final, start + x.shape[1])

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        if not self.state_patch:
            return self.run(x, check_bounds=check_bounds)[0]
        x = checked_input(self, x, check_bounds)
        outputs = self.readout(self._patched_core(x, self.state_patch))
        if "readout" in self.state_patch:
            outputs = _overwritten(outputs, self.state_patch["readout"])
        return outputs

    def layer_view(self, k: int) -> nn.RNNBase:
        """Layer ``k`` of the core as a one-layer stock ``nn.LSTM`` / ``nn.GRU`` sharing its parameters."""
        core = self.core
        view = type(core)(self.d_in if k == 0 else core.hidden_size, core.hidden_size, batch_first=True,
                          dtype=self.h0.dtype, device=self.h0.device)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(view, f"{name}_l0", getattr(core, f"{name}_l{k}"))
        return view

    def _patched_core(self, x: torch.Tensor, patches: dict) -> torch.Tensor:
        """The core layer by layer; a patched layer one step at a time (the stock layer on sequences of one
        step, carrying ``(h, c)``), its ``h`` patched before it is carried and read by the next layer."""
        lstm = isinstance(self.core, nn.LSTM)
        for k in range(self.core.num_layers):
            view = self.layer_view(k)
            h = self.h0[k][None, None, :].expand(1, x.shape[0], -1).contiguous()
            state = (h, self.c0[k][None, None, :].expand(1, x.shape[0], -1).contiguous()) if lstm else h
            if k not in patches:  # the fused stock layer
                x = view(x, state)[0]
                continue
            steps = []
            for t in range(x.shape[1]):
                state = view(x[:, t:t + 1], state)[1]
                h = patches[k](state[0][0] if lstm else state[0], t)
                state = (h[None], state[1]) if lstm else h[None]
                steps.append(h)
            x = torch.stack(steps, dim=1)
        return x

    def run_with_cache(self, xs: Any, patch: Any = None, check_bounds: bool = True) -> tuple[Any, dict]:
        """``(outputs, cache)`` as ``lsrl.targets.cache.run_with_cache``: every core layer run one step at a
        time with PyTorch's equations (``lsrl.targets.cell_steps``), the hooks ``core.l{k}`` (its ``h``),
        ``core.l{k}.r`` / ``.z`` / ``.n`` (GRU) or ``.i`` / ``.f`` / ``.g`` / ``.o`` / ``.c`` (LSTM), and
        ``readout``. ``patch``: hook names (values of the hook's shape, NaN keeps the model's) and program nodes
        of ``net.patchable`` (``values`` as for the program)."""
        x = _as_batch(self, xs)
        squeeze = x.dim() == 2
        x = checked_input(self, x[None] if squeeze else x, check_bounds)
        items = patch_items(patch, "run_with_cache")
        patchable = set(getattr(self, "patchable", None) or ())
        nodes = {key: values for key, values in items if patch_key_name(key) in patchable}
        run = Run(self._hook_patches([(k, v) for k, v in items if k not in nodes], squeeze), x.shape[1],
                  DimensionError)
        held = _held_patches(self, nodes, x.shape[0], x.shape[1]) if nodes else {}
        kind = "lstm" if isinstance(self.core, nn.LSTM) else "gru"
        with torch.no_grad():
            for k in range(self.core.num_layers):
                w_ih, w_hh, b_ih, b_hh = (getattr(self.core, f"{name}_l{k}")
                                          for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
                h = self.h0[k].expand(x.shape[0], -1)
                points = _points(run, f"core.l{k}", CACHE_GATES[kind], held.get(k))
                c = self.c0[k].expand(x.shape[0], -1) if kind == "lstm" else None
                x = run_steps(kind, points, F.linear(x, w_ih, b_ih), h, c, w_hh, b_hh, torch.sigmoid, torch.tanh)[0]
            outputs = self.readout(x)
            if "readout" in held:
                outputs = _overwritten(outputs, held["readout"])
            outputs = run.visit("readout", outputs, None)
        cache = run.finished()
        if squeeze:
            return outputs[0], {name: value[0] for name, value in cache.items()}
        return outputs, cache

    def hook_names(self) -> list[str]:
        """The names ``run_with_cache`` records, in the order it first reaches them (a step's gates, then ``h``)."""
        gates = CACHE_GATES["lstm" if isinstance(self.core, nn.LSTM) else "gru"]
        return [name for k in range(self.core.num_layers) for name in
                [f"core.l{k}.{gate}" for gate in gates] + [f"core.l{k}"]] + ["readout"]

    def _hook_patches(self, items: list, squeeze: bool) -> dict:
        names = self.hook_names()
        patches = {}
        for name, values in items:
            if name not in names:
                raise LsrlError(f"run_with_cache: cannot patch {name!r}: neither a program node of net.patchable nor "
                                f"a hook of this {self.architecture} ({', '.join(names)})")
            tensor = torch.as_tensor(_hook_values(values, f"run_with_cache: patch values for {name!r}"))
            patches[name] = tensor[None] if squeeze else tensor
        return patches

    def extra_repr(self) -> str:
        return (f"max_len={self.max_len}, dtype={DTYPES[self.scales.dtype]}, runtime={self.scales.runtime}, "
                f"tolerance={self.tolerance:.3g}, "
                f"amplitude={self.scales.amplitude:g}, gate_amplitude={self.scales.gate_amplitude:g}")


def _overwritten(sequence: torch.Tensor, patch: StatePatch) -> torch.Tensor:
    """``sequence`` ``(B, T, width)`` with the patched units set at every step."""
    sequence = sequence.clone()
    sequence[..., patch.units] = patch.values.to(sequence.dtype)
    return sequence


def stock_dtype(name: str) -> torch.dtype:
    """The torch dtype named ``"float32"`` or ``"float64"``."""
    dtypes = {value: key for key, value in DTYPES.items()}
    if name not in dtypes:
        raise LsrlError(f"stock targets: dtype must be 'float32' or 'float64', got {name!r}")
    return dtypes[name]


def _scales(dtype: Any, amplitude: float | None, gate_amplitude: float | None, gain: float, name: str,
            runtime: Any = "torch") -> Scales:
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


def _build(arch: str, model, max_len: Any, dtype: Any, amplitude: float | None, gate_amplitude: float | None,
           gain: float, runtime: Any) -> StockRNNModel:
    name = f"stock_{arch}"
    if whole_number(max_len) is None or max_len < 1:
        raise LsrlError(f"{name}: max_len must be a positive integer (the longest sequence the module runs), "
                        f"got {max_len!r}; the scales come from the value bounds at that length")
    max_len = int(max_len)
    scales = _scales(dtype, amplitude, gate_amplitude, gain, name, runtime)
    relational_bounds(model.layers[-1] if model.layers else model.input, max_len)  # every layer's, in one run
    built: tuple | None = None
    refused = LsrlError(f"{name}: not built")  # replaced by the plain construction's refusal where it raises one
    try:
        built = _built(arch, model, max_len, scales, thresholds=False)
    except LsrlError as error:
        refused = error
    if built is None or not _decides(model, built[3]):  # threshold units where the lattices allow
        try:
            exact = _built(arch, model, max_len, scales, thresholds=True)
            if built is None or np.max(exact[3], initial=0.0) < np.max(built[3], initial=0.0):
                built = exact
        except _NoThresholds:
            pass
        except LsrlError:
            if built is None:
                raise
    if built is None:
        raise refused from None
    builder, weight, bias, tolerances = built
    plan = _unit_plan(model, builder.layers, weight.shape[1], tolerances)
    return StockRNNModel(arch, model.input.dim, builder.layers, weight, bias, tolerances, max_len, scales, plan)


def _decides(model, tolerances: np.ndarray) -> bool:
    """Whether ``tolerances`` prove every token decision: below half its lattice's step for every output whose
    values lie on a lattice (real-valued outputs have none, and nothing to decide)."""
    lattices = _value_lattices(model)[-1]
    return all(lattice is None or not lattice[1] or tolerance < float(lattice[1]) / 2
               for lattice, tolerance in zip(lattices, tolerances))


class _NoThresholds(Exception):
    """The construction with threshold units failed where none could be built: the plain refusal stands."""


def _built(arch: str, model, max_len: int, scales: Scales, thresholds: bool) -> tuple:
    """``(builder, readout weight, readout bias, tolerances)``, checked (overflow, an informative bound)."""
    builder = _Builder(arch, model, max_len, scales, thresholds)
    try:
        builder.walk()
        if thresholds:
            builder.snap()
        weight, bias, tolerances = builder.readout()
        _check_overflow(f"stock_{arch}", builder.layers, weight, scales.dtype)
        _check_informative(f"stock_{arch}", model, builder, tolerances)
    except LsrlError:
        if thresholds and not builder.thresholded:
            raise _NoThresholds from None
        raise
    return builder, weight, bias, tolerances


def build_stock_lstm(model: CompiledProgram, max_len: int | None = None, dtype: torch.dtype = torch.float32,
                     amplitude: float | None = None, gate_amplitude: float | None = None,
                     gain: float = 1.0, runtime: str = "torch") -> StockRNNModel:
    """``model`` (a CompiledProgram) in one stock ``torch.nn.LSTM`` (module docstring); ``max_len`` required.
    ``runtime="onnxruntime"`` (float32): ``net.tolerance`` holds in onnxruntime too (``export_stock_onnx``)."""
    return _build("lstm", model, max_len, dtype, amplitude, gate_amplitude, gain, runtime)


def build_stock_gru(model: CompiledProgram, max_len: int | None = None, dtype: torch.dtype = torch.float32,
                    amplitude: float | None = None, gate_amplitude: float | None = None,
                    gain: float = 1.0, runtime: str = "torch") -> StockRNNModel:
    """``model`` (a CompiledProgram) in one stock ``torch.nn.GRU`` (module docstring); ``max_len`` required.
    ``runtime="onnxruntime"`` (float32): ``net.tolerance`` holds in onnxruntime too (``export_stock_onnx``)."""
    return _build("gru", model, max_len, dtype, amplitude, gate_amplitude, gain, runtime)


def layer_report(module: StockRNNModel) -> list[dict]:
    """One row per layer of the core (``hidden``: its width, ``nonzeros``: its non-zero weights), then the readout."""
    core = module.core
    rows = []
    for k in range(core.num_layers):
        tensors = [getattr(core, f"{name}_l{k}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        nonzeros = sum(int(torch.count_nonzero(t)) for t in tensors) + int(torch.count_nonzero(module.h0[k])) + int(
            torch.count_nonzero(module.c0[k]))
        rows.append(dict(layer=k, kind=module.architecture, hidden=core.hidden_size, nonzeros=nonzeros))
    readout = module.readout
    rows.append(dict(layer=max(core.num_layers - 1, 0), kind="readout", hidden=readout.out_features,
                     nonzeros=int(torch.count_nonzero(readout.weight)) + int(torch.count_nonzero(readout.bias))))
    return rows


# ---- ONNX -----------------------------------------------------------------------------------------

_ONNX_OPERATORS = {  # ONNX operator, PyTorch gate blocks in ONNX order, attributes (as lsrl.automata.export)
    "stock_lstm": ("LSTM", ONNX_GATE_ORDER["lstm"], {}),
    "stock_gru": ("GRU", ONNX_GATE_ORDER["gru"], {"linear_before_reset": 1}),
}


def export_stock_onnx(net: StockRNNModel, path: Any) -> Any:
    """Write ``net`` (a ``stock_lstm`` / ``stock_gru`` module) as an ONNX model to ``path``: one standard
    ``LSTM`` / ``GRU`` operator per layer of the core (its default activations: sigmoid, tanh, tanh; the
    GRU with ``linear_before_reset=1``, PyTorch's formula), then ``MatMul`` + ``Add`` for the readout, in the
    module's dtype. ``x``: ``(batch, time, d_in)``, ``y``: ``(batch, time, d_out)``. Returns the path.

    onnxruntime runs these operators in float32 only (see ``lsrl.targets.onnx_export``), and its kernels compute
    other activations than torch's (``benchmarks/rnn_activations.py``: tanh within 10.1 u, never the
    identity, ``tanh(64) = 1 + 2^-21`` in the GRU, whose reset gate is ``-2^-22`` / ``1 + 2^-22`` at ``-+1024``).
    ``net.tolerance`` holds there for a module built with ``runtime="onnxruntime"`` (module docstring,
    "onnxruntime"); for one built for torch it does not: identity units are off by the tanh's error (robust
    Listing 2, ``max_len = 256``: about 1e-2), and the file's doc string says which."""
    if getattr(net, "architecture", None) not in _ONNX_OPERATORS:
        raise LsrlError(f"export_stock_onnx: needs a module of {tuple(_ONNX_OPERATORS)}, got "
                        f"{getattr(net, 'architecture', type(net).__name__)!r}")
    g, out = _onnx_graph(net)
    doc = (f"lsrl {net.architecture}: a compiled program in stock {net.core.__class__.__name__} operators; "
           f"outputs within {net.tolerance:.3g} of the program's for T <= {net.max_len} (runtime {net.scales.runtime}"
           f"{'' if net.scales.runtime == 'onnxruntime' else ': onnxruntime computes other activations'})")
    try:
        return g.write(out, path, f"lsrl_{net.architecture}", net.d_in, net.readout.out_features, doc)
    except OSError as error:
        raise LsrlError(f"export_stock_onnx: cannot write {str(path)!r}: {error.strerror or error}") from None


def _onnx_graph(net: StockRNNModel) -> tuple[OnnxGraph, str]:
    op_type, order, attributes = _ONNX_OPERATORS[net.architecture]
    core = net.core
    g = OnnxGraph(DTYPES[net.scales.dtype])
    seq, _, batch_prefix = g.read_input()
    hidden = core.hidden_size
    for k in range(core.num_layers):
        W, R = (reorder_gates(to_numpy(getattr(core, f"{name}_l{k}")), hidden, order)
                for name in ("weight_ih", "weight_hh"))
        B = np.concatenate([reorder_gates(to_numpy(getattr(core, f"{name}_l{k}")), hidden, order)
                            for name in ("bias_ih", "bias_hh")])
        initial = [to_numpy(net.h0[k])] + ([to_numpy(net.c0[k])] if op_type == "LSTM" else [])
        seq = g.recurrence(op_type, seq, W, R, B, hidden, initial, batch_prefix, [], f"{net.architecture}{k}",
                           **attributes)
    return g, g.linear(seq, to_numpy(net.readout.weight), to_numpy(net.readout.bias), hint="readout")


__all__ = [
    "StockRNNModel", "build_stock_gru", "build_stock_lstm", "export_stock_onnx", "layer_report", "power_sum",
    "stock_dtype",
]
