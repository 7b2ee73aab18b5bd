"""The grid runner: every grid command (``lsrl llrnn experiment`` and ``reproduce``, ``lsrl bench train-tier``,
``eval-all`` and ``build``, ``lsrl experiment noise``) runs its runs through ``run_grid``.

A run is a module-level function and its arguments (``Run``). ``run_grid`` runs them

- in this process, one after the other (``workers=1``, or a single run);
- in ``workers`` local processes, one CPU thread each;
- or as tasks of a Ray cluster (``ray_address``: ``"auto"`` for the cluster this machine belongs to, or the
  head's ``HOST:PORT``), each declaring one CPU and the GPUs it needs (``Run.gpus``). Ray is the optional
  extra ``lsrl[ray]``, imported only here and only then.

Wherever a run runs, it runs on one torch thread, so that its numbers do not depend on where it ran. A run that
fails is reported with its error after the others have finished (``Outcome.check``); what they returned is kept,
and a command writes it before it raises. Runs that write files (checkpoints, suite folders) write them where
their arguments say: on a cluster, a folder every node sees.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import click

from lsrl.errors import InternalError
from lsrl.workers import MAX_WORKERS, StudyError, check_workers

RAY_EXTRA = "pip install 'lsrl[ray]'"
CONNECT_SECONDS = 10.0  # a cluster's head answers a TCP connection within this, or it is taken as unreachable
FAILURE_TEXT = 300  # characters of each failed run's error in the one-line report


class GridError(StudyError):
    """A grid that could not run where asked (Ray absent, a cluster that does not answer), or runs of it that
    failed (each named with its error)."""


@dataclass(frozen=True)
class Run:
    """One run of a grid: ``function(*args)``, a module-level function (sent to another process by name).
    ``name``: how a failure names it; ``gpus``: the GPUs it takes on a Ray cluster (1 for a ``cuda`` run)."""

    name: str
    function: Callable[..., Any]
    args: tuple = ()
    gpus: int = 0


@dataclass
class Outcome:
    """What each run returned (None where it failed), in the order of the runs, and the failed runs' errors."""

    owner: str
    names: list[str]
    results: list[Any]
    failures: dict[str, str] = field(default_factory=dict)  # run name -> "ErrorType: message", as they failed
    bugs: set[str] = field(default_factory=set)  # the failed runs whose error was an InternalError

    @property
    def finished(self) -> list[Any]:
        """The results of the runs that did not fail, in the order of the runs."""
        return [result for name, result in zip(self.names, self.results) if name not in self.failures]

    def check(self) -> None:
        """Raise a ``GridError`` naming every failed run and its error (nothing when all finished); an
        ``InternalError`` instead where a run met a bug in lsrl."""
        if self.failures:
            listed = "; ".join(f"{name}: {self.failures[name]}" for name in self.names if name in self.failures)
            message = f"{self.owner}: {len(self.failures)} of {len(self.names)} runs failed: {listed}"
            raise InternalError(message) if self.bugs else GridError(message)


def run_grid(owner: str, runs: Sequence[Run], workers: int = 2, ray_address: str | None = None,
             progress: bool = True, done: Callable[[Any], None] | None = None) -> Outcome:
    """Run every run (see the module's text) and gather what they return; a bar named ``owner`` shows progress.
    ``done``: called in this process with each result as soon as its run finishes (in the order they finish)."""
    from tqdm.auto import tqdm

    workers = check_workers(owner, workers)
    ray_address = check_ray_address(owner, ray_address)
    outcome = Outcome(owner, [run.name for run in runs], [None] * len(runs))
    ray = None if ray_address is None else connected_ray(ray_address)  # before the bar: a refusal is one line
    with tqdm(total=len(runs), desc=owner, disable=not progress) as bar:
        def finish(index: int, result: Any = None, error: BaseException | str | None = None) -> None:
            if error is None:
                outcome.results[index] = result
                if done is not None:
                    done(result)
            else:
                outcome.failures[runs[index].name] = _error_text(error)
                if isinstance(error, InternalError):
                    outcome.bugs.add(runs[index].name)
            bar.update()

        if ray is not None:
            _run_on_ray(ray, runs, finish)
        elif workers == 1 or len(runs) <= 1:
            for index, run in enumerate(runs):
                try:
                    result = call_on_one_thread(run.function, run.args)
                except Exception as error:  # reported with the others' results, not instead of them
                    finish(index, error=error)
                else:
                    finish(index, result)
        else:
            _run_in_processes(runs, min(workers, len(runs)), finish)
    return outcome


def call_on_one_thread(function: Callable[..., Any], args: tuple) -> Any:
    """``function(*args)`` with torch (where loaded) on one thread, restored afterwards: a run's numbers are
    then the same in this process, in a worker process and in a Ray task."""
    torch = sys.modules.get("torch")
    if torch is None:
        return function(*args)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return function(*args)
    finally:
        torch.set_num_threads(threads)


def _run_in_processes(runs: Sequence[Run], workers: int, finish: Callable[..., None]) -> None:
    with ProcessPoolExecutor(workers) as pool:
        futures: dict[Future, int] = {pool.submit(call_on_one_thread, run.function, run.args): index
                                      for index, run in enumerate(runs)}
        for future in as_completed(futures):
            error = future.exception()
            finish(futures[future], None if error is not None else future.result(), error)


# ---- Ray -----------------------------------------------------------------------------------------------------------


def import_ray() -> Any:
    """The ``ray`` module, or a ``GridError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise GridError(f"--ray-address needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


def connected_ray(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (``_connect``)."""
    ray = import_ray()
    _connect(ray, address)
    return ray


def _run_on_ray(ray: Any, runs: Sequence[Run], finish: Callable[..., None]) -> None:
    remote = ray.remote(call_on_one_thread)
    pending = {remote.options(num_cpus=1, num_gpus=run.gpus, max_retries=0, name=run.name)
               .remote(run.function, run.args): index for index, run in enumerate(runs)}
    try:
        while pending:  # each round takes at least one finished run out of pending: at most len(runs) rounds
            ready, _ = ray.wait(list(pending), num_returns=1)
            for reference in ready:
                index = pending.pop(reference)
                try:
                    result = ray.get(reference)
                except ray.exceptions.RayTaskError as error:  # the run raised: its own error, not Ray's wrapper
                    finish(index, error=error.cause if isinstance(error.cause, BaseException) else error)
                except ray.exceptions.RayError as error:  # its worker died, the node was lost, ...
                    finish(index, error=error)
                else:
                    finish(index, result)
    except BaseException:  # interrupted (Ctrl-C): the cluster stops the runs this grid still has there
        for reference in pending:
            ray.cancel(reference, force=True)
        raise


def _connect(ray: Any, address: str) -> None:
    """Connect to the cluster at ``address``, unless this process already is: the connection stays open for the
    process's next grids (Ray closes it at exit), and is replaced when a grid names another address."""
    global _connected_address
    if ray.is_initialized() and _connected_address in (None, address):  # None: connected by the caller
        return
    if ray.is_initialized():
        ray.shutdown()
    head = _head_of_this_machine() if address == "auto" else address
    if head is not None:
        _check_reachable(head, address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise GridError(f"--ray-address {address}: no Ray cluster to connect to ({_error_text(error)})") from None
    _connected_address = address


_connected_address: str | None = None  # the address this process connected to Ray at (None: not by _connect)


def _head_of_this_machine() -> str | None:
    """The head's address that ``auto`` stands for (``RAY_ADDRESS``, else the cluster this machine last started
    or joined), where Ray says; None where it finds none (``ray.init`` then says so at once)."""
    try:
        from ray._private.services import get_ray_address_from_environment  # no public name for this look-up

        head = get_ray_address_from_environment("auto", None)
    except Exception:  # a Ray without this function, or no cluster: ray.init answers for it
        return None
    return None if head in (None, "auto") else head


def _check_reachable(head: str, address: str) -> None:
    """A ``GridError`` naming ``address`` unless the ``head`` it stands for answers a TCP connection within
    ``CONNECT_SECONDS``, name lookup included (``ray.init`` itself retries for minutes)."""
    host, _, port = head.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise GridError(f"--ray-address {address}: expected 'auto' or HOST:PORT of a Ray cluster's head")
    answer: list[BaseException | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
            answer.append(None)
        except (OSError, ValueError, OverflowError) as error:
            answer.append(error)

    attempt = threading.Thread(target=connect, daemon=True)  # a name lookup has no timeout of its own
    attempt.start()
    attempt.join(CONNECT_SECONDS)
    if not answer or isinstance(answer[0], (socket.timeout, TimeoutError)):
        raise GridError(f"--ray-address {address}: no Ray cluster answers at {head} (no answer within "
                        f"{CONNECT_SECONDS:g} s)")
    if answer[0] is not None:
        raise GridError(f"--ray-address {address}: no Ray cluster answers at {head} ({_error_text(answer[0])})")


def _error_text(error: BaseException | str) -> str:
    """An error as ``Type: message`` on one line, at most ``FAILURE_TEXT`` characters."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= FAILURE_TEXT else text[: FAILURE_TEXT - 1] + "…"


def check_ray_address(owner: str, ray_address: Any) -> str | None:
    """``ray_address`` as a non-empty string or None, else a ``GridError`` naming ``owner``."""
    if ray_address is None or (isinstance(ray_address, str) and ray_address.strip()):
        return ray_address
    raise GridError(f"{owner}: ray_address must be 'auto' or HOST:PORT of a Ray cluster's head, got {ray_address!r}")


def grid_options(workers: int = 2) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The command-line options of every grid command: ``--workers`` (default ``workers``) and ``--ray-address``."""
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--ray-address", default=None, metavar="ADDRESS",
                               help="run the runs as tasks of the Ray cluster at ADDRESS (auto: the cluster this "
                                    "machine belongs to; else HOST:PORT of its head); needs lsrl[ray]")(command)
        return click.option("--workers", default=workers, show_default=True, type=click.IntRange(1, MAX_WORKERS),
                            help="runs in parallel on this machine, one process and CPU thread each (at most 4 per "
                                 "usable CPU, 64)")(command)
    return decorate
