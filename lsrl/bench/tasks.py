"""The tasks of the benchmark suite: each a small named function that builds an LSRL program, or an
automaton (``lsrl.automata``) for the tasks that have no program.

Token tasks read one integer token per step (``Input(1)``, tokens ``0..V``) and answer at every step.
Comparisons of integers use steps of slope 1 (``f_step(v, mu=1)`` is exactly ``[v >= 1]`` on
integers), so every program is exact. A task whose algorithm enumerates values (a count's residue,
a running maximum over positions) is exact up to ``max_len`` steps, the longest sequence in its data.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lsrl import programs
from lsrl.automata import from_regex, tomita
from lsrl.automata.machines import DFA
from lsrl.errors import InternalError
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Node, ReLU
from lsrl.lang.program import ForEach
from lsrl.numbers import EXACT
from lsrl.sugar import f_and, f_bump, f_larger, f_modulo_counter, f_smaller, f_step

PROGRAM_ARCHS = ("path", "linear_rnn", "rnn", "lstm", "gru")
GATED_PROGRAM_ARCHS = ("path", "gated_linear_rnn", "gated_rnn", "lstm", "gru")
AUTOMATON_ARCHS = ("rnn", "lstm", "gru")

Builder = Callable[[], ForEach]  # a task's program
Sampler = Callable[[np.random.Generator, int], np.ndarray]  # (rng, length) -> one input sequence (length, d_in)


@dataclass(frozen=True)
class Task:
    """A benchmark task: ``build()`` gives its program (``None`` for an automaton task, whose
    ``automaton()`` gives the DFA); ``sample(rng, length)`` one input sequence ``(length, d_in)``."""

    name: str
    build: Builder | None
    sample: Sampler
    train_lengths: tuple[int, int]
    test_lengths: tuple[int, int]
    circuit: tuple[str, ...] = ()
    archs: tuple[str, ...] = PROGRAM_ARCHS
    automaton: Callable[[], DFA] | None = None
    summary: str = ""

    @property
    def description(self) -> str:
        """The builder's docstring on one line (an automaton task's summary)."""
        return " ".join((self.build.__doc__ or "").split()) if self.build else self.summary

    def circuit_nodes(self) -> list[tuple[str, int]]:
        """``(name, dim)`` of the program's user-named nodes that the task names as its circuit."""
        if self.build is None:
            return []
        named = {node.name: node.dim for node in self.build().nodes if node.named}
        return [(name, named[name]) for name in self.circuit if name in named]


TASKS: dict[str, Task] = {}


@dataclass(frozen=True)
class TokenSampler:
    """A ``Sampler`` of ``length`` tokens drawn uniformly from ``0..largest``, ``(length, 1)``; ``largest`` tells
    the tasks of one token range apart."""

    largest: int

    def __call__(self, rng: np.random.Generator, length: int) -> np.ndarray:
        return rng.integers(0, self.largest + 1, size=(length, 1))


def register(name: str, sample: Sampler, train_lengths: tuple[int, int] = (1, 8),
             test_lengths: tuple[int, int] = (9, 12), circuit: Iterable[str] = (),
             archs: tuple[str, ...] = PROGRAM_ARCHS) -> Callable[[Builder], Builder]:
    """Decorator: add the decorated program builder to ``TASKS`` under ``name``."""

    def add(build: Builder) -> Builder:
        TASKS[name] = Task(name, build, sample, train_lengths, test_lengths, tuple(circuit), archs)
        return build

    return add


MAX_LEN = 12  # the longest sequence of a bounded task (its test lengths end here)


# ---- building blocks ------------------------------------------------------------------------------


def tokens(largest: int, name: str = "token") -> Input:
    return Input(1, name=name, bounds=(0, largest), integer=True)


def one_hot(x: Node, values: Sequence[int], name: str | None = None) -> Linear:
    """``[x == v]`` for each ``v`` of ``values`` (``x`` a scalar integer node): a bump of slope 1."""
    copies = Linear(x, [[1]] * len(values))
    return f_bump(copies, [v - 1 for v in values], list(values), mu=1, name=name)


def running_sum(x: Node, name: str | None = None) -> LinState:
    """``sum_{tau <= t} x_tau`` per component."""
    d = x.dim
    return LinState(x, A=EXACT.eye(d), B=EXACT.eye(d), name=name)


def at_least_one(x: Node, name: str | None = None) -> Node:
    """``[x >= 1]`` per component of an integer node."""
    return f_step(x, mu=1, name=name)


def select(flags: Node, values: Node, bound: int, name: str | None = None) -> Linear:
    """``sum_i flags_i * values_i`` for 0/1 ``flags`` and ``0 <= values_i <= bound``, without a product:
    ``ReLU(values_i - bound (1 - flags_i))`` is ``values_i`` where the flag is on and 0 elsewhere."""
    d = flags.dim
    gated = ReLU(Linear(Concat([values, flags]), EXACT.hstack([EXACT.eye(d), EXACT.eye(d, bound)]), [-bound] * d))
    return Linear(gated, [[1] * d], name=name)


def step_count(x: Node, name: str | None = None) -> LinState:
    """``t + 1`` at step t = 0, 1, ... (``x`` only anchors it in the graph)."""
    return LinState(x, A=[[1]], B=[[0] * x.dim], b=[1], name=name)


def past_first(x: Node) -> Node:
    """1 from the second step on, 0 at the first."""
    return f_step(step_count(x) - 1, mu=1)


def delay_line(x: Node, length: int, name: str | None = None) -> LinState:
    """``[x_t, x_{t-1}, ..., x_{t-length+1}]`` (zeros before the start) for a scalar ``x``."""
    shift = EXACT.from_entries(((i + 1, i, 1) for i in range(length - 1)), (length, length))
    return LinState(x, A=shift, B=[[1]] + [[0]] * (length - 1), name=name)


def _residue_task(name: str, divisor: int, token: int, largest: int) -> Builder:
    @register(name, TokenSampler(largest), circuit=(f"count_{token}", "residue"))
    def build() -> ForEach:
        count = running_sum(one_hot(tokens(largest), [token]), name=f"count_{token}")
        residues = one_hot(count, range(MAX_LEN + 1))
        return ForEach(Linear(residues, [[k % divisor for k in range(MAX_LEN + 1)]], name="residue"), name=name)

    build.__doc__ = (f"The number of {token}s so far (tokens 0..{largest}) modulo {divisor}: a LinState counts them; "
                     "the residue is "
                     f"read off a one-hot of the count (exact up to {MAX_LEN} steps).")
    return build


# ---- counting -------------------------------------------------------------------------------------

parity = _residue_task("parity", 2, 1, 1)
count_mod_3 = _residue_task("count_mod_3", 3, 1, 1)
count_mod_4 = _residue_task("count_mod_4", 4, 2, 2)


@register("majority", TokenSampler(1), test_lengths=(9, 24), circuit=("ones_minus_zeros", "more_ones"))
def majority() -> ForEach:
    """Fig. 1: 1 while more 1s than 0s have been read, else 0 (``lsrl.programs.more_ones_than_zeros``)."""
    return programs.more_ones_than_zeros()


@register("count_ones", TokenSampler(1), test_lengths=(9, 24), circuit=("count",))
def count_ones() -> ForEach:
    """The number of 1s so far: one LinState with A = B = 1."""
    bits = tokens(1)
    return ForEach(running_sum(bits, name="count"), name="count_ones")


@register("count_token_2", TokenSampler(3), test_lengths=(9, 24), circuit=("is_2", "count"))
def count_token_2() -> ForEach:
    """The number of 2s so far among tokens 0..3: a one-hot of the token feeds a counter."""
    token = tokens(3)
    return ForEach(running_sum(one_hot(token, [2], name="is_2"), name="count"), name="count_token_2")


@register("histogram", TokenSampler(3), circuit=("counts", "histogram"))
def histogram() -> ForEach:
    """How often the current token has occurred so far, itself included (RASP's histogram, causal):
    one counter per token value, and the current token's counter selected by a ReLU gate."""
    token = tokens(3)
    is_value = one_hot(token, range(4), name="is_value")
    counts = running_sum(is_value, name="counts")
    return ForEach(select(is_value, counts, MAX_LEN, name="histogram"), name="histogram")


@register("at_least_3_ones", TokenSampler(1), test_lengths=(9, 24), circuit=("count", "threshold"))
def at_least_3_ones() -> ForEach:
    """1 once at least three 1s have been read: a counter and a step at 2.5."""
    bits = tokens(1)
    count = running_sum(bits, name="count")
    return ForEach(f_step(count - 2, mu=1, name="threshold"), name="at_least_3_ones")


@register("equal_counts", TokenSampler(1), test_lengths=(9, 24), circuit=("ones_minus_zeros", "equal"))
def equal_counts() -> ForEach:
    """1 where as many 1s as 0s have been read: a counter of 1s minus 0s, compared with 0."""
    bits = tokens(1)
    lead = LinState(2 * bits - 1, A=[[1]], B=[[1]], name="ones_minus_zeros")
    return ForEach(one_hot(lead, [0], name="equal"), name="equal_counts")


@register("seen_token_3", TokenSampler(3), test_lengths=(9, 24), circuit=("count", "seen"))
def seen_token_3() -> ForEach:
    """1 once a 3 has appeared (existential quantifier): a counter and a step at 1/2."""
    token = tokens(3)
    count = running_sum(one_hot(token, [3]), name="count")
    return ForEach(at_least_one(count, name="seen"), name="seen_token_3")


@register("all_ones", TokenSampler(1), test_lengths=(9, 24), circuit=("zeros", "all_ones"))
def all_ones() -> ForEach:
    """1 while every token so far is a 1 (universal quantifier): no 0 counted yet."""
    bits = tokens(1)
    zeros = running_sum(1 - bits, name="zeros")
    return ForEach(1 - at_least_one(zeros), name="all_ones")


@register("mode", TokenSampler(2), circuit=("counts", "mode"))
def mode() -> ForEach:
    """The most frequent token so far among 0, 1, 2 (ties to the smaller token): three counters and
    their pairwise comparisons."""
    token = tokens(2)
    c = running_sum(one_hot(token, range(3)), name="counts")
    beats_0 = f_larger(c[1] - c[0], 0, mu=1)  # c1 > c0
    two_beats_0 = f_larger(c[2] - c[0], 0, mu=1)
    two_beats_1 = f_larger(c[2] - c[1], 0, mu=1)
    one_wins = f_and(beats_0, 1 - two_beats_1, mu=1)  # c1 > c0 and c1 >= c2
    two_wins = f_and(two_beats_0, two_beats_1, mu=1)
    return ForEach(Linear(Concat([one_wins, two_wins]), [[1, 2]], name="mode"), name="mode")


# ---- parentheses ------------------------------------------------------------------------------------


@register("balanced_parens", TokenSampler(1), circuit=("depth", "dips", "balanced"))
def balanced_parens() -> ForEach:
    """Token 0 is "(", 1 is ")": 1 where the prefix is a balanced string. The depth is a counter; a
    second counter records the steps at which it went below zero; balanced = depth 0 and no dip."""
    paren = tokens(1)
    depth = LinState(1 - 2 * paren, A=[[1]], B=[[1]], name="depth")
    dips = running_sum(f_smaller(depth, 0, mu=1), name="dips")
    return ForEach(f_and(one_hot(depth, [0]), one_hot(dips, [0]), mu=1, name="balanced"), name="balanced_parens")


@register("paren_depth", TokenSampler(1), test_lengths=(9, 24), circuit=("depth",))
def paren_depth() -> ForEach:
    """Token 0 is "(", 1 is ")": the nesting depth so far (opened minus closed)."""
    paren = tokens(1)
    return ForEach(LinState(1 - 2 * paren, A=[[1]], B=[[1]], name="depth"), name="paren_depth")


@register("max_depth", TokenSampler(1), circuit=("depth", "reached", "max_depth"))
def max_depth() -> ForEach:
    """Token 0 is "(", 1 is ")": the largest nesting depth so far; a flag per depth d records that
    the depth reached d at some step, and the maximum is the number of flags set."""
    paren = tokens(1)
    depth = LinState(1 - 2 * paren, A=[[1]], B=[[1]], name="depth")
    above = f_step(Linear(depth, [[1]] * MAX_LEN, [-d for d in range(MAX_LEN)]), mu=1)  # depth >= d + 1
    reached = at_least_one(running_sum(above), name="reached")
    return ForEach(Linear(reached, [[1] * MAX_LEN], name="max_depth"), name="max_depth")


# ---- order statistics ---------------------------------------------------------------------------------

LARGEST = 5  # tokens 0..5 for the order statistics


def _count_at_most(token: Node) -> LinState:
    """``[#tokens so far <= v for v in 0..LARGEST-1]``."""
    at_most = f_step(Linear(token, [[-1]] * LARGEST, [v + 1 for v in range(LARGEST)]), mu=1)  # token <= v
    return running_sum(at_most, name="count_at_most")


def _kth_smallest(k: int, name: str) -> Builder:
    @register(name, TokenSampler(LARGEST), circuit=("count_at_most", name))
    def build() -> ForEach:
        token = tokens(LARGEST)
        below_k = f_step(Linear(_count_at_most(token), EXACT.eye(LARGEST, -1), [k] * LARGEST), mu=1)  # count < k
        return ForEach(Linear(below_k, [[1] * LARGEST], name=name), name=name)

    build.__doc__ = (f"The {k}-th smallest token so far ({LARGEST} before {k} tokens were read), sorting-free: "
                     "it is the "
                     f"number of values v in 0..{LARGEST - 1} with fewer than {k} tokens <= v so far.")
    return build


running_min = _kth_smallest(1, "running_min")
second_smallest = _kth_smallest(2, "second_smallest")
third_smallest = _kth_smallest(3, "third_smallest")


@register("running_max", TokenSampler(LARGEST), test_lengths=(9, 24), circuit=("seen_at_least", "running_max"))
def running_max() -> ForEach:
    """The largest token so far: per value v, whether a token >= v has been seen; their sum is the max."""
    token = tokens(LARGEST)
    at_least = f_step(Linear(token, [[1]] * LARGEST, [-v for v in range(LARGEST)]), mu=1)  # token >= v + 1
    seen = at_least_one(running_sum(at_least), name="seen_at_least")
    return ForEach(Linear(seen, [[1] * LARGEST], name="running_max"), name="running_max")


@register("running_median", TokenSampler(LARGEST), circuit=("count_at_most", "steps", "running_median"))
def running_median() -> ForEach:
    """The lower median of the tokens so far: the number of values v with 2 #(tokens <= v) < t."""
    token = tokens(LARGEST)
    counts = _count_at_most(token)
    steps = step_count(token, name="steps")
    twice_counts_minus_steps = np.hstack([-2 * np.eye(LARGEST, dtype=int), np.ones((LARGEST, 1), dtype=int)])
    below_half = f_step(Linear(Concat([counts, steps]), twice_counts_minus_steps), mu=1)  # 2 count < t
    return ForEach(Linear(below_half, [[1] * LARGEST], name="running_median"), name="running_median")


@register("rank_of_token", TokenSampler(LARGEST), circuit=("count_below", "rank_of_token"))
def rank_of_token() -> ForEach:
    """How many earlier-or-current tokens are smaller than the current one: counters of tokens < v
    for every v, and the current token's counter selected by a ReLU gate."""
    token = tokens(LARGEST)
    below = f_step(Linear(token, [[-1]] * (LARGEST + 1), list(range(LARGEST + 1))), mu=1)  # token < v
    counts = running_sum(below, name="count_below")
    return ForEach(select(one_hot(token, range(LARGEST + 1)), counts, MAX_LEN, name="rank_of_token"),
                   name="rank_of_token")


# ---- positions --------------------------------------------------------------------------------------


@register("first_one_position", TokenSampler(1), circuit=("before_first", "seen", "first_one_position"))
def first_one_position() -> ForEach:
    """The step (1-based) of the first 1, 0 before it: the steps without a 1 counted, gated by "seen"."""
    bits = tokens(1)
    seen = at_least_one(running_sum(bits), name="seen")
    before = running_sum(1 - seen, name="before_first")
    return ForEach(select(seen, before + 1, MAX_LEN + 1, name="first_one_position"), name="first_one_position")


@register("last_one_position", TokenSampler(1), circuit=("steps", "latest", "last_one_position"))
def last_one_position() -> ForEach:
    """The step (1-based) of the latest 1, 0 before any: the running maximum of ``t * [x_t = 1]``."""
    bits = tokens(1)
    steps = step_count(bits, name="steps")
    marked = select(bits, steps, MAX_LEN, name="latest")  # t where x_t = 1, else 0
    above = f_step(Linear(marked, [[1]] * MAX_LEN, [-v for v in range(MAX_LEN)]), mu=1)
    seen = at_least_one(running_sum(above))
    return ForEach(Linear(seen, [[1] * MAX_LEN], name="last_one_position"), name="last_one_position")


@register("first_token_1", TokenSampler(1), circuit=("count", "first"))
def first_token_1() -> ForEach:
    """1 exactly at the first 1 of the sequence: the count of 1s equals 1 and the token is 1."""
    bits = tokens(1)
    count = running_sum(bits, name="count")
    return ForEach(f_and(one_hot(count, [1]), bits, mu=1, name="first"), name="first_token_1")


@register("position_mod_3", TokenSampler(1), test_lengths=(9, 24), circuit=("position",))
def position_mod_3() -> ForEach:
    """``t mod 3`` at step t = 0, 1, 2, ...: ``f_modulo_counter``, a permutation-matrix state."""
    bits = tokens(1)
    return ForEach(f_modulo_counter(bits, 3, name="position"), name="position_mod_3")


# ---- copying ------------------------------------------------------------------------------------------


def _copy_task(name: str, delay: int) -> Builder:
    @register(name, TokenSampler(4), test_lengths=(9, 24), circuit=("line", "copy"))
    def build() -> ForEach:
        token = tokens(4)
        line = delay_line(token, delay + 1, name="line")
        return ForEach(Linear(line, [[0] * delay + [1]], name="copy"), name=name)

    build.__doc__ = f"The token of {delay} steps before (0 before the start): a shift register of length {delay + 1}."
    return build


copy_delay_1 = _copy_task("copy_delay_1", 1)
copy_delay_3 = _copy_task("copy_delay_3", 3)


@register("reverse_blocks_3", TokenSampler(4), test_lengths=(9, 24), circuit=("line", "place", "reversed"))
def reverse_blocks_3() -> ForEach:
    """The previous block of 3 tokens reversed: at place i (0, 1, 2) of a block, the token at place
    2 - i of the block before, 2i + 1 steps back; a shift register of 6 and the place (``t mod 3``,
    one-hot) select it."""
    token = tokens(4)
    line = delay_line(token, 6, name="line")
    place = one_hot(f_modulo_counter(token, 3), range(3), name="place")
    lagged = Linear(line, [[1 if j == 2 * i + 1 else 0 for j in range(6)] for i in range(3)])
    return ForEach(select(place, lagged, 4, name="reversed"), name="reverse_blocks_3")


@register("previous_equals_current", TokenSampler(2), test_lengths=(9, 24), circuit=("line", "repeat"))
def previous_equals_current() -> ForEach:
    """1 where the token equals the previous one (a repeated token): a register of 2 and an equality."""
    token = tokens(2)
    line = delay_line(token, 2, name="line")
    return ForEach(f_and(one_hot(line[0] - line[1], [0]), past_first(token), mu=1, name="repeat"),
                   name="previous_equals_current")


@register("bigram_01", TokenSampler(1), test_lengths=(9, 24), circuit=("line", "bigram"))
def bigram_01() -> ForEach:
    """1 where the last two tokens are 0 then 1 (a bigram detector)."""
    bits = tokens(1)
    line = delay_line(bits, 2, name="line")
    return ForEach(f_and(line[0], 1 - line[1], past_first(bits), mu=1, name="bigram"), name="bigram_01")


@register("running_sum_window_3", TokenSampler(4), test_lengths=(9, 24), circuit=("line", "window"))
def running_sum_window_3() -> ForEach:
    """The sum of the last three tokens: a register of 3 and a sum."""
    token = tokens(4)
    return ForEach(Linear(delay_line(token, 3, name="line"), [[1, 1, 1]], name="window"), name="running_sum_window_3")


# ---- in-context lookup and approximation (Listings 1 and 2) -----------------------------------------


def _lookup_sample(n: int, largest: int) -> Sampler:
    def sample(rng: np.random.Generator, pairs: int) -> np.ndarray:  # pairs <= (largest + 1) ** n distinct keys
        drawn: set[tuple[int, ...]] = set()
        while len(drawn) < pairs:  # distinct keys by rejection: ends as pairs <= (largest + 1) ** n
            drawn.add(tuple(int(v) for v in rng.integers(0, largest + 1, size=n)))
        keys = sorted(drawn)
        mapping: dict[Sequence[int], Sequence[int]] = {
            key: tuple(int(v) for v in rng.integers(0, largest + 1, size=n)) for key in keys}
        query = keys[int(rng.integers(0, len(keys)))]
        return programs.discrete_prompt(mapping, query=query)

    return sample


def _lookup_task(name: str, n: int, largest: int) -> Builder:
    @register(name, _lookup_sample(n, largest), train_lengths=(1, 3), test_lengths=(4, 5), archs=GATED_PROGRAM_ARCHS,
              circuit=("mod_n", "mod_2n"))
    def build() -> ForEach:
        return programs.discrete_approximator(n)

    build.__doc__ = (f"Listing 2 (``lsrl.programs.discrete_approximator({n})``): the query (keys of {n} "
                     "tokens), then key-value pairs; after the query the model outputs the value of the "
                     "matching key while it is read (lengths count key-value pairs).")
    return build


lookup_1 = _lookup_task("lookup_1", 1, 7)
lookup_2 = _lookup_task("lookup_2", 2, 3)


def _approximation_task(name: str, f: Callable[[np.ndarray], np.ndarray], formula: str) -> Builder:
    def sample(rng: np.random.Generator, cells: int) -> np.ndarray:
        query = rng.integers(1, 64, size=1) / 64  # dyadic: exact in float64
        prompt = programs.continuous_prompt(f, 1, 1, cells, exact=True)
        return np.vstack([programs.continuous_query(query, 1), prompt]).astype(object)

    @register(name, sample, train_lengths=(2, 4), test_lengths=(5, 8), archs=GATED_PROGRAM_ARCHS, circuit=())
    def build() -> ForEach:
        return programs.continuous_approximator(1, 1)

    build.__doc__ = (f"Listing 1 (``lsrl.programs.continuous_approximator(1, 1)``) prompted with f(x) = {formula} on "
                     "[0, 1]: the query first, then one token per grid cell; the model outputs the value of the "
                     "cell that holds the query (lengths count cells).")
    return build


approximate_square = _approximation_task("approximate_square", lambda v: v ** 2, "x^2")
approximate_step = _approximation_task("approximate_step", lambda v: (v > 0.5).astype(float), "[x > 1/2]")


# ---- automata: no program, exact for every length -----------------------------------------------------


def _symbols(rng: np.random.Generator, length: int) -> np.ndarray:
    return rng.integers(0, 2, size=length)


def _automaton_task(name: str, automaton: Callable[[], DFA], summary: str) -> None:
    TASKS[name] = Task(name, None, _symbols, (1, 10), (11, 40), (), AUTOMATON_ARCHS, automaton, summary)


_automaton_task("parity_unbounded", lambda: from_regex("(0*10*1)*0*", ("0", "1")),
                "Whether the prefix holds an even number of 1s, for every length: a DFA (regex (0*10*1)*0*) "
                "compiled to stock torch.nn.RNN / LSTM / GRU (lsrl.automata.to_torch).")
for _number, _language in enumerate(
    ("1*", "(10)*", "no odd run of 1s followed by an odd run of 0s", "no 000", "even numbers of 0s and of 1s",
     "#0 - #1 divisible by 3", "0*1*0*1*"), start=1,
):
    _automaton_task(f"tomita_{_number}", functools.partial(tomita, _number),
                    f"Tomita grammar {_number} ({_language}) over {{0, 1}}: whether the prefix is in the language; "
                    "its minimal DFA compiled to stock torch.nn.RNN / LSTM / GRU (lsrl.automata.to_torch).")


def task_program(name: str) -> ForEach:
    """The program of task ``name`` (a program task: ``InternalError`` for an automaton task, which the callers
    refuse first)."""
    build = TASKS[name].build
    if build is None:
        raise InternalError(f"bench: task {name!r} has no program")
    return build()


def program_widths(program: ForEach) -> tuple[int, int]:
    """The input and output widths of a built program (``node_width``)."""
    return program.input.dim, program.output.dim
