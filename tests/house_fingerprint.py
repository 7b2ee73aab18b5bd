"""Fingerprints of everything a user sees of a fixed set of programs: the saved compiled model, the
``to_torch`` weights and stated tolerances of every target architecture, the ONNX exports, the
``lsrl.hf.save`` folder of every stock ``transformers`` architecture, the automata networks and their
ONNX exports, and a small ``lsrl bench build`` (sha256 of each, or the refusal's message). A change
that must not change what users get (a refactoring, a rename) is checked by writing the fingerprints
before it and comparing after.

    python tests/house_fingerprint.py --write before.json
    python tests/house_fingerprint.py --check before.json   # lists every fingerprint that differs
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers

import lsrl
from lsrl.errors import LsrlError
from lsrl.programs import (conditional_reset, continuous_approximator, discrete_approximator,
                           more_ones_than_zeros, parity, squaring)
from bounds_fingerprint import write_or_check
from test_random_programs import generate_program

MAX_LEN = 12  # the length the targets that need one (stock LSTM / GRU, transformers models) are built for
RANDOM_SEEDS = (0, 1, 2)


def random_program(seed: int) -> lsrl.ForEach:
    """The random program of ``seed`` (tests/test_random_programs.py), its Input declared in [-3, 3] (so that
    the targets that need bounds can be built)."""
    source = generate_program(random.Random(seed)).source_code()
    namespace: dict = {}
    exec(source.replace("name='x')", "name='x', bounds=(-3, 3))", 1), namespace)
    return namespace["prog"]


PROGRAMS: dict[str, Callable[[], lsrl.ForEach]] = {
    "more ones than zeros": more_ones_than_zeros,
    "parity": parity,
    "squaring": squaring,
    "conditional reset": conditional_reset,
    "listing1 d_in=1 d_out=1": lambda: continuous_approximator(1, 1),
    "listing2 n=2": lambda: discrete_approximator(2),
    "listing2 robust n=2 tokens<=9": lambda: discrete_approximator(2, robust=True, vocabulary=9),
    **{f"random seed {seed}": (lambda seed=seed: random_program(seed)) for seed in RANDOM_SEEDS},
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def folder_digest(folder: Path) -> str:
    """The names and bytes of every file under ``folder``, in name order."""
    hasher = hashlib.sha256()
    for file in sorted(path for path in folder.rglob("*") if path.is_file()):
        hasher.update(str(file.relative_to(folder)).encode() + b"\0" + file.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def module_digest(module: torch.nn.Module) -> str:
    hasher = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        hasher.update(name.encode() + str(tensor.dtype).encode() + repr(tuple(tensor.shape)).encode())
        hasher.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return hasher.hexdigest()[:16]


def stated_tolerances(module: torch.nn.Module) -> str:
    """What a module states of its accuracy: ``tolerance``, ``tolerances`` where it has them, as text."""
    stated = {name: getattr(module, name) for name in ("tolerance", "tolerances") if hasattr(module, name)}
    return repr({name: as_text(value) for name, value in stated.items()})


def as_text(value: object) -> str:
    """A tolerance as text: a record (``lsrl.targets.precision.Tolerance``) as its repr, numbers as float64 lists."""
    if isinstance(value, (float, int, np.ndarray, torch.Tensor, list, tuple)):
        return repr(np.asarray(value, dtype=np.float64).tolist())
    return repr(value)


def attempt(make: Callable[[], str]) -> str:
    """``make()``, or the message of the ``LsrlError`` that refused it."""
    try:
        return make()
    except LsrlError as error:
        return f"refused: {error}"


def onnx_digest(module: torch.nn.Module, arch: str, scratch: Path) -> str:
    from lsrl.targets.onnx_export import ARCHS, export_onnx

    if arch not in ARCHS:
        return "no onnx export"
    file = export_onnx(module, scratch / f"{arch}.onnx", allow_inexact=True)
    return sha(file.read_bytes())


def target_fingerprints(model: lsrl.CompiledProgram, scratch: Path) -> dict[str, str]:
    out = {}
    for arch in lsrl.targets.ARCHITECTURES:
        options = {"max_len": MAX_LEN} if arch in lsrl.targets.STOCK else {}
        try:
            module = model.to_torch(arch, **options)
        except LsrlError as error:
            out[f"to_torch {arch}"] = f"refused: {error}"
            continue
        out[f"to_torch {arch}"] = f"{module_digest(module)} | {stated_tolerances(module)}"
        out[f"onnx {arch}"] = attempt(lambda: onnx_digest(module, arch, scratch))
    return out


def hf_fingerprints(model: lsrl.CompiledProgram, scratch: Path) -> dict[str, str]:
    out = {}
    for arch in lsrl.hf.ARCHITECTURES:
        def saved(arch: str = arch) -> str:
            return folder_digest(lsrl.hf.save(lsrl.hf.to_hf(model, arch, MAX_LEN), scratch / f"hf-{arch}"))
        out[f"hf.save {arch.removeprefix('hf-')}"] = attempt(saved)  # keyed as before the hf- names
    return out


def program_fingerprints(name: str, make_program: Callable[[], lsrl.ForEach], scratch: Path) -> dict[str, str]:
    model = lsrl.compile(make_program(), progress=False)
    rows = {"save": folder_digest(model.save(scratch / "model")),
            **target_fingerprints(model, scratch), **hf_fingerprints(model, scratch)}
    return {f"{name}: {key}": value for key, value in rows.items()}


def automata_fingerprints(scratch: Path) -> dict[str, str]:
    from lsrl.automata import ARCHITECTURES, export_onnx, random_dfa, to_torch, tomita

    out = {}
    for label, machine in {"tomita 3": tomita(3), "random dfa 5x2 seed 0": random_dfa(5, 2, 0)}.items():
        for arch in ARCHITECTURES:
            network = to_torch(machine, arch)
            out[f"automaton {label}: to_torch {arch}"] = module_digest(network)
            out[f"automaton {label}: onnx {arch}"] = attempt(
                lambda: sha(export_onnx(network, scratch / f"{arch}.onnx").read_bytes()))
    return out


def bench_fingerprints(scratch: Path) -> dict[str, str]:
    """Every file of a compiled-tier build of the parity task (a short test split), on one CPU thread."""
    from lsrl.bench import build_suite

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the builds' determinism is claimed on one CPU thread
    try:
        folders = build_suite(scratch / "bench", ["parity"], progress=False, test_sequences=40)
    finally:
        torch.set_num_threads(threads)
    out = {f"bench parity: {Path(folder).relative_to(scratch / 'bench')}": folder_digest(Path(folder))
           for folder in folders}
    root_files = [path for path in (scratch / "bench").iterdir() if path.is_file()]
    out["bench parity: root files"] = sha(b"".join(path.name.encode() + path.read_bytes() for path in sorted(root_files)))
    return out


def fingerprints() -> dict[str, str]:
    out = {}
    for name, make_program in PROGRAMS.items():
        print(name, file=sys.stderr)
        with tempfile.TemporaryDirectory() as scratch:
            out.update(program_fingerprints(name, make_program, Path(scratch)))
    print("automata, bench", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        out.update(automata_fingerprints(Path(scratch)))
        out.update(bench_fingerprints(Path(scratch)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", help="write the fingerprints to this JSON file")
    action.add_argument("--check", help="compare with the fingerprints in this JSON file")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()  # a bar per saved folder
    write_or_check(fingerprints(), args.write, args.check)


if __name__ == "__main__":
    main()
