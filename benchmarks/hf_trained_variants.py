"""Variants of the trained tier's interchange intervention training in the stock transformers architectures
(``lsrl.bench.training.hf.train_hf``), measured on the tasks that missed the aim (docs/bench.md, the trained tier in
stock transformers models): which change gets every variable's interchange-intervention accuracy to 0.95.

A variant is ``KEY=VALUE`` settings joined by ``,`` (none: ``train_hf``'s own schedule):

* ``interchange=one``: each interchange step trains one circuit variable, drawn at random (the trainer before the
  summed loss); ``summed`` (``train_hf``'s): every variable on the same base / source pair, the losses summed;
* ``lengths=longest``: every batch of the longest training length (``train_hf``: a length drawn per step);
* ``steps=N``, ``lr=X``: Adam steps, learning rate (cosine schedule to 0, as ``train_hf``);
* ``cycle=tiis``: the loss of each step in turn, ``t`` task, ``i`` interchange, ``s`` free units (``tis``);
* ``decays=0.0001/0.1/1/10``: Mamba's and Mamba-2's initial ``-A`` per state entry (``lsrl.bench.training.hf.MAMBA_DECAYS``).

Task accuracy and per-variable interchange accuracy as ``train_hf`` measures them (``measure``: on the 64 fixed pairs
of the trained folder's ``data.npz``, of the training lengths); CPU seconds on one torch thread.

    python benchmarks/hf_trained_variants.py --task equal_counts --arch hawk --variant interchange=one --variant ""
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks.results import add_csv_option, write_csv
from lsrl.bench.training.hf import HF_BATCH, LR, MAMBA_DECAYS, hf_model
from lsrl.bench.training.loop import measure, pair_loss
from lsrl.bench.tasks import TASKS

DEFAULTS = {"interchange": "summed", "lengths": "drawn", "steps": "600", "lr": str(LR), "cycle": "tis",
            "decays": "/".join(f"{decay:g}" for decay in MAMBA_DECAYS)}


def settings(variant: str) -> dict[str, str]:
    """The variant's settings over ``DEFAULTS``."""
    given = dict(item.split("=", 1) for item in variant.split(",") if item)
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise SystemExit(f"unknown variant setting(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    return {**DEFAULTS, **given}


def train_variant(name: str, arch: str, variant: dict[str, str], seed: int = 0) -> dict[str, object]:
    """``train_hf``'s training of ``name`` as ``arch`` with ``variant``'s settings; a row of the table."""
    start = time.process_time()
    model = hf_model(name, arch, seed, tuple(float(decay) for decay in variant["decays"].split("/")))
    task, program, hf = TASKS[name], TASKS[name].build(), model.net.hf
    rng = np.random.default_rng(seed)
    steps = int(variant["steps"])
    hf.train()
    optimizer = torch.optim.Adam(hf.parameters(), lr=float(variant["lr"]))
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    variables = list(model.alignment)
    for step in range(steps):
        low, high = task.train_lengths
        length = high if variant["lengths"] == "longest" else int(rng.integers(low, high + 1))
        base, source = (np.stack([task.sample(rng, length) for _ in range(HF_BATCH)]).astype(np.float64)
                        for _ in "bs")
        kind = variant["cycle"][step % len(variant["cycle"])]
        if kind == "i":
            chosen = variables if variant["interchange"] == "summed" else [variables[int(rng.integers(len(variables)))]]
            loss = torch.stack([pair_loss(model, program, base, source, dict([model.alignment[variable]]), variable)
                                for variable in chosen]).sum()
        else:
            loss = pair_loss(model, program, base, source, model.free if kind == "s" else {}, None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    hf.eval()
    accuracy, interchange = measure(model)
    return {"task": name, "arch": arch, **variant, "task_accuracy": round(accuracy, 4),
            "iia": "; ".join(f"{variable} {value:.4f}" for variable, value in interchange.items()),
            "worst_variable": round(min(interchange.values()), 4), "cpu_seconds": round(time.process_time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", required=True, help="a trained-tier task (repeatable)")
    parser.add_argument("--arch", action="append", required=True, help="mamba, mamba2, hawk or griffin (repeatable)")
    parser.add_argument("--variant", action="append", default=None, help='settings "KEY=VALUE,..." (repeatable)')
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.task:
        for arch in args.arch:
            for variant in args.variant or [""]:
                rows.append(train_variant(name, arch, settings(variant)))
                print(rows[-1], flush=True)
    write_csv(args.csv, "hf_trained_variants", rows)


if __name__ == "__main__":
    main()
