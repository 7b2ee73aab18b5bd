"""The debranching cases of App. A, each a named rule ``case(graph, v, users)`` applied at a
branching op ``v`` with distinct ``users``.

Every case either removes a branch or rewrites the users into the form a later case removes (which
case applies where is the walk's choice: ``lsrl.compiler.debranch.walk``). All rewrites are exact
identities (slices commute with ReLU, ``x * 1 = x``, ``ReLU(x) - ReLU(-x) = x``, a LinState with
``A = 0, B = I`` copies its input), so the graph computes what it computed.

A Lin whose only user is a Multi (a *gate feed*, what the Multi bullet of Case 5A produces) is
treated as part of that Multi: Cases 1A/1B pull it up to the branching op together with the Multi.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, cast

from lsrl.compiler.fusion import fuse_concat_identical
from lsrl.errors import InternalError
from lsrl.ir.graph import Graph
from lsrl.ir.labels import Label, constant_for, copy_of, negation_of, positive_part
from lsrl.ir.ops import Op
from lsrl.kinds import CONCAT, LINEAR, LINSTATE, MULTI, RELU, RELUSTATE, STATE_KINDS

if TYPE_CHECKING:
    from lsrl.numbers import Matrix


def is_gate_feed(graph: Graph, op: Op) -> bool:
    user = graph.only_user(op)
    return op.kind == LINEAR and user is not None and user.kind == MULTI


def feeds_one_relu(graph: Graph, op: Op) -> bool:
    user = graph.only_user(op)
    return user is not None and user.kind == RELU


def _columns_read(v: Op, user: Op) -> AbstractSet[int]:
    """Components of ``v`` that ``user`` reads: a bypass carries only these."""
    if user.kind == LINEAR:
        return user.A.nonzero_columns()
    if user.kind in STATE_KINDS:
        return user.B.nonzero_columns()
    if user.kind == CONCAT:
        return {c for x, picks in user.slots if x is v for c in picks}
    return set(range(v.dim))


def _copies(v: Op, columns: Iterable[int]) -> list[Label]:
    """Labels of units that carry the components ``columns`` of ``v``."""
    return [copy_of(v.labels[c]) for c in columns]


def _carried(v: Op, users: Iterable[Op]) -> list[int]:
    """Sorted components of ``v`` read by any of ``users`` (at least one, to keep shapes valid)."""
    columns: set[int] = set()
    for user in users:
        columns |= _columns_read(v, user)
    return sorted(columns) or [0]


@dataclass
class _Carrier:
    """An op that carries the components ``columns`` of a branching op ``v`` past a layer: they
    are ``decode @ op`` (``decode=None``: ``op`` holds them as they are)."""

    graph: Graph
    v: Op
    op: Op
    columns: list[int]
    decode: Matrix | None = None

    @cached_property
    def plain(self) -> Op:
        """An op holding exactly ``v[columns]`` (one, shared by every Concat that needs it)."""
        return self.op if self.decode is None else self.graph.linear(self.op, self.decode,
                                                                       labels=_copies(self.v, self.columns))

    @cached_property
    def position(self) -> dict[int, int]:
        """Where each carried component of ``v`` sits in the carrier."""
        return {c: k for k, c in enumerate(self.columns)}

    def read_by(self, user: Op) -> None:
        """``user`` reads ``v`` from the carrier instead, taking only the components it reads."""
        graph, v, columns = self.graph, self.v, self.columns
        if user.kind in (LINEAR, *STATE_KINDS):
            weight = (user.A if user.kind == LINEAR else user.B).take_columns(columns)
            if self.decode is not None:
                weight = weight @ self.decode
            if user.kind == LINEAR:
                rebuilt = graph.linear(self.op, weight, user.b, name=user.name)
            else:
                rebuilt = graph.state_like(user, self.op, weight, name=user.name)
            graph.replace(user, rebuilt)
        elif user.kind == CONCAT:
            graph.regather(user, v, self.plain, self.position)
        else:  # reads every component of v
            full = self.plain
            if columns != list(range(v.dim)):
                spread = graph.backend.selection(columns, v.dim).transpose()
                full = graph.linear(full, spread, labels=[copy_of(label) for label in v.labels])
            graph.redirect(user, v, full)


# ---- the cases -------------------------------------------------------------------------------


def case_1a(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are Multi: they compute the same thing, one is kept."""
    for duplicate in users[1:]:
        graph.replace(duplicate, users[0])


def case_1b(graph: Graph, v: Op, users: list[Op]) -> None:
    """Multi (or gate feeds) and other users: one Lin + one Multi computes every product, and the
    other users read ``v`` passed through the Multi as ``v * 1``."""
    backend = graph.backend
    left, right, left_bias, right_bias, products = [], [], [], [], []
    left_labels, right_labels = [], []
    for user in users:
        if user.kind == MULTI:
            half = user.dim
            left.append(backend.selection(range(half), v.dim))
            right.append(backend.selection(range(half, 2 * half), v.dim))
            left_bias.append(backend.zeros_vector(half))
            right_bias.append(backend.zeros_vector(half))
            left_labels += v.labels[:half]
            right_labels += v.labels[half:]
            products.append(user)
        elif is_gate_feed(graph, user):
            half = user.dim // 2
            left.append(user.A.take_rows(range(half)))
            right.append(user.A.take_rows(range(half, 2 * half)))
            left_bias.append(user.b.take_rows(range(half)))
            right_bias.append(user.b.take_rows(range(half, 2 * half)))
            left_labels += user.labels[:half]
            right_labels += user.labels[half:]
            products.append(cast(Op, graph.only_user(user)))  # a gate feed's only user: its Multi
    others = [u for u in users if u.kind != MULTI and not is_gate_feed(graph, u)]
    carried = _carried(v, others)
    if others:
        left.append(backend.selection(carried, v.dim))
        right.append(backend.zeros(len(carried), v.dim))
        left_bias.append(backend.zeros_vector(len(carried)))
        right_bias.append(backend.constant_vector(len(carried), 1))
        left_labels += _copies(v, carried)
        right_labels += [constant_for(v.labels[c]) for c in carried]  # the 1 in v * 1
    factors = graph.linear(v, backend.vstack(left + right), backend.vstack(left_bias + right_bias),
                           labels=left_labels + right_labels)
    merged = graph.multi(
        factors,
        name=products[0].name if products else None,  # errors about gates name a user's Multi
        labels=[None] * sum(p.dim for p in products) + _copies(v, carried if others else []),
    )
    offset = 0
    for product in products:
        graph.replace(product, graph.slice(merged, offset, offset + product.dim))
        offset += product.dim
    if others:
        carrier = _Carrier(graph, v, graph.slice(merged, offset, offset + len(carried)), carried)
        for user in others:
            carrier.read_by(user)


def _merge_states(graph: Graph, v: Op, users: list[Op], build: Callable[..., Op]) -> None:
    """One state op (``build``: ``graph.linstate`` or ``graph.relustate``) with block-diagonal ``A``
    and stacked ``B, b, s_0`` in place of ``users``, each replaced by its Slice of it."""
    backend = graph.backend
    merged = build(
        v,
        backend.block_diag([u.A for u in users]),
        backend.vstack([u.B for u in users]),
        backend.vstack([u.b for u in users]),
        backend.vstack([u.init for u in users]),
    )
    offset = 0
    for user in users:
        graph.replace(user, graph.slice(merged, offset, offset + user.dim))
        offset += user.dim


def case_2(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are LinState: one LinState with block-diagonal ``A`` and stacked ``B, b, s_0``."""
    _merge_states(graph, v, users, graph.linstate)


def case_3(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are ReLU: one is kept."""
    for duplicate in users[1:]:
        graph.replace(duplicate, users[0])


def case_4(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are Concat: those whose inputs are all ``v`` become Lins (one always exists: the
    first Concat in topological order can only read ``v``)."""
    converted = [u for u in users if fuse_concat_identical(graph, u)]
    if not converted:
        raise InternalError(f"Case 4 at {v.name} found no Concat reading only it")


def _push_slice_into(graph: Graph, v: Op, piece: Op, user: Op, relu_of_v: Callable[[], Op]) -> None:
    """Move the slice ``piece`` of ``v`` past one of its users (the bullets of Case 5A)."""
    columns = piece.A.selected_columns()
    if user.kind == LINEAR:
        graph.replace(user, graph.linear(v, user.A.times_selection(columns, v.dim), user.b, name=user.name))
    elif user.kind in STATE_KINDS:
        B = user.B.times_selection(columns, v.dim)
        graph.replace(user, graph.state_like(user, v, B, name=user.name))
    elif user.kind == RELU:
        graph.replace(user, graph.selection(relu_of_v(), columns))
    elif user.kind == MULTI:
        graph.redirect(user, piece, graph.linear(v, piece.A, labels=piece.labels))
    elif user.kind == CONCAT:  # the Concat gathers the components from v itself
        graph.regather(user, piece, v, columns)
    else:
        raise InternalError(f"Case 5A cannot push a slice of {v.name} into {user}")


def case_5a(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are Slices (or Slices and Concats): each Slice is fused into the Lin / LinState
    after it, moved behind the ReLU or Concat after it, or (before a Multi) becomes that Multi's
    own gate feed."""
    shared_relu: list[Op] = []

    def relu_of_v() -> Op:
        if v.kind == RELU:
            return v
        if not shared_relu:
            shared_relu.append(graph.relu(v, labels=[positive_part(label) for label in v.labels]))
        return shared_relu[0]

    for piece in users:
        if piece.kind != LINEAR:  # Concat users wait (see choose_case)
            continue
        if piece not in graph.users:  # its last user was a Concat already rewritten for another piece
            continue
        for user in graph.distinct_users(piece):
            _push_slice_into(graph, v, piece, user, relu_of_v)
        graph.remove(piece)


def case_5b(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are Lin, not all Slices: one Lin with the distinct rows of all of them, then
    Slices (Case 5A pushes those further)."""
    backend = graph.backend
    row_index: dict[tuple, int] = {}
    blocks, bias_blocks, pickers = [], [], []
    for user in users:
        picks = []
        for i, key in enumerate(zip(user.A.row_keys(), user.b.row_keys())):
            if key not in row_index:
                row_index[key] = len(row_index)
                blocks.append(user.A.take_rows([i]))
                bias_blocks.append(user.b.take_rows([i]))
            picks.append(row_index[key])
        pickers.append(picks)
    merged = graph.linear(v, backend.vstack(blocks), backend.vstack(bias_blocks))
    for user, picks in zip(users, pickers):
        graph.replace(user, graph.selection(merged, picks))


def case_6(graph: Graph, v: Op, users: list[Op]) -> None:
    """LinState and other users: the others read ``v`` through a dummy LinState (``A = 0, B = I``),
    after which Case 2 fuses all LinStates."""
    backend = graph.backend
    others = [u for u in users if u.kind != LINSTATE]
    carried = _carried(v, others)
    width = len(carried)
    dummy = graph.linstate(
        v, backend.zeros(width, width), backend.selection(carried, v.dim),
        backend.zeros_vector(width), backend.zeros_vector(width), labels=_copies(v, carried),
    )
    carrier = _Carrier(graph, v, dummy, carried)
    for user in others:
        carrier.read_by(user)


def case_2r(graph: Graph, v: Op, users: list[Op]) -> None:
    """All users are ReLUState: one ReLUState with block-diagonal ``A`` and stacked ``B, b, h_0``
    (Case 2 for ReLUStates: the ReLU acts component by component, so the blocks stay apart)."""
    _merge_states(graph, v, users, graph.relustate)


def case_6r(graph: Graph, v: Op, users: list[Op]) -> None:
    """ReLUState and other users (no LinState, no Multi): the others read ``v`` through a dummy
    ReLUState with ``A = 0`` that holds ``v`` split as in Eq. (11) (``_relu_carried``); then Case 2R
    merges all ReLUStates."""
    backend = graph.backend
    others = [u for u in users if u.kind != RELUSTATE]
    carried = _carried(v, others)
    select, decode, _, labels = _relu_carried(graph, v, carried)
    width = select.shape2d[0]
    dummy = graph.relustate(
        v, backend.zeros(width, width), select, backend.zeros_vector(width), backend.zeros_vector(width),
        labels=labels,
    )
    carrier = _Carrier(graph, v, dummy, carried, decode=decode)
    for user in others:
        carrier.read_by(user)


def case_7a(graph: Graph, v: Op, users: list[Op]) -> None:
    """Lin and ReLU users, every Lin followed by exactly one ReLU: the ReLUs get identity Lins in
    front, so Case 5B and then Case 3 apply."""
    bypass = None
    for user in users:
        if user.kind == RELU:
            bypass = bypass or graph.linear(v, graph.backend.eye(v.dim), labels=_copies(v, range(v.dim)))
            graph.redirect(user, v, bypass)


def _relu_carried(graph: Graph, v: Op, carried: list[int]) -> tuple[Matrix, Matrix | None, list[Label], list[Label]]:
    """What a ReLU keeps exact of ``v[carried]``: the rows that read it, the decode back from the
    units after the ReLU (None: they hold ``v[carried]`` as it is), and the labels before and after
    the ReLU. A component that is never negative is carried alone (``ReLU(v) = v``), any other as
    ``[v; -v]`` (``ReLU(v) - ReLU(-v) = v``, Eq. (11))."""
    backend = graph.backend
    copies = _copies(v, carried)
    nonnegative = graph.nonnegative(v)
    signed = [k for k, c in enumerate(carried) if c not in nonnegative]
    if not signed:
        return backend.selection(carried, v.dim), None, copies, copies
    negated_rows = -backend.selection([carried[k] for k in signed], v.dim)
    select = backend.vstack([backend.selection(carried, v.dim), negated_rows])
    unfold = [(k, k, 1) for k in range(len(carried))] + [(k, len(carried) + m, -1) for m, k in enumerate(signed)]
    decode = backend.from_entries(unfold, (len(carried), len(carried) + len(signed)))
    negations = [negation_of(copies[k]) for k in signed]
    after = [positive_part(label) if k in signed else label for k, label in enumerate(copies)]
    return select, decode, copies + negations, after + [positive_part(label) for label in negations]


def _relu_bypass(graph: Graph, v: Op, users: list[Op], needs_bypass: Callable[[Op], bool]) -> None:
    """Users selected by ``needs_bypass`` read ``v`` through a ReLU (App. F.6), as ``_relu_carried``
    splits the components they read."""
    bypassed = [u for u in users if needs_bypass(u)]
    carried = _carried(v, bypassed)
    select, decode, before, after = _relu_carried(graph, v, carried)
    carrier = _Carrier(graph, v, graph.relu(graph.linear(v, select, labels=before), labels=after), carried, decode)
    for user in bypassed:
        carrier.read_by(user)


def case_7b(graph: Graph, v: Op, users: list[Op]) -> None:
    """Lin and ReLU users, some Lin not followed by a single ReLU: those Lins read ``v`` through a
    ReLU-based bypass ``[I, -I] ReLU([v; -v])``, which puts the graph in Case 7A."""
    _relu_bypass(graph, v, users, lambda u: u.kind == LINEAR and not feeds_one_relu(graph, u))


def case_8(graph: Graph, v: Op, users: list[Op]) -> None:
    """Lin and Concat users: the Concats (and ReLUs that wait for a later ReLU layer) read ``v``
    through a Slice of the components they read; Case 5B merges it with the other Lins."""
    not_lins = [u for u in users if u.kind != LINEAR]
    carried = _carried(v, not_lins)
    carrier = _Carrier(graph, v, v, carried, decode=graph.backend.selection(carried, v.dim))
    for user in not_lins:
        carrier.read_by(user)


def case_9(graph: Graph, v: Op, users: list[Op]) -> None:
    """ReLU and Concat users: the Concats read ``v`` through a ReLU-based bypass."""
    _relu_bypass(graph, v, users, lambda u: u.kind == CONCAT)


def case_10(graph: Graph, v: Op, users: list[Op]) -> None:
    """Lin, ReLU and Concat users: ReLU-based bypasses for the Concats and for the Lins not followed
    by a single ReLU; then Cases 7A, 5B and 3 apply."""
    _relu_bypass(
        graph, v, users, lambda u: u.kind == CONCAT or (u.kind == LINEAR and not feeds_one_relu(graph, u))
    )
