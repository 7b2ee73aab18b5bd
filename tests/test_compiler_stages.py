"""The compiler's stages one by one, and each App. A case and each fusion on a small graph of its own.

A rule test builds the working graph of a small program (no preparation, so that the graph is as
written), applies the one rule at the op named in the test, and checks the shape it promises and
that the graph computes exactly what it computed before the rewrite (``Graph.to_program`` runs the
working graph through the interpreter).
"""

import importlib
import random
from fractions import Fraction

import numpy as np
import pytest

import lsrl
from lsrl.errors import InternalError
from conftest import as_fractions
from lsrl.compiler import PASSES, debranch, prepare, prune, run_passes, to_graph, to_layers
from lsrl.ir.ops import Op, OpParts
from lsrl.kinds import Kind
from lsrl.programs import discrete_approximator

rules = importlib.import_module("lsrl.compiler.debranch.walk")  # the walk; lsrl.compiler.debranch is the stage
fusion = importlib.import_module("lsrl.compiler.fusion")


def exact_outputs(graph, xs):
    return as_fractions(graph.to_program()(xs, exact=True))


def random_inputs(dim, steps=6, seed=0):
    rng = random.Random(seed)
    return np.array([[Fraction(rng.randint(-9, 9), rng.randint(1, 4)) for _ in range(dim)] for _ in range(steps)],
                    dtype=object)


def op_named(graph, name):
    return next(op for op in graph.users if op.name == name)


def kinds_of_users(graph, op):
    return sorted((user.kind for user in graph.distinct_users(op)), key=str.lower)


def apply_rule(program, at, rule, apply, seed=0):
    """``apply(graph, op)`` at the op named ``at``, which must count as one ``rule`` and leave the
    outputs exactly as they were; returns (graph after, op)."""
    before = to_graph(program)
    graph = before.copy()
    op = op_named(graph, at)
    apply(graph, op)
    assert graph.stats == {rule: 1}
    xs = random_inputs(program.input.dim, seed=seed)
    assert exact_outputs(graph, xs) == exact_outputs(before, xs)
    return graph, op


def apply_case(program, at, expected_case):
    """Apply the App. A case at the op named ``at``; returns (graph after, v)."""

    def check_and_apply(graph, v):
        assert rules.choose_case(graph, v, graph.distinct_users(v)).__name__ == expected_case
        rules.debranch_at(graph, v)

    return apply_rule(program, at, expected_case, check_and_apply)


# ---- the cases of App. A ------------------------------------------------------------------------


def test_case_1a_keeps_one_of_several_multis():
    x = lsrl.Input(4, name="v")
    graph, v = apply_case(lsrl.ForEach(lsrl.Concat([lsrl.Multi(x), lsrl.Multi(x)])), "v", "case_1a")
    assert kinds_of_users(graph, v) == [Kind.MULTI]


def test_case_1b_passes_the_other_users_through_the_multi():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.Multi(x), lsrl.Linear(x, [[1, 2]])]))
    graph, v = apply_case(program, "v", "case_1b")
    (feed,) = graph.distinct_users(v)
    assert feed.kind == Kind.LINEAR and kinds_of_users(graph, feed) == [Kind.MULTI]


@pytest.mark.parametrize("state,case,kind", [(lsrl.LinState, "case_2", Kind.LINSTATE),
                                              (lsrl.ReLUState, "case_2r", Kind.RELUSTATE)])
def test_case_2_merges_states_into_one_block_diagonal_state(state, case, kind):
    x = lsrl.Input(1, name="v")
    first = state(x, [[1]], [[-1]], b=[2])
    second = state(x, [[Fraction(1, 2)]], [[2]], init_state=[3])
    graph, v = apply_case(lsrl.ForEach(lsrl.Concat([first, second])), "v", case)
    (merged,) = graph.distinct_users(v)
    assert merged.kind == kind and merged.dim == 2
    assert merged.A.to_fractions() == [[1, 0], [0, Fraction(1, 2)]] and merged.init.to_fractions() == [0, 3]


def test_case_3_keeps_one_of_several_relus():
    x = lsrl.Input(2, name="v")
    graph, v = apply_case(lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x), lsrl.ReLU(x)])), "v", "case_3")
    assert kinds_of_users(graph, v) == [Kind.RELU]


def test_case_4_turns_a_concat_of_v_alone_into_a_slice():
    x = lsrl.Input(2, name="v")
    doubled = lsrl.Concat([x, x])
    program = lsrl.ForEach(lsrl.Concat([x, lsrl.Linear(doubled, [[1, 0, 0, 1]])]))
    graph, v = apply_case(program, "v", "case_4")
    assert kinds_of_users(graph, v) == [Kind.CONCAT, Kind.LINEAR]


def test_case_5a_pushes_slices_into_their_users():
    x = lsrl.Input(3, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x[0:2]), lsrl.Linear(x[1:3], [[1, -1]]), lsrl.LinState(x[2:3], [[1]], [[1]])]))
    graph, v = apply_case(program, "v", "case_5a")
    assert not any(user.is_slice for user in graph.distinct_users(v))
    assert kinds_of_users(graph, v) == [Kind.LINEAR, Kind.LINSTATE, Kind.RELU]


def test_case_5a_gathers_a_slice_into_a_concat_without_widening_it():
    x = lsrl.Input(5, name="v")
    y = lsrl.ReLU(x[0:1], name="y")
    program = lsrl.ForEach(lsrl.Concat([lsrl.Concat([x[3:4], y], name="pair"), x[4:5]]))
    graph, v = apply_case(program, "v", "case_5a")
    pair = op_named(graph, "pair")
    assert pair.dim == 2 and [list(p) for p in pair.picks] == [[3], [0]]


def test_case_5b_merges_linears_into_one_with_distinct_rows():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.Linear(x, [[1, 2], [3, 4]]), lsrl.Linear(x, [[3, 4], [0, 1]])]))
    graph, v = apply_case(program, "v", "case_5b")
    (merged,) = graph.distinct_users(v)
    assert merged.kind == Kind.LINEAR and merged.dim == 3  # the row [3, 4] once
    assert all(user.is_slice for user in graph.distinct_users(merged))


def test_case_6_reads_the_other_users_through_a_copying_linstate():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.LinState(x, [[1]], [[1, 0]]), lsrl.Linear(x, [[0, 5]])]))
    graph, v = apply_case(program, "v", "case_6")
    assert kinds_of_users(graph, v) == [Kind.LINSTATE, Kind.LINSTATE]
    dummy = next(u for u in graph.distinct_users(v) if u.A.is_zero())
    assert dummy.dim == 1  # carries only component 1, the one the Linear reads


def test_case_7a_puts_identity_linears_in_front_of_the_relus():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(lsrl.Linear(x, [[1, 1]])), lsrl.ReLU(x)]))
    graph, v = apply_case(program, "v", "case_7a")
    assert kinds_of_users(graph, v) == [Kind.LINEAR, Kind.LINEAR]


def test_case_7b_reads_lonely_linears_through_a_relu_bypass():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([lsrl.Linear(x, [[1, -1]]), lsrl.ReLU(x)]))
    graph, v = apply_case(program, "v", "case_7b")
    assert rules.choose_case(graph, v, graph.distinct_users(v)).__name__ == "case_7a"


def test_case_8_reads_concats_through_a_slice_of_what_they_read():
    x = lsrl.Input(3, name="v")
    relu = lsrl.ReLU(lsrl.Linear(x, [[1, 1, 0]]))
    program = lsrl.ForEach(lsrl.Concat([x[2:3], relu]))
    graph = to_graph(program)
    # the outer Concat reads a Slice; gather it first so that v has a Concat user beside the Linear
    assert fusion.fuse_at(graph, op_named(graph, graph.output.inputs[0].name))
    v = op_named(graph, "v")
    assert kinds_of_users(graph, v) == [Kind.CONCAT, Kind.LINEAR]
    rules.debranch_at(graph, v)
    assert graph.stats["case_8"] == 1
    users = graph.distinct_users(v)
    assert sorted((u.kind for u in users), key=str.lower) == [Kind.LINEAR, Kind.LINEAR]
    assert any(u.is_slice and u.A.selected_columns() == [2] for u in users)
    xs = random_inputs(3)
    assert exact_outputs(graph, xs) == exact_outputs(to_graph(program), xs)


def test_case_9_reads_concats_through_a_relu_bypass():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([x, lsrl.Linear(lsrl.ReLU(x), [[1, 1]])]))
    graph, v = apply_case(program, "v", "case_9")
    assert Kind.CONCAT not in kinds_of_users(graph, v)


def test_a_relu_bypass_carries_a_component_that_is_never_negative_alone():
    """``v = [a + 2b; a - b]`` of ``[a; b] = ReLU(x)``: the first is >= 0 and passes the bypass's ReLU
    as one unit, the second as two (``ReLU(v) - ReLU(-v)``)."""
    x = lsrl.Input(2)
    v = lsrl.Linear(lsrl.ReLU(x), [[1, 2], [1, -1]], name="v")
    program = lsrl.ForEach(lsrl.Concat([v, lsrl.Linear(lsrl.ReLU(v), [[1, 1]])]))
    graph, v = apply_case(program, "v", "case_9")
    assert graph.nonnegative(v) == {0}
    (bypass,) = [u for u in graph.distinct_users(v) if u.kind == Kind.LINEAR]
    assert bypass.dim == 3 and kinds_of_users(graph, bypass) == [Kind.RELU]


@pytest.mark.slow
def test_components_said_to_be_nonnegative_never_are_negative():
    """``Graph.nonnegative`` against the values: on the prepared graphs of random programs, every
    component it names is >= 0 at every step; and it names many."""
    from tests.test_random_programs import _generated, _inputs_for

    named = 0
    for seed in range(40):
        generated = _generated(seed)
        graph = prepare(to_graph(generated.program))
        trace = graph.to_program().trace(np.array(_inputs_for(seed, generated.d_in)[0], dtype=object), exact=True)
        for op in graph.ops():
            nonnegative = sorted(graph.nonnegative(op))
            assert (trace[op.name][:, nonnegative] >= 0).all(), f"seed {seed}: {op.name}"
            named += len(nonnegative)
    assert named > 200


def test_case_10_bypasses_concats_and_lonely_linears():
    x = lsrl.Input(2, name="v")
    program = lsrl.ForEach(lsrl.Concat([x, lsrl.Linear(x, [[2, 0]]), lsrl.ReLU(x)]))
    graph, v = apply_case(program, "v", "case_10")
    assert Kind.CONCAT not in kinds_of_users(graph, v)
    assert rules.choose_case(graph, v, graph.distinct_users(v)).__name__ == "case_7a"


# ---- layers that wait for a later layer of their kind --------------------------------------------


def test_the_walk_stops_with_the_case_that_met_the_same_users_again(monkeypatch):
    x = lsrl.Input(1, name="v")
    graph = to_graph(lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x), lsrl.ReLU(x)])))  # unprepared: two ReLUs of v

    def case_3(graph, v, users):  # a case that leaves the users as they are
        pass

    monkeypatch.setattr(rules, "case_3", case_3)
    with pytest.raises(InternalError, match="case_3 met the same users at v again"):
        rules.walk(graph)


def test_the_walk_stops_on_a_fusion_that_does_not_shrink_the_graph(monkeypatch):
    x = lsrl.Input(1, name="x")
    graph = to_graph(lsrl.ForEach(lsrl.Linear(lsrl.Linear(x, [[2]], name="a"), [[3]], name="b")))
    monkeypatch.setattr(rules, "fuse_at", lambda graph, op: "fuse_nothing")
    with pytest.raises(InternalError, match=r"fuse_nothing at \w+ left \(ops, Concats\) at \(3, 0\), not below"):
        rules.walk(graph)


def _layer_kinds(model):
    return "".join({"Linear": "L", "LinState": "S", "ReLU": "R", "Multi": "M"}[layer.kind] for layer in model.layers)


def _waiting_compiles(program, monkeypatch):
    """The program's model, with users waiting and (greedy) without; both exact."""
    xs = random_inputs(program.input.dim, seed=3)
    expected = as_fractions(program(xs, exact=True))
    waited = lsrl.compile(program, progress=False)
    monkeypatch.setattr(rules, "waiting_users", lambda graph, users: [])
    greedy = lsrl.compile(program, progress=False)
    for model in (waited, greedy):
        assert as_fractions(model(xs, exact=True)) == expected
    return waited, greedy


def test_a_product_for_the_output_waits_for_the_next_multi_layer(monkeypatch):
    x = lsrl.Input(1, name="x")
    total = lsrl.LinState(x, [[1]], [[1]], name="total")
    square = lsrl.Multi(lsrl.Concat([x, x]), name="square")  # needed only at the output
    program = lsrl.ForEach(lsrl.Concat([square, lsrl.Multi(lsrl.Concat([total, x]))]))
    graph = prepare(to_graph(program))
    users = graph.distinct_users(graph.input)
    assert [u.kind for u in rules.waiting_users(graph, users)] == [Kind.LINEAR]  # square's gate feed
    waited, greedy = _waiting_compiles(program, monkeypatch)
    assert _layer_kinds(greedy) == "LMSLML"  # square first, then the product after the state
    assert _layer_kinds(waited) == "SLM" and waited.stats["wait_for_later_layer"] >= 1


def test_a_relu_for_the_output_waits_for_the_next_relu_layer(monkeypatch):
    x = lsrl.Input(1, name="x")
    y = lsrl.Linear(x, [[2], [3]], name="y")  # read twice: no gate feed
    later = lsrl.ReLU(lsrl.Linear(lsrl.Multi(y), [[1], [-1]]))
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x), y, later]))
    waited, greedy = _waiting_compiles(program, monkeypatch)
    assert _layer_kinds(greedy).count("R") == 2
    assert _layer_kinds(waited).count("R") == 1 and len(waited.layers) < len(greedy.layers)


def test_a_product_waits_only_for_the_output_and_beside_no_multi():
    x = lsrl.Input(2, name="x")
    total = lsrl.LinState(x, [[1]], [[1, 1]])
    ahead = lsrl.Multi(lsrl.Concat([total, x[0:1]]))  # a Multi layer below the state
    square = lsrl.Multi(lsrl.Concat([x[0:1], x[0:1]]))
    for extra, square_goes_on in (([lsrl.Multi(x)], False), ([], True)):  # a Multi at x / square read by a state
        values = [lsrl.LinState(square, [[1]], [[1]]) if square_goes_on else square, ahead, *extra]
        graph = prepare(to_graph(lsrl.ForEach(lsrl.Concat(values))))
        users = graph.distinct_users(graph.input)
        assert any(rules.is_gate_feed(graph, u) for u in users)
        assert rules.waiting_users(graph, users) == []


def test_products_and_relus_do_not_wait_on_each_other_beside_concats_alone():
    x = lsrl.Input(1, name="x")
    program = lsrl.ForEach(lsrl.Concat([lsrl.Multi(lsrl.Concat([x, x])), lsrl.ReLU(x)]))
    graph = prepare(to_graph(program))
    v = graph.input
    # a Concat of x alone, as the walk meets them
    gather = graph.add(Op(Kind.CONCAT, [v], 1, parts=OpParts(picks=[[0]])))
    below = graph.linear(gather, graph.backend.from_entries([(0, 0, 1), (1, 0, 3)], (2, 1)))
    graph.multi(below), graph.relu(below)  # a Multi and a ReLU layer further down
    users = graph.distinct_users(v)
    feeds = [u for u in users if rules.is_gate_feed(graph, u)]
    relus = [u for u in users if u.kind == Kind.RELU]
    assert rules._can_wait(graph, users, feeds, Kind.MULTI, graph.only_user)  # each could wait, the other
    assert rules._can_wait(graph, users, relus, Kind.RELU, lambda u: u)  # moving the walk on
    assert rules.waiting_users(graph, users) == []  # both waiting would leave the Concat alone


# ---- the preparation fusions --------------------------------------------------------------------


def apply_fusion(program, at, rule):
    def fuse(graph, op):
        assert fusion.fuse_at(graph, op)

    return apply_rule(program, at, rule, fuse, seed=1)[0]


def test_fuse_linear_linear():
    x = lsrl.Input(2)
    graph = apply_fusion(lsrl.ForEach(lsrl.Linear(lsrl.Linear(x, [[1, 2]], [3], name="a"), [[4]], [5])), "a",
                         "fuse_linear_linear")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.LINEAR] and graph.output.A.to_fractions() == [[4, 8]]


def test_fuse_linear_linstate():
    x = lsrl.Input(2)
    program = lsrl.ForEach(lsrl.LinState(lsrl.Linear(x, [[1, 2]], [3], name="a"), [[1]], [[2]]))
    graph = apply_fusion(program, "a", "fuse_linear_linstate")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.LINSTATE] and graph.output.b.to_fractions() == [6]


def test_fuse_relu_relu():
    x = lsrl.Input(2)
    inner = lsrl.ReLU(x)
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(inner, name="a"), inner * 2]))  # the inner ReLU has two users
    graph = apply_fusion(program, "a", "fuse_relu_relu")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.RELU, Kind.LINEAR, Kind.CONCAT]


def test_fuse_slice_concat():
    x = lsrl.Input(3)
    y = lsrl.ReLU(x)
    graph = apply_fusion(lsrl.ForEach(lsrl.Concat([lsrl.Linear(x, [[0, 0, 1]], name="a"), y])), "a",
                         "fuse_slice_concat")
    assert graph.output.kind == Kind.CONCAT and [list(p) for p in graph.output.picks] == [[2], [0, 1, 2]]


def test_fuse_concat_concat():
    x = lsrl.Input(2)
    y = lsrl.ReLU(x)
    inner = lsrl.Concat([y, x], name="a")
    graph = apply_fusion(lsrl.ForEach(lsrl.Concat([inner, lsrl.Linear(x, [[1, 1]])])), "a", "fuse_concat_concat")
    assert graph.output.kind == Kind.CONCAT and len(graph.output.inputs) == 3


def test_fuse_concat_identical():
    x = lsrl.Input(2)
    graph = apply_fusion(lsrl.ForEach(lsrl.Concat([x, x], name="a")), "a", "fuse_concat_identical")
    assert graph.output.is_slice and graph.output.A.selected_columns() == [0, 1, 0, 1]


def test_fuse_identity():
    x = lsrl.Input(2)
    graph = apply_fusion(lsrl.ForEach(lsrl.ReLU(lsrl.Linear(x, [[1, 0], [0, 1]], name="a"))), "a", "fuse_identity")
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.RELU]


def test_merge_duplicates_keeps_one_of_two_identical_ops():
    x = lsrl.Input(2)
    program = lsrl.ForEach(lsrl.Concat([lsrl.ReLU(x) * 2, lsrl.ReLU(x) * 3, lsrl.ReLU(x * 2)]))
    graph = to_graph(program)
    fusion.merge_duplicates(graph)
    assert graph.stats == {"merge_duplicates": 1}
    assert [op.kind for op in graph.ops()].count(Kind.RELU) == 2  # ReLU(2x) is another computation
    xs = random_inputs(2)
    assert exact_outputs(graph, xs) == as_fractions(program(xs, exact=True))


def test_fuse_stateless_linstate_and_the_path_fusions_after_it():
    x = lsrl.Input(2)
    forgetful = lsrl.LinState(x, [[0, 0], [0, 0]], [[1, 2], [0, 1]], [1, 0], init_state=[5, 5])
    program = lsrl.ForEach(lsrl.Linear(forgetful, [[1, 1]]))
    # not a rule of the walk (Case 6's dummy carriers have A = 0): it runs on the pruned path
    graph = apply_rule(program, forgetful.name, "fuse_stateless_linstate",
                       lambda graph, op: fusion.fuse_stateless_linstate(graph, op) and graph.count("fuse_stateless_linstate"))[0]
    assert [op.kind for op in graph.ops()] == [Kind.INPUT, Kind.LINEAR, Kind.LINEAR]
    model = lsrl.compile(program, progress=False)
    assert [layer.kind for layer in model.layers] == ["Linear"]  # the two Lins fuse on the pruned path
    assert model.stats["fuse_linear_linear"] == 1


def test_fuse_linstate_linstate_joins_a_state_that_runs_alone_and_folds_one_that_keeps_none():
    x = lsrl.Input(1)
    total = lsrl.LinState(x, [[1]], [[1]], name="total")
    # unit 0 decays on its own (reads nothing of total), unit 1 is 2 * total at this step (no state)
    second = lsrl.LinState(total, [[Fraction(1, 2), 0], [0, 0]], [[0], [2]], [1, 0], init_state=[3, 7])
    program = lsrl.ForEach(lsrl.Linear(second, [[1, 1]]))
    model = lsrl.compile(program, progress=False)
    assert [layer.kind for layer in model.layers] == ["LinState", "Linear"]
    assert model.stats["fuse_linstate_linstate"] == 1 and model.layers[0].dim == 2
    xs = random_inputs(1)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))
    assert model.label_violations(program, xs) == []


def test_the_path_fusion_is_skipped_where_it_would_add_weights():
    x = lsrl.Input(4)
    total = lsrl.LinState(x, [[0]], [[1, 1, 1, 1]])  # a bottleneck: 4 + 4 weights, fused 16
    program = lsrl.ForEach(lsrl.Linear(total, [[1], [2], [3], [4]]))
    model = lsrl.compile(program, progress=False)
    assert [layer.kind for layer in model.layers] == ["Linear", "Linear"] and model.parameter_count == 8
    xs = random_inputs(4)
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))


# ---- the stages ---------------------------------------------------------------------------------


def test_stages_compose_to_compile_and_leave_their_input_alone():
    program = discrete_approximator(2)
    graph = to_graph(program)
    printed = str(graph)
    prepared = prepare(graph)
    assert str(graph) == printed  # a stage returns a new graph
    debranched = debranch(prepared)
    assert debranched.is_path() and not prepared.is_path()
    model = to_layers(prune(debranched))
    reference = lsrl.compile(program, progress=False)
    assert [layer.kind for layer in model.layers] == [layer.kind for layer in reference.layers]
    assert model.parameter_count == reference.parameter_count
    xs = np.array([[1], [2], [3], [4], [5], [6], [1], [2]])
    assert as_fractions(model(xs, exact=True)) == as_fractions(program(xs, exact=True))


def test_every_stage_computes_what_the_program_computes():
    program = discrete_approximator(2, ifelse="step")
    xs = np.array([[1], [2], [1], [2], [3], [4], [2], [2], [5], [1]])
    expected = as_fractions(program(xs, exact=True))
    graph = to_graph(program)
    for stage in (prepare, debranch, prune):
        graph = stage(graph)
        assert exact_outputs(graph, xs) == expected, stage.__name__


def test_a_graph_prints_one_op_a_line():
    x = lsrl.Input(2, name="x")
    y = lsrl.ReLU(lsrl.Linear(x, [[1, 2], [0, 1]], name="lin"), name="act")
    graph = to_graph(lsrl.ForEach(lsrl.Concat([y, x[1:2]], name="out")))
    lines = str(graph).splitlines()
    assert lines[0].startswith("graph") and lines[-1].strip() == "return %out"
    assert len(lines) == len(graph) + 2
    body = "\n".join(lines)
    assert "%x = input[2]()" in body
    assert "%lin = linear[2](%x)  A2x2 nnz=3  b2 nnz=0" in body
    assert "%act = relu[2](%lin)" in body


def test_to_layers_refuses_a_graph_that_still_branches():
    x = lsrl.Input(1)
    with pytest.raises(lsrl.GraphError, match="still branches"):
        to_layers(to_graph(lsrl.ForEach(lsrl.Concat([x, lsrl.ReLU(x)]))))


def test_debranch_reports_progress_that_ends_at_the_total():
    reports = []
    debranch(prepare(to_graph(discrete_approximator(3))), lambda done, total: reports.append((done, total)))
    totals = {total for _, total in reports}
    assert len(totals) == 1
    done = [d for d, _ in reports]
    assert done == sorted(done) and done[-1] == totals.pop() and done[0] < done[-1]


def test_compile_runs_the_passes_in_order_and_reports_each():
    program = discrete_approximator(2)
    reports = []
    graph = run_passes(to_graph(program), lambda stage, done, total: reports.append((stage, done, total)))
    stages = [stage for stage, _, _ in reports]
    assert [stage.name for stage in PASSES] == ["prepare", "debranch", "prune"]
    assert sorted(set(stages), key=stages.index) == ["prepare", "debranch", "prune"]
    assert reports[0] == ("prepare", 0, 1)  # a stage that reports nothing shows the progress so far
    (_, done, total), last = reports[-2], reports[-1]
    assert last == ("prune", total, total) and done == total  # debranch ends at its total
    model, reference = to_layers(graph), lsrl.compile(program, progress=False)
    assert [(layer.kind, layer.dim) for layer in model.layers] == [(layer.kind, layer.dim) for layer in reference.layers]
    assert model.parameter_count == reference.parameter_count


def test_the_progress_bar_ends_at_100_percent_and_names_the_stage(monkeypatch):
    bars = []

    class Recorder:
        def __init__(self, total, **options):
            self.n, self.total, self.stages, self.postfix, self.shown = 0, total, [], None, []
            self.disable, self.delay, self.format_dict = False, 0, {"elapsed": 0.0}
            bars.append(self)

        def refresh(self):
            self.shown.append((self.postfix, self.n, self.total))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text
            self.stages.append(text)

        def update(self, steps):
            self.n += steps

    monkeypatch.setattr("lsrl.compiler.progress.tqdm", Recorder)
    lsrl.compile(discrete_approximator(3), progress=True)
    (bar,) = bars
    assert bar.n == bar.total > 1
    assert bar.stages[0] == "prepare" and "debranch" in bar.stages and bar.stages[-1] == "prune"
    assert bar.shown[-1] == ("prune", bar.total, bar.total)  # the last thing drawn is the full bar


@pytest.mark.parametrize("progress,disable,delay", [(None, False, 1.0), (True, False, 0), (False, True, 1.0)])
def test_the_progress_option_shows_the_bar_late_at_once_or_never(monkeypatch, progress, disable, delay):
    options = {}

    def recorder(**given):
        options.update(given)
        raise RuntimeError("recorded")  # the options are all this test needs

    monkeypatch.setattr("lsrl.compiler.progress.tqdm", recorder)
    with pytest.raises(RuntimeError, match="recorded"):
        lsrl.compile(lsrl.ForEach(lsrl.ReLU(lsrl.Input(1))), progress=progress)
    assert options["disable"] is disable and options["delay"] == delay


def test_peak_working_graph_stays_near_the_final_size():
    model = lsrl.compile(discrete_approximator(10), progress=False)
    assert model.stats["peak_nonzeros"] <= 3 * model.parameter_count
