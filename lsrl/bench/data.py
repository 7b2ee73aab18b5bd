"""A task's ``data.npz``: the splits, every program node's trace per step, and fixed clean / corrupted pairs
with the expected output under each single-variable interchange. Written byte for byte the same on every
build (``npz_bytes``: fixed zip entry times and order).

Arrays (``N`` sequences padded to the split's longest, ``T`` steps; NaN past a sequence's end):

- ``train_inputs (N, T, d_in)``, ``train_outputs (N, T, d_out)``, ``train_lengths (N,)``: ``SEQUENCES_PER_LENGTH``
  sequences of every training length; ``test_*`` the same for ``TEST_SEQUENCES`` (at least 1,000) sequences of
  the test lengths, all longer than the training ones.
- ``trace.NODE (N, T, dim)``: the value of every program node (its stable name) at every step of every test
  sequence; an automaton task has ``trace.state (N, T, 1)``, the index of the state after each step.
- ``pairs_clean_inputs``, ``pairs_corrupted_inputs (P, T, d_in)``, their ``_lengths (P,)`` and ``_outputs``:
  ``PAIRS`` fixed pairs of sequences of the lengths methods are scored on (``pair_lengths``: the test lengths), the
  first half of equal lengths, the second of different ones; a trained folder's all of equal lengths, of the
  training lengths: the interchanges its alignment is trained and measured on (a held value is not one of them).
- ``interchange.NODE (P, T, d_out)``: the output of the clean sequence when ``NODE`` takes, at every step ``t``,
  its value in the corrupted run at step ``min(t, corrupted length - 1)`` (a shorter corrupted run's last value
  is held): the program's ``prog(clean, patch={NODE: values})``, for every node but the input (for the named
  nodes only in a program of more than ``MAX_INTERCHANGES`` nodes: the lookup tables); for an automaton,
  ``interchange.state`` (the state variable swapped likewise).

Expected outputs and traces come from the program's interpreter in float64, checked equal to the exact
interpreter (``exact=True``) on ``EXACT_CHECKS`` sequences of each split and of the interchanges of about
``EXACT_NODES`` nodes (the tasks' values are small integers
and dyadic numbers, which float64 holds exactly), or from the automaton's transition table; never from a
compiled model.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from typing import TYPE_CHECKING

import numpy as np

from lsrl.errors import InternalError

if TYPE_CHECKING:
    from lsrl.automata.machines import DFA
    from lsrl.bench.tasks import Task
    from lsrl.lang.program import ForEach, Patch

SEQUENCES_PER_LENGTH = 4  # training sequences per length
TEST_SEQUENCES = 1000  # at least, spread evenly over the test lengths
PAIRS = 64
EXACT_CHECKS = 4
EXACT_NODES = 4  # interchanges checked against the exact interpreter, per task
MAX_INTERCHANGES = 64  # a program with more nodes has interchanges of its named nodes only
Sequences = list[np.ndarray]  # sequences of their own lengths, each (length, ...)

def pair_lengths(task: Task, tier: str) -> tuple[int, int]:
    """The shortest and longest length of the fixed clean / corrupted pairs of ``task``'s folders of ``tier``: the
    lengths methods are scored on. The test lengths, but on the trained tier the training lengths: a trained model's
    alignment is trained and measured (``lsrl.bench.training.loop.measure``) on those, and claimed on no other."""
    return task.train_lengths if tier == "trained" else task.test_lengths


def _sequences(task: Task, test_sequences: int = TEST_SEQUENCES, tier: str = "compiled"
               ) -> tuple[list[np.ndarray], ...]:
    """The train, test, clean and corrupted sequences of ``task``, drawn from a generator seeded by its name
    (``test_sequences`` below ``TEST_SEQUENCES``: every k-th test sequence kept, the rest the same); the clean and
    corrupted ones as the folders of ``tier`` hold them (module docstring)."""
    rng = np.random.default_rng(zlib.crc32(task.name.encode()))
    shortest, longest = task.test_lengths
    per_length = -(-TEST_SEQUENCES // (longest - shortest + 1))
    train = [task.sample(rng, size) for size in range(task.train_lengths[0], task.train_lengths[1] + 1)
             for _ in range(SEQUENCES_PER_LENGTH)]
    test = [task.sample(rng, size) for size in range(shortest, longest + 1) for _ in range(per_length)]
    shortest, longest = pair_lengths(task, tier)
    equal = tier == "trained"  # every pair of equal lengths
    sizes = rng.integers(shortest, longest + 1, size=PAIRS)  # the task's length parameter, not always its steps
    others = [int(rng.choice([n for n in range(shortest, longest + 1) if n != size] or [size])) for size in sizes]
    clean = [task.sample(rng, int(size)) for size in sizes]
    corrupted = [task.sample(rng, int(size) if k < PAIRS // 2 or equal else other)
                 for k, (size, other) in enumerate(zip(sizes, others))]
    return train, test[:: max(1, len(test) // test_sequences)], clean, corrupted


def _runs(task: Task) -> _ProgramRuns | _AutomatonRuns:
    if task.build is not None:
        return _ProgramRuns(task.build())
    if task.automaton is None:
        raise InternalError(f"bench data: task {task.name!r} has neither a program nor an automaton")
    return _AutomatonRuns(task.automaton())


def pair_inputs(task: Task, tier: str = "compiled") -> dict[str, np.ndarray]:
    """``data.npz``'s ``pairs_clean_inputs``, ``pairs_clean_lengths``, ``pairs_corrupted_inputs`` and
    ``pairs_corrupted_lengths`` of ``task``'s folders of ``tier`` (the same arrays), without running the program."""
    *_, clean, corrupted = _sequences(task, tier=tier)
    run = _runs(task)
    return {f"pairs_{kind}_{part}": values for kind, sequences in (("clean", clean), ("corrupted", corrupted))
            for part, values in (("inputs", run.inputs(sequences)), ("lengths", np.array([len(x) for x in sequences])))}


def task_data(task: Task, test_sequences: int = TEST_SEQUENCES, tier: str = "compiled") -> dict[str, np.ndarray]:
    """Every array of the module docstring for ``task``'s folders of ``tier`` (seeded by the task's name: the same
    on every build); ``test_sequences`` fewer than ``TEST_SEQUENCES`` makes a smaller test split (quick checks, not
    the suite)."""
    train, test, clean, corrupted = _sequences(task, test_sequences, tier)
    run = _runs(task)
    data = {}
    for split, sequences in (("train", train), ("test", test)):
        data.update(_split(split, run, sequences))
    data.update({f"trace.{name}": values for name, values in run.trace(test).items()})
    data.update(_split("pairs_clean", run, clean))
    data.update(_split("pairs_corrupted", run, corrupted))
    data.update({f"interchange.{name}": values for name, values in run.interchanges(clean, corrupted).items()})
    return data


def pair_data(task: Task, tier: str, nodes: list[str]) -> dict[str, np.ndarray]:
    """Of ``task_data(task, tier=tier)``, the pairs (``pairs_*``) and the interchanges of ``nodes`` only
    (``interchange.NODE``), the same arrays, without the splits and traces."""
    *_, clean, corrupted = _sequences(task, tier=tier)
    run = _runs(task)
    if not isinstance(run, _ProgramRuns):
        raise InternalError(f"bench data: pair_data needs a program task, {task.name!r} is an automaton")
    interchanges = run.interchanges(clean, corrupted, nodes)
    return {**_split("pairs_clean", run, clean), **_split("pairs_corrupted", run, corrupted),
            **{f"interchange.{name}": values for name, values in interchanges.items()}}


def _split(prefix: str, run: _ProgramRuns | _AutomatonRuns, sequences: list[np.ndarray]) -> dict[str, np.ndarray]:
    inputs = run.inputs(sequences)
    return {f"{prefix}_inputs": inputs, f"{prefix}_outputs": run.outputs(sequences),
            f"{prefix}_lengths": np.array([len(x) for x in sequences])}


def padded(arrays: list[np.ndarray], fill: float) -> np.ndarray:
    """``(N, T, d)`` float64 from ``N`` arrays ``(length, d)``, ``fill`` past each one's length."""
    steps = max(len(a) for a in arrays)
    out = np.full((len(arrays), steps, arrays[0].shape[-1]), fill, dtype=np.float64)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
    return out


def _masked(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``values (N, T, d)`` with NaN past each sequence's length."""
    values = np.array(values, dtype=np.float64)
    values[np.arange(values.shape[1])[None] >= lengths[:, None]] = np.nan
    return values


def held(values: np.ndarray, lengths: np.ndarray, steps: int) -> np.ndarray:
    """``values (N, T, d)`` over ``steps`` steps, each sequence's value at its last step held after its length."""
    index = np.minimum(np.arange(steps)[None], lengths[:, None] - 1)
    return np.take_along_axis(values, index[..., None], axis=1)


class _ProgramRuns:
    """The program's interpreter (float64, checked against the exact one) on padded token sequences: the program
    is causal, so the padding changes no value before a sequence's end."""

    def __init__(self, program: ForEach) -> None:
        self.program = program
        self.names = [program.names[node] for node in program.nodes if node is not program.input]

    def inputs(self, sequences: Sequences) -> np.ndarray:
        return padded([np.asarray(x, dtype=np.float64) for x in sequences], 0.0)

    def _run(self, sequences: Sequences, patch: Patch | None = None, check: bool = True
             ) -> np.ndarray:
        """The outputs, checked against the exact interpreter on the first ``EXACT_CHECKS`` sequences."""
        xs = self.inputs(sequences)
        ys = self.program(xs, check_bounds=False, patch=patch)
        if not check:
            return _masked(ys, np.array([len(x) for x in sequences]))
        checked: Patch = {name: np.asarray(values)[:EXACT_CHECKS] for name, values in (patch or {}).items()}
        exact = np.vectorize(float, otypes=[np.float64])(
            self.program(xs[:EXACT_CHECKS], exact=True, check_bounds=False, patch=checked))
        if not np.array_equal(exact, ys[:EXACT_CHECKS]):
            raise InternalError(f"bench data of {self.program.name}: the float64 interpreter differs from the exact "
                                "one; this task needs exact data")
        return _masked(ys, np.array([len(x) for x in sequences]))

    def outputs(self, sequences: Sequences) -> np.ndarray:
        return self._run(sequences)

    def trace(self, sequences: Sequences) -> dict[str, np.ndarray]:
        lengths = np.array([len(x) for x in sequences])
        trace = self.program.trace(self.inputs(sequences), check_bounds=False)
        return {name: _masked(trace[name], lengths) for name in self.names}

    def interchanges(self, clean: Sequences, corrupted: Sequences, nodes: list[str] | None = None
                     ) -> dict[str, np.ndarray]:
        """The interchange of every node (of the named ones in a large program), or of ``nodes`` only."""
        steps, lengths = max(len(x) for x in clean), np.array([len(y) for y in corrupted])
        donors = self.program.trace(padded([np.asarray(y, dtype=np.float64) for y in corrupted], 0.0),
                                    check_bounds=False)
        names = nodes or (self.names if len(self.names) <= MAX_INTERCHANGES else [
            self.program.names[node] for node in self.program.nodes if node.named and node is not self.program.input])
        checked = set(names[:: max(1, len(names) // EXACT_NODES)])
        return {name: self._run(clean, {name: held(donors[name], lengths, steps)}, check=name in checked)
                for name in names}


class _AutomatonRuns:
    """The automaton's transition table on symbol sequences (inputs one-hot)."""

    def __init__(self, machine: DFA) -> None:
        self.machine = machine

    def inputs(self, sequences: Sequences) -> np.ndarray:
        return padded([np.eye(len(self.machine.alphabet))[x] for x in sequences], 0.0)

    def outputs(self, sequences: Sequences) -> np.ndarray:
        return padded([self.machine.reference(np.asarray(x)[None])[0].astype(np.float64) for x in sequences], np.nan)

    def _states(self, x: np.ndarray) -> np.ndarray:
        return self.machine.states_after(np.asarray(x)[None])[0]

    def trace(self, sequences: Sequences) -> dict[str, np.ndarray]:
        return {"state": padded([self._states(x)[:, None].astype(np.float64) for x in sequences], np.nan)}

    def interchanges(self, clean: Sequences, corrupted: Sequences) -> dict[str, np.ndarray]:
        accepting = self.machine.accepting.astype(np.float64)
        states = held(padded([self._states(y)[:, None] for y in corrupted], 0), np.array([len(y) for y in corrupted]),
                       max(len(x) for x in clean))
        return {"state": _masked(accepting[states[..., 0].astype(int)][..., None], np.array([len(x) for x in clean]))}


# ---- writing it, byte for byte the same ---------------------------------------------------------------------

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest time: no build time in the file


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """What ``np.savez_compressed`` writes, with fixed entry times and the entries in sorted order: the same bytes
    for the same arrays (``np.load`` reads it as any ``.npz``)."""
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            entry = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            entry.compress_type, entry.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(entry, buffer.getvalue())
    return zipped.getvalue()
