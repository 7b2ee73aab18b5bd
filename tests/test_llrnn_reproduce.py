"""``lsrl llrnn reproduce``: the table beside the TF medians, the targets, the files it writes."""

import pytest
import torch
from click.testing import CliRunner

from lsrl.llrnn.cli import llrnn
from lsrl.llrnn.reproduce import medians, reproduction_table, target
from lsrl.llrnn.train import Trainer


def row(model, task, seed, errors, train=0.0):
    return {"model": model, "task": task, "seed": seed, "steps": 10, "parameters": 100, "wall_seconds": 2.0,
            "train_symbol_error": train, "test_errors": {str(n): e for n, e in errors.items()}}


def test_medians_targets_and_table():
    rows = [row("ntm", "tf_copy", s, {33: e, 58: 0.0}) for s, e in enumerate((0.0, 0.5, 0.0))]
    rows += [row("ntm", "tf_multiple_pattern4", s, {33: e, 58: 0.3}) for s, e in enumerate((0.01, 0.02, 0.013))]
    rows += [row("lstm", "tf_copy", 0, {33: 0.4, 58: 0.6})]
    summary = medians(rows)
    assert summary["tf_copy", "ntm"]["lengths"] == {33: 0.0, 58: 0.0}
    assert summary["tf_multiple_pattern4", "ntm"]["lengths"][33] == 0.013
    assert target("tf_copy", "ntm", {33: 0.0, 58: 0.0}) == ("0 at 33, 58", True)
    assert target("tf_copy", "ntm", {33: 0.0, 58: 0.01})[1] is False
    assert target("tf_multiple_pattern4", "ntm", {33: 0.015})[1] is False
    assert target("tf_pattern3", "pattern_ntm", {33: 0.02}) == ("≤ TF (0–2 %)", True)
    assert target("tf_copy", "lstm", {33: 0.0}) == ("", None)
    assert target("tf_repeat_copy", "ntm", {40: 0.1, 15: 0.0, 25: 0.0}) == ("0 at 15, 25", True)  # tf-cpu's lengths
    table = reproduction_table(rows, "tf").splitlines()
    assert "checked at 33," in table[0] and "targets of 0 also at 58" in table[0]
    assert table[4].startswith("| tf_copy | ntm | 3 | 0.00% | 0.00% | 0.00% | 0 | 0 at 33, 58 | yes |")
    assert "| tf_multiple_pattern4 | ntm | 3 |" in table[5]
    assert "| 1.30% | 30.00% | 1.4 % | ≤ 1.4% | yes |" in table[5]
    assert table[6].startswith("| tf_copy | lstm | 1 |") and "| – | – | – |" in table[6]


@pytest.mark.slow
def test_cli_reproduce_writes_table_plot_and_heat_maps(tmp_path):
    torch.set_num_threads(1)
    result = CliRunner().invoke(llrnn, ["reproduce", "--preset", "smoke", "--models", "ntm,gru", "--tasks",
                                        "tf_copy", "--seeds", "1", "--steps", "2", "--workers", "1",
                                        "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "| tf_copy | ntm | 1 |" in result.output and "| tf_copy | gru | 1 |" in result.output
    assert len((tmp_path / "reproduction.csv").read_text().splitlines()) == 3
    for name in ("error_vs_length.png", "ntm-tf_copy-0/memories.png", "ntm-tf_copy-0/addresses.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert not (tmp_path / "gru-tf_copy-0" / "memories.png").exists()  # no memory to show


@pytest.mark.slow
def test_cli_reproduce_finished_only_tables_the_runs_done_and_trains_nothing(tmp_path):
    torch.set_num_threads(1)
    grid = ["reproduce", "--preset", "smoke", "--models", "ntm", "--tasks", "tf_copy", "--steps", "2",
            "--workers", "1", "-o", str(tmp_path)]
    empty = CliRunner().invoke(llrnn, [*grid, "--seeds", "1", "--finished-only"])
    assert empty.exit_code != 0 and "no run of this grid has finished yet" in empty.output
    assert CliRunner().invoke(llrnn, [*grid, "--seeds", "1"]).exit_code == 0
    result = CliRunner().invoke(llrnn, [*grid, "--seeds", "3", "--finished-only"])
    assert result.exit_code == 0, result.output
    assert "| tf_copy | ntm | 1 |" in result.output  # one of the three seeds has finished
    assert not (tmp_path / "ntm-tf_copy-1").exists()
    assert len((tmp_path / "reproduction.csv").read_text().splitlines()) == 2


@pytest.mark.slow
def test_cli_reproduce_overrides_the_presets_schedule_and_rate(tmp_path):
    """A grid with --schedule cosine (or --lr) is another grid: its runs keep that setting, and the
    constant-rate runs of the same folder are not counted as its finished ones."""
    torch.set_num_threads(1)
    grid = ["reproduce", "--preset", "smoke", "--models", "ntm", "--tasks", "tf_copy", "--steps", "2",
            "--workers", "1", "--seeds", "1", "-o", str(tmp_path)]
    assert CliRunner().invoke(llrnn, grid).exit_code == 0
    cosine = CliRunner().invoke(llrnn, [*grid, "--schedule", "cosine", "--finished-only"])
    assert cosine.exit_code != 0 and "no run of this grid has finished yet" in cosine.output
    assert CliRunner().invoke(llrnn, [*grid, "--schedule", "cosine"]).exit_code == 0
    assert Trainer.resume(tmp_path / "ntm-tf_copy-0").config.schedule == "cosine"
    slower = CliRunner().invoke(llrnn, [*grid, "--schedule", "cosine", "--lr", "5e-5", "--finished-only"])
    assert slower.exit_code != 0 and "no run of this grid has finished yet" in slower.output
    assert CliRunner().invoke(llrnn, [*grid, "--schedule", "cosine", "--lr", "5e-5"]).exit_code == 0
    assert Trainer.resume(tmp_path / "ntm-tf_copy-0").config.learning_rate == 5e-5
