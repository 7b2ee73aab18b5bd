"""Listing 2 in generation form: a token map in context, answered after the prompt one token at a time.

The prompt is the key / value pairs (n tokens each) and then the query (a key). At the query's last
token the output is the first token of its value; fed that token back (as greedy decoding does), the
output is the second, and so on: ``n`` generated tokens are the value. So a model that runs this
program answers through ``generate(..., max_new_tokens=n)``.

The query comes last, so the map must be kept whole until it arrives: a table of registers, one per
possible key ``k`` (a tuple of n tokens in ``0 .. vocabulary``) and value position ``j``. Every step:

- ``onehot``: the current token as ``vocabulary + 1`` flags (steps at half-integers, margin 1/2);
- ``history``: the last n one-hot tokens (a shift register);
- ``key_end[k]``: 1 at the last token of a key equal to ``k``, at a key position of the pair (``phase =
  step mod 2n = n - 1``): the sum of n history flags and the phase flag reaches ``n + 1``;
- ``key_delays``: ``key_end`` delayed by ``0 .. n`` steps;
- the registers ``table[j, k]`` add the token where ``key_end[k]`` is ``j + 1`` steps old (value token
  ``j`` of a pair with key ``k``): products of a 0/1 flag and a token, exact;
- the answer is ``table[j, k]`` where ``key_end[k]`` is ``j`` steps old: at the key's last token value
  token 0, at value token ``j - 1`` value token ``j``. At every other step the output is 0.

Every comparison is between integers at a half-integer with steps of slope 2 (as the robust
Listing 2), so the program is exact in both backends, and its weights are rationals. Its size grows
with the number of possible keys, ``(vocabulary + 1) ** n``: a map over many tokens takes keys of
one token (``n = 1``).
"""

from __future__ import annotations

from lsrl.errors import LsrlError
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Multi, Node
from lsrl.lang.program import ForEach
from lsrl.numbers import EXACT, Matrix
from lsrl.sugar import f_and, f_larger, f_modulo_counter, f_smaller, f_step

MU = 2  # integers compared at a half-integer: a margin of 1/2 saturates a step of slope 2
MAX_TABLE = 4096  # registers of the table, n (vocabulary + 1) ** n: the program builds in seconds


def generating_approximator(n: int, vocabulary: int) -> ForEach:
    """The generation form of Listing 2 (module doc) for keys and values of ``n`` tokens in
    ``0 .. vocabulary``."""
    tokens = vocabulary + 1
    keys = tokens ** n
    if n * keys > MAX_TABLE:
        raise LsrlError(f"discrete_approximator(generate=True): n={n} and vocabulary={vocabulary} need a table of "
                        f"{n * keys:,} registers (n (vocabulary + 1) ** n), more than {MAX_TABLE:,}; use keys of "
                        "fewer tokens")
    token = Input(dim=1, name="token", bounds=(0, vocabulary), integer=True)
    onehot = _one_hot(token, tokens)
    history = _shift_register(onehot, tokens, n, name="history")  # block d: the token d steps ago
    phase = f_modulo_counter(token, 2 * n, mu=MU, name="phase")
    at_key_end = f_and(f_larger(phase, n - 1.5, MU), f_smaller(phase, n - 0.5, MU), mu=MU, name="at_key_end")
    key_end = f_step(Linear(Concat([history, at_key_end]), _key_sums(n, tokens), b=[-(n + 0.5)] * keys), MU,
                     name="key_end")
    key_delays = _shift_register(key_end, keys, n + 1, name="key_delays")  # block d: key_end d steps ago
    writes = Multi(Concat([key_delays[keys:], Linear(token, [[1]] * (n * keys))]), name="table_writes")
    table = LinState(writes, A=EXACT.eye(n * keys), B=EXACT.eye(n * keys), name="table")
    reads = Multi(Concat([key_delays[:n * keys], table]), name="table_reads")
    answer = Linear(reads, [[1] * (n * keys)], name="answer")
    return ForEach(answer, name=f"discrete_approximator({n}, generate, vocabulary={vocabulary})")


def _one_hot(token: Node, tokens: int) -> Node:
    """``[token == v]`` for v in ``0 .. tokens - 1``: 1 within 1/2 of v (the tokens are integers)."""
    ones = [[1]] * tokens
    above = f_step(Linear(token, ones, b=[-(v - 0.5) for v in range(tokens)]), MU)
    below = f_step(Linear(token, [[-1]] * tokens, b=[v + 0.5 for v in range(tokens)]), MU)
    return f_and(above, below, mu=MU, name="onehot")


def _shift_register(signal: Node, width: int, length: int, name: str) -> LinState:
    """``length`` blocks of ``signal`` (of dim ``width``): block 0 is ``signal_t``, block d is
    ``signal_(t-d)``."""
    shift = EXACT.from_entries(((i + width, i, 1) for i in range(width * (length - 1))),
                               (width * length, width * length))
    enter = EXACT.from_entries(((i, i, 1) for i in range(width)), (width * length, width))
    return LinState(signal, A=shift, B=enter, name=name)


def _key_sums(n: int, tokens: int) -> Matrix:
    """Rows ``k`` (a key as the number with base-``tokens`` digits ``k_0 .. k_(n-1)``, ``k_0`` first):
    the history flags of its tokens (token i is ``n - 1 - i`` steps old at the key's last token) and
    the phase flag (the last column)."""
    keys = tokens ** n
    entries: list[tuple[int, int, int]] = []
    for key in range(keys):
        digits = [(key // tokens ** (n - 1 - i)) % tokens for i in range(n)]
        entries.extend((key, (n - 1 - i) * tokens + digit, 1) for i, digit in enumerate(digits))
        entries.append((key, n * tokens, 1))
    return EXACT.from_entries(entries, (keys, n * tokens + 1))
