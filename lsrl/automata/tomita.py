"""The seven Tomita grammars over {"0", "1"} (Tomita 1982), the standard test set of automaton extraction.

1. ``1*``   2. ``(10)*``   3. no odd-length run of 1s directly followed by an odd-length run of 0s
4. no ``000``   5. even numbers of 0s and of 1s   6. #0 - #1 divisible by 3   7. ``0*1*0*1*``

Grammars 1, 2 and 7 come from their regular expressions; 3–6 are tables (state names say what they count).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

from lsrl.errors import checked_call, shown
from lsrl.automata.machines import DFA, from_regex
from lsrl.errors import AutomatonError

ALPHABET = ("0", "1")
S = TypeVar("S", bound=Hashable)  # a state's name

_REGEXES = {1: "1*", 2: "(10)*", 7: "0*1*0*1*"}


def _table(rows: dict[S, tuple[S, S]], start: S, accepting: Iterable[S]) -> DFA:
    transitions = {state: dict(zip(ALPHABET, targets)) for state, targets in rows.items()}
    return DFA(rows, ALPHABET, transitions, start, accepting)


def _grammar_3() -> DFA:
    # even: no pending odd run of 1s; odd1: inside an odd run of 1s; odd1_odd0 / odd1_even0: the 0s after it
    return _table({"even": ("even", "odd1"), "odd1": ("odd1_odd0", "even"), "odd1_odd0": ("odd1_even0", "dead"),
                   "odd1_even0": ("odd1_odd0", "odd1"), "dead": ("dead", "dead")},
                  "even", {"even", "odd1", "odd1_even0"})


def _grammar_4() -> DFA:
    return _table({"z0": ("z1", "z0"), "z1": ("z2", "z0"), "z2": ("dead", "z0"), "dead": ("dead", "dead")},
                  "z0", {"z0", "z1", "z2"})


def _grammar_5() -> DFA:
    parities = [(zeros, ones) for zeros in (0, 1) for ones in (0, 1)]
    return _table({(z, o): ((1 - z, o), (z, 1 - o)) for z, o in parities}, (0, 0), {(0, 0)})


def _grammar_6() -> DFA:
    return _table({d: ((d + 1) % 3, (d - 1) % 3) for d in range(3)}, 0, {0})


@checked_call
def tomita(number: int) -> DFA:
    """The minimal DFA of Tomita grammar ``number`` (1..7)."""
    if isinstance(number, bool) or not isinstance(number, Hashable):
        raise AutomatonError(f"tomita: number must be one of the seven Tomita grammars (1..7), not {shown(number)}")
    if number in _REGEXES:
        return from_regex(_REGEXES[number], ALPHABET)
    tables = {3: _grammar_3, 4: _grammar_4, 5: _grammar_5, 6: _grammar_6}
    if number not in tables:
        raise AutomatonError(f"tomita: number must be one of the seven Tomita grammars (1..7), not {shown(number)}")
    return tables[number]().minimal()
