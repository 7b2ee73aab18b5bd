"""The main demo: compile Fig. 1's program and both universal approximators, run them, compare; Listing 2
in a stock transformers Mamba, answered by generate().

    python -m lsrl.demo
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

import lsrl
from lsrl.programs import (
    continuous_approximator, continuous_prompt, continuous_query, discrete_approximator, discrete_prompt,
    more_ones_than_zeros,
)

if TYPE_CHECKING:
    from transformers import GenerationMixin

    from lsrl.model import CompiledProgram

CAPITALS = {  # Fig. 3, letters as tokens A=1, B=2, ...
    "AUT": "VIE", "BGR": "SOF", "CAN": "OTT", "DEU": "BER", "FRA": "PAR", "JPN": "TOK", "PER": "LIM",
}


def _tokens(word: str) -> tuple[int, ...]:
    return tuple(ord(c) - ord("A") + 1 for c in word)


def _word(tokens: Iterable[float]) -> str:
    return "".join(chr(int(round(t)) + ord("A") - 1) if round(t) > 0 else "?" for t in tokens)


def demo_more_ones() -> bool:
    program = more_ones_than_zeros()
    model = lsrl.compile(program)
    bits = [1, 0, 0, 1, 1, 1, 0, 0, 0, 1]
    expected = [int(2 * sum(bits[: t + 1]) > t + 1) for t in range(len(bits))]
    got = model(np.array(bits).reshape(-1, 1))[:, 0].astype(int).tolist()
    print("Fig. 1  more ones than zeros")
    print(f"  {model.summary()}")
    print(f"  input    {bits}\n  output   {got}\n  expected {expected}  {'OK' if got == expected else 'MISMATCH'}")
    return got == expected


def demo_discrete() -> bool:
    print("Listing 2  token map in context (country -> capital, Fig. 3)")
    mapping: dict[Sequence[int], Sequence[int]] = {_tokens(k): _tokens(v) for k, v in CAPITALS.items()}
    all_right = True
    for variant in ("multiplicative", "original"):
        program = discrete_approximator(3, ifelse=variant)
        for backend in ("exact", "float"):
            model = lsrl.compile(program, backend=backend)
            answers = []
            for country in ("CAN", "JPN", "AUT"):
                out = model(discrete_prompt(mapping, query=_tokens(country)))[-3:, 0]
                answers.append(f"{country}->{_word(out)}")
                all_right &= _word(out) == CAPITALS[country]
            print(f"  {variant:15} {backend:5}: {', '.join(answers)}   "
                  f"({len(model.layers)} layers, {model.parameter_count} weights)")
    return all_right


def demo_stock_mamba() -> bool:
    """Listing 2's generation form (a word per token) in a stock transformers MambaForCausalLM, prompted
    with the map and the query and answered by greedy ``generate``, beside the compiled model's answer."""
    try:
        import torch
        import transformers  # noqa: F401  (the hf extra)
    except ImportError:
        print("Listing 2 in a stock MambaForCausalLM: needs the hf extra (pip install 'lsrl[hf]')")
        return True
    print("Listing 2  answered by generate() in a stock transformers MambaForCausalLM (one token per word)")
    words = sorted(set(CAPITALS) | set(CAPITALS.values()))
    number = {word: token for token, word in enumerate(words)}
    mapping: dict[Sequence[int], Sequence[int]] = {
        (number[country],): (number[capital],) for country, capital in CAPITALS.items()}
    model = lsrl.compile(discrete_approximator(1, robust=True, vocabulary=len(words) - 1, generate=True))
    mamba = model.to_hf("hf-mamba", max_len=2 * len(mapping) + 2, generate=True)
    all_right, answers = True, []
    for country in ("CAN", "JPN", "AUT"):
        prompt = discrete_prompt(mapping, (number[country],), generate=True)
        compiled = words[int(model(prompt)[-1, 0])]
        causal_lm = cast("GenerationMixin", mamba)  # to_hf(generate=True) builds a causal LM
        with torch.no_grad():
            generated = words[int(causal_lm.generate(torch.as_tensor(prompt[None, :, 0]), max_new_tokens=1,
                                                     do_sample=False)[0, -1])]
        answers.append(f"{country}->{compiled} (compiled) {generated} (stock Mamba)")
        all_right &= compiled == generated == CAPITALS[country]
    print(f"  {', '.join(answers)}")
    print(f"  {type(mamba).__name__}: {mamba.config.num_hidden_layers} blocks, hidden size {mamba.config.hidden_size}")
    return all_right


def demo_continuous() -> bool:
    print("Listing 1  continuous function in context: f(x, y) = (sin 3x + y^2, cos 2xy), 8 x 8 cells")

    def f(c: np.ndarray) -> np.ndarray:
        return np.array([np.sin(3 * c[0]) + c[1] ** 2, np.cos(2 * c[0] * c[1])])

    program = continuous_approximator(2, 2, ifelse="multiplicative")
    model = lsrl.compile(program)
    prompt = continuous_prompt(f, 2, 2, 8, exact=True)
    rng = random.Random(0)
    all_right = True
    for _ in range(3):
        # a random point well inside a random cell (cells have soft edges of width 1/mu = 0.001)
        q = [Fraction(rng.randint(0, 7), 8) + Fraction(rng.randint(10, 115), 1000) for _ in range(2)]
        xs = np.vstack([continuous_query(np.array(q, dtype=object), 2), prompt])
        estimate = [float(Fraction(str(v))) for v in model(xs, exact=True)[-1]]
        centre = np.array([(int(v * 8) + 0.5) / 8 for v in q])
        expected = f(centre)
        all_right &= np.allclose(estimate, expected, rtol=0, atol=1e-15)
        print(f"  q=({float(q[0]):.4f}, {float(q[1]):.4f}) model {np.round(estimate, 6)} "
              f"cell centre value {np.round(expected, 6)} true f(q) {np.round(f(np.array(q, dtype=float)), 6)}")
    print(f"  {model.summary().splitlines()[0]}")
    return all_right


def _target(c: np.ndarray) -> np.ndarray:
    return np.array([np.sin(3 * c[0]) + c[1] ** 2])


def _queries_on_grid(side: int) -> np.ndarray:
    """Grid points kept off the cell edges of every grid the plots use (cells have soft edges)."""
    ticks = (np.arange(side) + 0.5) / side
    return np.array([[x, y] for y in ticks for x in ticks])


def _answers(model: CompiledProgram, prompt: np.ndarray, queries: np.ndarray) -> np.ndarray:
    batch = np.stack([np.vstack([continuous_query(q, 1).astype(float), prompt]) for q in queries])
    return model(batch)[:, -1, 0]


def write_plots(out_dir: str | Path = "lsrl-demo", side: int = 48) -> tuple[list[float], list[float]]:
    """Heat maps of target and in-context approximation, error against grid size, and streaming."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = lsrl.compile(continuous_approximator(2, 1, ifelse="multiplicative"), backend="float")
    queries = _queries_on_grid(side)
    truth = np.array([_target(q)[0] for q in queries])

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    approximation = _answers(model, continuous_prompt(_target, 2, 1, 8), queries)
    for ax, values, title in ((axes[0], truth, "target f(x, y) = sin 3x + y²"),
                              (axes[1], approximation, "model output, prompt of 8 x 8 cells")):
        image = ax.imshow(values.reshape(side, side), origin="lower", extent=(0, 1, 0, 1), cmap="viridis")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(out / "heatmaps.png", dpi=110)
    plt.close(fig)

    cells = [2, 4, 8, 16]
    lipschitz = np.hypot(3, 2)  # |grad f| <= sqrt(3^2 + 2^2) on [0, 1]^2
    errors = [np.abs(_answers(model, continuous_prompt(_target, 2, 1, c), queries) - truth).max() for c in cells]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.loglog(cells, errors, "o-", label="max error over the query grid")
    ax.loglog(cells, [lipschitz * np.sqrt(2) / (2 * c) for c in cells], "--", label="App. B bound δ L √d / 2")
    ax.set_xticks(cells, [str(c) for c in cells])  # one label per grid; log axes' minor labels overlap
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("cells per dimension")
    ax.set_ylabel("error")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "error_vs_grid.png", dpi=110)
    plt.close(fig)

    # streaming (Sec. 4.1): each finer grid's prompt carries corrections to the coarser estimate
    stages, prompt, previous = [], [], None
    for c in cells:
        grid = continuous_prompt(_target, 2, 1, c)
        if previous is not None:
            grid[:, -1] -= _answers(model, previous, grid[:, 1:3] + grid[:, :1] / 2)
        prompt.append(grid)
        previous = np.vstack(prompt)
        stages.append(np.abs(_answers(model, previous, queries) - truth).mean())
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.semilogy(range(1, len(cells) + 1), stages, "o-")
    ax.set_xticks(range(1, len(cells) + 1), [f"+{c}x{c}" for c in cells])
    ax.set_xlabel("prompt so far (coarse to fine)")
    ax.set_ylabel("mean error over the query grid")
    ax.set_title("streaming approximation", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "streaming.png", dpi=110)
    plt.close(fig)
    print(f"plots: {out / 'heatmaps.png'}, {out / 'error_vs_grid.png'}, {out / 'streaming.png'}")
    return errors, stages


def main(plots: str | None = "lsrl-demo") -> int:
    results = [demo_more_ones(), demo_discrete(), demo_stock_mamba(), demo_continuous()]
    if plots:
        write_plots(plots)
    print("all outputs as expected" if all(results) else "SOME OUTPUTS DIFFER FROM THE EXPECTED ONES")
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
