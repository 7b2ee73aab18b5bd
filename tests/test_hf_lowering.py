"""``lsrl.hf.lowering`` computes its coefficients in exact rationals: the slots it lowers a program to,
run by an independent interpreter of their meaning in ``fractions.Fraction`` (the module doc), give the
DAG interpreter's exact outputs bit for bit, on fixed and random programs; the floats the builders write
are the nearest float64s, flagged where they are roundings (no grid is claimed for them); decays are
within ``DECAY_ROUNDING``; irrational eigenvalues are enclosed (tests/test_hf_irrational.py), a repeated
irrational factor refused beyond the convolution's max_len, naming the state."""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import lsrl
from lsrl.hf.enclosure import Algebraic, midpoint
from lsrl.hf.lowering import DECAY_ROUNDING, Lowered, constant, decay_and_rotation, decay_float, lower
from lsrl.hf.rounding import form_grid
from lsrl.numbers import mpq, to_fraction, to_rational

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_mamba import bounded_random_program, every_state_program  # noqa: E402
from test_random_programs import X_NUM  # noqa: E402


def _q(value) -> Fraction:
    return to_fraction(mpq(value))


def _form(form, values: list[Fraction]) -> Fraction:
    return sum((_q(c) * values[slot] for slot, c in form.terms), _q(form.offset))


def run_slots(lowered: Lowered, xs: np.ndarray) -> list[list[list[Fraction]]]:
    """The outputs ``(B, T, d_out)`` of ``lowered`` on ``xs``, in exact fractions: each channel as the module
    doc defines it (relu, delay / impulse, product, scan, pulse), read from the exact ``terms``, ``offset``
    and ``exact_decay`` only (never the floats the builders write); every slot checked within its bounds."""
    batches = []
    for sequence in xs:
        history: list[list[Fraction]] = []  # every slot's value per step
        scans: dict[tuple[int, int], Fraction] = {}
        for t, x in enumerate(sequence, start=1):
            values: list[Fraction] = []
            for index, slot in enumerate(lowered.slots):
                if not slot.channels:
                    values.append(to_fraction(to_rational(x[index])) if index < lowered.input_dim else Fraction(0))
                    continue
                total = Fraction(0)
                for k, channel in enumerate(slot.channels):
                    total += _q(channel.weight) * _channel(channel, t, values, history, scans, (index, k))
                assert Fraction(slot.low) <= total <= Fraction(slot.high), (slot.name, t)  # its bound holds
                values.append(total)
            history.append(values)
        batches.append([[_form(form, values) for form in lowered.outputs] for values in history])
    return batches


def _channel(channel, t, values, history, scans, key) -> Fraction:
    if channel.kind == "relu":
        return max(_form(channel.form, values), Fraction(0))
    if channel.kind == "product":
        return _form(channel.form, values) * _form(channel.gate, values)
    if channel.kind == "delay":
        if channel.impulse:
            return _q(channel.form.offset) if t == channel.lag + 1 else Fraction(0)
        return _form(channel.form, history[t - 1 - channel.lag]) if t > channel.lag else Fraction(0)
    decay = _q(midpoint(channel.exact_decay)[0])  # an irrational decay: a rational within 2**-120 of it
    if channel.kind == "pulse":
        return decay ** (t - 1) * _q(channel.form.offset)
    scans[key] = decay * scans.get(key, Fraction(0)) + _form(channel.form, values)  # a scan
    return scans[key]


def _exact_reference(model, xs) -> list:
    return [[[to_fraction(v) for v in step] for step in sequence] for sequence in model(xs, exact=True)]


def test_every_kind_of_state_is_lowered_exactly():
    """Decays 1, 1/2, 0, a sign flip (-1/2), a quarter turn, a delay line with an initial state, ReLU, Multi."""
    model = lsrl.compile(every_state_program())
    xs = np.random.default_rng(0).integers(-4, 5, (3, 12, 2)) / 2
    lowered = lower(model, 12)
    assert run_slots(lowered, xs) == _exact_reference(model, xs)


def _enclosed_channels(lowered: Lowered) -> int:
    return sum(isinstance(c.exact_decay, Algebraic) for slot in lowered.slots for c in slot.channels)


@pytest.mark.parametrize("seed", [*range(12), 20, 42, 54, 116, 166])  # 42...: delay blocks shaped as trees
def test_random_programs_are_lowered_exactly(seed):
    """Irrational eigenvalues: seeds 1 and 166 (their irrational blocks undriven, max_len 8: exact fixed sequences),
    54 (driven: enclosed, so its slots' forms are within 1e-25 of the program's), 4 (a cubic with complex roots,
    driven: its exact convolution, tests/test_hf_convolution.py)."""
    model = lsrl.compile(bounded_random_program(seed))
    xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, (2, 8, model.input.dim)) / 2
    lowered = lower(model, 8)
    assert _enclosed_channels(lowered) == (2 if seed == 54 else 0)  # a scan and a sign flip's scan
    if seed != 54:
        assert run_slots(lowered, xs) == _exact_reference(model, xs)
        return
    for got, expected in zip(np.ravel(run_slots(lowered, xs)), np.ravel(_exact_reference(model, xs))):
        assert abs(got - expected) <= Fraction(1, 10 ** 25), (float(got), float(expected))


def test_a_delay_block_with_two_entries_in_a_row_is_lowered_exactly():
    """A nilpotent block whose row has two entries (a tree of shifts, not one path): both reach the output.
    The delay line followed one successor per row and dropped the other (error 1.5 in Mamba, stated 5e-6)."""
    import torch

    x = lsrl.Input(3, name="x", bounds=(-6, 6))
    tree = lsrl.LinState(x, A=[[0, 0, 0], [-Fraction(2, 3), 0, -Fraction(1, 4)], [0, 0, 0]], B=np.eye(3).tolist(),
                         init_state=[1, 2, -3], name="tree")
    model = lsrl.compile(lsrl.ForEach(tree))
    xs = np.random.default_rng(3).integers(-12, 13, (3, 6, 3)) / 2
    assert run_slots(lower(model, 6), xs) == _exact_reference(model, xs)
    net = model.to_hf("mamba", max_len=6, dtype=torch.float64)
    from lsrl.hf import inputs, outputs
    computed = outputs(net, net(**inputs(net, xs))).detach().numpy()
    assert np.max(np.abs(computed - np.asarray(model(xs), dtype=float))) <= net.config.lsrl_io["tolerance"]


def _powers_reference(A, init, drive, steps) -> list[list[Fraction]]:
    """``z_t = A z_(t-1) + drive`` from ``init``, by powers of ``A`` in fractions: ``A^t init + sum_(k<t) A^k
    drive``."""
    size = len(A)
    power = [[Fraction(int(i == j)) for j in range(size)] for i in range(size)]
    acc = [[Fraction(0)] * size for _ in range(size)]  # sum_(k<t) A^k
    out = []
    for _ in range(steps):
        acc = [[acc[i][j] + power[i][j] for j in range(size)] for i in range(size)]
        power = [[sum(A[i][k] * power[k][j] for k in range(size)) for j in range(size)] for i in range(size)]
        out.append([sum(power[i][j] * init[j] + acc[i][j] * drive[j] for j in range(size)) for i in range(size)])
    return out


@pytest.mark.parametrize("max_len", [10, 70])
def test_a_driveless_block_is_its_exact_sequence(max_len):
    """A 3-4-5 rotation (no finite period: ``p = max_len``) with a third as its initial state and a constant
    drive, and a period-4 quarter turn at max_len 70 (beyond MAX_FIXED_PERIOD): the slots' outputs equal
    ``A^t z_0 + sum A^k c`` computed in fractions."""
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    A = [[Fraction(3, 5), Fraction(-4, 5)], [Fraction(4, 5), Fraction(3, 5)]] if max_len == 10 else [[0, -1], [1, 0]]
    init, drive = [Fraction(1, 3), Fraction(2, 7)], [Fraction(1, 9), Fraction(0)]
    state = lsrl.LinState(x, A=A, B=[[0], [0]], b=drive, init_state=init, name="turn")
    model = lsrl.compile(lsrl.ForEach(lsrl.Concat([state, x])))
    lowered = lower(model, max_len)
    xs = np.zeros((1, max_len, 1))
    got = run_slots(lowered, xs)[0]
    expected = _powers_reference([[Fraction(v) for v in row] for row in A], init, drive, max_len)
    assert [step[:2] for step in got] == expected
    assert not all(form.exact for form in lowered.outputs[:2])  # thirds and sevenths: not float64s


def test_a_driven_decaying_rotation_has_a_finite_period_or_is_refused():
    """``rho`` rational (1/2, a quarter turn) or irrational (``1/sqrt(2)``, an eighth turn: ``R`` holds ``+-1/sqrt(2)``,
    ``R**2`` rationals), exact either way; a rotation of no finite period (``atan(2/3)``) is refused beyond the
    convolution's max_len, naming it."""
    half_turn = [[mpq(0), mpq(-1, 2)], [mpq(1, 2), mpq(0)]]  # rho = 1/2, a quarter turn
    rho, rotation, period = decay_and_rotation(half_turn, 12)
    assert (rho, period) == (mpq(1, 2), 4) and rotation == [[0, -1], [1, 0]]
    eighth = [[mpq(1, 2), mpq(-1, 2)], [mpq(1, 2), mpq(1, 2)]]  # rho = 1/sqrt(2): irrational
    rho, rotation, period = decay_and_rotation(eighth, 12)
    assert isinstance(rho, Algebraic) and rho * rho == mpq(1, 2) and period == 8
    c = rotation[0][0]
    assert rotation == [[c, -c], [c, c]] and c * c == mpq(1, 2) and float(c) == math.sqrt(0.5)
    untimely = [[mpq(1, 2), mpq(-1, 3)], [mpq(1, 3), mpq(1, 2)]]  # rho = sqrt(13)/6, a turn by atan(2/3)
    assert decay_and_rotation(untimely, 12) is None
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, untimely, np.eye(2), name="untimely")))
    with pytest.raises(lsrl.LsrlError, match="'untimely'.*cannot be emulated.*rotation of period at most 12.*max_len <= 64"):
        lower(model, 65)


def test_a_float_model_is_lowered_as_the_binary_values_it_holds():
    """0.1 and 0.3 in a float model are binary fractions, not tenths: the lowering's decays are those."""
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    A = [[0.1, 0.2], [0.0, 0.3]]
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, A, [[1], [1]], init_state=[0.5, 0.25], name="s")),
                         backend="float")
    lowered = lower(model, 6)
    decays = sorted(c.exact_decay for slot in lowered.slots for c in slot.channels if c.kind == "scan")
    assert decays == [mpq(0.1), mpq(0.3)] and mpq(0.1) != mpq(1, 10)
    xs = np.random.default_rng(1).integers(-2, 3, (2, 6, 1)) / 2
    Aq = [[Fraction(v) for v in row] for row in A]
    for sequence, got in zip(xs, run_slots(lowered, xs)):
        state = [Fraction(0.5), Fraction(0.25)]
        for value, step in zip(sequence, got):
            state = [sum(a * s for a, s in zip(row, state)) + Fraction(value[0]) for row in Aq]
            assert step == state


def test_coefficients_are_written_as_nearest_floats_and_flagged_where_rounded():
    third = constant(mpq(1, 3))
    assert third.const == 1 / 3 and not third.exact
    near_one = constant(1 + mpq(1, 2 ** 60))  # rounds to the short dyadic 1.0, yet is not 1
    assert near_one.const == 1.0 and not near_one.exact
    assert form_grid(near_one, [], []) is None and form_grid(constant(mpq(3, 4)), [], []) == 2


def test_a_coefficient_that_rounds_to_a_dyadic_is_not_claimed_exact():
    """``y = (1 + 2**-60) x`` on integer tokens: float64 writes 1, so the output is not exact; the stated
    tolerance covers the 2**-60 x it misses (the float64 coefficient alone would have been claimed exact)."""
    import torch

    x = lsrl.Input(1, name="x", bounds=(0, 7), integer=True)
    model = lsrl.compile(lsrl.ForEach(lsrl.Linear(x, [[Fraction(2 ** 60 + 1, 2 ** 60)]], name="y")))
    hf = model.to_hf("mamba", max_len=4, dtype=torch.float64)
    xs = np.arange(8).reshape(2, 4, 1)
    with torch.no_grad():
        out = lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).double().numpy()
    exact = model(xs, exact=True)
    error = max(abs(Fraction(float(o)) - to_fraction(e)) for o, e in zip(out.ravel(), exact.ravel()))
    assert error > 0 and hf.config.lsrl_io["tolerance"] >= error


def test_decays_are_written_within_decay_rounding():
    for decay in [mpq(1, 3), mpq(9, 10), 1 - mpq(1, 2 ** 60), mpq(1, 2 ** 1100), mpq(1, 2)]:
        written = decay_float(decay)
        assert abs(mpq(written) - decay) <= DECAY_ROUNDING
        assert 0 < written < 1  # never the exact 0 or 1 the builders take as exact
    assert decay_float(mpq(1)) == 1.0 and decay_float(mpq(0)) == 0.0


def test_a_repeated_irrational_factor_is_refused_naming_the_state():
    """``[[C, I], [0, C]]`` with ``C``'s eigenvalues ``(1 +- sqrt(2)) / 4``: Jordan blocks over ``Q(sqrt(2))``, refused
    beyond the convolution's max_len (within it: tests/test_hf_convolution.py)."""
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    half, quarter = Fraction(1, 2), Fraction(1, 4)
    A = [[half, quarter, 1, 0], [quarter, 0, 0, 1], [0, 0, half, quarter], [0, 0, quarter, 0]]
    twice = lsrl.LinState(x, A, [[1], [0], [0], [1]], name="twice")
    model = lsrl.compile(lsrl.ForEach(twice))
    with pytest.raises(lsrl.LsrlError, match="'twice'.*repeated irrational.*refused.*max_len <= 64 \\(here 65\\)"):
        lower(model, 65)
    assert math.isfinite(float(np.max(np.abs(model(np.zeros((3, 1)))))))  # the program itself runs


def test_bounds_are_rounded_outward():
    """An Input declared in [-1/3, 1/3]: its slot's float bounds contain the thirds (nearest rounding would
    cut one of them off), and a scan of decay 1/3 of it bounds its value."""
    x = lsrl.Input(1, name="x", bounds=(Fraction(-1, 3), Fraction(1, 3)))
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[Fraction(1, 3)]], [[1]], name="s")))
    lowered = lower(model, 5)
    assert Fraction(lowered.slots[0].low) <= Fraction(-1, 3) and Fraction(lowered.slots[0].high) >= Fraction(1, 3)
    xs = np.array([[[Fraction(1, 3)], [Fraction(-1, 3)], [Fraction(1, 3)], [Fraction(1, 3)], [Fraction(1, 3)]]])
    assert run_slots(lowered, xs) == _exact_reference(model, xs)


@pytest.mark.parametrize("arch", lsrl.hf.ARCHITECTURES)
@pytest.mark.parametrize("integer", [True, False])
def test_a_program_whose_output_is_its_input_is_built(arch, integer):
    """A program with no layers (its output is its Input) builds a stock model that carries the input to the
    logits: tokens exactly, other values within the stated tolerance."""
    x = lsrl.Input(dim=2 - integer, name="x", bounds=(0, 5), integer=integer)
    model = lsrl.compile(lsrl.ForEach(x))
    assert model.layers == []
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 6, (2, 5, 1)) if integer else rng.uniform(0, 5, (2, 5, 2))
    hf = model.to_hf(arch, max_len=5)
    got = lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).detach().double().numpy()
    tolerance = hf.config.lsrl_io["tolerance"]
    assert tolerance == 0 if integer else tolerance < 1e-5
    assert np.abs(got - model(xs)).max() <= tolerance
