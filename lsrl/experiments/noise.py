"""The numerical-stability study of Sec. 5 (Fig. 4): Gaussian noise on every non-zero weight.

For each approximator and ``f_ifelse`` variant the program is compiled with the float backend; a
noisy copy adds N(0, σ²) to every non-zero weight (A, B, b and initial states). As in the paper, the
noisy model is fed the noiseless run's states: at every step a LinState computes
``A' s_{t-1} + B' x'_t + b'`` from the *clean* previous state ``s_{t-1}``, so the figure measures the
per-step error of each conditional construction, not its accumulation over the prompt.

Protocol (Sec. 5): continuous, d_in = d_out = 2, 8 cells per dimension, 25 random smooth targets x 10
queries, Euclidean distance between the model's final output and the target's value at the query;
discrete, n = 10, 20 key -> value pairs over 10 tokens, 25 random maps x 5 queries, percentage of
wrong tokens among the last n outputs.

Beside the paper's constructions (mu = 1000, lambda = 1e10) the discrete approximator is also run
with ``robust=True``: steps of steepness 2 and lambda just above the largest branch value, the
margins that integer tokens, counters and flags allow (``discrete_approximator``'s docstring).
"""

from __future__ import annotations

import csv
import itertools
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from lsrl.compiler import compile as compile_program
from lsrl.programs import continuous_approximator, continuous_prompt, continuous_query, discrete_approximator
from lsrl.programs import discrete_prompt
from lsrl.sugar import IFELSE_VARIANTS

SIGMAS = (0.0, 1e-9, 1e-7, 1e-5, 1e-3)


@dataclass(frozen=True)
class Protocol:
    samples: int = 25  # random targets / maps
    queries: int = 10  # continuous queries per target
    discrete_queries: int = 5
    n: int = 10
    pairs: int = 20
    vocabulary: int = 10
    cells: int = 8
    seed: int = 0


# ---- the noisy, teacher-forced forward pass ---------------------------------------------------


def _dense(matrix):
    return matrix.to_numpy()


def _noisy(values, sigma, rng):
    """``values`` with N(0, sigma^2) added to its non-zero entries."""
    noisy = values.copy()
    mask = noisy != 0
    noisy[mask] += rng.normal(0.0, sigma, size=int(mask.sum()))
    return noisy


def forced_outputs(model, xs, sigma, rng):
    """Outputs of ``model`` with noisy weights, each LinState fed its clean previous state."""
    clean = noisy = np.asarray(xs, dtype=np.float64)
    for layer in model.layers:
        if layer.kind == "ReLU":
            clean, noisy = np.maximum(clean, 0.0), np.maximum(noisy, 0.0)
        elif layer.kind == "Multi":
            half = layer.dim
            clean, noisy = clean[..., :half] * clean[..., half:], noisy[..., :half] * noisy[..., half:]
        elif layer.kind == "Linear":
            A, b = _dense(layer.A), _dense(layer.b)
            clean, noisy = clean @ A.T + b, noisy @ _noisy(A, sigma, rng).T + _noisy(b, sigma, rng)
        else:
            A, B, b, s0 = (_dense(m) for m in (layer.A, layer.B, layer.b, layer.init_state))
            states = _clean_states(A, clean @ B.T + b, s0)
            previous = np.concatenate([np.broadcast_to(s0, states[:, :1].shape), states[:, :-1]], axis=1)
            A, B, b = _noisy(A, sigma, rng), _noisy(B, sigma, rng), _noisy(b, sigma, rng)
            clean, noisy = states, previous @ A.T + noisy @ B.T + b
    return noisy


def _clean_states(A, drive, s0):
    states = np.empty_like(drive)
    state = np.broadcast_to(s0, drive[:, 0].shape)
    for t in range(drive.shape[1]):
        state = state @ A.T + drive[:, t]
        states[:, t] = state
    return states


# ---- the two tasks ------------------------------------------------------------------------------


def _smooth_target(rng):
    amplitude = rng.uniform(-1, 1, size=(2, 3))
    frequency = rng.uniform(-3, 3, size=(2, 3, 2))
    phase = rng.uniform(0, 2 * np.pi, size=(2, 3))

    def f(x):
        x = np.asarray(x, dtype=np.float64)
        return np.array([sum(amplitude[o, k] * np.sin(frequency[o, k] @ x + phase[o, k]) for k in range(3))
                         for o in range(2)])

    return f


def continuous_inputs(protocol: Protocol):
    """``(xs, targets)``: query-then-prompt sequences and f(query) for every (target, query)."""
    rng = np.random.default_rng(protocol.seed)
    sequences, values = [], []
    for _ in range(protocol.samples):
        f = _smooth_target(rng)
        prompt = continuous_prompt(f, 2, 2, protocol.cells)
        for _ in range(protocol.queries):
            q = rng.uniform(0, 1, size=2)
            sequences.append(np.vstack([continuous_query(q, 2).astype(np.float64), prompt]))
            values.append(f(q))
    return np.stack(sequences), np.array(values)


def discrete_inputs(protocol: Protocol):
    """``(xs, values)``: queries followed by their map, and the expected last n tokens."""
    rng = np.random.default_rng(protocol.seed)
    sequences, values = [], []
    for _ in range(protocol.samples):
        mapping = {}
        while len(mapping) < protocol.pairs:
            key = tuple(int(v) for v in rng.integers(1, protocol.vocabulary + 1, protocol.n))
            mapping.setdefault(key, tuple(int(v) for v in rng.integers(1, protocol.vocabulary + 1, protocol.n)))
        keys = list(mapping)
        for index in rng.choice(len(keys), size=protocol.discrete_queries, replace=False):
            sequences.append(discrete_prompt(mapping, query=keys[index]).astype(np.float64))
            values.append(mapping[keys[index]])
    return np.stack(sequences), np.array(values, dtype=np.float64)


def _errors(program_kind, outputs, expected, n):
    if program_kind == "continuous":
        return np.linalg.norm(outputs[:, -1] - expected, axis=1)
    wrong = np.round(outputs[:, -n:, 0]) != expected
    return 100.0 * wrong.mean(axis=1)


def _run_job(job):
    program_kind, construction, variant, sigmas, protocol = job
    if program_kind == "continuous":
        program = continuous_approximator(2, 2, ifelse=variant)
        xs, expected = continuous_inputs(protocol)
    else:
        xs, expected = discrete_inputs(protocol)
        margins = {"robust": True, "vocabulary": protocol.vocabulary, "max_length": xs.shape[1]}
        program = discrete_approximator(protocol.n, ifelse=variant, **(margins if construction == "robust" else {}))
    model = compile_program(program, backend="float", progress=False)
    rows = []
    for sigma in sigmas:
        rng = np.random.default_rng([protocol.seed, SIGMAS.index(sigma) if sigma in SIGMAS else 99])
        errors = _errors(program_kind, forced_outputs(model, xs, sigma, rng), expected, protocol.n)
        rows.extend((program_kind, construction, variant, sigma, i, float(e)) for i, e in enumerate(errors))
    return rows


JOBS = (("continuous", "paper"), ("discrete", "paper"), ("discrete", "robust"))


def run(out_dir="noise", sigmas=SIGMAS, variants=IFELSE_VARIANTS, protocol=Protocol(), workers=2, progress=True):
    """Run the sweep, write ``noise.csv`` and one strip plot per program; returns the rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(kind, construction, variant, tuple(sigmas), protocol)
            for (kind, construction), variant in itertools.product(JOBS, variants)]
    rows = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in tqdm(pool.map(_run_job, jobs), total=len(jobs), desc="noise study", disable=not progress):
            rows.extend(result)
    with open(out / "noise.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["program", "construction", "variant", "sigma", "sample", "error"])
        writer.writerows(rows)
    for kind in ("continuous", "discrete"):
        strip_plot([r for r in rows if r[0] == kind], out / f"noise_{kind}.png", kind)
    return rows


def strip_plot(rows, path, kind):
    """Errors per variant (x) and noise level (colour), one dot per sample, as in Fig. 4;
    the robust construction's variants are marked ``(robust)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(r[2] if r[1] == "paper" else f"{r[2]} (robust)", r[3], r[5]) for r in rows]
    variants = list(dict.fromkeys(r[0] for r in rows))
    sigmas = sorted({r[1] for r in rows})
    fig, ax = plt.subplots(figsize=(1.3 * len(variants) + 2, 4.5))
    jitter = np.random.default_rng(0)
    for k, sigma in enumerate(sigmas):
        for i, variant in enumerate(variants):
            values = [r[2] for r in rows if r[0] == variant and r[1] == sigma]
            offset = (k - (len(sigmas) - 1) / 2) * 0.15
            xs = i + offset + jitter.uniform(-0.04, 0.04, len(values))
            ax.scatter(xs, values, s=6, alpha=0.6, color=plt.cm.viridis(k / max(1, len(sigmas) - 1)),
                       label=f"σ = {sigma:g}" if i == 0 else None)
    ax.set_xticks(range(len(variants)), variants, rotation=25, ha="right", fontsize=7)
    ax.set_ylabel("Euclidean error" if kind == "continuous" else "wrong tokens (%)")
    if kind == "continuous":
        ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_title(f"{kind} approximator: parameter noise, teacher-forced states")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
