"""Deterministic finite automata and Mealy machines: checked tables, reference runs, regular expressions.

Parsing regular expressions, determinising and minimising use **automata-lib** (``automata``): it is
maintained, pure Python, typed, builds a DFA from a regex (``NFA.from_regex`` then ``DFA.from_nfa``),
minimises it (Hopcroft), and decides language equivalence of two DFAs (``==``), which the round-trip
check needs. pyformlang parses regexes too but with a different syntax and no random DFAs; interegular
and greenery target Python's ``re`` dialect (character classes, not a finite alphabet of symbols);
pynini needs OpenFst binaries.

Both machines keep the user's state and symbol names, and index them (in the order given) for the
networks: ``table[p, a]`` is the index of the state reached from state ``p`` on symbol ``a``.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from lsrl.automata.arguments import generator, is_hashable, items, whole_number
from lsrl.errors import checked_call, shown
from lsrl.errors import AutomatonError

if TYPE_CHECKING:
    from automata.fa.dfa import DFA as LibDFA
    from automata.fa.nfa import NFA as LibNFA

T = TypeVar("T")  # what a table entry is read as

_MANY = (set, frozenset, list)  # a target given as one of these may hold several states
_PLURAL = {"state": "states", "symbol": "the alphabet", "output": "outputs"}
RANDOM_DFA_MAX_TRANSITIONS = 200_000  # random_dfa: the largest n_states * n_symbols
RANDOM_DFA_DRAWS = 1000  # random_dfa: redraws before giving up on a minimal DFA
REGEX_MAX_STATES = 100_000  # from_regex: the largest subset construction (before minimising)


def _distinct(values: object, what: str) -> tuple[Any, ...]:
    values = items(values, _PLURAL.get(what, what))
    seen = set()
    for item in values:
        if item in seen:
            raise AutomatonError(f"{what} {item!r} is listed twice")
        seen.add(item)
    if not values:
        raise AutomatonError(f"a machine needs at least one {what}")
    return values


def _single_target(state: Hashable, symbol: Hashable, target: object) -> object:
    """The one target of a deterministic entry; several targets are a non-deterministic table."""
    if isinstance(target, _MANY):
        if len(target) != 1:
            raise AutomatonError(f"non-deterministic table: state {state!r} on symbol {symbol!r} goes to "
                                 f"{len(target)} targets {sorted(map(repr, target))}; a deterministic machine "
                                 f"needs exactly one")
        (target,) = target
    return target


def _read_table(states: Sequence[Hashable], alphabet: Sequence[Hashable], transitions: object,
                read_entry: Callable[[Hashable, Hashable, object], T]) -> dict[tuple[Hashable, Hashable], T]:
    """``{(state, symbol): read_entry(state, symbol, value)}`` for every pair, or a clear error."""
    known_states, known_symbols = set(states), set(alphabet)
    if not isinstance(transitions, dict):
        raise AutomatonError(f"transitions must be a dict {{state: {{symbol: target}}}}, "
                             f"got {type(transitions).__name__}")
    entries: dict[tuple[Hashable, Hashable], T] = {}
    for state, row in transitions.items():
        if state not in known_states:
            raise AutomatonError(f"transitions leave state {state!r}, which is not one of the states {list(states)}")
        if not isinstance(row, dict):
            raise AutomatonError(f"state {state!r}: transitions must be a dict {{symbol: target}}, got {row!r}")
        for symbol, value in row.items():
            if symbol not in known_symbols:
                raise AutomatonError(f"state {state!r}: symbol {symbol!r} is not in the alphabet {list(alphabet)}")
            entries[state, symbol] = read_entry(state, symbol, value)
    for state in states:
        for symbol in alphabet:
            if (state, symbol) not in entries:
                raise AutomatonError(f"missing transition: state {state!r} has none on symbol {symbol!r}")
    return entries


def _target_index(state: Hashable, symbol: Hashable, target: object, index: dict[Hashable, int]) -> int:
    if not is_hashable(target) or target not in index:
        raise AutomatonError(f"state {state!r} on symbol {symbol!r} goes to {target!r}, which is not one of the states")
    return index[target]


def _check_reachable(states: Sequence[Hashable], table: np.ndarray, start: int) -> None:
    reached, queue = {start}, deque([start])
    while queue:  # a state is queued once, when first reached: at most len(states) rounds
        for nxt in table[queue.popleft()]:
            if int(nxt) not in reached:
                reached.add(int(nxt))
                queue.append(int(nxt))
    for i, state in enumerate(states):
        if i not in reached:
            raise AutomatonError(f"unreachable state {state!r}: no word leads to it from the start state; "
                                 f"remove it (or call .minimal() on a DFA built without the check)")


def _symbol_indices(words: object, alphabet: Sequence[Hashable]) -> np.ndarray:
    """Equal-length words (sequences of symbols) as a ``(B, T)`` array of symbol indices."""
    index = {symbol: i for i, symbol in enumerate(alphabet)}
    rows: list[list[int]] = []
    for word in _iterable(words, "words (a list of words)"):
        row: list[int] = []
        for symbol in _iterable(word, f"word {word!r}"):
            if not is_hashable(symbol) or symbol not in index:
                raise AutomatonError(f"symbol {symbol!r} (in word {word!r}) is not in the alphabet {list(alphabet)}")
            row.append(index[symbol])
        rows.append(row)
    if len({len(row) for row in rows}) > 1:
        raise AutomatonError("words must all have the same length to form one batch")
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)


def _iterable(value: object, what: str) -> Iterable[Any]:
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise AutomatonError(f"{what} must be a sequence of symbols, got {value!r} ({type(value).__name__})")
    return value


def _index_array(values: object, what: str, size: int) -> np.ndarray:
    """``values`` as an int64 array of indices in ``0..size-1``: integers, bools, or floats that are whole numbers;
    anything else (fractions, NaN, strings, indices out of range) is an ``AutomatonError`` naming ``what``."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as error:
        raise AutomatonError(f"{what} must be an array of integers, got {type(values).__name__} ({error})") from None
    if array.dtype == object and array.size:  # Python ints too large for int64, or mixed objects
        foreign = [v for v in array.flat if isinstance(v, bool) or not isinstance(v, numbers.Real)]
        if foreign:
            raise AutomatonError(f"{what} must be an array of integers, got {foreign[0]!r}")
        array = array.astype(np.float64)
    if not (array.dtype == bool or np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
            or (array.dtype == object and not array.size)):
        raise AutomatonError(f"{what} must be an array of integers, got an array of {array.dtype}")
    if array.size and not np.issubdtype(array.dtype, np.integer) and array.dtype != bool:
        whole = np.isfinite(array) & (array == np.round(array))
        if not whole.all():
            raise AutomatonError(f"{what} must be whole numbers, got {array[~whole].flat[0]!r}")
    if array.size and (array.min() < 0 or array.max() >= size):
        raise AutomatonError(f"{what} must lie in 0..{size - 1}, got {array.min()}..{array.max()}")
    return array.astype(np.int64)


def _run_table(table: np.ndarray, start: object, indices: object) -> np.ndarray:
    """The states after each prefix: ``(B, T)`` from symbol indices ``(B, T)`` (vectorised over B), starting
    from state ``start`` (one index, or one per string)."""
    indices = _index_array(indices, "symbol indices", table.shape[1])
    if indices.ndim != 2:
        raise AutomatonError(f"symbol indices must be a (batch, time) array, got shape {indices.shape}")
    start = _index_array(start, "start (state indices)", table.shape[0])
    if start.ndim > 1 or (start.ndim == 1 and len(start) != indices.shape[0]):
        raise AutomatonError(f"start must be one state index or one per string ({indices.shape[0]}), got shape "
                             f"{start.shape}")
    state = np.broadcast_to(start, indices.shape[:1]).copy()
    visited = np.empty(indices.shape, dtype=np.int64)
    for t in range(indices.shape[1]):
        state = table[state, indices[:, t]]
        visited[:, t] = state
    return visited


class DFA:
    """A complete deterministic finite automaton.

    ``DFA(states, alphabet, transitions, start, accepting)`` with ``transitions = {state: {symbol:
    target}}``. Every state needs exactly one target per symbol and must be reachable from ``start``;
    anything else raises ``AutomatonError`` naming the state and symbol.
    """

    @checked_call
    def __init__(self, states: Iterable[Hashable], alphabet: Iterable[Hashable],
                 transitions: dict[Any, dict[Any, Any]], start: Hashable,
                 accepting: Iterable[Hashable], *, check_reachable: bool = True) -> None:
        self.states = _distinct(states, "state")
        self.alphabet = _distinct(alphabet, "symbol")
        index = {state: i for i, state in enumerate(self.states)}
        if not is_hashable(start) or start not in index:
            raise AutomatonError(f"start state {start!r} is not one of the states {list(self.states)}")
        accepting = frozenset(items(accepting, "the accepting states", "DFA"))
        for state in accepting:
            if state not in index:
                raise AutomatonError(f"accepting state {state!r} is not one of the states {list(self.states)}")
        entries = _read_table(self.states, self.alphabet, transitions,
                              lambda p, a, target: _target_index(p, a, _single_target(p, a, target), index))
        self.table = np.array([[entries[p, a] for a in self.alphabet] for p in self.states], dtype=np.int64)
        self.start = index[start]
        self.accepting = np.array([state in accepting for state in self.states])
        if check_reachable:
            _check_reachable(self.states, self.table, self.start)

    def __repr__(self) -> str:
        return f"DFA({len(self.states)} states, alphabet {list(self.alphabet)})"

    @property
    def transitions(self) -> dict[Hashable, dict[Hashable, Hashable]]:
        return {p: {a: self.states[self.table[i, j]] for j, a in enumerate(self.alphabet)}
                for i, p in enumerate(self.states)}

    # ---- running ----------------------------------------------------------------------------------------
    def indices(self, words: Iterable[Sequence[Hashable]]) -> np.ndarray:
        """Equal-length words as a ``(B, T)`` array of symbol indices (unknown symbols are an error)."""
        return _symbol_indices(words, self.alphabet)

    def accepts(self, word: Sequence[Hashable]) -> bool:
        """Whether the whole word is accepted."""
        visited = self.states_after(self.indices([word]))[0]
        return bool(self.accepting[visited[-1] if len(visited) else self.start])

    def states_after(self, indices: ArrayLike, start: int | np.ndarray | None = None) -> np.ndarray:
        """The index of the state after each prefix, ``(B, T)``, from symbol indices ``(B, T)``; from the start
        state, or from ``start`` (state indices, one per string: to continue a run)."""
        return _run_table(self.table, self.start if start is None else start, indices)

    def reference(self, indices: ArrayLike) -> np.ndarray:
        """``(B, T, 1)`` float32: 1.0 where the prefix up to t is accepted; what the networks must output."""
        return self.accepting[self.states_after(indices)][..., None].astype(np.float32)

    # ---- the forms the networks are built from ------------------------------------------------------
    def transition_outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """Per transition ``(p, a)`` the output channels of the state it enters: ``(1, n, k)`` 0/1, and the
        channels before any input (acceptance of the empty word): ``(1,)``."""
        return self.accepting[self.table][None].astype(np.int64), self.accepting[[self.start]].astype(np.int64)

    def moore(self) -> tuple[np.ndarray, int, np.ndarray]:
        """``(table, start, state_outputs)`` with ``state_outputs`` ``(1, n)``: the DFA is its own Moore form."""
        return self.table, self.start, self.accepting[None].astype(np.int64)

    # ---- automata-lib -----------------------------------------------------------------------------------
    def to_automata_lib(self) -> LibDFA:
        """This DFA as an ``automata.fa.dfa.DFA`` over the symbols ``"0".."k-1"`` (symbol indices)."""
        from automata.fa.dfa import DFA as LibDFA

        return LibDFA(states=set(range(len(self.states))), input_symbols={str(a) for a in range(len(self.alphabet))},
                      transitions={p: {str(a): int(self.table[p, a]) for a in range(len(self.alphabet))}
                                   for p in range(len(self.states))},
                      initial_state=self.start, final_states={int(p) for p in np.flatnonzero(self.accepting)})

    def minimal(self) -> "DFA":
        """The minimal equivalent DFA (automata-lib's Hopcroft minimisation), states numbered 0.. breadth first."""
        lib_symbols = [str(a) for a in range(len(self.alphabet))]
        return _from_library(self.to_automata_lib().minify(), self.alphabet, lib_symbols)

    def equivalent(self, other: "DFA") -> bool:
        """Whether both accept the same language (automata-lib decides it on the product automaton); a Mealy
        machine is never equivalent to a DFA, and anything else is an ``AutomatonError``."""
        if not _comparable(self, other, "DFA.equivalent"):
            return False
        if set(self.alphabet) != set(other.alphabet):
            return False
        order = [other.alphabet.index(a) for a in self.alphabet]
        transitions = {p: {a: int(other.table[p, order[a]]) for a in range(len(order))}
                       for p in range(len(other.states))}
        renamed = DFA(range(len(other.states)), range(len(self.alphabet)), transitions,
                      other.start, np.flatnonzero(other.accepting).tolist(), check_reachable=False)
        return self.to_automata_lib() == renamed.to_automata_lib()


def _comparable(machine: DFA | Mealy, other: object, where: str) -> bool:
    """Whether ``other`` is a machine of ``machine``'s kind; False for the other kind; an error for a non-machine."""
    if not isinstance(other, (DFA, Mealy)):
        raise AutomatonError(f"{where}: can compare with a DFA or a Mealy machine only, got {type(other).__name__}")
    return type(other) is type(machine)


def _from_library(lib_dfa: LibDFA, alphabet: Sequence[Hashable], lib_symbols: Sequence[str]) -> DFA:
    """A complete automata-lib DFA as a ``DFA`` over ``alphabet`` (``lib_symbols[i]`` names ``alphabet[i]``),
    states renumbered breadth first from the start; a partial one is completed with a rejecting sink."""
    if lib_dfa.allow_partial:
        lib_dfa = lib_dfa.to_complete()
    order, queue = {lib_dfa.initial_state: 0}, deque([lib_dfa.initial_state])
    while queue:  # a state is queued once, when first numbered: at most len(lib_dfa.states) rounds
        state = queue.popleft()
        for symbol in lib_symbols:
            target = lib_dfa.transitions[state][symbol]
            if target not in order:
                order[target] = len(order)
                queue.append(target)
    transitions = {order[p]: {a: order[lib_dfa.transitions[p][s]] for a, s in zip(alphabet, lib_symbols)}
                   for p in order}
    return DFA(range(len(order)), alphabet, transitions, 0, [order[p] for p in lib_dfa.final_states if p in order])


@checked_call
def from_regex(pattern: str, alphabet: Iterable[str], *, max_states: int | None = REGEX_MAX_STATES) -> DFA:
    """The minimal complete DFA of a regular expression over ``alphabet`` (single-character symbols).

    Syntax is automata-lib's: concatenation, ``|``, ``*``, ``+``, ``?``, parentheses, ``&`` (intersection)
    and ``.`` (any symbol of the alphabet). automata-lib parses the pattern into an NFA; the subset
    construction here stops at ``max_states`` DFA states (default ``REGEX_MAX_STATES`` = 100,000; ``None``:
    no limit), since a pattern of n symbols can need 2^n of them (``(a|b)*a(a|b)(a|b)...``); then automata-lib
    minimises. An invalid pattern or alphabet, or too many states, is an ``AutomatonError`` naming the pattern.
    """
    from automata.base.exceptions import AutomatonException, RegexException
    from automata.fa.nfa import NFA

    if not isinstance(pattern, str):
        raise AutomatonError(f"from_regex: the pattern must be a string, got {pattern!r} ({type(pattern).__name__})")
    if max_states is not None:
        max_states = whole_number(max_states, "max_states", "from_regex", minimum=1)
    alphabet = _distinct(alphabet, "symbol")
    for symbol in alphabet:
        if not (isinstance(symbol, str) and len(symbol) == 1):
            raise AutomatonError(f"from_regex: symbols must be single characters, got {symbol!r}")
    used = {c for c in pattern if c.isalnum()}
    if used - set(alphabet):
        raise AutomatonError(f"from_regex: symbol(s) {sorted(used - set(alphabet))} in {pattern!r} are not in the "
                             f"alphabet {list(alphabet)}")
    try:
        nfa = NFA.from_regex(pattern, input_symbols=set(alphabet))
    except (AutomatonException, RegexException) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise AutomatonError(f"from_regex: cannot parse the pattern {shown(pattern)}: {reason}") from None
    except RecursionError:
        raise AutomatonError(f"from_regex: cannot parse the pattern {shown(pattern)}: it nests too deeply") from None
    return _from_library(_determinised(nfa, alphabet, max_states, pattern).minify(), alphabet, alphabet)


def _determinised(nfa: LibNFA, alphabet: tuple[str, ...], max_states: int | None, pattern: str) -> LibDFA:
    """The complete DFA of ``nfa`` by the subset construction (the empty subset is the rejecting sink), breadth
    first; at most ``max_states`` subsets, else an ``AutomatonError``."""
    from automata.fa.dfa import DFA as LibDFA

    closures: dict[Hashable, frozenset[Hashable]] = {}

    def closure(state: Hashable) -> frozenset[Hashable]:  # the states reached from ``state`` by empty moves
        if state not in closures:
            reached, stack = {state}, [state]
            while stack:  # a state is pushed once, when first reached: at most len(nfa.states) rounds
                for nxt in nfa.transitions.get(stack.pop(), {}).get("", ()):
                    if nxt not in reached:
                        reached.add(nxt)
                        stack.append(nxt)
            closures[state] = frozenset(reached)
        return closures[state]

    start = closure(nfa.initial_state)
    index, subsets, transitions = {start: 0}, [start], {}
    for i, subset in enumerate(subsets):  # grows while it is walked: breadth first, each subset once
        row = {}
        for symbol in alphabet:
            moves = (nfa.transitions.get(state, {}).get(symbol, ()) for state in subset)
            target = frozenset().union(*(closure(t) for targets in moves for t in targets))
            if target not in index:
                if max_states is not None and len(subsets) >= max_states:
                    raise AutomatonError(f"from_regex: the DFA of {shown(pattern)} needs more than "
                                         f"max_states={max_states:,} states before minimising; pass a larger "
                                         "max_states (or None) to allow them")
                index[target] = len(subsets)
                subsets.append(target)
            row[symbol] = index[target]
        transitions[i] = row
    final_states = {i for i, subset in enumerate(subsets) if not subset.isdisjoint(nfa.final_states)}
    return LibDFA(states=set(range(len(subsets))), input_symbols=set(alphabet), transitions=transitions,
                  initial_state=0, final_states=final_states)


@checked_call
def random_dfa(n_states: int, n_symbols: int, rng: np.random.Generator | int) -> DFA:
    """A random minimal DFA with exactly ``n_states`` states over symbols ``0..n_symbols-1``.

    Every state but the start gets an incoming transition from a random earlier state (so all are
    reachable), the other transitions and the accepting set are uniform; minimised, and redrawn
    until no two states are equivalent, at most ``RANDOM_DFA_DRAWS`` (1,000) times. ``rng`` is a
    ``numpy.random.Generator`` or an integer seed; ``n_states * n_symbols`` is at most
    ``RANDOM_DFA_MAX_TRANSITIONS`` (200,000; such a draw takes about a minute).
    """
    n_states = whole_number(n_states, "n_states", "random_dfa", minimum=1)
    n_symbols = whole_number(n_symbols, "n_symbols", "random_dfa", minimum=1)
    if n_states * n_symbols > RANDOM_DFA_MAX_TRANSITIONS:
        raise AutomatonError(f"random_dfa: n_states * n_symbols = {n_states * n_symbols:,} transitions, above the "
                             f"limit of {RANDOM_DFA_MAX_TRANSITIONS:,}")
    rng = generator(rng, "random_dfa")
    for _ in range(RANDOM_DFA_DRAWS):
        table = rng.integers(0, n_states, size=(n_states, n_symbols))
        free = [(p, a) for p in range(n_states) for a in range(n_symbols)]  # sorted by p, and kept so
        for state in range(1, n_states):  # a spanning tree: state reached from an earlier one
            # the free transitions out of states p < state are the first state * n_symbols of them, less the
            # state - 1 already taken by the tree
            p, a = free.pop(rng.integers(state * (n_symbols - 1) + 1))
            table[p, a] = state
        accepting = np.flatnonzero(rng.random(n_states) < 0.5).tolist()
        dfa = DFA(range(n_states), range(n_symbols), {p: dict(enumerate(map(int, table[p]))) for p in range(n_states)},
                  0, accepting)
        minimal = dfa.minimal()
        if len(minimal.states) == n_states:
            return minimal
    raise AutomatonError(f"random_dfa: no minimal DFA with {n_states} states over {n_symbols} symbols in "
                         f"{RANDOM_DFA_DRAWS} draws")


class Mealy:
    """A complete deterministic Mealy machine: ``transitions = {state: {symbol: (target, output)}}``.

    The output at step t is the output of the transition taken on the t-th symbol. Checked like ``DFA``;
    an output outside ``outputs`` is an error too.
    """

    @checked_call
    def __init__(self, states: Iterable[Hashable], alphabet: Iterable[Hashable], outputs: Iterable[Hashable],
                 transitions: dict[Any, dict[Any, Any]], start: Hashable) -> None:
        self.states = _distinct(states, "state")
        self.alphabet = _distinct(alphabet, "symbol")
        self.outputs = _distinct(outputs, "output")
        index = {state: i for i, state in enumerate(self.states)}
        output_index = {o: i for i, o in enumerate(self.outputs)}
        if not is_hashable(start) or start not in index:
            raise AutomatonError(f"start state {start!r} is not one of the states {list(self.states)}")

        def read_entry(p: Hashable, a: Hashable, entry: object) -> tuple[int, int]:
            value = _single_target(p, a, entry)
            if not (isinstance(value, tuple) and len(value) == 2):
                raise AutomatonError(f"state {p!r} on symbol {a!r}: a Mealy entry is a pair (target, output), "
                                     f"got {value!r}")
            target, output = value
            if not is_hashable(output) or output not in output_index:
                raise AutomatonError(f"state {p!r} on symbol {a!r} outputs {output!r}, which is not one of the "
                                     f"outputs {list(self.outputs)}")
            return _target_index(p, a, target, index), output_index[output]

        entries = _read_table(self.states, self.alphabet, transitions, read_entry)
        self.table = np.array([[entries[p, a][0] for a in self.alphabet] for p in self.states], dtype=np.int64)
        self.output_table = np.array([[entries[p, a][1] for a in self.alphabet] for p in self.states], dtype=np.int64)
        self.start = index[start]
        _check_reachable(self.states, self.table, self.start)

    def __repr__(self) -> str:
        return f"Mealy({len(self.states)} states, alphabet {list(self.alphabet)}, outputs {list(self.outputs)})"

    def indices(self, words: Iterable[Sequence[Hashable]]) -> np.ndarray:
        """Equal-length words as a ``(B, T)`` array of symbol indices (unknown symbols are an error)."""
        return _symbol_indices(words, self.alphabet)

    def translate(self, word: Sequence[Hashable]) -> list[Hashable]:
        """The output symbols of ``word``."""
        indices = self.indices([word])
        if not indices.shape[1]:
            return []
        previous = np.concatenate([[self.start], _run_table(self.table, self.start, indices)[0, :-1]])
        return [self.outputs[o] for o in self.output_table[previous, indices[0]]]

    def reference(self, indices: ArrayLike) -> np.ndarray:
        """``(B, T, |outputs|)`` float32 one-hot output symbols."""
        indices = _index_array(indices, "symbol indices", self.table.shape[1])
        visited = _run_table(self.table, self.start, indices)
        previous = np.concatenate([np.full((indices.shape[0], 1), self.start), visited[:, :-1]], axis=1)
        return np.eye(len(self.outputs), dtype=np.float32)[self.output_table[previous, indices]]

    def equivalent(self, other: "Mealy") -> bool:
        """Whether both translate every word alike (same alphabet and output symbols, by name): a breadth-first
        walk over the reachable pairs of states, comparing the outputs of every transition. A DFA is never
        equivalent to a Mealy machine, and anything else is an ``AutomatonError``."""
        if not _comparable(self, other, "Mealy.equivalent"):
            return False
        if set(self.alphabet) != set(other.alphabet) or set(self.outputs) != set(other.outputs):
            return False
        symbols = [other.alphabet.index(a) for a in self.alphabet]  # other's index of each of our symbols
        seen, queue = {(self.start, other.start)}, deque([(self.start, other.start)])
        while queue:  # a pair is queued once, when first seen: at most n * n' rounds
            p, q = queue.popleft()
            for a, b in enumerate(symbols):
                if self.outputs[self.output_table[p, a]] != other.outputs[other.output_table[q, b]]:
                    return False
                pair = (int(self.table[p, a]), int(other.table[q, b]))
                if pair not in seen:
                    seen.add(pair)
                    queue.append(pair)
        return True

    def transition_outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(|outputs|, n, k)`` one-hot output per transition; no output before any input."""
        return np.moveaxis(np.eye(len(self.outputs), dtype=np.int64)[self.output_table], -1, 0), \
            np.zeros(len(self.outputs), dtype=np.int64)

    def moore(self) -> tuple[np.ndarray, int, np.ndarray]:
        """The equivalent Moore machine on pairs (state, last output), reachable ones only, numbered
        breadth first from (start, none): ``(table, start, state_outputs (|outputs|, n'))``."""
        k = len(self.alphabet)
        pairs, queue, rows = {(self.start, -1): 0}, deque([(self.start, -1)]), {}
        while queue:  # a (state, output) pair is queued once: at most n * (|outputs| + 1) rounds
            pair = queue.popleft()
            row = []
            for a in range(k):
                nxt = (int(self.table[pair[0], a]), int(self.output_table[pair[0], a]))
                if nxt not in pairs:
                    pairs[nxt] = len(pairs)
                    queue.append(nxt)
                row.append(pairs[nxt])
            rows[pairs[pair]] = row
        table = np.array([rows[i] for i in range(len(pairs))], dtype=np.int64)
        state_outputs = np.zeros((len(self.outputs), len(pairs)), dtype=np.int64)
        for (_, output), i in pairs.items():
            if output >= 0:
                state_outputs[output, i] = 1
        return table, 0, state_outputs
