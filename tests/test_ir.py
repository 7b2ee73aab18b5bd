"""The working graph (lsrl.ir): op kinds, and ``Graph.verify()`` failing on each invariant it checks."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

import lsrl
from lsrl.compiler import PASSES, run_passes, to_graph
from lsrl.errors import InternalError, LsrlError
from lsrl.ir import Graph, Op
from lsrl.ir.ops import OpParts
from lsrl.kinds import Kind
from lsrl.numbers import EXACT

ROOT = Path(__file__).resolve().parent.parent


def sample_program() -> lsrl.ForEach:
    """Every kind but ReLUState once: x -> lin -> r -> s; m = Multi(cat[s, x]); out = Concat[m, r]."""
    x = lsrl.Input(2, name="x")
    lin = lsrl.Linear(x, [[1, 2], [3, 4]], b=[1, 0], name="lin")
    r = lsrl.ReLU(lin, name="r")
    s = lsrl.LinState(r, [[1, 0], [0, 1]], [[1, 0], [0, 1]], name="s")
    m = lsrl.Multi(lsrl.Concat([s, x], name="cat"), name="m")
    return lsrl.ForEach(lsrl.Concat([m, r], name="out"))


def sample_graph() -> Graph:
    return to_graph(sample_program())


def op(graph, name) -> Op:
    return next(o for o in graph.users if o.name == name)


def test_one_kind_names_nodes_ops_and_layers_and_prints_in_lower_case_in_graphs():
    assert [str(kind) for kind in Kind] == ["Input", "Linear", "ReLU", "LinState", "ReLUState", "Concat", "Multi"]
    graph = sample_graph()
    assert "%lin = linear[2](%x)  A2x2 nnz=4  b2 nnz=1" in str(graph)
    assert op(graph, "lin").kind is Kind.LINEAR and op(graph, "r").kind is Kind.RELU
    assert {node.kind for node in sample_program().nodes} == set(Kind) - {Kind.RELUSTATE}
    layer_kinds = [layer.kind for layer in lsrl.compile(sample_program()).layers]
    assert all(type(kind) is Kind for kind in layer_kinds) and Kind.LINSTATE in layer_kinds


def test_a_sound_graph_passes_after_every_stage():
    graph = sample_graph()
    graph.verify()
    seen = []
    run_passes(graph, lambda stage, done, total: seen.append(stage), verify=True)
    assert [stage.name for stage in PASSES] == ["prepare", "debranch", "prune"]
    assert set(seen) == {"prepare", "debranch", "prune"}


def _set_part(target: Op, **parts) -> None:
    target.parts = replace(target.parts, **parts)


def _set_weight(name, weight, shape):
    def breaks(graph):
        _set_part(op(graph, name), **{weight: EXACT.zeros(*shape)})
    return breaks


def _stray(graph):
    return Op(Kind.LINEAR, [graph.input], 1, "stray", OpParts(A=EXACT.zeros(1, 2), b=EXACT.zeros_vector(1)))


def _read_stray(graph):
    op(graph, "lin").inputs = [_stray(graph)]


def _cycle_below_output(graph):
    """``out`` reads a Linear that reads ``out``: both have users, and the output is read."""
    out = graph.output
    out.dim += 1
    out.labels.append(None)
    back = graph.add(Op(Kind.LINEAR, [out], 1, "back", OpParts(A=EXACT.zeros(1, out.dim), b=EXACT.zeros_vector(1))))
    out.inputs.append(back)
    _set_part(out, picks=[*out.picks, [0]])
    graph.users[back][out] = 1


def _unreached_loop(graph):
    """Two ReLUs reading each other, beside the graph: each has a user, the output reads neither."""
    first = Op(Kind.RELU, [], 2, "first")
    graph.users[first] = {}
    graph.kinds[Kind.RELU] += 1
    second = graph.add(Op(Kind.RELU, [first], 2, "second"))
    first.inputs = [second]
    graph.users[second][first] = 1


def _cycle(graph):
    """``lin`` reads ``r``, which reads ``lin``."""
    lin, r = op(graph, "lin"), op(graph, "r")
    lin.inputs = [r]
    graph.users[r][lin] = 1
    del graph.users[graph.input][lin]


def _empty_gather(graph):
    """A Concat of nothing, read by the output: it does not depend on the input."""
    empty = graph.add(Op(Kind.CONCAT, [], 0, "empty", OpParts(picks=[])))
    out = graph.output
    out.inputs.append(empty)
    _set_part(out, picks=[*out.picks, []])
    graph.users[empty][out] = 1


def _odd_gather(graph):
    """``cat`` gathers 3 components, and the Multi reading it keeps its width 2."""
    cat = op(graph, "cat")
    _set_part(cat, picks=[range(2), [0]])
    cat.dim = 3
    cat.labels.pop()


def _second_input(graph):
    graph.add(Op(Kind.INPUT, [], 1, "other"))


def _more_edges(graph):
    graph.users[op(graph, "r")][graph.output] = 2


def _missing_user(graph):
    del graph.users[op(graph, "lin")][op(graph, "r")]


def _peak_below(graph):
    graph.peak_nnz = graph.nnz - 1


def _miscount_kinds(graph):
    graph.kinds[Kind.RELU] += 1


def _relu_width(graph):
    op(graph, "r").dim = 3
    op(graph, "r").labels.append(None)


BREAKS = [
    ("output outside", lambda g: setattr(g, "output", _stray(g)), "%stray .* is the graph's output but not one of"),
    ("input outside", lambda g: setattr(g, "input", _stray(g)), "%stray .* is the graph's input but not one of"),
    ("reads an op outside", _read_stray, r"%lin .* reads %stray, which is not in the graph"),
    ("linear A", _set_weight("lin", "A", (2, 3)), r"%lin .* A of shape \(2, 3\), expected \(2, 2\)"),
    ("linear b", _set_weight("lin", "b", (3, 1)), r"%lin .* b of shape \(3, 1\), expected \(2, 1\)"),
    ("linear without A", lambda g: _set_part(op(g, "lin"), A=None), "%lin .* has no weight A"),
    ("state A square", _set_weight("s", "A", (2, 3)), r"%s .* A of shape \(2, 3\), expected \(2, 2\)"),
    ("state B", _set_weight("s", "B", (2, 1)), r"%s .* B of shape \(2, 1\), expected \(2, 2\)"),
    ("state init", _set_weight("s", "init", (1, 1)), r"%s .* init of shape \(1, 1\), expected \(2, 1\)"),
    ("state b", _set_weight("s", "b", (2, 2)), r"%s .* b of shape \(2, 2\), expected \(2, 1\)"),
    ("relu width", _relu_width, "%r .* has width 3 but its input has 2"),
    ("multi width", lambda g: setattr(op(g, "m"), "dim", 1), r"%m .* width 1 but its input has 4 \(expected an even"),
    ("multi odd input", _odd_gather, r"%m .* width 2 but its input has 3 \(expected an even"),
    ("gather width", lambda g: _set_part(op(g, "cat"), picks=[range(2), [0]]), "%cat .* has width 4 but picks 3"),
    ("two inputs", lambda g: op(g, "r").inputs.append(g.input), "%r .* reads 2 ops, expected 1"),
    ("input reads", lambda g: g.input.inputs.append(op(g, "lin")), "%x .* is an input but reads 1 ops"),
    ("second input", _second_input, "%other .* is a second input"),
    ("pick out of range", lambda g: _set_part(op(g, "cat"), picks=[range(2), [0, 5]]),
     r"%cat .* picks components \[5\] of %x, which has 2"),
    ("picks per input", lambda g: _set_part(op(g, "cat"), picks=[range(2)]), "%cat .* has 2 inputs but 1 pick lists"),
    ("labels", lambda g: op(g, "lin").labels.pop(), "%lin .* has 1 labels for 2 components"),
    ("edge count", _more_edges, r"%r .* has users \{.*'out': 2.*\}, but the ops' inputs say \{.*'out': 1"),
    ("missing user", _missing_user, r"%lin .* has users \{\}, but the ops' inputs say \{'r': 1\}"),
    ("no users", lambda g: g.add(_stray(g)), "%stray .* has no users but is not the output"),
    ("output read", _cycle_below_output, "%out .* is the output but has users"),
    ("dangling", _unreached_loop, "is not read by the output"),
    ("cycle", _cycle, "is on a cycle"),
    ("not from the input", _empty_gather, "%empty .* is not reached from the input"),
    ("op nnz", lambda g: setattr(op(g, "lin"), "nnz", 1), "%lin .* says it holds 1 non-zero weights, but its weights hold 5"),
    ("graph nnz", lambda g: setattr(g, "nnz", g.nnz + 1), "the graph counts 10 non-zero weights, but its ops hold 9"),
    ("peak", _peak_below, "the graph has a peak of 8 non-zero weights, below the 9"),
    ("kinds", _miscount_kinds, "the graph counts ops by kind as"),
]


def test_a_part_its_kind_does_not_hold_is_an_internal_error_naming_the_op():
    relu = op(sample_graph(), "r")
    assert relu.parts.A is None and relu.parts.picks is None
    with pytest.raises(InternalError, match=r"op %r \(relu\) holds no A"):
        relu.A
    with pytest.raises(InternalError, match=r"op %r \(relu\) holds no picks"):
        relu.picks


@pytest.mark.parametrize("name,breaks,message", BREAKS, ids=[b[0] for b in BREAKS])
def test_verify_names_the_op_and_the_broken_invariant(name, breaks, message):
    graph = sample_graph()
    graph.verify()
    breaks(graph)
    with pytest.raises(InternalError, match=message) as caught:
        graph.verify()
    assert not isinstance(caught.value, LsrlError) and "please report it" in str(caught.value)


def test_only_lsrl_numbers_reads_the_matrices_internal_rows():
    """Passes use ``Matrix``'s public methods (``row``, ``entry``, ``nonzero_rows``, ``entries``)."""
    readers = [path.relative_to(ROOT) for path in (ROOT / "lsrl").rglob("*.py")
               if path.name != "numbers.py" and re.search(r"\.rows\b(?!\")", path.read_text())]
    assert readers == []


def test_a_matrix_row_is_read_only():
    matrix = EXACT.from_entries([(0, 1, 3)], (2, 2))
    assert dict(matrix.row(0)) == {1: 3} and dict(matrix.row(1)) == {}
    assert matrix.entry(0, 1) == 3 and matrix.entry(1, 0) == 0 and matrix.nonzero_rows() == {0}
    with pytest.raises(TypeError):
        matrix.row(0)[1] = 4
