"""The random-string check at full size, efficiently: random strings through compiled networks against their machines.

``check(machines, architectures, strings=10_000, max_length=1000)`` draws, per machine, ``strings`` random
strings of random lengths 1..``max_length`` (uniform) and counts the (string, prefix) pairs on which the
network's output differs from the machine's (every prefix of every string is compared, so the answer on
the whole string too), plus a DFA's empty word (``initial_output``).

Efficiency: a string is drawn as a row of ``max_length`` symbols and a length, the string being the row's
prefix of that length. A network's output at step t depends on the first t symbols only, so running a
padded row and ignoring the steps past its length is exact. The strings are sorted by length and cut
into batches, and a batch runs only up to its longest string (about half the steps of padding everything
to ``max_length``); the whole batch goes through the torch module at once (in chunks of time that carry
the state, for very long strings). The reference is the machine's table, looked up for the whole batch
at each step (``machine.reference``, numpy).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from lsrl.automata.arguments import whole_number
from lsrl.errors import checked_call, listed, shown
from lsrl.automata.compile import ARCHITECTURES, to_torch
from lsrl.automata.machines import DFA, Mealy
from lsrl.errors import AutomatonError, LsrlError

MAX_CHECK_SYMBOLS = 10 ** 7  # strings x max_length per machine (the default 10,000 x 1000): ~10 s per architecture
MAX_CHECK_BATCHES = 1000  # strings / batch per machine: about 1 ms each (the default 10,000 / 1000 is 10)

if TYPE_CHECKING:
    from lsrl.automata.networks import AutomatonNetwork


@dataclass
class CheckResult:
    """One architecture's totals over the machines: ``checked`` outputs (string prefixes and empty words),
    ``errors`` among them, and the CPU seconds of building and running the networks."""

    architecture: str
    machines: int
    strings: int
    checked: int
    errors: int
    cpu_seconds: float


def random_strings(rng: np.random.Generator, n_symbols: int, count: int, max_length: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random strings as ``(indices (count, max_length), lengths (count,))``: string i is
    ``indices[i, :lengths[i]]``, its length uniform in 1..max_length, its symbols uniform."""
    n_symbols = whole_number(n_symbols, "n_symbols", "random_strings", minimum=1, error=LsrlError)
    count = whole_number(count, "count", "random_strings", minimum=0, error=LsrlError)
    max_length = whole_number(max_length, "max_length", "random_strings", minimum=1, error=LsrlError)
    return rng.integers(0, n_symbols, size=(count, max_length)), rng.integers(1, max_length + 1, size=count)


def network_outputs(network: AutomatonNetwork, indices: np.ndarray, chunk: int = 100_000) -> np.ndarray:
    """``network``'s outputs ``(B, T, C)`` on symbol indices ``(B, T)``, run ``chunk`` steps at a time
    (the state carried from chunk to chunk), so that strings of 10^6 symbols fit in memory."""
    chunk = whole_number(chunk, "chunk", "network_outputs", minimum=1, error=LsrlError)
    k, state, pieces = network._input_size(), None, []
    indices = _symbol_indices(indices, k, "network_outputs")
    if not indices.shape[1]:  # no steps: no outputs
        return np.zeros((*indices.shape, network.readout.out_features), dtype=np.float32)
    for t0 in range(0, indices.shape[1], chunk):
        x = torch.nn.functional.one_hot(torch.as_tensor(indices[:, t0:t0 + chunk]), k).to(network.h0.dtype)
        with torch.no_grad():
            hidden, state = network.hidden(x, state)
            pieces.append(network.read(hidden).numpy())
    return np.concatenate(pieces, axis=1)


def count_errors(network: AutomatonNetwork, machine: DFA | Mealy, indices: np.ndarray,
                 lengths: np.ndarray | None = None, *, batch: int = 1000, chunk: int = 100_000) -> tuple[int, int]:
    """``(errors, checked)``: the prefixes of the strings ``indices[i, :lengths[i]]`` (default: whole rows)
    on which ``network``'s output differs from ``machine.reference``; batches of similar lengths."""
    batch = whole_number(batch, "batch", "count_errors", minimum=1, error=LsrlError)
    chunk = whole_number(chunk, "chunk", "count_errors", minimum=1, error=LsrlError)
    indices = _symbol_indices(indices, len(machine.alphabet), "count_errors")
    if lengths is None:
        lengths = np.full(len(indices), indices.shape[1])
    lengths = np.asarray(lengths)
    if (lengths.shape != indices.shape[:1] or not np.issubdtype(lengths.dtype, np.integer)
            or (lengths.size and (lengths.min() < 0 or lengths.max() > indices.shape[1]))):
        raise LsrlError(f"count_errors: lengths must be {indices.shape[0]} integers in 0..{indices.shape[1]} (one "
                        f"per string), got shape {lengths.shape} of {lengths.dtype}")
    errors = checked = 0
    order = np.argsort(lengths, kind="stable")
    for first in range(0, len(order), batch):
        rows = order[first:first + batch]
        longest = int(lengths[rows].max())
        if not longest:  # empty strings only: nothing to compare
            continue
        piece = indices[rows, :longest]
        wrong = (network_outputs(network, piece, chunk) != machine.reference(piece)).any(axis=-1)
        valid = np.arange(longest)[None] < lengths[rows][:, None]
        errors += int((wrong & valid).sum())
        checked += int(valid.sum())
    return errors, checked


def _symbol_indices(indices: np.ndarray, n_symbols: int, where: str) -> np.ndarray:
    """``indices`` as a ``(B, T)`` int64 array of symbol indices in ``0..n_symbols-1``, or an ``AutomatonError``."""
    array = np.asarray(indices)
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.integer) or array.dtype == bool):
        raise AutomatonError(f"{where}: symbol indices must be a (batch, time) array of integers, got shape "
                             f"{array.shape} of {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= n_symbols):
        raise AutomatonError(f"{where}: symbol indices must lie in 0..{n_symbols - 1}, got "
                             f"{array.min()}..{array.max()}")
    return array.astype(np.int64, copy=False)


def _empty_word(network: AutomatonNetwork, machine: DFA | Mealy) -> tuple[int, int]:
    """``(errors, checked)`` for the empty word: a DFA's network must give its acceptance before any
    symbol; a Mealy machine has no output before its first symbol, so nothing is checked."""
    if not isinstance(machine, DFA):
        return 0, 0
    return int(bool(network.initial_output()[0]) != bool(machine.accepting[machine.start])), 1


@checked_call
def check(machines: Iterable[DFA | Mealy], architectures: Iterable[str] = ARCHITECTURES, *, strings: int = 10_000,
          max_length: int = 1000, batch: int = 1000, seed: int = 0, first: int = 0,
          progress: Callable[[int, list[CheckResult]], object] | None = None) -> list[CheckResult]:
    """Per architecture, the errors of the compiled networks of ``machines`` (DFAs or Mealy machines) on
    ``strings`` random strings per machine of lengths 1..``max_length`` (module docstring), float32.

    Machine i's strings come from ``numpy.random.default_rng([seed, i])``, the same for every architecture;
    machines are numbered from ``first``, so a list checked in slices sees the strings it would whole.
    ``progress(i, results)``, if given, is called after each machine with the running totals.
    """
    strings = whole_number(strings, "strings", "check", minimum=0, error=LsrlError)
    max_length = whole_number(max_length, "max_length", "check", minimum=1, error=LsrlError)
    batch = whole_number(batch, "batch", "check", minimum=1, error=LsrlError)
    seed = whole_number(seed, "seed", "check", minimum=0, error=LsrlError)
    first = whole_number(first, "first", "check", minimum=0, error=LsrlError)
    if strings * max_length > MAX_CHECK_SYMBOLS:  # the strings are drawn whole, as int64 rows of max_length
        raise AutomatonError(f"check: strings x max_length must be at most {MAX_CHECK_SYMBOLS:,} symbols per machine, "
                             f"got {strings:,} x {max_length:,}; check fewer or shorter strings")
    if -(-strings // batch) > MAX_CHECK_BATCHES:  # each batch costs a torch call and a reference look-up
        raise AutomatonError(f"check: strings / batch must be at most {MAX_CHECK_BATCHES:,} batches per machine, got "
                             f"{strings:,} / {batch:,}; choose a larger batch")
    names = [architectures] if isinstance(architectures, str) else listed(architectures)
    if names is None:
        raise LsrlError(f"check: architectures must be names among {ARCHITECTURES}, got {shown(architectures)}")
    architectures = names
    for arch in architectures:
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise LsrlError(f"check: architectures must be among {ARCHITECTURES}, got {arch!r}")
    results = {arch: CheckResult(arch, 0, 0, 0, 0, 0.0) for arch in architectures}
    for i, machine in enumerate(machines, start=first):
        if not isinstance(machine, (DFA, Mealy)):
            raise LsrlError(f"check: machine {i} must be a lsrl.automata.DFA or Mealy, got {type(machine).__name__}")
        indices, lengths = random_strings(np.random.default_rng([seed, i]), len(machine.alphabet), strings,
                                          max_length)
        for arch, result in results.items():
            start = time.process_time()
            network = to_torch(machine, arch)
            for errors, checked in (count_errors(network, machine, indices, lengths, batch=batch),
                                    _empty_word(network, machine)):
                result.errors += errors
                result.checked += checked
            result.cpu_seconds += time.process_time() - start
            result.machines += 1
            result.strings += strings
        if progress is not None:
            progress(i, list(results.values()))
    return list(results.values())
