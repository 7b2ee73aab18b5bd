"""The proved tolerances of the hf targets (``lsrl.hf.rounding``) at their boundaries: the assumptions
on torch's activations the proofs rest on, and each scale the builders choose (SiLU / GELU gains, the
stream's payload scale, Mamba-2's group-norm anchor) at the smallest value the proof allows (the model
is exact, as stated) and a clearly worse one (the stated tolerance no longer holds). Inputs at their
declared bounds, T = max_len."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lsrl
import lsrl.hf as H
import lsrl.hf.mamba as mamba
import lsrl.hf.mamba2 as mamba2
import lsrl.hf.recurrentgemma as recurrentgemma
from lsrl.hf.mamba import SILU_EXACT, SILU_GAP
from lsrl.hf.recurrentgemma import GELU_EXACT, GELU_GAP, SATURATE

DTYPES = (torch.float32, torch.float64)
T = 12
STATED_ONCE = 5e-6  # stated 1.0e-6 to 1.6e-6 at T = 256; 2.3e-4 without live steps, 8e-3 to 1.6e-2 as a full scan


def _run(hf, xs) -> np.ndarray:
    with torch.no_grad():
        return H.outputs(hf, hf(**H.inputs(hf, xs))).double().numpy()


def _integer_program() -> lsrl.CompiledProgram:
    """ReLUs of integer inputs with integer offsets: every value on the grid of whole numbers, so the
    proofs state tolerance 0 (every output exact)."""
    x = lsrl.Input(4, name="x", bounds=(-3, 3), integer=True)
    return lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Linear(x, np.eye(4), [1, 0, -1, 2])), name="integer_relus"))


MODEL = _integer_program()
# at the declared bounds (+-3, all of them at once: the largest payload energy) and next to the ReLUs' knees
XS = np.stack([np.full((T, 4), 3.0), np.full((T, 4), -3.0),
               np.random.default_rng(7).choice([-3.0, -2.0, -1.0, 0.0, 1.0, 3.0], size=(T, 4))])
REFERENCE = np.asarray(MODEL(XS, exact=True), dtype=float)


# ---- the assumptions on torch ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_is_relu_beyond_its_window_and_within_its_gap_inside(dtype):
    outside = torch.tensor([SILU_EXACT, -SILU_EXACT, 1e3, -1e3, 2.0 ** 90, -(2.0 ** 90), 0.0] * 9, dtype=dtype)
    assert torch.equal(F.silu(outside), torch.relu(outside))  # the vectorised path
    for value in outside[:7]:
        assert F.silu(value.reshape(1)).item() == torch.relu(value).item()  # the scalar path
    inside = torch.linspace(-SILU_EXACT, SILU_EXACT, 200_001, dtype=dtype)
    assert float(torch.max(torch.abs(F.silu(inside) - torch.relu(inside)))) <= SILU_GAP
    assert float(torch.max(torch.abs(F.silu(inside) - torch.relu(inside)))) > 0.27  # the gap is real


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_sigmoid_exp_and_tanh_where_the_recurrentgemma_proof_needs_them(dtype):
    outside = torch.tensor([GELU_EXACT, -GELU_EXACT, 9.5, -9.5, 2.0 ** 60, -(2.0 ** 60)] * 9, dtype=dtype)
    assert torch.equal(F.gelu(outside, approximate="tanh"), torch.relu(outside))
    inside = torch.linspace(-GELU_EXACT, GELU_EXACT, 200_001, dtype=dtype)
    gap = float(torch.max(torch.abs(F.gelu(inside, approximate="tanh") - torch.relu(inside))))
    assert 0.16 < gap <= GELU_GAP
    gates = torch.sigmoid(torch.tensor([SATURATE, -SATURATE], dtype=dtype))
    assert gates.tolist() == [1.0, 0.0] and torch.exp(torch.tensor(-8 * SATURATE, dtype=dtype)).item() == 0.0
    small = torch.tensor([2.0 ** -27, -(2.0 ** -27), 2.0 ** -60, 3 * 2.0 ** -40], dtype=dtype)
    assert torch.equal(torch.tanh(small), small)  # the logits soft-cap is the identity


# ---- the gains ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["mamba", "mamba2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_gain_smallest_allowed_is_exact_and_a_16_times_smaller_one_is_not(arch, dtype, monkeypatch):
    """On the grid of whole numbers the proof needs ``k >= 710`` (module doc of lsrl.hf.mamba,
    exactness): ``k = 1024`` gives the stated tolerance 0; ``k = 64`` leaves ``silu(-64) / 64 != 0`` (1.6e-28:
    the window is a bit-exactness margin), within the tolerance the proof states for that gain (0.0044)."""
    monkeypatch.setattr(mamba, "SMALLEST_GAIN", 1.0)
    monkeypatch.setattr(mamba, "GAIN_CAP", 1024.0)
    exact = H.to_hf(MODEL, arch, T, dtype)
    assert exact.config.lsrl_io["tolerance"] == 0.0
    np.testing.assert_array_equal(_run(exact, XS), REFERENCE)
    monkeypatch.setattr(mamba, "GAIN_CAP", 64.0)
    smaller = H.to_hf(MODEL, arch, T, dtype)
    error = np.max(np.abs(_run(smaller, XS) - REFERENCE))
    assert 0.0 < error <= smaller.config.lsrl_io["tolerance"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_gain_smallest_allowed_is_exact_and_a_16_times_smaller_one_is_not(dtype, monkeypatch):
    """RecurrentGemma's MLP units: on whole numbers ``G = 8`` is the smallest gain the proof allows
    (``gelu_tanh(G x) == relu(G x)`` for ``|G x| >= 8``); ``G = 1/2`` gives wrong outputs (0.32 off), within
    the tolerance the proof states for that gain (0.34: the bound is nearly tight)."""
    monkeypatch.setattr(recurrentgemma, "GATE_GAIN", 8.0)
    exact = H.to_hf(MODEL, "hawk", T, dtype)
    assert exact.config.lsrl_io["tolerance"] == 0.0
    np.testing.assert_array_equal(_run(exact, XS), REFERENCE)
    monkeypatch.setattr(recurrentgemma, "GATE_GAIN", 0.5)
    smaller = H.to_hf(MODEL, "hawk", T, dtype)
    error = np.max(np.abs(_run(smaller, XS) - REFERENCE))
    assert 0.1 < error <= smaller.config.lsrl_io["tolerance"]


# ---- the stream's payload scale and Mamba-2's anchor ----------------------------------------------


def _payload_scale(hf) -> float:
    record = hf.config.lsrl_io
    return record["embed_scale"] * (math.sqrt(hf.config.hidden_size) if record["arch"] in ("hawk", "griffin") else 1)


@pytest.mark.parametrize("arch", ["mamba", "hawk"])
def test_payload_scale_largest_allowed_is_exact_and_16_times_larger_is_not(arch):
    """``lsrl.hf.stream``'s claim: beta from the bounds ``M + E`` keeps every RMSNorm the identity (the
    stated tolerance, 0, holds); 16 times that beta (payload energy 2**-18 of the anchors') does not."""
    builder = {"mamba": lambda **kw: mamba.build_mamba(MODEL, T, torch.float32, **kw),
               "hawk": lambda **kw: recurrentgemma.build(MODEL, T, torch.float32, "hawk", **kw)}[arch]
    exact = builder()
    assert exact.config.lsrl_io["tolerance"] == 0.0
    np.testing.assert_array_equal(_run(exact, XS), REFERENCE)
    loose = builder(beta=_payload_scale(exact) * 16)
    assert np.max(np.abs(_run(loose, XS) - REFERENCE)) > 0.0


def test_mamba2_group_norm_anchor_smallest_allowed_is_exact_and_16_times_smaller_is_not(monkeypatch):
    exact = H.to_hf(MODEL, "mamba2", T, torch.float32)
    assert exact.config.lsrl_io["tolerance"] == 0.0
    np.testing.assert_array_equal(_run(exact, XS), REFERENCE)
    smallest = mamba2._anchor_value
    monkeypatch.setattr(mamba2, "_anchor_value", lambda heads, where: smallest(heads, where) / 16)
    assert np.max(np.abs(_run(H.to_hf(MODEL, "mamba2", T, torch.float32), XS) - REFERENCE)) > 0.0


# ---- a real-valued program with every kind of state, inputs at their bounds -----------------------


@pytest.mark.parametrize("arch", ["mamba", "mamba2", "hawk", "griffin"])
def test_stated_tolerance_holds_with_inputs_at_their_bounds(arch):
    """Decays 1, 1/2 and 0, a sign flip, a quarter turn, a delay line with an initial state, ReLU and Multi
    (tests/test_hf_mamba.py), T = max_len, every input at -2 or +2."""
    from test_hf_mamba import every_state_program

    model = lsrl.compile(every_state_program())
    xs = np.random.default_rng(11).choice([-2.0, 2.0], size=(3, T, 2))
    hf = H.to_hf(model, arch, T)
    error = np.max(np.abs(_run(hf, xs) - np.asarray(model(xs, exact=True), dtype=float)))
    assert error <= hf.config.lsrl_io["tolerance"] < 2.0


# ---- refusals and warnings ------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["mamba", "hawk"])
def test_a_scan_too_long_for_its_rounding_bound_is_refused_naming_the_state(arch):
    """A real-valued sum over 2**23 steps: ``2 U R >= 1/2``, no finite error bound (lsrl.hf.rounding)."""
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[1]], [[1]], name="long_sum")))
    with pytest.raises(lsrl.LsrlError, match="long_sum.*rounding error bound"):
        H.to_hf(model, arch, 2 ** 23)


def test_a_tolerance_that_proves_nothing_warns():
    """A saturating step of slope 2**26 (outputs in [0, 1]) multiplies its input's rounding (``2**-24``
    relative) by 2**26: its error bound (36 in Mamba) exceeds its outputs' bound, and the model is written
    with a ToleranceWarning."""
    from lsrl.targets.precision import ToleranceWarning

    x = lsrl.Input(1, name="x", bounds=(0, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.f_step(x - 0.5, 2 ** 26, saturating=True), name="steep"))
    with pytest.warns(ToleranceWarning, match="steep.*proves nothing"):
        H.to_hf(model, "mamba", 8)


# ---- scans: an initial state, a state written once ------------------------------------------------


@pytest.mark.parametrize("arch,dtype", [("mamba", torch.float32), ("mamba", torch.float64), ("hawk", torch.float32)])
def test_an_initial_state_and_a_state_written_once_keep_their_first_steps_error(arch, dtype):
    """A pulse (the initial state 1/3 at decay 1; RecurrentGemma's first-step channel:
    ``lsrl.hf.rounding.pulse_error``) carries its first step's error alone, and a scan whose slot
    ``relational_bounds`` bounds by 1 and whose drive lives at step 1 only rounds there alone
    (``lsrl.hf.rounding.Activity``): at T = 256 the full-scan bound ``2 U T**2`` would be 8e-3, ``U`` per step
    (``scan_error``'s ``state``, ``Slot.scan_state``) 2.3e-4."""
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    started = lsrl.LinState(lsrl.f_constant(x, 1), [[0, 0], [1, 0]], [[1], [0]])  # [1, 0], [1, 1], ...
    once = lsrl.LinState(lsrl.f_ifelse(lsrl.f_not(started[1]), x, x * 0, variant="multiplicative"), [[1]], [[1]])
    third = lsrl.LinState(x, [[1]], [[0]], init_state=[Fraction(1, 3)], name="third")
    model = lsrl.compile(lsrl.ForEach(lsrl.Concat([once, third])))
    steps = 256
    xs = np.random.default_rng(5).uniform(0, 1, (4, steps, 1))
    hf = H.to_hf(model, arch, steps, dtype)
    error = np.max(np.abs(_run(hf, xs) - np.asarray(model(xs), dtype=float)))
    assert error <= hf.config.lsrl_io["tolerance"] < STATED_ONCE


# ---- live steps and sign splits (lsrl.hf.rounding.Activity, lsrl.hf.mamba._split_parts) ----------------


def _window_program() -> lsrl.CompiledProgram:
    """``acc_t = sum_(s <= t) [s in {2, 3}] x_s``: a shift register of constants, ``[1, [t > 1], [t > 2],
    [t > 3]]``, makes the window flag, so the sum's drive lives at two steps."""
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    shift = [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    ones = lsrl.LinState(lsrl.f_constant(x, 1), shift, [[1], [0], [0], [0]], name="ones")
    window = lsrl.Linear(ones, [[0, 1, 0, -1]], name="window")
    acc = lsrl.LinState(lsrl.f_ifelse(window, x, x * 0, variant="multiplicative"), [[1]], [[1]], name="acc")
    return lsrl.compile(lsrl.ForEach(acc, name="window_sum"))


def _activity(model: lsrl.CompiledProgram, max_len: int) -> tuple:
    """The lowered slots and their live steps as ``lsrl.hf.mamba.slot_errors`` sees them."""
    from lsrl.hf.lowering import lower
    from lsrl.hf.rounding import Activity

    lowered = lower(model, max_len)
    _, grids = mamba.slot_errors(lowered, mamba._plan_blocks(lowered))
    activity = Activity(lowered.slots, max_len, grids)
    for slot in range(len(lowered.slots)):
        activity.record(slot)
    return lowered, activity


def _scan_drives(lowered, activity) -> dict[str, int]:
    return {slot.name: activity.count(channel.form) for slot in lowered.slots for channel in slot.channels
            if channel.kind == "scan"}


@pytest.mark.parametrize("arch", ["mamba", "mamba2", "hawk"])
def test_a_sum_driven_at_two_steps_rounds_at_those_alone(arch):
    """The window's sum (drive live at steps 2 and 3 only) at T = max_len = 256, inputs anywhere in [0, 1]
    and at 1: its stated error is two steps' (2.3e-6 to 3.5e-6), not 256 steps' (2.1e-4), and holds."""
    model, steps = _window_program(), 256
    lowered, activity = _activity(model, steps)
    assert _scan_drives(lowered, activity) == {"acc": 2}
    xs = np.concatenate([np.random.default_rng(4).uniform(0, 1, (3, steps, 1)), np.ones((1, steps, 1))])
    hf = H.to_hf(model, arch, steps)
    error = np.max(np.abs(_run(hf, xs) - np.asarray(model(xs, exact=True), dtype=float)))
    assert error <= hf.config.lsrl_io["tolerance"] < 5e-6


def _signed_product_sum() -> lsrl.CompiledProgram:
    """``sum_t a_t b_t`` of two signed real inputs: Mamba splits both the product and the scan by sign."""
    ab = lsrl.Input(2, name="ab", bounds=(-1, 1))
    products = lsrl.Multi(ab)
    return lsrl.compile(lsrl.ForEach(lsrl.LinState(products, [[1]], [[1]], name="dot"), name="signed_dot"))


@pytest.mark.parametrize("arch", ["mamba", "mamba2", "hawk", "griffin"])
def test_a_sign_split_is_charged_once_and_holds_inside_the_activation_window(arch):
    """Factors at their bounds, and inside the SiLU / GeLU window (``|k a| < 710``, where each piece is
    off by its gap): the stated error (5.6e-4 to 1.2e-3 at T = 64; two to four times that when every
    piece was charged in full) holds."""
    model, steps = _signed_product_sum(), 64
    rng = np.random.default_rng(8)
    tiny = rng.choice([-3e-7, -1e-9, 0.0, 1e-9, 3e-7], size=(2, steps, 2))
    xs = np.concatenate([rng.choice([-1.0, 1.0], size=(2, steps, 2)), tiny, rng.uniform(-1, 1, (1, steps, 2))])
    hf = H.to_hf(model, arch, steps)
    error = np.max(np.abs(_run(hf, xs) - np.asarray(model(xs, exact=True), dtype=float)))
    assert error <= hf.config.lsrl_io["tolerance"] < 1.5e-3


# ---- Listing 1: the query on a cell's ramp at every token ---------------------------------------------


LISTING1_STATED = {65: 0.4, 256: 1.5}  # stated 0.25 to 0.34 at 65 steps, 1.0 to 1.35 at 256 (16 to 2,000 before)


def _listing1_edge_prompts(max_len: int) -> np.ndarray:
    """Prompts of ``max_len`` tokens, every prompt token one cell ``(l, l + d]`` with the query on the ramp of
    its lower or upper edge (both for ``d`` below the ramps' width 1/1000), value +-1 (the errors add up);
    and a regular grid of 64 cells (the query meets one ramp at most)."""
    rng = np.random.default_rng(max_len)
    prompts = []
    for index, width in enumerate([1 / 64, 0.37, 1.0, 5e-4, 1 / 64, 0.2]):
        lower = rng.uniform(0, 1 - width)
        query = min(1.0, lower + width + rng.uniform(0, 1e-3)) if index % 2 else lower + rng.uniform(0, 1e-3)
        value = 1.0 if index % 3 else -1.0
        prompts.append([[query, 0.0, 0.0]] + [[width, lower, value]] * (max_len - 1))
    grid = [[rng.uniform(0, 1), 0.0, 0.0]] + [[1 / 64, i / 64, math.sin(3 * (i + 0.5) / 64)] for i in range(64)]
    prompts.append(grid + [[1 / 64, 0.0, 0.0]] * (max_len - len(grid)))  # then cells of value 0
    return np.array(prompts)


@pytest.mark.parametrize("arch,max_len,dtype", [(arch, 65, torch.float32) for arch in ("mamba", "mamba2", "hawk",
                                                                                       "griffin")]
                         + [("mamba2", 65, torch.float64), ("mamba", 256, torch.float64), ("hawk", 256, torch.float32)])
@pytest.mark.slow
def test_listing1_stated_error_holds_with_queries_on_the_ramps_and_is_informative(arch, max_len, dtype):
    """Listing 1 (robust, 1 -> 1): no ToleranceWarning, a stated error far below its outputs' bound (64 at
    65 steps, 256 at 256), and it holds on prompts of ``max_len`` tokens that put the query on a ramp at
    every token (measured 9e-4 to 1.2e-3 at 65 steps, 3.5e-3 to 4.7e-3 at 256: the bound is within a few
    hundred times of what such prompts reach)."""
    from lsrl.targets.precision import ToleranceWarning

    model = lsrl.compile(lsrl.programs.continuous_approximator(1, 1, robust=True, value_bound=1))
    xs = _listing1_edge_prompts(max_len)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ToleranceWarning)
        hf = H.to_hf(model, arch, max_len, dtype)
    error = np.max(np.abs(_run(hf, xs) - np.asarray(model(xs), dtype=float)))
    assert 1e-4 < error <= hf.config.lsrl_io["tolerance"] < LISTING1_STATED[max_len]


def test_listing1_query_is_written_once():
    """Listing 1's query register ``(1 - processing) q`` is driven at step 1 only; its estimate at every
    step but the first (where ``processing`` is an exact 0: ``in_cell`` is not, being a ReLU of real values,
    so every step counts)."""
    model = lsrl.compile(lsrl.programs.continuous_approximator(1, 1, robust=True, value_bound=1))
    drives = _scan_drives(*_activity(model, 65))
    assert sorted(drives.values()) == [1, 65]
