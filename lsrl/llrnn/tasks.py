"""The sequence-to-sequence tasks of the LLRNN paper (Sec. 4): copy, repeat copy, pattern, multiple
pattern (Sec. 4.2's swap task) and variable pattern; the NTM paper's associative recall and priority
sort; and the authors' TensorFlow tasks (``tf_*``, section "Tape tasks" below).

A sample is a *prompt* ``∘ … •`` followed by one blank ``_`` per output symbol: the model keeps
reading blanks while it emits, and the output at step t is read off the state after input t. So
the first output symbol is due at the first blank, one step after ``•``, and the mask is true
exactly on the blanks. Targets index the same alphabet as the inputs (0 where the mask is false).

Reading with a pattern of steps (pattern and variable pattern tasks): the first symbol read is
x₁; after the n-th read (n = 0, 1, …) the read position moves on by ``steps[n mod len(steps)]`` and
wraps modulo the string length k. With steps 1, 0, 0, 2, 0 and abcde that reads a b b b d d e e e b.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsInt

import torch

from lsrl.errors import LsrlError
from lsrl.llrnn.checks import count
from lsrl.llrnn.settings import MAX_BATCH, MAX_LENGTH

START, END, SWAP, SEPARATOR, BLANK = "∘", "•", "S", "|", "_"


class TaskError(LsrlError):
    """A task asked for something it cannot produce (unknown symbol, empty string, bad length)."""


MARKERS = START + END + SWAP + SEPARATOR + BLANK
MAX_PATTERN_DRAWS = 100_000  # TapeVariablePattern: random patterns drawn until one is valid, at most

Sample = tuple[list[int], list[int]]  # (prompt, output) as symbol indices


@dataclass(frozen=True)
class Alphabet:
    """Data symbols a, b, c, … then step digits 0, 1, … (variable pattern only), then the ``markers``
    (by default ∘ • S | _; the TF tasks use only ∘ and •, their initial and terminal symbols)."""

    data: int = 8
    digits: int = 0
    markers: str = MARKERS

    def __post_init__(self) -> None:
        if not 1 <= self.data <= 26 or not 0 <= self.digits <= 10:
            raise TaskError(f"alphabet: need 1..26 data symbols and 0..10 digits, got {self.data}, {self.digits}")

    @property
    def symbols(self) -> str:
        return string.ascii_lowercase[: self.data] + string.digits[: self.digits] + self.markers

    @property
    def size(self) -> int:
        return len(self.symbols)

    def index(self, symbol: str) -> int:
        position = self.symbols.find(symbol)
        if len(symbol) != 1 or position < 0:
            raise TaskError(f"alphabet: unknown symbol {symbol!r} (known: {self.symbols})")
        return position

    def encode(self, text: str) -> list[int]:
        """Symbol indices of ``text``; spaces are ignored (``"∘ abc •"``)."""
        return [self.index(symbol) for symbol in text if symbol != " "]

    def decode(self, indices: Iterable[SupportsInt]) -> str:
        return "".join(self.symbols[int(i)] for i in indices)

    def digit(self, value: int) -> int:
        if not 0 <= value < self.digits:
            raise TaskError(f"alphabet: no digit {value} (digits 0..{self.digits - 1})")
        return self.data + value


@dataclass
class Batch:
    """One-hot ``inputs`` (B, T, vocab), ``targets`` (B, T) indices, ``mask`` (B, T): outputs due."""

    tokens: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Batch:
        return Batch(self.tokens.to(device), self.inputs.to(device, dtype), self.targets.to(device),
                     self.mask.to(device))


def read_with_pattern(symbols: list[int], steps: tuple[int, ...], count: int) -> list[int]:
    """``count`` reads of ``symbols``, moving by the cyclic ``steps`` after each read (module docstring)."""
    position, reads = 0, []
    for n in range(count):
        reads.append(symbols[position])
        position = (position + steps[n % len(steps)]) % len(symbols)
    return reads


class Task:
    """Subclasses define ``sample(length, generator) -> (prompt, output)`` from random data symbols."""

    name = ""
    min_length = 1  # the shortest length a sample can have

    def __init__(self, alphabet: Alphabet | None = None) -> None:
        self.alphabet = alphabet or Alphabet()

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        raise NotImplementedError

    def random_string(self, length: int, generator: torch.Generator | None) -> list[int]:
        return torch.randint(self.alphabet.data, (length,), generator=generator).tolist()

    def wrap(self, *parts: list[int]) -> list[int]:
        """``∘ part₁ S part₂ S … •``."""
        prompt = [self.alphabet.index(START)]
        for number, part in enumerate(parts):
            prompt += ([self.alphabet.index(SWAP)] if number else []) + list(part)
        return prompt + [self.alphabet.index(END)]

    def batch(self, batch_size: int, length: int | tuple[int, int], generator: torch.Generator | None = None) -> Batch:
        """``batch_size`` samples of one length: ``length`` or drawn from the inclusive range ``(lo, hi)``."""
        batch_size = count(self.name, "batch_size", batch_size, high=MAX_BATCH)
        length = self._draw_length(length, generator)
        samples = [self.sample(length, generator) for _ in range(batch_size)]
        batch = self.collate(samples)
        if not batch.mask.any():  # a loss or an error rate over no position would be NaN, not an answer
            raise TaskError(f"{self.name}: length {length} gives samples with no output to score; use a longer "
                            f"length (this task's shortest usual one is {self.min_length})")
        return batch

    def test_set(self, lengths: Iterable[int | tuple[int, int]], batch_size: int = 64, seed: int = 0) -> list[Batch]:
        """One reproducible batch per length in ``lengths``."""
        generator = torch.Generator().manual_seed(seed)
        return [self.batch(batch_size, length, generator) for length in lengths]

    def _draw_length(self, length: int | tuple[int, int], generator: torch.Generator | None) -> int:
        pair = (length, length) if not isinstance(length, (tuple, list)) else length
        if len(pair) != 2:
            raise TaskError(f"{self.name}: length must be an integer or a pair (low, high), got {length!r}"[:200])
        low, high = (count(self.name, "length", value, high=MAX_LENGTH) for value in pair)
        if not 1 <= low <= high:
            raise TaskError(f"{self.name}: lengths must satisfy 1 <= low <= high, got {length}")
        return int(torch.randint(low, high + 1, (), generator=generator))

    def collate(self, samples: Sequence[Sample]) -> Batch:
        """One batch of ``(prompt, output)`` samples of one length (e.g. from ``example``)."""
        blank = self.alphabet.index(BLANK)
        tokens = torch.tensor([prompt + [blank] * len(output) for prompt, output in samples])
        targets = torch.tensor([[0] * len(prompt) + output for prompt, output in samples])
        mask = torch.tensor([[False] * len(prompt) + [True] * len(output) for prompt, output in samples])
        inputs = torch.nn.functional.one_hot(tokens, self.alphabet.size).to(torch.get_default_dtype())
        return Batch(tokens, inputs, targets, mask)


class Copy(Task):
    """``∘ x₁…x_k •`` → ``x₁…x_k``."""

    name = "copy"

    def example(self, symbols: list[int]) -> Sample:
        return self.wrap(symbols), list(symbols)

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        return self.example(self.random_string(length, generator))


class RepeatCopy(Task):
    """``∘ abc •`` → ``aabbcc`` for two repeats: every symbol ``repeats`` times in a row."""

    name = "repeat_copy"

    def __init__(self, alphabet: Alphabet | None = None, repeats: int = 2) -> None:
        super().__init__(alphabet)
        self.repeats = repeats

    def example(self, symbols: list[int]) -> Sample:
        return self.wrap(symbols), [symbol for symbol in symbols for _ in range(self.repeats)]

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        return self.example(self.random_string(length, generator))


class Pattern(Task):
    """``∘ x₁…x_k •`` → ``output_factor · k`` reads with the fixed cyclic ``steps`` (Sec. 4.1).

    With the default steps 1, 0, 0, 2, 0 and one read per symbol the read position never wraps.
    """

    name = "pattern"

    def __init__(self, alphabet: Alphabet | None = None, steps: tuple[int, ...] = (1, 0, 0, 2, 0),
                 output_factor: int = 1) -> None:
        super().__init__(alphabet)
        if not steps or min(steps) < 0:
            raise TaskError(f"pattern: steps must be a non-empty tuple of non-negative integers, got {steps}")
        self.steps, self.output_factor = tuple(steps), output_factor

    def example(self, symbols: list[int]) -> Sample:
        return self.wrap(symbols), read_with_pattern(symbols, self.steps, self.output_factor * len(symbols))

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        return self.example(self.random_string(length, generator))


class MultiplePattern(Task):
    """Sec. 4.2: ``segments`` strings of length k separated by the swap symbol S; segment i is
    emitted with every symbol repeated ``repeats[i mod 2]`` times (identity, then doubling)."""

    name = "multiple_pattern"

    def __init__(self, alphabet: Alphabet | None = None, segments: int = 3, repeats: tuple[int, int] = (1, 2)
                 ) -> None:
        super().__init__(alphabet)
        self.segments, self.repeats = segments, tuple(repeats)

    def example(self, segments: list[list[int]]) -> Sample:
        output = []
        for number, segment in enumerate(segments):
            output += [symbol for symbol in segment for _ in range(self.repeats[number % len(self.repeats)])]
        return self.wrap(*segments), output

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        return self.example([self.random_string(length, generator) for _ in range(self.segments)])


class VariablePattern(Task):
    """``∘ s₁…s_m | x₁…x_k •`` → k reads of x with the steps s (digits 0..max_step, drawn per sample)."""

    name = "variable_pattern"

    def __init__(self, alphabet: Alphabet | None = None, pattern_length: int = 3, max_step: int = 2) -> None:
        super().__init__(alphabet or Alphabet(digits=max_step + 1))
        if self.alphabet.digits <= max_step:
            raise TaskError(f"variable_pattern: the alphabet needs digits 0..{max_step}")
        self.pattern_length, self.max_step = pattern_length, max_step

    def example(self, steps: list[int], symbols: list[int]) -> Sample:
        encoded = [self.alphabet.digit(step) for step in steps]
        prompt = self.wrap(encoded + [self.alphabet.index(SEPARATOR)] + list(symbols))
        return prompt, read_with_pattern(symbols, tuple(steps), len(symbols))

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        steps = torch.randint(self.max_step + 1, (self.pattern_length,), generator=generator).tolist()
        return self.example(steps, self.random_string(length, generator))


class AssociativeRecall(Task):
    """NTM paper, Sec. 4.3, with symbols for bit vectors: ``∘ item₁ S item₂ S … item_k | query •`` →
    the item that followed ``query`` (one of items 1..k-1). Items are ``item_length`` data symbols,
    all different within a sample; ``length`` is the number of items (at least 2)."""

    name = "associative_recall"
    min_length = 2

    def __init__(self, alphabet: Alphabet | None = None, item_length: int = 3) -> None:
        super().__init__(alphabet)
        self.item_length = item_length

    def example(self, items: list[list[int]], query: int) -> Sample:
        if not 0 <= query < len(items) - 1:
            raise TaskError(f"associative_recall: the query must be one of items 1..{len(items) - 1}, got {query + 1}")
        separator = [self.alphabet.index(SEPARATOR)]
        prompt = self.wrap(*items)
        return prompt[:-1] + separator + list(items[query]) + prompt[-1:], list(items[query + 1])

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        if length < 2 or length > self.alphabet.data**self.item_length:
            raise TaskError(f"associative_recall: length (the number of items) must be 2 .. "
                            f"{self.alphabet.data ** self.item_length}, got {length}")
        items: list[list[int]] = []
        # distinct items by rejection: length <= the number of items (checked above), so it ends; the expected
        # draws are at most N (H_N) for N = data ** item_length possible items (coupon collector)
        while len(items) < length:
            item = self.random_string(self.item_length, generator)
            if item not in items:
                items.append(item)
        return self.example(items, int(torch.randint(length - 1, (), generator=generator)))


class PrioritySort(Task):
    """NTM paper, Sec. 4.5, with symbols: ``∘ x₁ p₁ x₂ p₂ … •`` (priorities are digits) → the
    ``round(kept · k)`` symbols of highest priority, highest first (ties in input order)."""

    name = "priority_sort"

    def __init__(self, alphabet: Alphabet | None = None, kept: float = 0.8) -> None:
        super().__init__(alphabet or Alphabet(digits=10))
        if not self.alphabet.digits or not 0 < kept <= 1:
            raise TaskError("priority_sort: needs priority digits and 0 < kept <= 1")
        self.kept = kept

    def example(self, symbols: list[int], priorities: list[int]) -> Sample:
        prompt = self.wrap([code for pair in zip(symbols, map(self.alphabet.digit, priorities)) for code in pair])
        order = sorted(range(len(symbols)), key=lambda i: -priorities[i])  # stable: ties keep input order
        return prompt, [symbols[i] for i in order[: max(1, round(self.kept * len(symbols)))]]

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        priorities = torch.randint(self.alphabet.digits, (length,), generator=generator).tolist()
        return self.example(self.random_string(length, generator), priorities)


# ---- Tape tasks: the authors' TensorFlow tasks (/work/shared/llrnn-tf-tasks.md) ---------------------------
#
# Alphabet: content symbols 0..7 (a..h), initial ∘ (8) and terminal • (9): the TF code's 10 classes.
# A sample of content length L sits on a tape of fixed length: input ∘ x₁..x_L then • to the end;
# target • up to position L, then f(x) from position L+1, then •. The tape of a batch is as long as
# the longest content the task is trained on (``tape_content``) allows: (n + 2) + out(n), n = max(L,
# tape_content); f(x) is cut to fit. The mask is the union over the batch of the output windows, so
# a sequence whose output ended must emit • at the remaining masked steps (TF's masked loss).
# Lengths here are content lengths L; TF's ℓ is L + 2.

TF_DIVIDER = 7  # the multiple pattern tasks' divider: an ordinary content symbol elsewhere


def repetition_pattern(symbols: list[int], steps: Iterable[int], limit: int, wrap: bool = False) -> list[int]:
    """TF's ``f_repetitionpattern``: read ``symbols[j]``, move ``j`` by the next step, until ``j`` runs
    off the end (a negative ``j`` reads from the end, as Python indexing does) or ``limit`` reads.
    ``wrap=True``: the paper's semantics instead, exactly ``limit`` reads with ``j`` modulo the length."""
    moves, k, j = tuple(steps), len(symbols), 0
    reads: list[int] = []
    if k == 0:
        return reads
    while len(reads) < limit and (wrap or j < k):  # one read per round: at most limit rounds
        reads.append(symbols[j % k])  # j % k: TF's negative indexing; beyond -k (TF crashes) it wraps
        j += moves[(len(reads) - 1) % len(moves)]
    return reads


class TapeTask(Task):
    """A TF task: ``function(content)`` on a fixed-length tape (module notes above).

    ``tape_content``: the content length the tape is sized for (TF's N - 2; 28 by default); longer
    test contents get their own longer tape. ``min_length``: the shortest content TF trains on.
    """

    min_length = 5

    def __init__(self, tape_content: int = 28) -> None:
        super().__init__(Alphabet(data=8, markers=START + END))
        self.tape_content = tape_content

    def output_length(self, length: int) -> int:
        """TF's N_out for content length ``length``."""
        raise NotImplementedError

    def content(self, length: int, generator: torch.Generator | None) -> Sample:
        """``(tape content, f(content))`` of content length ``length``."""
        raise NotImplementedError

    def tape_length(self, length: int) -> int:
        n = max(length, self.tape_content)
        return n + 2 + self.output_length(n)

    def sample(self, length: int, generator: torch.Generator | None) -> Sample:
        content, output = self.content(length, generator)
        prompt = [self.alphabet.index(START)] + content + [self.alphabet.index(END)]
        return prompt, output[: self.tape_length(length) - len(prompt)]

    def collate(self, samples: Sequence[Sample]) -> Batch:
        terminal = self.alphabet.index(END)
        if len({len(prompt) for prompt, _ in samples}) != 1:
            raise TaskError(f"{self.name}: the sequences of a batch share one content length (TF)")
        tape = self.tape_length(len(samples[0][0]) - 2)
        tokens = torch.full((len(samples), tape), terminal)
        targets = torch.full((len(samples), tape), terminal)
        window = torch.zeros(tape, dtype=torch.bool)
        for row, (prompt, output) in enumerate(samples):
            tokens[row, : len(prompt)] = torch.tensor(prompt)
            targets[row, len(prompt) - 1 : len(prompt) - 1 + len(output)] = torch.tensor(output, dtype=torch.long)
            window[len(prompt) - 1 : len(prompt) - 1 + len(output)] = True
        inputs = torch.nn.functional.one_hot(tokens, self.alphabet.size).to(torch.get_default_dtype())
        return Batch(tokens, inputs, targets, window.expand(len(samples), tape).clone())


class TapePattern(TapeTask):
    """TF's copy, repeat copy and pattern 1–5: ``repetition_pattern(content, steps)``; ``wrap=True``
    gives the paper's wrap-around reading (``output_length`` reads) instead of TF's truncation."""

    def __init__(self, steps: Iterable[int] = (1,), out: Callable[[int], int] = lambda n: n,
                 tape_content: int = 28, wrap: bool = False) -> None:
        super().__init__(tape_content)
        self.steps, self.out, self.wrap_around = tuple(steps), out, wrap

    def output_length(self, length: int) -> int:
        return self.out(length)

    def content(self, length: int, generator: torch.Generator | None) -> Sample:
        symbols = self.random_string(length, generator)
        limit = self.output_length(length) if self.wrap_around else self.tape_length(length)
        return symbols, repetition_pattern(symbols, self.steps, limit, self.wrap_around)


def _tape_pattern(name: str, steps: tuple[int, ...], out: Callable[[int], int] | None = None) -> type[TapePattern]:
    """A ``TapePattern`` subclass named ``name``; ``out=None``: TF's |f(0^n)|."""
    def output(n: int) -> int:
        return out(n) if out is not None else len(repetition_pattern([0] * n, steps, 10 * n + 10))

    def init(self: TapePattern, tape_content: int = 28, wrap: bool = False) -> None:
        TapePattern.__init__(self, steps, output, tape_content, wrap)

    return type(name, (TapePattern,), {"name": name, "__init__": init,
                                       "__doc__": f"TF's {name[3:]}: steps {list(steps)}."})


TAPE_PATTERNS = [
    _tape_pattern("tf_copy", (1,), lambda n: n),
    _tape_pattern("tf_repeat_copy", (0, 1), lambda n: 2 * n),
    _tape_pattern("tf_pattern1", (0, 1, 1), lambda n: n + n // 2),
    _tape_pattern("tf_pattern2", (0, 2), lambda n: n + n // 2),
    _tape_pattern("tf_pattern3", (0, 2, -1), lambda n: 4 + 3 * (n - 2)),
    _tape_pattern("tf_pattern4", (0, 2, 1, 2, -2, -1)),
    _tape_pattern("tf_pattern5", (4, 1, 1, -4)),
]


def multiple_pattern(symbols: list[int], patterns: Sequence[Sequence[int]], limit: int) -> list[int]:
    """TF's ``f_multpattern``: the runs between dividers, run ``i`` (i dividers before it) read with
    ``patterns[i mod len]``; empty runs are dropped, dividers are not output."""
    output, run, index = [], [], 0
    for symbol in symbols + [TF_DIVIDER]:
        if symbol != TF_DIVIDER:
            run.append(symbol)
            continue
        if run:
            output += repetition_pattern(run, patterns[index % len(patterns)], limit)
        run, index = [], index + 1
    return output[:limit]


class TapeMultiplePattern(TapeTask):
    """TF's multiple pattern 1–4 (divider 7, N_out = 2n); ``force_divider``: mult 2's one 7 at a
    uniform position."""

    def __init__(self, patterns: Iterable[Iterable[int]], tape_content: int = 28, force_divider: bool = False) -> None:
        super().__init__(tape_content)
        self.patterns, self.force_divider = tuple(tuple(p) for p in patterns), force_divider

    def output_length(self, length: int) -> int:
        return 2 * length

    def content(self, length: int, generator: torch.Generator | None) -> Sample:
        symbols = self.random_string(length, generator)
        if self.force_divider:
            symbols[int(torch.randint(length, (), generator=generator))] = TF_DIVIDER
        return symbols, multiple_pattern(symbols, self.patterns, self.tape_length(length))


VARIABLE_PATTERNS_1 = ((1,), (2,), (0, 1), (0, 2), (1, 2))
VARIABLE_PATTERNS_2 = VARIABLE_PATTERNS_1 + (
    (0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 2, 0), (0, 2, 1), (0, 2, 2), (1, 1, 2), (1, 2, 2),
    (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 1, 2), (0, 1, 1, 2), (0, 1, 0, 2), (0, 2, 0, 2),
)


class TapeVariablePattern(TapeTask):
    """TF's variable pattern 1–4: content ``A ∘ B``, output ``repetition_pattern(B, A)``. Pattern
    entries are coded as symbols: 0..2 as content symbols, -1 and -2 as • and ∘ (TF's negative
    one-hot indexing). ``patterns``: a fixed list to draw from, or None for random patterns of length
    1..``max_pattern_length`` with entries in ``entries`` (all-zero patterns, or with ``positive_sum``
    patterns of sum <= 0, redrawn with their length, as in the logged v11 notebook)."""

    min_length = 8

    def __init__(self, patterns: Sequence[Sequence[int]] | None = None, entries: Iterable[int] = (0, 1, 2),
                 positive_sum: bool = False, max_pattern_length: int = 8, tape_content: int = 28) -> None:
        super().__init__(tape_content)
        self.patterns, self.entries, self.positive_sum = patterns, tuple(entries), positive_sum
        self.max_pattern_length = max_pattern_length
        if patterns is None and not any(e > 0 if positive_sum else e != 0 for e in self.entries):
            raise TaskError(f"{self.name}: entries {self.entries} make no pattern that is "
                            f"{'of positive sum' if positive_sum else 'not all zero'}")

    def output_length(self, length: int) -> int:
        return 2 * length

    def draw_pattern(self, generator: torch.Generator | None) -> list[int]:
        if self.patterns is not None:
            return list(self.patterns[int(torch.randint(len(self.patterns), (), generator=generator))])
        # rejection sampling: a draw of one valid entry is accepted, so a draw succeeds with probability at
        # least 1 / (max_pattern_length * len(entries)); MAX_PATTERN_DRAWS bounds the loop all the same
        for _ in range(MAX_PATTERN_DRAWS):
            size = int(torch.randint(1, self.max_pattern_length + 1, (), generator=generator))
            pattern = [self.entries[i] for i in torch.randint(len(self.entries), (size,), generator=generator)]
            if (sum(pattern) > 0) if self.positive_sum else any(pattern):
                return pattern
        raise TaskError(f"{self.name}: no valid pattern in {MAX_PATTERN_DRAWS} draws")

    def content(self, length: int, generator: torch.Generator | None) -> Sample:
        pattern = self.draw_pattern(generator)
        if length < len(pattern) + 2:
            raise TaskError(f"{self.name}: length {length} leaves no room after a pattern of {len(pattern)}: the "
                            f"content needs length >= {len(pattern) + 2}")
        symbols = self.random_string(length - len(pattern) - 1, generator)
        coded = [step % self.alphabet.size for step in pattern]  # -1 -> •, -2 -> ∘
        output = repetition_pattern(symbols, pattern, self.tape_length(length))
        return coded + [self.alphabet.index(START)] + symbols, output


def _named(name: str, base: type[TapeTask], doc: str, min_length: int = 5, **fixed: Any) -> type[TapeTask]:
    def init(self: TapeTask, tape_content: int = 28) -> None:
        base.__init__(self, tape_content=tape_content, **fixed)

    return type(name, (base,), {"name": name, "__init__": init, "min_length": min_length, "__doc__": doc})


TAPE_TASKS = TAPE_PATTERNS + [
    _named("tf_multiple_pattern1", TapeMultiplePattern, "TF's mult 1: [1], [0,1].", patterns=((1,), (0, 1))),
    _named("tf_multiple_pattern2", TapeMultiplePattern, "TF's mult 2: mult 1 with at least one divider.",
           patterns=((1,), (0, 1)), force_divider=True),
    _named("tf_multiple_pattern3", TapeMultiplePattern, "TF's mult 3: [1], [0,1], [0,2].",
           patterns=((1,), (0, 1), (0, 2))),
    _named("tf_multiple_pattern4", TapeMultiplePattern, "TF's mult 4: [0,1], [2,-1].", patterns=((0, 1), (2, -1))),
    _named("tf_variable_pattern1", TapeVariablePattern, "TF's var 1: 5 fixed patterns.", 8,
           patterns=VARIABLE_PATTERNS_1),
    _named("tf_variable_pattern2", TapeVariablePattern, "TF's var 2: 19 fixed patterns.", 11,
           patterns=VARIABLE_PATTERNS_2),
    _named("tf_variable_pattern3", TapeVariablePattern, "TF's var 3: random patterns over 0..2.", 18),
    _named("tf_variable_pattern4", TapeVariablePattern, "TF's var 4: random patterns over -2..2 of positive sum.",
           18, entries=(-2, -1, 0, 1, 2), positive_sum=True),
]

_ALL_TASKS: list[type[Task]] = [Copy, RepeatCopy, Pattern, MultiplePattern, VariablePattern, AssociativeRecall,
                                PrioritySort, *TAPE_TASKS]
TASKS: dict[str, type[Task]] = {task.name: task for task in _ALL_TASKS}
