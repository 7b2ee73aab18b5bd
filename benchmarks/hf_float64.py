"""float64 against float32 in the stock Hugging Face targets: on the same program and inputs, the tolerance each
model states and the error measured against the DAG interpreter, in both dtypes. The stock code computes its
norms (and, per architecture, its scans, logits and Mamba-2's gated group norm: ``lsrl.hf.io.FLOAT32_PARTS``) in
float32 also in a float64 model, so the float64 column is of the float32 column's size; programs whose values are
integers are exact in both.

    python benchmarks/hf_float64.py [--archs mamba,mamba2,hawk,griffin] [--seeds 0,1,2,3,4,5] [--csv DIR]
                                                                                          # DIR/hf_float64.csv

Cases: ``every state`` (tests/test_hf_mamba.py: decays 1, 1/2, a sign flip, a quarter turn, a delay line, ReLU
and Multi; inputs uniform in [-2, 2], 12 steps), the random test programs of ``--seeds`` with their Input bounded
(multiples of 1/2 in the bounds, 8 steps) and Listing 2 (robust, n = 2, tokens up to 3: a map of two keys, 10
steps).
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import lsrl
from lsrl.hf.io import FLOAT32_PARTS
from lsrl.programs import discrete_approximator, discrete_prompt
from results import add_csv_option, print_rows, write_csv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_hf_mamba import bounded_random_program, every_state_program  # noqa: E402
from test_random_programs import X_NUM  # noqa: E402

SHORT_PARTS = {"mamba": "norms, scan, logits", "mamba2": "norms, group norm, scan, logits",
               "hawk": "norms, RG-LRU scan", "griffin": "norms, RG-LRU scan"}


def cases(seeds: list[int]) -> list[tuple[str, lsrl.ForEach, np.ndarray]]:
    """``(name, program, inputs)`` per case (module doc)."""
    found = [("every state", every_state_program(), np.random.default_rng(3).uniform(-2, 2, (2, 12, 2)))]
    for seed in seeds:
        program = bounded_random_program(seed)
        xs = np.random.default_rng(seed).integers(-X_NUM, X_NUM + 1, (2, 8, program.input.dim)) / 2
        found.append((f"random seed {seed}", program, xs))
    prompt = discrete_prompt({(1, 2): (3, 0), (2, 1): (0, 3)})
    xs = np.vstack([np.array([[2], [1]]), prompt])[None].astype(float)
    found.append(("Listing 2 n=2", discrete_approximator(2, robust=True, vocabulary=3), xs))
    return found


def measured(model: lsrl.CompiledProgram, arch: str, dtype: torch.dtype, xs: np.ndarray, expected: np.ndarray
             ) -> tuple[float, float]:
    """``(stated tolerance, largest error against expected)`` of ``model`` in ``arch`` and ``dtype``."""
    hf = model.to_hf(arch, max_len=xs.shape[1], dtype=dtype)
    with torch.no_grad():
        computed = lsrl.hf.outputs(hf, hf(**lsrl.hf.inputs(hf, xs))).double().numpy()
    return float(hf.config.lsrl_io["tolerance"]), float(np.abs(computed - expected).max())


def row(name: str, program: lsrl.ForEach, xs: np.ndarray, arch: str) -> dict:
    model = lsrl.compile(program)
    expected = model(xs)
    stated32, error32 = measured(model, arch, torch.float32, xs, expected)
    stated64, error64 = measured(model, arch, torch.float64, xs, expected)
    return {"case": name, "arch": arch, "largest output": f"{np.abs(expected).max():.3g}",
            "float32 stated": f"{stated32:.3g}", "float32 measured": f"{error32:.3g}",
            "float64 stated": f"{stated64:.3g}", "float64 measured": f"{error64:.3g}",
            "stated 64/32": f"{stated64 / stated32:.3g}" if stated32 else "both exact",
            "float32 in float64": SHORT_PARTS[arch],
            "holds": error32 <= stated32 and error64 <= stated64}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default=",".join(lsrl.hf.ARCHITECTURES))
    parser.add_argument("--seeds", default="0,1,2,3,4,5")
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    archs = args.archs.split(",")
    assert set(SHORT_PARTS) == set(FLOAT32_PARTS)
    rows = [row(name, program, xs, arch) for name, program, xs in cases([int(s) for s in args.seeds.split(",")])
            for arch in archs]
    print_rows(rows, width=12)
    write_csv(args.csv, "hf_float64", rows)
    broken = [r for r in rows if not r["holds"]]
    print(f"{len(rows)} rows, {len(broken)} beyond their stated tolerance")


if __name__ == "__main__":
    main()
