"""The debranching cases of App. A, each a named rule, and the walk that applies them.

The walk follows the path from the Input. At the first op with more than one outgoing edge (the
branching op ``v``) it applies the case that matches the kinds of ``v``'s users; every case either
removes a branch or rewrites the users into the form a later case removes. All rewrites are exact
identities (slices commute with ReLU, ``x * 1 = x``, ``ReLU(x) - ReLU(-x) = x``, a LinState with
``A = 0, B = I`` copies its input), so the path computes what the program computes.

A Lin whose only user is a Multi (a *gate feed*, what the Multi bullet of Case 5A produces) is
treated as part of that Multi: Cases 1A/1B pull it up to the branching op together with the Multi.
"""

from __future__ import annotations

from lsrl.compiler.fusion import fuse_at, fuse_concat_identical
from lsrl.compiler.graph import CONCAT, LINEAR, LINSTATE, MULTI, RELU
from lsrl.errors import LsrlError


def _is_gate_feed(graph, op) -> bool:
    users = graph.users[op]
    return op.kind == LINEAR and len(users) == 1 and users[0].kind == MULTI


def _feeds_one_relu(graph, op) -> bool:
    users = graph.users[op]
    return len(users) == 1 and users[0].kind == RELU


def _nonzero_columns(matrix) -> set:
    return {j for _, j, _ in matrix.entries()}


def _columns_read(graph, v, user) -> set:
    """Components of ``v`` that ``user`` (or, for a Concat, the users after it) really reads.

    A bypass only carries these, so that a Concat waiting for its other inputs does not drag the
    whole of ``v`` through every later layer.
    """
    if user.kind == LINEAR:
        return _nonzero_columns(user.A)
    if user.kind == LINSTATE:
        return _nonzero_columns(user.B)
    if user.kind != CONCAT:
        return set(range(v.dim))
    read = set(range(user.dim)) if user is graph.output else set()  # the caller reads the output
    for after in graph.distinct_users(user):
        if after.kind == LINEAR:
            read |= _nonzero_columns(after.A)
        elif after.kind == LINSTATE:
            read |= _nonzero_columns(after.B)
        else:
            read |= set(range(user.dim))
    needed, offset = set(), 0
    for x in user.inputs:
        if x is v:
            needed |= {c - offset for c in read if offset <= c < offset + v.dim}
        offset += x.dim
    return needed


def _carried(graph, v, users) -> list:
    """Sorted components of ``v`` read by any of ``users`` (at least one, to keep shapes valid)."""
    columns = set()
    for user in users:
        columns |= _columns_read(graph, v, user)
    return sorted(columns) or [0]


def _scatter(backend, columns, width):
    """``width x len(columns)`` matrix putting a carried vector back at its place in ``v``."""
    return backend.from_entries(((c, i, 1) for i, c in enumerate(columns)), (width, len(columns)))


def _scattered(graph, carried_op, carried, width):
    """``carried_op`` (the components ``carried`` of a ``width``-wide value) at full width."""
    if carried == list(range(width)):
        return carried_op
    return graph.linear(carried_op, _scatter(graph.backend, carried, width))


# ---- the cases -------------------------------------------------------------------------------


def case_1a(graph, v, users):
    """All users are Multi: they compute the same thing, one is kept."""
    for duplicate in users[1:]:
        graph.replace(duplicate, users[0])


def case_1b(graph, v, users):
    """Multi (or gate feeds) and other users: one Lin + one Multi computes every product, and the
    other users read ``v`` passed through the Multi as ``v * 1``."""
    backend = graph.backend
    left, right, left_bias, right_bias, products = [], [], [], [], []
    for user in users:
        if user.kind == MULTI:
            half = user.dim
            left.append(backend.selection(range(half), v.dim))
            right.append(backend.selection(range(half, 2 * half), v.dim))
            left_bias.append(backend.zeros_vector(half))
            right_bias.append(backend.zeros_vector(half))
            products.append(user)
        elif _is_gate_feed(graph, user):
            half = user.dim // 2
            left.append(user.A.take_rows(range(half)))
            right.append(user.A.take_rows(range(half, 2 * half)))
            left_bias.append(user.b.take_rows(range(half)))
            right_bias.append(user.b.take_rows(range(half, 2 * half)))
            products.append(graph.users[user][0])
    others = [u for u in users if u.kind != MULTI and not _is_gate_feed(graph, u)]
    carried = _carried(graph, v, others)
    if others:
        left.append(backend.selection(carried, v.dim))
        right.append(backend.zeros(len(carried), v.dim))
        left_bias.append(backend.zeros_vector(len(carried)))
        right_bias.append(backend.constant_vector(len(carried), 1))
    merged = graph.multi(
        graph.linear(v, backend.vstack(left + right), backend.vstack(left_bias + right_bias)),
        name=products[0].name if products else None,  # errors about gates name a user's Multi
    )
    offset = 0
    for product in products:
        graph.replace(product, graph.slice(merged, offset, offset + product.dim))
        offset += product.dim
    if others:
        passed = graph.slice(merged, offset, offset + len(carried))
        passed = _scattered(graph, passed, carried, v.dim)
        for user in others:
            graph.redirect(user, v, passed)


def case_2(graph, v, users):
    """All users are LinState: one LinState with block-diagonal ``A`` and stacked ``B, b, s_0``."""
    backend = graph.backend
    merged = graph.linstate(
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


def case_3(graph, v, users):
    """All users are ReLU: one is kept."""
    for duplicate in users[1:]:
        graph.replace(duplicate, users[0])


def case_4(graph, v, users):
    """All users are Concat: those whose inputs are all ``v`` become Lins (one always exists: the
    first Concat in topological order can only read ``v``)."""
    converted = [u for u in users if fuse_concat_identical(graph, u)]
    if not converted:
        raise LsrlError(f"internal compiler error: Case 4 at {v.name} found no Concat reading only it")


def _push_slice_into(graph, v, piece, user, relu_of_v):
    """Move the slice ``piece`` of ``v`` past one of its users (the bullets of Case 5A)."""
    columns = piece.A.selected_columns()
    if user.kind == LINEAR:
        graph.replace(user, graph.linear(v, user.A.times_selection(columns, v.dim), user.b, name=user.name))
    elif user.kind == LINSTATE:
        B = user.B.times_selection(columns, v.dim)
        graph.replace(user, graph.linstate(v, user.A, B, user.b, user.init, name=user.name))
    elif user.kind == RELU:
        graph.replace(user, graph.selection(relu_of_v(), columns))
    elif user.kind == MULTI:
        graph.redirect(user, piece, graph.linear(v, piece.A))
    elif user.kind == CONCAT:
        # Concat(.., S v, ..) = T Concat(.., v, ..): every slice of v in the Concat reads v itself
        sources, columns, offsets = [], [], {}
        for x in user.inputs:
            source = v if (x.is_slice and x.inputs[0] is v) else x
            if source not in offsets:
                offsets[source] = sum(s.dim for s in sources)
                sources.append(source)
            picked = x.A.selected_columns() if source is not x else range(x.dim)
            columns.extend(offsets[source] + c for c in picked)
        joined = sources[0] if len(sources) == 1 else graph.concat(sources)
        graph.replace(user, graph.selection(joined, columns))
    else:
        raise LsrlError(f"internal compiler error: cannot push a slice into {user}")


def case_5a(graph, v, users):
    """All users are Slices (or Slices and Concats): each Slice is fused into the Lin / LinState
    after it, moved behind the ReLU or Concat after it, or (before a Multi) becomes that Multi's
    own gate feed."""
    shared_relu = []

    def relu_of_v():
        if v.kind == RELU:
            return v
        if not shared_relu:
            shared_relu.append(graph.relu(v))
        return shared_relu[0]

    for piece in users:
        if piece.kind != LINEAR:  # Concat users wait (see choose_case)
            continue
        if piece not in graph.users:  # its last user was a Concat already rewritten for another piece
            continue
        for user in graph.distinct_users(piece):
            _push_slice_into(graph, v, piece, user, relu_of_v)
        graph.remove(piece)


def case_5b(graph, v, users):
    """All users are Lin, not all Slices: one Lin with the distinct rows of all of them, then
    Slices (Case 5A pushes those further)."""
    backend = graph.backend
    row_index, blocks, bias_blocks, pickers = {}, [], [], []
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


def case_6(graph, v, users):
    """LinState and other users: the others read ``v`` through a dummy LinState (``A = 0, B = I``),
    after which Case 2 fuses all LinStates."""
    backend = graph.backend
    others = [u for u in users if u.kind != LINSTATE]
    carried = _carried(graph, v, others)
    width = len(carried)
    dummy = graph.linstate(
        v, backend.zeros(width, width), backend.selection(carried, v.dim),
        backend.zeros_vector(width), backend.zeros_vector(width),
    )
    passed = _scattered(graph, dummy, carried, v.dim)
    for user in others:
        graph.redirect(user, v, passed)


def case_7a(graph, v, users):
    """Lin and ReLU users, every Lin followed by exactly one ReLU: the ReLUs get identity Lins in
    front, so Case 5B and then Case 3 apply."""
    bypass = None
    for user in users:
        if user.kind == RELU:
            bypass = bypass or graph.linear(v, graph.backend.eye(v.dim))
            graph.redirect(user, v, bypass)


def _relu_bypass(graph, v, users, needs_bypass):
    """Users selected by ``needs_bypass`` read ``v`` (or their Lin of it) through
    ``[I, -I] ReLU([v; -v])`` (App. F.6), carrying only the components they read."""
    backend = graph.backend
    bypassed = [u for u in users if needs_bypass(u)]
    carried = _carried(graph, v, bypassed)
    select = backend.selection(carried, v.dim)
    both = graph.relu(graph.linear(v, backend.vstack([select, -select])))
    back = _scatter(backend, carried, v.dim)
    for user in bypassed:
        read = user.A @ back if user.kind == LINEAR else back
        through = graph.linear(both, backend.hstack([read, -read]), user.b if user.kind == LINEAR else None)
        if user.kind == LINEAR:
            graph.replace(user, through)
        else:
            graph.redirect(user, v, through)


def case_7b(graph, v, users):
    """Lin and ReLU users, some Lin not followed by a single ReLU: those Lins read ``v`` through a
    ReLU-based bypass ``[I, -I] ReLU([v; -v])``, which puts the graph in Case 7A."""
    _relu_bypass(graph, v, users, lambda u: u.kind == LINEAR and not _feeds_one_relu(graph, u))


def case_8(graph, v, users):
    """Lin and Concat users: the Concats read ``v`` through a Lin (the identity on the components
    they read); Case 5B merges it with the other Lins."""
    concats = [u for u in users if u.kind == CONCAT]
    carried = _carried(graph, v, concats)
    keep = _scatter(graph.backend, carried, v.dim) @ graph.backend.selection(carried, v.dim)
    bypass = graph.linear(v, keep)
    for user in concats:
        graph.redirect(user, v, bypass)


def case_9(graph, v, users):
    """ReLU and Concat users: the Concats read ``v`` through a ReLU-based bypass."""
    _relu_bypass(graph, v, users, lambda u: u.kind == CONCAT)


def case_10(graph, v, users):
    """Lin, ReLU and Concat users: ReLU-based bypasses for the Concats and for the Lins not followed
    by a single ReLU; then Cases 7A, 5B and 3 apply."""
    _relu_bypass(
        graph, v, users, lambda u: u.kind == CONCAT or (u.kind == LINEAR and not _feeds_one_relu(graph, u))
    )


def choose_case(graph, v, users):
    """The App. A case for branching op ``v`` with distinct ``users``."""
    kinds = {u.kind for u in users}
    if MULTI in kinds or any(_is_gate_feed(graph, u) for u in users):
        return case_1a if kinds == {MULTI} else case_1b
    if kinds == {LINSTATE}:
        return case_2
    if LINSTATE in kinds:
        return case_6
    if kinds == {RELU}:
        return case_3
    if kinds == {CONCAT}:
        return case_4
    if kinds == {LINEAR}:
        return case_5a if all(u.is_slice for u in users) else case_5b
    if kinds == {LINEAR, RELU}:
        lins = [u for u in users if u.kind == LINEAR]
        return case_7a if all(_feeds_one_relu(graph, u) for u in lins) else case_7b
    if kinds == {LINEAR, CONCAT}:
        # with only Slices beside the Concats, a bypass would be pushed straight back into the
        # Concats; pushing the Slices alone (Case 5A's bullets) makes the progress
        return case_5a if all(u.is_slice for u in users if u.kind == LINEAR) else case_8
    if kinds == {RELU, CONCAT}:
        return case_9
    return case_10


def debranch_at(graph, v, stats) -> None:
    """Apply one case at the branching op ``v``."""
    users = graph.distinct_users(v)
    if v.kind == RELU:  # ReLU users of a ReLU are the ReLU itself (preparation rule)
        relus = [u for u in users if u.kind == RELU]
        for user in relus:
            graph.replace(user, v)
        if relus:
            stats["fuse_relu_relu"] = stats.get("fuse_relu_relu", 0) + len(relus)
            return
    case = choose_case(graph, v, users)
    stats[case.__name__] = stats.get(case.__name__, 0) + 1
    case(graph, v, users)


def walk(graph, stats, on_step=lambda: None, max_rewrites=None) -> list:
    """Debranch until the graph is a path; returns the path from the Input to the output."""
    limit = max_rewrites or 200 * len(graph) + 1000
    path, rewrites = [graph.input], 0
    while True:
        current = path[-1]
        edges = graph.users[current]
        if not edges:
            if current is not graph.output:
                raise LsrlError(f"internal compiler error: {current.name} has no users but is not the output")
            return path
        rewrites += 1
        if rewrites > limit:
            raise LsrlError(f"internal compiler error: debranching did not terminate (at {current.name})")
        if len(edges) == 1:
            if fuse_at(graph, edges[0], stats):
                continue
            if fuse_at(graph, current, stats):
                if current not in graph.users:
                    path.pop()
                continue
            path.append(edges[0])
            on_step()
            continue
        debranch_at(graph, current, stats)
