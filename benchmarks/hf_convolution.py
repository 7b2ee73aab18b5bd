"""States as exact convolutions in the stock Hugging Face targets (``model.to_hf`` at ``max_len <= 64``; the
fallback of ``lsrl.hf.lowering``): the tolerance each builder states against the error measured on random inputs
(multiples of 1/2 in the declared bounds, ``max_len`` steps, against the exact interpreter), and what the
convolution costs: the slots, the conv taps, the parameters and the CPU seconds of the build.

    python benchmarks/hf_convolution.py [--archs mamba,mamba2,hawk,griffin] [--dtypes float32,float64] [--csv DIR]
                                                                                      # DIR/hf_convolution.csv

Cases (tests/test_hf_convolution.py): ``seed 4`` (the random program whose driven cubic has complex roots),
``four states`` (a driven rotation by ``atan(4/3)`` of decay 1/2, a driven decay 5/4, a repeated irrational
factor, the golden ratio; a ReLU downstream) at 8 steps; the rotation with the repeated factor (``turn+twice``)
and the decay 5/4 alone (``growth``) at 16, 32 and 64 steps.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

import lsrl
from lsrl.hf.lowering import lower
from hf_irrational import tolerance_columns
from results import add_csv_option, add_hf_options, hf_variants, print_rows, write_csv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_hf_convolution import refused_states_program, state  # noqa: E402
from test_hf_mamba import bounded_random_program  # noqa: E402


def states(*names: str) -> lsrl.ForEach:
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    return lsrl.ForEach(lsrl.Concat([state(x, name) for name in names]))


CASES = [
    ("seed 4", lambda: bounded_random_program(4), 8),
    ("four states", refused_states_program, 8),
    *[("turn+twice", lambda: states("turn", "twice"), n) for n in (16, 32, 64)],
    *[("growth", lambda: states("growth"), n) for n in (16, 32, 64)],
]


def measure(name: str, build: object, max_len: int, arch: str, dtype: torch.dtype) -> dict:
    model = lsrl.compile(build())
    xs = np.random.default_rng(0).integers(-2, 3, (4, max_len, model.input.dim)) / 2  # within every bound here
    reference = np.asarray(model(xs, exact=True), dtype=float)
    row = {"case": name, "arch": arch, "dtype": str(dtype).removeprefix("torch."), "max_len": max_len,
           "slots": len(lower(model, max_len).slots)}
    start = time.process_time()
    hf = model.to_hf(arch, max_len=max_len, dtype=dtype)
    seconds = time.process_time() - start
    taps = getattr(hf.config, "conv_kernel", None) or hf.config.conv1d_width
    return row | {"conv_taps": taps, "parameters": sum(p.numel() for p in hf.parameters()),
                  "largest_output": f"{np.max(np.abs(reference)):.3g}"} | tolerance_columns(hf, xs, reference) | {
                  "build_s": f"{seconds:.2f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_hf_options(parser)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(name, build, max_len, arch, getattr(torch, dtype)) for name, build, max_len in CASES
            for arch, dtype in hf_variants(args)]
    print_rows(rows)
    write_csv(args.csv, "hf_convolution", rows)


if __name__ == "__main__":
    main()
