"""The grid runner (``lsrl.grid``) on this machine: runs in this process and in worker processes give the same
results in the order of the runs, a failed run is named with its error after the others have finished, and a
``--ray-address`` that cannot be used is a one-line error that names it (or the extra that installs Ray). The
runs on a Ray cluster: tests/test_grid_ray.py."""

from __future__ import annotations

import socket
import sys
import threading

import pytest
import torch
from click.testing import CliRunner

from lsrl import grid
from lsrl.cli import main
from lsrl.errors import InternalError, LsrlError
from lsrl.grid import GridError, Run, run_grid


def square_or_fail(value: int) -> int:
    if value < 0:
        raise LsrlError(f"no square of {value} here")
    return value * value


def broken(value: int) -> int:
    raise InternalError(f"broken at {value}")


def threads_in_run() -> int:
    return torch.get_num_threads()


RUNS = [Run(f"square {value}", square_or_fail, (value,)) for value in (3, -1, 4, -2, 5)]


@pytest.mark.parametrize("workers", [1, 2])
def test_runs_give_their_results_in_order_and_failures_name_the_run_and_its_error(workers):
    outcome = run_grid("squares", RUNS, workers=workers, progress=False)
    assert outcome.results == [9, None, 16, None, 25] and outcome.finished == [9, 16, 25]
    assert outcome.failures == {"square -1": "LsrlError: no square of -1 here",
                                "square -2": "LsrlError: no square of -2 here"}
    with pytest.raises(GridError, match=r"^squares: 2 of 5 runs failed: square -1: LsrlError: no square of -1 "
                                        r"here; square -2: LsrlError: no square of -2 here$"):
        outcome.check()


def test_done_sees_each_result_as_its_run_finishes():
    seen = []
    run_grid("squares", RUNS[:1] + RUNS[2:3], workers=1, progress=False, done=seen.append)
    assert seen == [9, 16]


def test_a_run_that_meets_a_bug_is_raised_as_a_bug_not_a_user_error():
    outcome = run_grid("broken", [Run("b", broken, (1,)), RUNS[0]], workers=1, progress=False)
    assert outcome.finished == [9]
    with pytest.raises(InternalError, match="broken: 1 of 2 runs failed: b: InternalError: broken at 1"):
        outcome.check()


def test_a_run_has_one_torch_thread_wherever_it_runs_and_the_caller_keeps_its_own():
    torch.set_num_threads(2)  # the suite's fixture sets 1 and restores the caller's afterwards
    assert run_grid("threads", [Run("t", threads_in_run)], workers=1, progress=False).results == [1]
    assert run_grid("threads", [Run("t", threads_in_run)] * 2, workers=2, progress=False).results == [1, 1]
    assert torch.get_num_threads() == 2


def _one_line(arguments: list[str], *words: str) -> str:
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().count("\n") == 0, result.output
    for word in words:
        assert word in result.output, result.output
    return result.output


def _free_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_an_address_nothing_answers_at_is_a_one_line_error_naming_it(tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    _one_line(["experiment", "noise", "--quick", "-o", str(tmp_path), "--ray-address", address],
              f"--ray-address {address}: no Ray cluster answers at {address} (ConnectionRefusedError")


def test_auto_names_the_head_it_stands_for_when_that_does_not_answer(monkeypatch):
    head = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", head)  # where Ray looks first for the cluster "auto" means
    with pytest.raises(GridError, match=f"^--ray-address auto: no Ray cluster answers at {head} "
                                        f"\\(ConnectionRefusedError"):
        run_grid("squares", RUNS[:1], ray_address="auto", progress=False)


def test_a_head_that_does_not_answer_is_given_up_after_a_bounded_wait(monkeypatch):
    monkeypatch.setattr(grid, "CONNECT_SECONDS", 0.2)
    released = threading.Event()

    def silent(*args, **kwargs):  # a name server or head that does not answer until the test is done
        released.wait(60)
        raise OSError("answered too late")

    monkeypatch.setattr(socket, "create_connection", silent)
    try:
        with pytest.raises(GridError, match=r"^--ray-address head:6379: no Ray cluster answers at head:6379 "
                                            r"\(no answer within 0.2 s\)$"):
            run_grid("squares", RUNS[:1], ray_address="head:6379", progress=False)
    finally:
        released.set()


@pytest.mark.parametrize("address", ["head", "head:port", ":6379"])
def test_an_address_that_is_no_host_and_port_is_refused(address):
    with pytest.raises(GridError, match=f"--ray-address {address}: expected 'auto' or HOST:PORT"):
        run_grid("squares", RUNS[:1], ray_address=address, progress=False)


def test_without_ray_the_address_names_the_extra_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an import finds where Ray is not installed
    _one_line(["llrnn", "experiment", "--models", "ntm", "--tasks", "copy", "--seeds", "1", "--steps", "1",
               "-o", str(tmp_path), "--ray-address", "auto"],
              "--ray-address needs Ray, which is not installed: pip install 'lsrl[ray]'")


def test_a_numbered_gpu_is_refused_on_a_cluster(tmp_path):
    """Ray gives each run its GPU; ``cuda:1`` would name another run's."""
    _one_line(["llrnn", "reproduce", "--preset", "smoke", "--models", "ntm", "--tasks", "tf_copy", "--seeds", "1",
               "--device", "cuda:1", "-o", str(tmp_path), "--ray-address", "auto"], "give device 'cuda'")


def test_jobs_is_the_deprecated_name_of_workers(monkeypatch, tmp_path):
    from lsrl.bench import trained_tier as trained

    asked = {}

    def stand_in(tasks, steps, progress, workers, ray_address, **archs):
        asked.update(workers=workers, ray_address=ray_address)
        return []

    monkeypatch.setattr(trained, "train_all", stand_in)
    result = CliRunner().invoke(main, ["bench", "train-tier", "-o", str(tmp_path), "--task", "count_ones",
                                       "--jobs", "3"])
    assert result.exit_code == 0, result.output
    assert "--jobs is deprecated" in result.output and asked == {"workers": 3, "ray_address": None}
