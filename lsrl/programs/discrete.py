"""Listing 2 (Fig. 3): universal in-context approximation of maps between token sequences.

Input: the n query tokens, then key/value pairs of n tokens each. The model stores the query,
compares every key with it position by position (a shift-register buffer remembers the last n
matches), and when a key matched, copies the following n value tokens into n output registers
that it reads out in turn: the last n outputs are the value of the matching key.

Two slips of the printed listing are corrected: positions run over ``0..n-1`` (what the modulo
counter produces; the printed ``1..n`` never selects position 0), and the modulo counters default
to a cyclic permutation state with rational weights (``counter="rotation"`` gives App. F.7's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from lsrl.errors import LsrlError, shown, whole_number
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Node
from lsrl.lang.program import ForEach
from lsrl.numbers import EXACT
from lsrl.programs.generation import generating_approximator
from lsrl.sugar import (
    DEFAULT_LAMBDA, DEFAULT_MU, IFELSE_VARIANTS, f_and, f_constant, f_ifelse, f_larger, f_modulo_counter, f_not,
    f_smaller, flag, positive_integer,
)

ROBUST_MU = 2  # integers compared at a half-integer: a margin of 1/2 saturates a step of slope 2

MAX_KEY_LENGTH = 256  # discrete_approximator: the program has O(n) nodes; n = 256 builds in about 3 s


def discrete_approximator(
    n: int, ifelse: str = "multiplicative", counter: str = "permutation", mu: float = DEFAULT_MU,
    lambda_: float | Literal["auto"] = DEFAULT_LAMBDA, robust: bool = False, vocabulary: int | None = None,
    generate: bool = False,
) -> ForEach:
    """Listing 2 with the paper's constants, or with ``robust=True`` a construction whose margins
    come from the values involved (``vocabulary``, the largest token, must then be given).

    ``generate=True`` (with ``robust=True`` and ``vocabulary``) is the generation form
    (``lsrl.programs.generation``): the prompt ends with the query (``discrete_prompt(mapping, query,
    generate=True)``) and the value's tokens are the outputs from the query's last token on, each
    step fed the previous output, as greedy decoding does.

    Weight noise acts in proportion to the values a layer carries, and a ReLU conditional multiplies
    an error in its condition by ``lambda_``. Listing 2 carries a global step counter (as large as
    the prompt is long) through most layers and compares it with steps of steepness 1000, and uses
    ``lambda_ = 1e10``. The robust construction keeps every value bounded and every margin wide:

    - the two uses of the counter become shift registers of flags: "past the query" is a one that
      has travelled n + 1 places, and "copying a value" is the sum of the last n "a matching key
      ends here" flags (the counter and the ``started_on`` state are gone, with them any bound on
      the prompt length);
    - every remaining comparison is between integers (tokens, positions, flag sums) at a
      half-integer, a margin of 1/2, so steps of steepness ``mu = 2`` are exact;
    - ``lambda_`` only has to exceed the branch values, tokens and registers: ``vocabulary + 1``.
    """
    n = positive_integer(n, "discrete_approximator: n", at_most=MAX_KEY_LENGTH)
    if vocabulary is not None:
        vocabulary = _vocabulary(vocabulary, "discrete_approximator")
    if not isinstance(counter, str) or counter not in ("permutation", "rotation"):
        raise LsrlError(f"discrete_approximator: counter must be 'permutation' or 'rotation', got {shown(counter)}")
    if not isinstance(ifelse, str) or ifelse not in IFELSE_VARIANTS:
        raise LsrlError(f"discrete_approximator: unknown ifelse variant {shown(ifelse)}; "
                        f"expected one of {IFELSE_VARIANTS}")
    robust = flag(robust, "discrete_approximator: robust")  # a truthy {} or "no" is no robust=True
    if flag(generate, "discrete_approximator: generate"):
        if not robust or vocabulary is None:
            raise LsrlError("discrete_approximator(generate=True) needs robust=True and vocabulary= (the largest "
                            "token)")
        return generating_approximator(n, vocabulary)
    if robust:
        if vocabulary is None:
            raise LsrlError("discrete_approximator(robust=True) needs vocabulary= (the largest token)")
        if counter != "permutation":
            # the rotation counter's thresholds have margins 1 - cos(pi / n), not 1/2
            raise LsrlError(f"discrete_approximator(robust=True) needs counter='permutation', got {counter!r}")
        mu, lambda_ = ROBUST_MU, vocabulary + 1

    def choose(cond: Node, t: Node, f: Node, name: str | None = None) -> Node:
        return f_ifelse(cond, t, f, variant=ifelse, lambda_=lambda_, mu=mu, name=name)

    token = Input(dim=1, name="token", bounds=(0, vocabulary), integer=True)
    mod_n = f_modulo_counter(token, n, counter, mu, name="mod_n")
    mod_2n = f_modulo_counter(token, 2 * n, counter, mu, name="mod_2n")
    # modes: reading the query, comparing a key with it, or copying a value
    is_prompt: Node
    if robust:
        is_prompt = Linear(_shift_register(f_constant(token, 1), n + 1), [[0] * n + [1]], name="is_prompt")
    else:
        # 0, 1, 2, ...
        global_ctr = LinState(f_constant(token, 1), A=[[1]], B=[[1]], init_state=[-1], name="global_ctr")
        is_prompt = f_larger(global_ctr, n - 0.5, mu, name="is_prompt")
    is_compare = f_larger(mod_2n, n - 0.5, mu, name="is_compare_mode")
    is_copy = f_and(is_prompt, f_not(is_compare), mu=mu, name="is_copy_mode")
    is_first_copy = f_and(is_copy, f_smaller(mod_n, 0.5, mu), mu=mu, name="is_first_token_for_copy")
    at_position = [
        f_and(f_larger(mod_n, i - 0.5, mu), f_smaller(mod_n, i + 0.5, mu), mu=mu, name=f"mod_n_eq_{i}")
        for i in range(n)
    ]
    # store the query, token i in component i
    query_token = choose(f_smaller(is_prompt, 0.5, mu), token, token * 0, "query_token")
    query_parts = [choose(at_position[i], query_token, query_token * 0) for i in range(n)]
    query = LinState(Concat(query_parts), A=EXACT.eye(n), B=EXACT.eye(n), name="query")
    # the query token at the current position, compared with the current key token
    current = Linear(Concat([choose(at_position[i], query[i], query[i] * 0) for i in range(n)]), [[1] * n])
    matching = f_and(
        f_larger(token, current - 0.5, mu), f_smaller(token, current + 0.5, mu), is_compare, mu=mu, name="matching"
    )
    # the last n + 1 match flags, newest first; the n before this step's
    buffer = _shift_register(matching, n + 1, name="match_buffer")
    all_matching = f_larger(Linear(buffer, [[0] + [1] * n]), n - 0.5, mu, name="all_matching")
    # the value of the matching key starts here: copy it for n steps
    starts_here = f_and(all_matching, is_first_copy, mu=mu)
    within_value: Node
    if robust:
        within_value = Linear(_shift_register(starts_here, n), [[1] * n], name="within_value")
    else:
        started_on = LinState(
            choose(starts_here, global_ctr, global_ctr * 0), A=[[1]], B=[[1]], name="started_on"
        )
        within_value = f_smaller(global_ctr, started_on + n, mu)
    copying = f_and(is_copy, within_value, mu=mu, name="copy_and_on")
    registers = []
    for i in range(n):
        write = choose(f_larger(f_and(copying, at_position[i], mu=mu), 0.5, mu), token, token * 0)
        registers.append(LinState(write, A=[[1]], B=[[1]], name=f"output_reg_{i}"))
    # read register (t mod n) out
    outputs = [choose(f_larger(at_position[i], 0.5, mu), registers[i], registers[i] * 0) for i in range(n)]
    answer = Linear(Concat(outputs), [[1] * n], name="answer")
    return ForEach(answer, name=f"discrete_approximator({n}, {ifelse}{', robust' if robust else ''})")


def check_discrete_prompt(prompts: ArrayLike, n: int, vocabulary: int | None = None) -> None:
    """Raise ``LsrlError`` unless every prompt (``(T, 1)`` or ``(B, T, 1)``) is n query tokens and
    then key / value pairs of n tokens each, every token a non-negative integer (at most
    ``vocabulary`` when given), and the query one of the keys.

    The network itself runs on any sequence (the interpreter is the reference semantics on every
    input, and compiled forms must agree with it): it answers 0 for a query that is no key and is
    meaningless on other tokens. Its ``Input`` bounds ``(0, vocabulary)`` make every runner refuse
    negative and (with ``vocabulary``) too large tokens; this helper (and ``discrete_prompt``)
    catch the rest. Any other shape (a ragged batch included) is an ``LsrlError`` too."""
    n = positive_integer(n, "check_discrete_prompt: n")
    if vocabulary is not None:
        vocabulary = _vocabulary(vocabulary, "check_discrete_prompt")
    try:
        array = np.asarray(prompts, dtype=object)
    except ValueError:  # ragged
        array = None
    if array is None or array.ndim not in (2, 3) or array.shape[-1] != 1:
        shape = "ragged" if array is None else f"of shape {array.shape}"
        raise LsrlError(f"check_discrete_prompt: prompts must be tokens of shape (T, 1) or (B, T, 1), got "
                        f"{type(prompts).__name__} {shape}")
    for index, prompt in enumerate(array.reshape((-1,) + array.shape[-2:])[..., 0]):
        where = f"discrete approximator (n={n}), prompt {index}"
        bad = [t for t in prompt if not _is_token(t, vocabulary)]
        if bad:
            limit = f" up to vocabulary={vocabulary}" if vocabulary is not None else ""
            raise LsrlError(f"{where}: tokens must be non-negative integers{limit}, got {bad[0]!r}")
        if len(prompt) < n or (len(prompt) - n) % (2 * n):
            raise LsrlError(f"{where}: expected {n} query tokens then key/value pairs of {n} tokens each, "
                            f"got {len(prompt)} tokens")
        query, pairs = list(prompt[:n]), prompt[n:].reshape(-1, 2 * n)
        seen: set[tuple[int, ...]] = set()
        for pair in pairs:
            key = tuple(int(t) for t in pair[:n])
            if key in seen:
                raise LsrlError(f"{where}: the key {list(key)} appears more than once; the network would add up "
                                "their values")
            seen.add(key)
        if not any(list(pair[:n]) == query for pair in pairs):
            raise LsrlError(f"{where}: the query {[int(t) for t in query]} is not one of the prompt's keys "
                            "(the network would answer 0 0 ..., indistinguishable from a value)")


def _vocabulary(vocabulary: object, owner: str) -> int:
    """The largest token: a non-negative integer."""
    number = whole_number(vocabulary)
    if number is None or number < 0:
        raise LsrlError(f"{owner}: vocabulary (the largest token) must be a non-negative integer, got {vocabulary!r}")
    return number


def _is_token(value: Any, vocabulary: int | None) -> bool:  # value: anything a user gave
    try:
        integer = int(value) == value
    except (TypeError, ValueError, OverflowError):  # complex, NaN, infinity, not a number
        return False
    return integer and value >= 0 and (vocabulary is None or value <= vocabulary)


def _shift_register(flag: Node, length: int, name: str | None = None) -> LinState:
    """A state of ``length`` components: ``s_t[0] = flag_t``, ``s_t[i] = s_{t-1}[i - 1]``."""
    shift = EXACT.from_entries(((i + 1, i, 1) for i in range(length - 1)), (length, length))
    return LinState(flag, A=shift, B=[[1]] + [[0]] * (length - 1), name=name)


def discrete_prompt(mapping: Mapping[Sequence[int], Sequence[int]], query: Sequence[int] | None = None,
                    generate: bool = False) -> np.ndarray:
    """Keys and values one after the other as a ``(2 n len(mapping), 1)`` array of tokens.

    With ``query``, its n tokens come first (the complete model input), or last with ``generate=True``
    (the prompt of ``discrete_approximator(..., generate=True)``); it must be one of the keys.
    Keys must differ (as token tuples: ``(1, 2)`` and ``(1.0, 2.0)`` are one key): the network adds
    up the values of a repeated key.
    """
    generate = flag(generate, "discrete_prompt: generate")
    if not isinstance(mapping, Mapping):
        raise LsrlError(f"discrete_prompt: mapping must be a dict of key -> value token tuples, got "
                        f"{type(mapping).__name__}")
    if not mapping:
        raise LsrlError("discrete_prompt: mapping is empty; give at least one key -> value pair")
    pairs = [(_tokens(key, "key"), _tokens(value, f"value of key {key!r}")) for key, value in mapping.items()]
    seen: set[tuple[int, ...]] = set()
    for key, _ in pairs:
        if key in seen:
            raise LsrlError(f"discrete_prompt: the key {key} appears more than once; the network would add up "
                            "their values")
        seen.add(key)
    lengths = {len(part) for pair in pairs for part in pair}
    if query is not None:
        query = _tokens(query, "query")
        lengths.add(len(query))
    if len(lengths) > 1:
        raise LsrlError(f"discrete_prompt: keys, values and query must all have one length n, got lengths {lengths}")
    if query is not None and query not in seen:
        raise LsrlError(f"discrete_prompt: the query {query} is not one of the keys; the network "
                        "would answer 0 0 ..., indistinguishable from a value")
    rows: list[int] = []
    for key, value in pairs:
        rows.extend(key)
        rows.extend(value)
    if query is not None:
        rows = rows + list(query) if generate else list(query) + rows
    return np.array(rows, dtype=np.int64).reshape(-1, 1)


def _tokens(value: object, what: str) -> tuple[int, ...]:
    """A key, value or query as a non-empty tuple of non-negative integer tokens."""
    try:
        tokens = list(value)  # type: ignore[call-overload]  # anything: a non-sequence is refused below
    except TypeError:
        raise LsrlError(f"discrete_prompt: {what} must be a sequence of tokens, got {type(value).__name__} "
                        f"{value!r}") from None
    if not tokens:
        raise LsrlError(f"discrete_prompt: {what} is empty; keys and values hold n >= 1 tokens")
    bad = [t for t in tokens if isinstance(t, (str, bytes)) or not _is_token(t, None)]
    if bad:
        raise LsrlError(f"discrete_prompt: tokens must be non-negative integers, got {bad[0]!r} in {what}")
    if any(t > np.iinfo(np.int64).max for t in tokens):
        raise LsrlError(f"discrete_prompt: token beyond int64 in {what}")
    return tuple(int(t) for t in tokens)
