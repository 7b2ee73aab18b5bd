"""The debranching walk: where App. A's cases apply, and in which order (its whole strategy).

The walk follows the path from the Input (``walk``). While the end of the path has one outgoing
edge, the walk fuses (``fuse_at``: the end with its user, or the user with its own user) or, when
no rule fits, extends the path by that user. At the first op with more than one outgoing edge (the
branching op ``v``) it applies the case that matches the kinds of ``v``'s users (``choose_case``),
after two choices of strategy, both made here:

* **Waiting users** (``waiting_users``): the walk is greedy, a Multi or ReLU user makes the next
  layer a Multi or ReLU layer. When such a user's value only goes on to the output and a layer of
  its kind lies further down anyway, it waits for that layer (carried along as a Concat's input
  would be: a gate feed counts as a plain Lin, a ReLU as a Concat), and one layer computes both.
* **Concat-only exits**: beside Concats alone nothing waits (``waiting_users`` returns ``[]``), and
  Slices beside Concats are pushed into their readers (Case 5A) rather than bypassed (Case 8):
  either would rebuild the Lin or the bypass that the Concats read, and the walk would not move.

The look-ahead that finds a later layer visits ``_LOOK_AHEAD`` ops below ``v`` at most. It exists
for speed, not for correctness: unbounded, every branching op would search the rest of the graph
(quadratic time on long programs). A partner layer farther down is missed, which only makes the
walk greedy there (one more layer, still exact); the partners that matter sit a few ops below.

**Why it stops.** A *step* is one fusion, one path extension or one case. The walk checks, every
step, the measure of the kind of step taken, and raises ``InternalError`` naming the rule or the
case when it does not decrease (there is no step budget):

* a path extension: the ops ahead of the path (not on it) lose one, the op the path takes (so by
  construction: the graph is not touched);
* a fusion (``_fuse``): ``(ops in the graph, Concats in the graph)`` decreases in lexicographic
  order: every rule removes an op, except ``fuse_concat_identical``, which turns a Concat into a
  Slice;
* a case at ``v``: the configurations not yet met at this end. A *configuration* is the case with
  what it is applied to (``_configuration``: every user's kind, width, weights and picks, and the
  kinds of the users' readers); the set of those met is emptied when the path moves on, and
  meeting one again stops the walk. Why a configuration does not come back: the cases form chains
  that leave ``v`` with one user (10 or 9 -> 7B -> 7A -> 5B; 8 -> 5B; 6 -> 2; 6R -> 2R; 4 -> 5A;
  1A, 1B, 2, 3 and 5B at once), and the one case that can start a chain again, 5A, replaces each
  Slice of ``v`` by the Slice's readers, which lie nearer the output, or (for a ReLU or a Multi)
  by a ReLU of ``v`` or a gate feed, which no Slice precedes: the users of ``v`` only move down. A
  configuration met again is a walk going round in a circle: the Lin that beside Concats alone a
  waiting user would rebuild forever was one (``waiting_users`` now keeps it from waiting).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Iterator

from lsrl.compiler.debranch.cases import (
    case_1a, case_1b, case_2, case_2r, case_3, case_4, case_5a, case_5b, case_6, case_6r, case_7a, case_7b, case_8,
    case_9, case_10, feeds_one_relu, is_gate_feed,
)
from lsrl.compiler.fusion import computation, fuse_at
from lsrl.errors import InternalError
from lsrl.ir.graph import Graph
from lsrl.ir.ops import Op
from lsrl.kinds import CONCAT, LINEAR, LINSTATE, MULTI, RELU, RELUSTATE, Kind

Case = Callable[[Graph, Op, list[Op]], None]  # one of App. A's cases (lsrl.compiler.debranch.cases)


_LOOK_AHEAD = 256  # ops a search below the branching op visits at most (see the module doc)


def _below(graph: Graph, starts: Iterable[Op]) -> Iterator[Op | None]:
    """``starts``, then the ops below them, breadth first; ``None`` last if the look-ahead ran out."""
    queue, seen = list(starts), set(starts)
    for current in queue:
        if len(seen) > _LOOK_AHEAD:
            yield None
            return
        yield current
        for user in graph.users[current]:
            if user not in seen:
                seen.add(user)
                queue.append(user)


def _goes_straight_to_output(graph: Graph, op: Op) -> bool:
    """Whether ``op``'s value reaches the output through Lins and Concats only: computing it later
    delays no layer after it."""
    return all(x is op or (x is not None and x.kind in (LINEAR, CONCAT)) for x in _below(graph, [op]))


def _kind_ahead(graph: Graph, starts: Iterable[Op], kind: Kind) -> bool:
    """Whether an op of ``kind`` lies below ``starts`` (within the look-ahead)."""
    return any(x is not None and x.kind == kind for x in _below(graph, starts))


def _can_wait(graph: Graph, users: list[Op], waiting: list[Op], layer_kind: Kind,
              value_of: Callable[[Op], Op | None]) -> bool:
    """Whether the users ``waiting`` (their values ``value_of(u)``) can wait for a later layer of
    ``layer_kind``: each value goes straight to the output, such a layer lies below the other users,
    and one of those is no Concat. The case then applied fuses that user into the next layer, so the
    walk moves on (beside Concats alone it would rebuild the same Lin forever)."""
    others = [u for u in users if u not in waiting]
    return (
        bool(waiting)
        and any(u.kind != CONCAT for u in others)
        and all(value is not None and _goes_straight_to_output(graph, value) for value in map(value_of, waiting))
        and _kind_ahead(graph, others, layer_kind)
    )


def waiting_users(graph: Graph, users: list[Op]) -> list[Op]:
    """The gate feeds and ReLUs among ``users`` that wait for a later Multi or ReLU layer: all of a
    kind or none (those that cannot wait make the layer now, and the others join it)."""
    feeds = [u for u in users if is_gate_feed(graph, u)]
    relus = [u for u in users if u.kind == RELU]
    waiting = []
    if all(u.kind != MULTI for u in users) and _can_wait(graph, users, feeds, MULTI, graph.only_user):
        waiting += feeds
    if not any(u.kind == LINEAR and feeds_one_relu(graph, u) for u in users) and \
            _can_wait(graph, users, relus, RELU, lambda u: u):
        waiting += relus
    if all(u.kind == CONCAT for u in users if u not in waiting):  # each kind counted on the other to move on
        return []
    return waiting


def choose_case(graph: Graph, v: Op, users: list[Op], waiting: Collection[Op] = ()) -> Case:
    """The App. A case for branching op ``v`` with distinct ``users``. Users ``waiting`` (see
    ``waiting_users``) only need ``v`` carried: a gate feed counts as a plain Lin, a ReLU as a Concat."""
    kinds = {CONCAT if u in waiting and u.kind == RELU else u.kind for u in users}
    if MULTI in kinds or any(is_gate_feed(graph, u) and u not in waiting for u in users):
        return case_1a if kinds == {MULTI} else case_1b
    if kinds == {LINSTATE}:
        return case_2
    if LINSTATE in kinds:
        return case_6
    if kinds == {RELUSTATE}:
        return case_2r
    if RELUSTATE in kinds:
        return case_6r
    if kinds == {RELU}:
        return case_3
    if kinds == {CONCAT}:
        return case_4
    if kinds == {LINEAR}:
        return case_5a if all(u.is_slice for u in users) else case_5b
    if kinds == {LINEAR, RELU}:
        lins = [u for u in users if u.kind == LINEAR]
        return case_7a if all(feeds_one_relu(graph, u) for u in lins) else case_7b
    if kinds == {LINEAR, CONCAT}:
        # with only Slices beside the Concats, a bypass would be pushed straight back into the
        # Concats; pushing the Slices alone (Case 5A's bullets) makes the progress
        return case_5a if all(u.is_slice for u in users if u.kind == LINEAR) else case_8
    if kinds == {RELU, CONCAT}:
        return case_9
    return case_10


def _merge_relu_users(graph: Graph, v: Op, users: list[Op]) -> bool:
    """ReLU users of a ReLU ``v`` are ``v`` itself (the preparation rule ``fuse_relu_relu``)."""
    relus = [u for u in users if u.kind == RELU] if v.kind == RELU else []
    for user in relus:
        graph.replace(user, v)
    if relus:
        graph.count("fuse_relu_relu", len(relus))
    return bool(relus)


def _case_for(graph: Graph, v: Op, users: list[Op]) -> Case:
    """The case to apply at ``v`` now, its users that wait for a later layer counted in the stats."""
    waiting = waiting_users(graph, users)
    if waiting:
        graph.count("wait_for_later_layer")
    case = choose_case(graph, v, users, waiting)
    graph.count(case.__name__)
    return case


def debranch_at(graph: Graph, v: Op) -> None:
    """Apply one case at the branching op ``v``."""
    users = graph.distinct_users(v)
    if not _merge_relu_users(graph, v, users):
        _case_for(graph, v, users)(graph, v, users)


def _configuration(graph: Graph, case: Case, users: list[Op]) -> tuple:
    """What ``case`` is applied to at a branching op: its users as kind, width, weights and picks,
    with the kinds of their readers (at one end of the path, the ops a case rewrites)."""
    users_seen = _multiset(
        (u.kind, u.dim, computation(u)[2:], _multiset(r.kind for r in graph.users[u])) for u in users
    )  # the order of the users does not matter, and the keys are cached, cheap to hash
    return case.__name__, users_seen


def _multiset(items: Iterable[Hashable]) -> frozenset[tuple[Hashable, int]]:
    """``items`` with their multiplicities, hashable (a plain dict: ``Counter`` costs more per call here)."""
    counts: dict[Hashable, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return frozenset(counts.items())


def _fusion_measure(graph: Graph) -> tuple[int, int]:
    return len(graph), graph.count_of(CONCAT)


def _fuse(graph: Graph, op: Op) -> bool:
    """``fuse_at(graph, op)``, checked to decrease ``_fusion_measure``."""
    before = _fusion_measure(graph)
    rule = fuse_at(graph, op)
    if rule is not None and not _fusion_measure(graph) < before:
        raise InternalError(f"debranching: {rule} at {op.name} left (ops, Concats) at {_fusion_measure(graph)}, "
                            f"not below {before}")
    return rule is not None


def _no_progress(done: int, total: int) -> None:
    pass


def walk(graph: Graph, on_progress: Callable[[int, int], None] = _no_progress) -> None:
    """Debranch ``graph`` in place until it is a path; each step is checked to decrease its measure
    (see the module doc). Progress is the share of ops behind the path (never decreasing, although
    bypasses add ops), reported as ``on_progress(done, total)``."""
    total, done = len(graph), 1
    path = [graph.input]
    met: set[tuple] = set()  # configurations a case was applied to at the current end
    on_progress(done, total)
    while True:
        current = path[-1]
        if not graph.users[current]:
            if current is not graph.output:
                raise InternalError(f"debranching: {current.name} has no users but is not the output")
            on_progress(total, total)
            return
        user = graph.only_user(current)
        if user is None:
            users = graph.distinct_users(current)
            before = _fusion_measure(graph)
            if _merge_relu_users(graph, current, users):
                if not _fusion_measure(graph) < before:
                    raise InternalError(f"debranching: fuse_relu_relu at {current.name} removed no op")
                continue
            case = _case_for(graph, current, users)
            configuration = _configuration(graph, case, users)
            if configuration in met:
                raise InternalError(f"debranching: {case.__name__} met the same users at {current.name} again "
                                    f"({', '.join(u.describe() for u in users)}): the walk would go round in a circle")
            met.add(configuration)
            case(graph, current, users)
            continue
        if _fuse(graph, user):
            continue
        if _fuse(graph, current):
            if current not in graph.users:
                path.pop()
                met.clear()
            continue
        path.append(user)
        met.clear()
        done = max(done, total - (len(graph) - len(path)))
        on_progress(done, total)


def debranch(graph: Graph, on_progress: Callable[[int, int], None] = _no_progress) -> Graph:
    """Stage 2: App. A's cases, applied where the path from the Input branches, until the graph is
    a path."""
    graph = graph.copy()
    walk(graph, on_progress)
    return graph
