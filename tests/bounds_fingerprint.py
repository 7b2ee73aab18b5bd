"""Fingerprints of what the value analysis decides: per program and ``max_len``, the relational bounds of every
layer of the compiled model and of its exact diagonal form, and per stock target the built weights and the
tolerances they state (sha256 of each, and the tolerance itself). A change to ``lsrl.lang.relational_bounds``
that must not change its bounds is checked by writing the fingerprints before it and comparing after.

    python tests/bounds_fingerprint.py --write before.json [--lengths 64,300,1024]
    python tests/bounds_fingerprint.py --check before.json   # lists every fingerprint that differs
"""

import argparse
import hashlib
import json
import sys

import numpy as np
import torch

import lsrl
from lsrl.errors import LsrlError
from lsrl.hf.lowering import exact_layers
from lsrl.lang.relational_bounds import relational_bounds
from lsrl.programs import discrete_approximator, more_ones_than_zeros, parity

PROGRAMS = {"listing2 robust n=2 tokens<=9": lambda: discrete_approximator(2, robust=True, vocabulary=9),
            "listing2 robust n=3 tokens<=10": lambda: discrete_approximator(3, robust=True, vocabulary=10),
            "parity": parity,
            "more ones than zeros": more_ones_than_zeros}
TORCH_TARGETS = {"stock_lstm f32": ("stock_lstm", torch.float32), "stock_lstm f64": ("stock_lstm", torch.float64),
                 "stock_gru f32": ("stock_gru", torch.float32)}
HF_TARGETS = ("mamba", "mamba2", "hawk")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bounds_digest(layers, max_len: int) -> str:
    relational_bounds(layers[-1], max_len)
    return digest(repr([tuple(map(str, side)) for layer in layers for side in relational_bounds(layer, max_len)]))


def module_digest(module: torch.nn.Module) -> str:
    hasher = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        hasher.update(name.encode())
        hasher.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return hasher.hexdigest()[:16]


def stated_tolerances(module: torch.nn.Module) -> str:
    """The tolerances a module states: ``tolerances`` (stock RNNs) or ``config.lsrl_io`` (hf), as text."""
    if hasattr(module, "tolerances"):
        return repr(np.asarray(module.tolerances, dtype=np.float64).tolist()) + repr(float(module.tolerance))
    return json.dumps(module.config.lsrl_io, sort_keys=True, default=str)


def built(build, *args, **options) -> str:
    """``weights digest | tolerances`` of ``build(*args, **options)``, or the refusal's message."""
    try:
        module = build(*args, **options)
    except LsrlError as error:
        return f"refused: {error}"
    return f"{module_digest(module)} | {stated_tolerances(module)}"


def fingerprints(lengths: list[int]) -> dict[str, str]:
    out = {}
    for program_name, make_program in PROGRAMS.items():
        model = lsrl.compile(make_program(), progress=False)
        for max_len in lengths:
            row = f"{program_name} @ {max_len}"
            print(row, file=sys.stderr)
            out[f"{row}: layer bounds"] = bounds_digest(model.layers, max_len)
            out[f"{row}: diagonal bounds"] = bounds_digest(exact_layers(model), max_len)
            for label, (arch, dtype) in TORCH_TARGETS.items():
                out[f"{row}: {label}"] = built(model.to_torch, arch, max_len=max_len, dtype=dtype)
            for arch in HF_TARGETS:
                out[f"{row}: hf {arch}"] = built(model.to_hf, arch, max_len)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="64,300,1024")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", help="write the fingerprints to this JSON file")
    action.add_argument("--check", help="compare with the fingerprints in this JSON file")
    args = parser.parse_args()
    write_or_check(fingerprints([int(v) for v in args.lengths.split(",")]), args.write, args.check, only_shared=True)


def write_or_check(current: dict[str, str], write: str | None, check: str | None, only_shared: bool = False) -> None:
    """Write ``current`` to the JSON file ``write``, or compare it with the one at ``check``: print each fingerprint
    that differs (``only_shared``: of those both hold; else a missing one differs too) and each new one, and exit
    1 if any differs."""
    if write:
        with open(write, "w") as file:
            json.dump(current, file, indent=1, sort_keys=True)
        print(f"{len(current)} fingerprints written to {write}")
        return
    with open(check) as file:
        expected = json.load(file)
    compared = [key for key in expected if key in current or not only_shared]
    differing = [key for key in compared if expected[key] != current.get(key)]
    for key in differing:
        print(f"DIFFERS {key}\n  before: {expected[key][:200]}\n  now:    {str(current.get(key))[:200]}")
    added = [key for key in current if key not in expected]
    for key in added:
        print(f"NEW {key}: {current[key][:200]}")
    print(f"{len(compared)} compared, {len(differing)} differ, {len(added)} new")
    sys.exit(1 if differing else 0)

if __name__ == "__main__":
    main()
