"""The sequence-to-sequence tasks of the LLRNN paper (Sec. 4): copy, repeat copy, pattern, multiple
pattern (Sec. 4.2's swap task) and variable pattern.

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
from dataclasses import dataclass

import torch

from lsrl.errors import LsrlError

START, END, SWAP, SEPARATOR, BLANK = "∘", "•", "S", "|", "_"


class TaskError(LsrlError):
    """A task asked for something it cannot produce (unknown symbol, empty string, bad length)."""


@dataclass(frozen=True)
class Alphabet:
    """Data symbols a, b, c, … then step digits 0, 1, … (variable pattern only), then ∘ • S | _."""

    data: int = 8
    digits: int = 0

    def __post_init__(self):
        if not 1 <= self.data <= 26 or not 0 <= self.digits <= 10:
            raise TaskError(f"alphabet: need 1..26 data symbols and 0..10 digits, got {self.data}, {self.digits}")

    @property
    def symbols(self) -> str:
        return string.ascii_lowercase[: self.data] + string.digits[: self.digits] + START + END + SWAP + SEPARATOR + BLANK

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

    def decode(self, indices) -> str:
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

    def to(self, device=None, dtype=None) -> Batch:
        return Batch(self.tokens.to(device), self.inputs.to(device, dtype), self.targets.to(device), self.mask.to(device))


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

    def __init__(self, alphabet: Alphabet | None = None):
        self.alphabet = alphabet or Alphabet()

    def sample(self, length: int, generator) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def random_string(self, length: int, generator) -> list[int]:
        return torch.randint(self.alphabet.data, (length,), generator=generator).tolist()

    def wrap(self, *parts: list[int]) -> list[int]:
        """``∘ part₁ S part₂ S … •``."""
        prompt = [self.alphabet.index(START)]
        for number, part in enumerate(parts):
            prompt += ([self.alphabet.index(SWAP)] if number else []) + list(part)
        return prompt + [self.alphabet.index(END)]

    def batch(self, batch_size: int, length: int | tuple[int, int], generator=None) -> Batch:
        """``batch_size`` samples of one length: ``length`` or drawn from the inclusive range ``(lo, hi)``."""
        length = self._draw_length(length, generator)
        samples = [self.sample(length, generator) for _ in range(batch_size)]
        return self.collate(samples)

    def test_set(self, lengths, batch_size: int = 64, seed: int = 0) -> list[Batch]:
        """One reproducible batch per length in ``lengths``."""
        generator = torch.Generator().manual_seed(seed)
        return [self.batch(batch_size, length, generator) for length in lengths]

    def _draw_length(self, length, generator) -> int:
        low, high = (length, length) if isinstance(length, int) else length
        if not 1 <= low <= high:
            raise TaskError(f"{self.name}: lengths must satisfy 1 <= low <= high, got {length}")
        return int(torch.randint(low, high + 1, (), generator=generator))

    def collate(self, samples) -> Batch:
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

    def example(self, symbols: list[int]):
        return self.wrap(symbols), list(symbols)

    def sample(self, length, generator):
        return self.example(self.random_string(length, generator))


class RepeatCopy(Task):
    """``∘ abc •`` → ``aabbcc`` for two repeats: every symbol ``repeats`` times in a row."""

    name = "repeat_copy"

    def __init__(self, alphabet: Alphabet | None = None, repeats: int = 2):
        super().__init__(alphabet)
        self.repeats = repeats

    def example(self, symbols: list[int]):
        return self.wrap(symbols), [symbol for symbol in symbols for _ in range(self.repeats)]

    def sample(self, length, generator):
        return self.example(self.random_string(length, generator))


class Pattern(Task):
    """``∘ x₁…x_k •`` → ``output_factor · k`` reads with the fixed cyclic ``steps`` (Sec. 4.1).

    With the default steps 1, 0, 0, 2, 0 and one read per symbol the read position never wraps.
    """

    name = "pattern"

    def __init__(self, alphabet: Alphabet | None = None, steps: tuple[int, ...] = (1, 0, 0, 2, 0), output_factor: int = 1):
        super().__init__(alphabet)
        if not steps or min(steps) < 0:
            raise TaskError(f"pattern: steps must be a non-empty tuple of non-negative integers, got {steps}")
        self.steps, self.output_factor = tuple(steps), output_factor

    def example(self, symbols: list[int]):
        return self.wrap(symbols), read_with_pattern(symbols, self.steps, self.output_factor * len(symbols))

    def sample(self, length, generator):
        return self.example(self.random_string(length, generator))


class MultiplePattern(Task):
    """Sec. 4.2: ``segments`` strings of length k separated by the swap symbol S; segment i is
    emitted with every symbol repeated ``repeats[i mod 2]`` times (identity, then doubling)."""

    name = "multiple_pattern"

    def __init__(self, alphabet: Alphabet | None = None, segments: int = 3, repeats: tuple[int, int] = (1, 2)):
        super().__init__(alphabet)
        self.segments, self.repeats = segments, tuple(repeats)

    def example(self, segments: list[list[int]]):
        output = []
        for number, segment in enumerate(segments):
            output += [symbol for symbol in segment for _ in range(self.repeats[number % len(self.repeats)])]
        return self.wrap(*segments), output

    def sample(self, length, generator):
        return self.example([self.random_string(length, generator) for _ in range(self.segments)])


class VariablePattern(Task):
    """``∘ s₁…s_m | x₁…x_k •`` → k reads of x with the steps s (digits 0..max_step, drawn per sample)."""

    name = "variable_pattern"

    def __init__(self, alphabet: Alphabet | None = None, pattern_length: int = 3, max_step: int = 2):
        super().__init__(alphabet or Alphabet(digits=max_step + 1))
        if self.alphabet.digits <= max_step:
            raise TaskError(f"variable_pattern: the alphabet needs digits 0..{max_step}")
        self.pattern_length, self.max_step = pattern_length, max_step

    def example(self, steps: list[int], symbols: list[int]):
        encoded = [self.alphabet.digit(step) for step in steps]
        prompt = self.wrap(encoded + [self.alphabet.index(SEPARATOR)] + list(symbols))
        return prompt, read_with_pattern(symbols, tuple(steps), len(symbols))

    def sample(self, length, generator):
        steps = torch.randint(self.max_step + 1, (self.pattern_length,), generator=generator).tolist()
        return self.example(steps, self.random_string(length, generator))


TASKS = {task.name: task for task in (Copy, RepeatCopy, Pattern, MultiplePattern, VariablePattern)}
