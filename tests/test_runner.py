"""The fast float runner (lsrl/model/runner.py) against the compiled layers run step by step.

The reference below applies the layers one time step at a time with scipy sparse products, so it
shares nothing with the runner's kernels but the weights; like the recurrence it multiplies only
stored weights, so an exploding A gives inf (never NaN from inf * 0) where the recurrence does (and
``model(xs)`` refuses such a run: its exact values are finite).
Small ``LANES_PER_CHUNK`` values make short inputs span many chunks and many batch groups.
"""

import math
import random

import numpy as np
import pytest
import scipy.sparse

import lsrl
from conftest import library_program, max_relative_difference, random_map
from lsrl.model import runner
from lsrl.programs import continuous_prompt, discrete_prompt
from test_random_programs import X_BOUND, generate_program


def step_by_step(model, xs):
    """``model``'s layers applied one step at a time, feature-major, in float64."""
    batch = np.asarray(xs, dtype=np.float64)
    batch = batch[None] if batch.ndim == 2 else batch
    sparse = {}

    def product(matrix, x):
        if id(matrix) not in sparse:
            sparse[id(matrix)] = scipy.sparse.csr_array(matrix.to_numpy())
        return sparse[id(matrix)] @ x

    states = {layer: np.tile(layer.init_state.to_numpy()[:, None], (1, len(batch)))
              for layer in model.layers if layer.kind == "LinState"}
    outputs = np.zeros(batch.shape[:2] + (model.output_dim,))
    for t in range(batch.shape[1]):
        x = batch[:, t, :].T
        for layer in model.layers:
            if layer.kind == "Linear":
                x = product(layer.A, x) + layer.b.to_numpy()[:, None]
            elif layer.kind == "ReLU":
                x = np.maximum(x, 0.0)
            elif layer.kind == "Multi":
                x = x[: layer.dim] * x[layer.dim :]
            else:
                states[layer] = x = product(layer.A, states[layer]) + product(layer.B, x) + layer.b.to_numpy()[:, None]
        outputs[:, t, :] = x.T
    return outputs[0] if np.ndim(xs) == 2 else outputs


def assert_matches(fast, reference):
    """Same shape, NaN and inf where the reference has them, finite values within 1e-9."""
    assert fast.shape == reference.shape and fast.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(reference))
    infinite = np.isinf(reference)
    np.testing.assert_array_equal(fast[infinite], reference[infinite])
    finite = np.isfinite(reference)
    assert np.isfinite(fast[finite]).all()
    assert max_relative_difference(fast[finite], reference[finite]) <= 1e-9


@pytest.fixture(params=[512, 3], ids=["default-chunks", "tiny-chunks"])
def lanes_per_chunk(request, monkeypatch):
    monkeypatch.setattr(runner, "LANES_PER_CHUNK", request.param)
    return request.param


# ---- LinStates of every kind ----------------------------------------------------------------

ANGLE = 2 * math.pi / 7
TRANSITIONS = {
    "diagonal": [[1, 0, 0], [0, 0.5, 0], [0, 0, -1]],
    "shift": [[0, 0, 0], [1, 0, 0], [0, 1, 0]],
    "rotation": [[math.cos(ANGLE), -math.sin(ANGLE), 0], [math.sin(ANGLE), math.cos(ANGLE), 0], [0, 0, 1]],
    "dense": [[0.3, -0.2, 0.4], [0.1, 0.5, -0.3], [-0.4, 0.2, 0.25]],
    "exploding": [[40, 0, 0], [1, 40, 0], [0, 0, 0.5]],  # overflows to inf after about 190 steps
}


def kernel_outputs(model, xs):
    """The runner's kernels on ``xs`` as ``model(xs)`` runs them, without its refusal of non-finite outputs."""
    batch = np.asarray(xs, dtype=np.float64)
    plan = runner.build_plan(model.input.dim, model.layers)
    outputs = runner.run_plan(plan, batch[None] if batch.ndim == 2 else batch)
    return outputs[0] if batch.ndim == 2 else outputs


def linstate_model(A):
    """Input(2) -> LinState(A) with a bias and an initial state -> a Linear mixing signs -> ReLU."""
    x = lsrl.Input(2)
    state = lsrl.LinState(x, A, B=[[1, -1], [0, 2], [1, 1]], b=[0.5, 0, -1], init_state=[1, -2, 0.5])
    mixed = lsrl.Linear(state, [[1, -1, 0], [0, 1, 1], [2, 0, -1]], b=[0, 1, 0])  # inf - inf: NaN
    return lsrl.compile(lsrl.ForEach(lsrl.Concat([state, lsrl.ReLU(mixed)])), backend="float")


# (lanes per chunk, input shape): the default chunks, and tiny ones that split short inputs often
LINSTATE_RUNS = [(512, (1, 1)), (512, (1, 1100)), (512, (7, 700)), (512, (300,)), (3, (1, 1)), (3, (7, 40)), (3, (40,))]


@pytest.mark.parametrize("kind", sorted(TRANSITIONS))
@pytest.mark.parametrize("lanes_per_chunk, shape", LINSTATE_RUNS, ids=str)
def test_linstates_of_every_kind(kind, lanes_per_chunk, shape, monkeypatch):
    monkeypatch.setattr(runner, "LANES_PER_CHUNK", lanes_per_chunk)
    model = linstate_model(TRANSITIONS[kind])
    xs = np.random.default_rng(len(kind)).uniform(-1, 1, size=shape + (2,))
    reference = step_by_step(model, xs)
    if np.isfinite(reference).all():
        assert_matches(model(xs), reference)
        return
    assert kind == "exploding" and np.isinf(reference).any() and np.isnan(reference).any()
    assert_matches(kernel_outputs(model, xs), reference)  # the kernels overflow where the recurrence does
    with pytest.raises(lsrl.BackendError, match="leaves float64's range"):  # and model(xs) says so
        model(xs)


def test_layers_after_a_linstate_do_not_change_its_state(monkeypatch):
    monkeypatch.setattr(runner, "LANES_PER_CHUNK", 4)  # the state crosses many chunk boundaries
    x = lsrl.Input(2)
    sums = lsrl.LinState(x, [[1, 0], [0, 1]], [[1, 0], [0, 1]])  # LinState -> ReLU -> Multi, in place
    model = lsrl.compile(lsrl.ForEach(lsrl.Multi(lsrl.ReLU(sums))), backend="float")
    assert [layer.kind for layer in model.layers] == ["LinState", "ReLU", "Multi"]
    xs = np.random.default_rng(6).uniform(-1, 1, size=(3, 50, 2))
    totals = np.cumsum(xs, axis=1)
    np.testing.assert_allclose(model(xs)[..., 0], np.maximum(totals[..., 0], 0) * np.maximum(totals[..., 1], 0))


def test_exploding_state_overflows_where_the_recurrence_does():
    x = lsrl.Input(1)
    model = lsrl.compile(lsrl.ForEach(lsrl.LinState(x, [[2]], [[1]])), backend="float")
    xs = np.zeros((1100, 1))
    xs[3] = 1.0
    out = kernel_outputs(model, xs)[:, 0]
    assert out[3] == 1 and out[1026] == 2.0**1023 and np.isinf(out[1027:]).all()
    with pytest.raises(lsrl.BackendError, match="at step 1027 of a float run"):
        model(xs)


# ---- compiled programs ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_random_programs(seed, lanes_per_chunk):
    program = generate_program(random.Random(seed), mixed_formats=seed % 5 == 0).program
    model = lsrl.compile(program, backend="float")
    xs = np.random.default_rng(seed).uniform(-X_BOUND, X_BOUND, size=(5, 13, program.input.dim))
    assert_matches(model(xs), step_by_step(model, xs))
    assert_matches(model(xs[2]), step_by_step(model, xs[2]))


@pytest.fixture(scope="module")
def library_models():
    return {kind: lsrl.compile(library_program(kind), backend="float") for kind in ("discrete", "continuous")}


def library_inputs(kind, count, rng):
    """``count`` prompts for a library program: token maps, or grids of a random function."""
    if kind == "discrete":
        maps = [random_map(random.Random(i), 3, pairs=12) for i in range(count)]
        prompts = [discrete_prompt(mapping, query=next(iter(mapping))) for mapping in maps]
    else:
        prompts = [continuous_prompt(lambda q, s=rng.uniform(-2, 2): [s * q[0], q[1] ** 2], 2, 2, 6)
                   for _ in range(count)]
    return np.array(prompts, dtype=np.float64)


@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_library_programs(kind, library_models, lanes_per_chunk):
    model = library_models[kind]
    prompts = library_inputs(kind, 4, np.random.default_rng(0))
    assert_matches(model(prompts), step_by_step(model, prompts))
    assert_matches(model(prompts[1]), step_by_step(model, prompts[1]))


@pytest.mark.slow
def test_library_program_on_a_prompt_longer_than_a_chunk(library_models):
    model = library_models["discrete"]
    xs = np.random.default_rng(1).integers(0, 11, size=(1, 1100, 1)).astype(np.float64)
    assert_matches(model(xs), step_by_step(model, xs))


# ---- shapes and layouts ---------------------------------------------------------------------


def test_shapes_and_non_contiguous_inputs(library_models):
    model = library_models["continuous"]
    data = np.random.default_rng(2).random((6, 40, 5))
    views = {
        "every other step": data[:, ::2],
        "fortran order": np.asfortranarray(data),
        "batch reversed": data[::-1],
        "one sequence, strided": data[:, 3, :][::-1],
        "list of lists": data[0].tolist(),
    }
    for name, xs in views.items():
        expected = step_by_step(model, np.ascontiguousarray(xs))
        assert model(xs).shape == np.shape(xs)[:-1] + (2,), name
        assert_matches(model(xs), expected)


def test_empty_and_single_step_inputs(library_models):
    model = library_models["continuous"]
    assert model(np.zeros((0, 5))).shape == (0, 2)
    assert model(np.zeros((3, 0, 5))).shape == (3, 0, 2)
    xs = np.random.default_rng(3).random((9, 1, 5))
    assert_matches(model(xs), step_by_step(model, xs))


def test_batch_rows_are_independent_of_their_group(monkeypatch):
    monkeypatch.setattr(runner, "LANES_PER_CHUNK", 4)  # groups of up to 4 sequences
    monkeypatch.setattr(runner, "PARALLEL_TOKENS", 0)  # on threads even when small
    model = linstate_model(TRANSITIONS["dense"])
    xs = np.random.default_rng(4).uniform(-1, 1, size=(11, 9, 2))
    together = model(xs)
    for i in range(len(xs)):
        np.testing.assert_array_equal(together[i], model(xs[i]))


def test_program_without_layers_returns_its_input():
    x = lsrl.Input(3)
    model = lsrl.compile(lsrl.ForEach(x[0:3]), backend="float")
    xs = np.random.default_rng(5).random((2, 5, 3))
    np.testing.assert_array_equal(model(xs), xs)
