"""The grid commands on a real Ray cluster: a head started by this module (``ray start --head --block``, two
CPUs, 127.0.0.1) runs a smoke grid of every grid command through ``--ray-address`` (tests/ray_grid_driver.py),
and each command's files hold the numbers of the same grid run in this process.

Ray advertises a machine's outside interface even when told 127.0.0.1, and the machines that run these tests may
send traffic to loopback only: the cluster and the driver run in a network namespace of their own whose only
interface is loopback (``unshare -n``, joined with ``nsenter``: both util-linux; root). The head and everything it
starts form one process group, killed at the end whatever happened (then whatever is left in the namespace);
every wait is bounded."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from bench_builds import built_once
from click.testing import CliRunner
from ray_grid_driver import REPRODUCE, SMOKE_GRIDS

import lsrl.cli

pytestmark = pytest.mark.slow  # every test here is slow (see pyproject.toml's markers)

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "tests" / "ray_grid_driver.py"
PORT = 6379  # the namespace is the cluster's own: no other program holds a port there
ADDRESS = f"127.0.0.1:{PORT}"
START_SECONDS = 120  # the head is up within this (seconds on an idle machine)
DRIVER_SECONDS = 420  # every smoke grid, on two busy cores
TIMES = {"wall_seconds", "seconds", "das_seconds"}  # the columns that differ from one run to the next


def _tools() -> dict[str, str]:
    """The programs the cluster needs, or a failure that says what to install."""
    found = {name: shutil.which(name) for name in ("unshare", "nsenter")}
    found["ray"] = str(Path(sys.executable).parent / "ray")
    missing = [name for name, path in found.items() if not path or not Path(path).exists()]
    if missing or os.geteuid() != 0:
        pytest.fail(f"a Ray cluster in its own network namespace needs root, unshare and nsenter (util-linux) and "
                    f"ray (pip install -e '.[test]'); missing: {missing or 'root'}")
    return {name: str(path) for name, path in found.items()}


def _kill_group(process: subprocess.Popen) -> None:
    """The process and everything it started (its process group): SIGTERM, then SIGKILL."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            return
        try:
            process.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue


def _namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _kill_the_rest(namespace: str) -> None:
    """Every process left in the cluster's network namespace (Ray's workers put themselves in process groups of
    their own, and leave when the head's raylet is gone; a worker stuck in a run may not): SIGKILL, waited for."""
    deadline = time.monotonic() + 10
    while left := [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
                   and _namespace_or_none(int(entry.name)) == namespace]:
        assert time.monotonic() < deadline, f"processes {left} of the cluster's namespace outlived SIGKILL"
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _namespace_or_none(pid: int) -> str | None:
    try:
        return _namespace(pid)
    except OSError:  # the process is gone
        return None


def _wait_for_head(head: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if head.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the Ray head did not start within {START_SECONDS} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def on_cluster(tmp_path_factory) -> Path:
    """The folder of the smoke grids run on the cluster (OUT/NAME per grid of ``SMOKE_GRIDS``): run once per test
    session, whichever test worker asks first (the others wait for it and read it)."""
    ((out, _),) = built_once(tmp_path_factory, [("ray-grids", _grids_on_a_cluster)])
    return out


def _grids_on_a_cluster(out: Path) -> list[Path]:
    tools = _tools()
    _cut_reproduction(out / "reproduce")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 characters
    log = out / "head.log"
    start = [tools["unshare"], "-n", sys.executable, str(DRIVER), "head", tools["ray"], "start", "--head", "--block",
             "--node-ip-address", "127.0.0.1", f"--port={PORT}", "--num-cpus=2", "--num-gpus=0",
             "--include-dashboard=false", "--disable-usage-stats", "--object-store-memory=100000000",
             f"--temp-dir={temp}"]
    with open(log, "w") as head_log:
        head = subprocess.Popen(start, stdout=head_log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    namespace = None
    try:
        _wait_for_head(head, log)
        namespace = _namespace(head.pid)
        driver = subprocess.run([tools["nsenter"], f"--net=/proc/{head.pid}/ns/net", sys.executable,
                                 str(DRIVER), ADDRESS, str(out)],
                                capture_output=True, text=True, env=env, timeout=DRIVER_SECONDS, cwd=out)
        assert driver.returncode == 0, driver.stdout[-3000:] + driver.stderr[-5000:]
    finally:
        _kill_group(head)
        if namespace is not None and namespace != _namespace(os.getpid()):
            _kill_the_rest(namespace)
        shutil.rmtree(temp, ignore_errors=True)
    return []


def _cut_reproduction(folder: Path) -> None:
    """A local run of the reproduction's seed 0 to step 2 of its 4, as if it had taken 1,000 s: the cluster
    continues it."""
    import torch

    from lsrl.llrnn.train import SIDECAR

    _local([*REPRODUCE, "--seeds", "1", "--steps", "2", "-o"], folder)
    checkpoint = folder / "ntm-tf_copy-0" / SIDECAR
    state = torch.load(checkpoint, weights_only=True)
    torch.save({**state, "training_seconds": 1000.0}, checkpoint)


def _local(arguments: list[str], folder: Path) -> None:
    result = CliRunner().invoke(lsrl.cli.main, [*arguments, str(folder), "--workers", "1"])
    assert result.exit_code == 0, result.output[-3000:]


def _rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows without the columns of times."""
    with open(path, newline="") as file:
        rows = [{key: value for key, value in row.items() if key not in TIMES} for row in csv.DictReader(file)]
    assert rows, path
    return rows


TABLES = {"noise": "noise.csv", "experiment": "experiment.csv", "reproduce": "reproduction.csv",
          "train-tier": "trained.csv", "eval-all": "eval.csv"}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_grid_on_the_cluster_writes_the_numbers_of_the_local_run(name, on_cluster, tmp_path):
    """Same seeds, same numbers, wherever the runs ran (the reproduction's seed 0 continued on the cluster from a
    checkpoint written here: resumed runs too)."""
    _local(SMOKE_GRIDS[name], tmp_path / name)
    here, there = _rows(tmp_path / name / TABLES[name]), _rows(on_cluster / name / TABLES[name])
    assert there == here


def test_a_reproduction_continued_on_the_cluster_counts_the_time_of_its_first_steps(on_cluster):
    with open(on_cluster / "reproduce" / "reproduction.csv", newline="") as file:
        continued, fresh = csv.DictReader(file)
    assert (continued["seed"], continued["steps"], fresh["seed"]) == ("0", "4", "1")
    assert float(continued["wall_seconds"]) >= 1000 > float(fresh["wall_seconds"])  # steps 1-2 here, 3-4 there


def test_a_suite_built_on_the_cluster_has_the_files_of_the_local_build(on_cluster, tmp_path):
    _local(SMOKE_GRIDS["build"], tmp_path / "build")
    here = {path.relative_to(tmp_path / "build"): path.read_bytes()
            for path in sorted((tmp_path / "build").rglob("*")) if path.is_file()}
    there = {path.relative_to(on_cluster / "build"): path.read_bytes()
             for path in sorted((on_cluster / "build").rglob("*")) if path.is_file()}
    assert len(here) > 20 and sorted(there) == sorted(here)
    assert [path for path in here if here[path] != there[path]] == []


def test_a_failed_run_on_the_cluster_is_named_with_its_error_and_the_others_kept(on_cluster):
    outcome = json.loads((on_cluster / "outcome.json").read_text())
    assert outcome["results"] == [2.0, None, 3.0]
    assert outcome["failures"] == {"root of -1": "ValueError: math domain error"}
