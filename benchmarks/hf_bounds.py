"""What the stock Hugging Face targets (``model.to_hf``) prove for Listings 1 and 2: the output bound of the
interval analysis (``value_bounds``) and of the unrolled relational one (``relational_bounds``) at
``max_len``, the tolerance each builder states when it plans from either (``before``: intervals, as the
builders did; ``after``: relational, as they do now), or why it refuses, the largest weight, and the error
measured on prompts of ``max_len`` tokens against the exact interpreter (for Listing 1 also on prompts
that put the query on a cell's ramp at every token, where its errors add up: ``at edges``).

    python benchmarks/hf_bounds.py [--archs mamba,mamba2,hawk,griffin] [--dtypes float32] [--cases ...] [--csv DIR]
                                                                                      # DIR/hf_bounds.csv
    python benchmarks/hf_bounds.py --generation [--archs ...] [--dtypes ...] [--csv DIR]  # DIR/hf_generation.csv

``--generation`` compares Listing 2 (robust, the query first, the answer read from one logit) with its
generation form (``generate=True``: the query last, a next-token head, answered by ``generate``) on the
same maps: the model's parameters, the build's CPU seconds (median of 3, compile excluded), and the
queries answered (generation form: greedy ``generate``; today's: the rounded outputs of its last n steps).

A token program's answers are proved exact where the stated tolerance is below 1/2 (``proved``: yes); 0
means every output is on a grid and computed exactly. Listing 1's outputs are real: ``proved`` says
whether its tolerance is below its outputs' bound (informative). Cases: Listing 2 robust (n = 2, tokens
up to 9, 66 steps; n = 3, tokens up to 10, 256 steps), Listing 2 with the paper's constants (n = 2, 3,
multiplicative ``f_ifelse``, ``mu = 1000``, ``lambda = 1e10``; 22 and 33 steps), Listing 1 robust (1 -> 1,
|f| <= 1, 64 cells and the query: 65 steps; at 256 steps, the 64 cells then cells of value 0).
"""

import argparse
import itertools
import math
import random
import time
import warnings

import numpy as np
import torch

import lsrl
import lsrl.hf.lowering as lowering
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.programs import continuous_approximator, continuous_prompt, continuous_query, discrete_approximator
from lsrl.programs import discrete_prompt
from results import add_csv_option, add_hf_options, hf_variants, write_csv


def listing2_prompts(n, vocabulary, max_len, count=6, seed=0):
    """``count`` prompts of ``max_len`` tokens (the query, then (max_len - n) / 2n key / value pairs)."""
    rng = random.Random(seed)
    pairs = (max_len - n) // (2 * n)
    keys = rng.sample(list(itertools.product(range(vocabulary + 1), repeat=n)), pairs)
    mapping = {key: tuple(rng.randint(0, vocabulary) for _ in range(n)) for key in keys}
    return np.stack([discrete_prompt(mapping, query=key) for key in keys[:count]]).astype(float)


def listing1_prompts(cells, max_len, count=6, seed=0):
    """The query, a regular grid of ``cells`` cells of ``sin(3 x)``, then cells of value 0 up to ``max_len``."""
    prompt = continuous_prompt(lambda v: np.array([math.sin(3 * v[0])]), 1, 1, cells).astype(float)
    padding = np.tile([[1.0 / cells, 0.0, 0.0]], (max_len - 1 - cells, 1))
    queries = np.random.default_rng(seed).uniform(0, 1, count)
    return np.stack([np.vstack([continuous_query([q], 1).astype(float), prompt, padding]) for q in queries])


def listing1_edge_prompts(max_len, count=8, seed=0):
    """``max_len`` tokens: every prompt token one cell ``(l, l + d]`` with the query on the ramp of its lower or
    upper edge (both where ``d`` is below the ramps' width 1/1000), value +-1, so that the errors add up."""
    rng = np.random.default_rng(seed)
    prompts = []
    for index in range(count):
        width = [1 / 64, 0.37, 1.0, 5e-4][index % 4]
        lower = rng.uniform(0, 1 - width)
        query = min(1.0, lower + width + rng.uniform(0, 1e-3)) if index % 2 == 0 else lower + rng.uniform(0, 1e-3)
        prompts.append([[query, 0.0, 0.0]] + [[width, lower, 1.0 if index % 3 else -1.0]] * (max_len - 1))
    return np.array(prompts)


CASES = {
    "L2 robust n=2": (lambda: discrete_approximator(2, robust=True, vocabulary=9), 66,
                      lambda: listing2_prompts(2, 9, 66), True),
    "L2 robust n=3": (lambda: discrete_approximator(3, robust=True, vocabulary=10), 256,
                      lambda: listing2_prompts(3, 10, 256), True),
    "L2 paper n=2": (lambda: discrete_approximator(2, vocabulary=9), 22, lambda: listing2_prompts(2, 9, 22), True),
    "L2 paper n=3": (lambda: discrete_approximator(3, vocabulary=9), 33, lambda: listing2_prompts(3, 9, 33), True),
    "L1 robust": (lambda: continuous_approximator(1, 1, robust=True, value_bound=1), 65,
                  lambda: listing1_prompts(64, 65), False),
    "L1 robust 256": (lambda: continuous_approximator(1, 1, robust=True, value_bound=1), 256,
                      lambda: listing1_prompts(64, 256), False),
}
EDGES = {"L1 robust": lambda: listing1_edge_prompts(65), "L1 robust 256": lambda: listing1_edge_prompts(256)}


def interval_planning(enabled):
    """Make the shared planner (``lsrl.hf.lowering``) plan from ``value_bounds`` (the intervals) instead of
    ``relational_bounds``."""
    intervals = lambda node, max_len: lsrl.value_bounds(node, max_len)  # noqa: E731
    lowering.relational_bounds = intervals if enabled else relational_bounds


def build(model, arch, max_len, dtype):
    """``(hf model or None, stated tolerance or the refusal, seconds)``."""
    start = time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = model.to_hf(arch, max_len=max_len, dtype=dtype)
    except lsrl.LsrlError as error:
        return None, "refused: " + str(error)[:90], time.process_time() - start
    return hf, hf.config.lsrl_io["tolerance"], time.process_time() - start


def measured(hf, xs, reference):
    with torch.no_grad():
        out = lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).double().numpy()
    return float(np.abs(out - reference).max())


def shown(value):
    return value if isinstance(value, str) else ("0 (exact)" if value == 0 else f"{value:.3g}")


def proved(tolerance, token, bound):
    if isinstance(tolerance, str):
        return "-"
    return "yes" if (tolerance < 0.5 if token else tolerance < bound) else "no"


GENERATION_MAPS = {"n=1, 14 tokens (Fig. 3's words)": (1, 13, 7), "n=2, tokens 0..3": (2, 3, 6)}  # n, vocabulary, pairs


def answered(hf, n, mapping, generate):
    """How many queries of ``mapping`` the model answers (module doc)."""
    right = 0
    for query, value in mapping.items():
        prompt = torch.as_tensor(discrete_prompt(mapping, query, generate=generate)[None, :, 0])
        with torch.no_grad():
            if generate:
                answer = hf.generate(prompt, max_new_tokens=n, do_sample=False)[0, prompt.shape[1]:]
            else:
                answer = torch.round(lsrl.hf.outputs(hf, hf(input_ids=prompt))[0, -n:, 0])
        right += tuple(int(t) for t in answer) == value
    return right


def generation_rows(args):
    rows = []
    for case, (n, vocabulary, pairs) in GENERATION_MAPS.items():
        rng = random.Random(n)
        keys = rng.sample(list(itertools.product(range(vocabulary + 1), repeat=n)), pairs)
        mapping = {key: tuple(rng.randint(0, vocabulary) for _ in range(n)) for key in keys}
        for generate in (False, True):
            model = lsrl.compile(discrete_approximator(n, robust=True, vocabulary=vocabulary, generate=generate),
                                 progress=False)
            max_len = 2 * n * pairs + n + (n if generate else 0)
            for arch, dtype in hf_variants(args):
                seconds = []
                for _ in range(3):
                    start = time.process_time()
                    hf = model.to_hf(arch, max_len=max_len, dtype=getattr(torch, dtype), generate=generate)
                    seconds.append(time.process_time() - start)
                row = {"map": case, "form": "generate" if generate else "query first", "max_len": max_len,
                       "target": arch, "dtype": dtype, "program weights": model.parameter_count,
                       "parameters": sum(p.numel() for p in hf.parameters()), "layers": hf.config.num_hidden_layers,
                       "hidden": hf.config.hidden_size, "build s": f"{sorted(seconds)[1]:.2f}",
                       "answered": f"{answered(hf, n, mapping, generate)}/{len(mapping)}"}
                rows.append(row)
                print(row, flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_hf_options(parser)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    parser.add_argument("--generation", action="store_true", help="the generation form against today's Listing 2")
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.generation:
        write_csv(args.csv, "hf_generation", generation_rows(args))
        return
    rows = []
    for case in args.cases.split(","):
        make, max_len, prompts, token = CASES[case]
        model = lsrl.compile(make(), progress=False)
        start = time.process_time()
        sharp = float(max(abs(v) for side in relational_bounds(model.layers[-1], max_len) for v in side))
        seconds = time.process_time() - start
        interval = float(max(abs(v) for side in lsrl.value_bounds(model.layers[-1], max_len) for v in side))
        xs = prompts()
        reference = np.asarray(model(xs), dtype=float)
        edges = EDGES[case]() if case in EDGES else None
        edge_reference = np.asarray(model(edges), dtype=float) if edges is not None else None
        for arch, dtype in hf_variants(args):
            interval_planning(True)
            _, before, _ = build(model, arch, max_len, getattr(torch, dtype))
            interval_planning(False)
            hf, after, build_seconds = build(model, arch, max_len, getattr(torch, dtype))
            error = measured(hf, xs, reference) if hf is not None else None
            at_edges = measured(hf, edges, edge_reference) if hf is not None and edges is not None else None
            row = {"program": case, "max_len": max_len, "interval bound": f"{interval:.3g}",
                   "relational bound": f"{sharp:.4g}", "analysis s": f"{seconds:.1f}", "target": arch, "dtype": dtype,
                   "tolerance before": shown(before), "tolerance after": shown(after),
                   "proved": proved(after, token, sharp),
                   "largest weight": f"{hf.config.lsrl_io['largest_weight']:.3g}" if hf is not None else "-",
                   "measured error": "-" if error is None else f"{error:.3g}",
                   "at edges": "-" if at_edges is None else f"{at_edges:.3g}", "build s": f"{build_seconds:.1f}"}
            rows.append(row)
            print(row, flush=True)
    write_csv(args.csv, "hf_bounds", rows)


if __name__ == "__main__":
    main()
