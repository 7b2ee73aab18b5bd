"""Irrational eigenvalues in the stock Hugging Face targets (``model.to_hf``; ``lsrl.hf.enclosure``): the tolerance
each builder states against the error measured on random inputs (uniform in the declared bounds, ``max_len``
steps, against the exact interpreter), and the CPU seconds of the build.

    python benchmarks/hf_irrational.py [--archs mamba,mamba2,hawk,griffin] [--dtypes float32,float64] [--csv DIR]
                                                                                      # DIR/hf_irrational.csv

Cases: ``three states`` (tests/test_hf_irrational.py: eigenvalues ``(1 +- sqrt 2) / 4``, the roots of
``x**3 - 3x/4 - 1/8``, a driven eighth turn of decay ``1 / sqrt 2``; 16 steps), ``undriven golden`` (``(1 +- sqrt 2)
/ 4`` from an initial state, 80 steps: beyond the fixed sequences, two enclosed pulses), and the random programs
of seeds 1, 54 and 166 (tests/test_random_programs.py, inputs declared in [-6, 6]), whose states have irrational
eigenvalues, at 80 steps (beyond the fixed sequences, so their undriven blocks are enclosed too).
"""

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

import lsrl
from results import add_csv_option, add_hf_options, hf_variants, print_rows, write_csv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_hf_irrational import GOLDEN, irrational_program  # noqa: E402
from test_hf_mamba import bounded_random_program  # noqa: E402


def undriven_golden() -> lsrl.ForEach:
    x = lsrl.Input(1, name="x", bounds=(-1, 1))
    state = lsrl.LinState(x, GOLDEN, [[0], [0]], init_state=[1, Fraction(-1, 3)], name="free")
    return lsrl.ForEach(lsrl.Concat([state, x]))


CASES = {
    "three states": (irrational_program, 16),
    "undriven golden": (undriven_golden, 80),
    **{f"random seed {seed}": (lambda seed=seed: bounded_random_program(seed), 80) for seed in (1, 54, 166)},
}


def measure(name: str, arch: str, dtype: torch.dtype) -> dict:
    build, max_len = CASES[name]
    model = lsrl.compile(build())
    low, high = (np.asarray(side, dtype=float) for side in model.input.bounds)
    xs = np.random.default_rng(0).uniform(low, high, (4, max_len, model.input.dim))
    reference = np.asarray(model(xs, exact=True), dtype=float)
    row = {"case": name, "arch": arch, "dtype": str(dtype).removeprefix("torch."), "max_len": max_len}
    start = time.process_time()
    try:
        hf = model.to_hf(arch, max_len=max_len, dtype=dtype)
    except lsrl.LsrlError as error:
        return row | {"stated": "refused", "measured": str(error)[:80], "ratio": "", "build_s": ""}
    seconds = time.process_time() - start
    return row | tolerance_columns(hf, xs, reference) | {"build_s": f"{seconds:.2f}"}


def tolerance_columns(hf: torch.nn.Module, xs: np.ndarray, reference: np.ndarray) -> dict:
    """The tolerance ``hf`` states, the largest error of its outputs on ``xs`` against the interpreter's
    ``reference``, and their ratio."""
    with torch.no_grad():
        computed = lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).double().numpy()
    stated, measured = hf.config.lsrl_io["tolerance"], float(np.max(np.abs(computed - reference)))
    return {"stated": f"{stated:.3g}", "measured": f"{measured:.3g}",
            "ratio": f"{stated / measured:.3g}" if measured else "inf"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_hf_options(parser)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(name, arch, getattr(torch, dtype)) for name in CASES for arch, dtype in hf_variants(args)]
    print_rows(rows)
    write_csv(args.csv, "hf_irrational", rows)


if __name__ == "__main__":
    main()
