"""The trained tier's aim in a stock transformers folder (lsrl.bench.build.write_hf_folder): the same
record as an LSTM / GRU folder, in config.json's lsrl_bench record, covered by the manifest, read back by
lsrl.bench.load, and said first by the model card (tests/test_bench_tiers.py tests the LSTM / GRU folders)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lsrl.bench.records import AIM, read_training

pytest.importorskip("transformers")
from test_bench_hf import built  # noqa: E402  (its majority folder, 2 steps: built once per process)


def test_a_transformers_folder_records_the_aim():
    root, loaded = built("hawk")  # two Adam steps: far below the aim
    folder = Path(root) / "trained" / "majority" / "hawk"
    config = json.loads((folder / "config.json").read_text())
    training = config["lsrl_bench"]["training"]
    assert read_training(folder) == training == loaded.training
    assert set(training["interchange_accuracy"]) == {"ones_minus_zeros", "more_ones"}
    accuracies = [training["task_accuracy"], *training["interchange_accuracy"].values()]
    assert training["aim"] == AIM and training["meets_aim"] is False and min(accuracies) < AIM
    assert (training["steps"], training["seed"]) == (2, 0)
    manifest = json.loads((folder / "manifest.json").read_text())["sha256"]
    assert manifest["config.json"] == hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()
    card = (folder / "README.md").read_text()
    title = card.index("\n# ")
    assert card[title:].split("\n")[3].startswith("**Below the aim: these labels are not faithful.**")
    assert "`lsrl_bench.training.meets_aim` is `false`" in card
