"""The LLRNN cell: every model's LLRNN form (master terms run by the cell) against its explicit
equations, user-written masters, type errors, and gradients."""

import itertools

import pytest
import torch

from lsrl.errors import DimensionError
from lsrl.llrnn import explicit
from lsrl.llrnn.cell import LLRNN, Commands, Data, Space, StateSpace
from lsrl.llrnn.checks import LlrnnArgumentError
from lsrl.llrnn.forms import llrnn_form
from lsrl.llrnn.logic import (
    Atom, Bang, Derelict, IllTypedTerm, LogicError, Var, binary, bint_type, endo, higher_order_master, int_type, lam,
    second_order_master,
)
from lsrl.llrnn.logic.terms import Const

RING_MACHINES = {
    "ntm": lambda **o: explicit.NTM(3, 4, 5, **o),
    "ntm_some_powers": lambda **o: explicit.NTM(3, 4, 6, powers=(0, 1, 5), **o),
    "dihedral_ntm": lambda **o: explicit.DihedralNTM(3, 4, 5, **o),
    "ntm_narrow_memory": lambda **o: explicit.NTM(3, 4, 5, powers=(0, -1, 1), memory_width=2, **o),
    "pattern_ntm_small_pattern_ring": lambda **o: explicit.PatternNTM(3, 4, 6, 3, head_powers=(0, -1, 1),
                                                                      pattern_slots=4, **o),
    "polynomial_step_ntm_small_rings": lambda **o: explicit.PolynomialStepNTM(3, 4, 6, 3, head_powers=(0, -1, 1),
                                                                             pattern_slots=4, **o),
    "pattern_ntm": lambda **o: explicit.PatternNTM(3, 4, 5, 3, **o),
    "multiple_pattern_ntm": lambda **o: explicit.MultiplePatternNTM(3, 4, 3, slots=(7, 2, 3, 2),
                                                                  switch_words=("0", "1", "01"), **o),
    "polynomial_step_ntm": lambda **o: explicit.PolynomialStepNTM(3, 4, 5, 3, **o),
    "dihedral_polynomial_step_ntm": lambda **o: explicit.DihedralPolynomialStepNTM(3, 4, 5, 3, **o),
}
# every variant: the paper's, the defaults (Eq. (2.13) erase, softmax over pattern contents), the two
# crossed, each TF stabiliser alone (the gate acts on the pattern models only; tanh: TF's controller),
# and all of them with the defaults and with the paper-literal erase and contents
FORM_VARIANTS = {
    "paper": explicit.PAPER_LITERAL,
    "default": {},
    "location_erase_linear_contents": {"content_softmax": False},
    "matrix_erase_softmax_contents": {"erase": "matrix"},
    "gate": {"gate": True},
    "sharpen": {"sharpen": True},
    "content_addressing": {"content_addressing": True},
    "tanh_controller": {"controller": "tanh"},
    "all_stabilisers": explicit.ALL_STABILISERS,
    "all_stabilisers_paper": {**explicit.PAPER_LITERAL, **explicit.ALL_STABILISERS},
}
MODELS = {
    "second_order": lambda: explicit.SecondOrderRNN(3, 4),
    "multiplicative": lambda: explicit.MultiplicativeRNN(3, 4, 2),
    "higher_order": lambda: explicit.HigherOrderRNN(3, 4, 3),
    **{f"{name}-{variant}": (lambda build=build, options=options: build(**options))
       for name, build in RING_MACHINES.items() for variant, options in FORM_VARIANTS.items()},
}


def relative_error(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.slow
def test_llrnn_form_equals_explicit_equations(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    cell = llrnn_form(model)
    assert isinstance(cell, LLRNN) and cell.state_dim == model.state_dim
    xs = torch.randn(3, 5, model.input_dim, dtype=torch.float64)
    assert relative_error(cell(xs), model(xs)) <= 1e-10
    # from a random state whose entries stay of order one over the run
    start = torch.rand(3, model.state_dim, dtype=torch.float64) * 0.3
    assert relative_error(cell(xs, start), model(xs, start)) <= 1e-10


def test_the_forms_run_the_papers_terms():
    """The multiple pattern NTM's ring 1 is moved by ``feed``; its masters have the LLRNN type."""
    cell = llrnn_form(MODELS["multiple_pattern_ntm-paper"]())
    assert cell.masters["out"] is not None and cell.reads_state
    assert "decode4" in str(cell.masters["out"]) and "decode2" in str(cell.masters["out"])
    from lsrl.llrnn.logic import type_of
    assert type_of(cell.masters["out"]) == cell.expected_master_type()


def test_a_user_written_master_term():
    """A higher-order RNN over binary words: Z = Σ_k p_k ⟦S_k⟧(c, b), c = W^c x, b = ReLU(W^b h + B^b)."""
    torch.manual_seed(1)
    A, d = Atom("A"), 3
    words = ("", "0", "01", "110")
    n, b, c = "n", "b", "c"
    master = lam((n, Bang(bint_type(A))), (b, Bang(endo(A))), (c, Bang(endo(A))), Derelict(Var(n))(Var(c), Var(b)))
    state = StateSpace({"h": Space(Atom("H"), (d,))}, A)
    cell = LLRNN(state, 2, master_in=master, commands=[Commands("words", bint_type(A), tuple(binary(w, A) for w in words))],
                 data=[Data("b", endo(A), Space(endo(A), (d, d)))], input_space=Space(endo(A), (d, d)))
    h, x = torch.rand(4, d, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    p = torch.softmax(h @ cell.W_p["words"].T + cell.B_p["words"], dim=-1)
    beta = torch.relu(h @ cell.W_b["b"].T + cell.B_b["b"]).reshape(4, d, d)
    alpha = (x @ cell.W_c.T).reshape(4, d, d)
    expected = []
    for i in range(4):
        Z = torch.zeros(d, d, dtype=torch.float64)
        for k, word in enumerate(words):
            product = torch.eye(d, dtype=torch.float64)
            for letter in word:
                product = (alpha[i] if letter == "0" else beta[i]) @ product
            Z = Z + p[i, k] * product
        expected.append(torch.relu(Z @ h[i] + cell.H @ h[i] + cell.U @ x[i] + cell.B))
    assert torch.allclose(cell.step(h, x), torch.stack(expected))


def test_masters_of_the_wrong_type_are_rejected():
    A = Atom("A")
    state = StateSpace({"h": Space(Atom("H"), (2,))}, A)
    with pytest.raises(IllTypedTerm, match=r"master\^in has type .*; an LLRNN with these slots needs !\(A ⊸ A\) ⊸ A ⊸ A"):
        LLRNN(state, 2, master_in=higher_order_master(A), input_space=Space(endo(A), (2, 2)))
    with pytest.raises(LogicError, match="uses the constant K, which was not given"):
        LLRNN(state, 2, master_in=lam(("c", Bang(endo(A))), Discard_(Var("c"), Const("K", endo(A)))),
              input_space=Space(endo(A), (2, 2)))
    with pytest.raises(IllTypedTerm, match="the constant proj_h is used at type"):
        LLRNN(state, 2, master_in=lam(("c", Bang(endo(A))), Discard_(Var("c"), Const("proj_h", endo(A)))),
              input_space=Space(endo(A), (2, 2)))


def test_the_input_map_is_w_c_and_a_cell_without_input_space_has_none():
    A = Atom("A")
    state = StateSpace({"h": Space(Atom("H"), (2,))}, A)
    with_input = LLRNN(state, 3, master_in=second_order_master(A), input_space=Space(endo(A), (2, 2)))
    assert with_input.input_map is with_input.W_c and with_input.input_map.shape == (4, 3)
    without = LLRNN(state, 3)
    with pytest.raises(LlrnnArgumentError, match="^LLRNN: this cell has no input space, hence no input map W"):
        _ = without.input_map


def Discard_(variable, body):
    from lsrl.llrnn.logic import Discard
    return Discard(variable, body)


def test_bad_spaces_and_inputs():
    A = Atom("A")
    with pytest.raises(DimensionError, match="diagonal space needs a square shape"):
        Space(endo(A), (2, 3), diagonal=True)
    with pytest.raises(LogicError, match="needs an atom or a map between atoms"):
        Space(int_type(A), (2,))
    cell = llrnn_form(MODELS["ntm-default"]())
    with pytest.raises(DimensionError, match=r"inputs must be \(B, T, 3\)"):
        cell(torch.zeros(2, 3, 4, dtype=torch.float64))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["higher_order", "ntm-paper", "ntm-default", "pattern_ntm-paper",
                                  "pattern_ntm-default", "multiple_pattern_ntm-default",
                                  "pattern_ntm-all_stabilisers", "ntm-all_stabilisers_paper"])
def test_gradients_of_the_llrnn_form_match_finite_differences(name):
    torch.manual_seed(2)
    model = MODELS[name]()
    with torch.no_grad():  # γ = 1 + ReLU(W h0 + B): a positive bias keeps the ReLU on, so W and B get gradients
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.startswith("B_gamma"):
                parameter.fill_(2.0)
    cell = llrnn_form(model)
    xs = torch.randn(4, 4, cell.input_dim, dtype=torch.float64)
    start = torch.rand(4, cell.state_dim, dtype=torch.float64) * 0.5  # non-empty memories from the start
    target = torch.randn(4, 4, cell.state_dim, dtype=torch.float64)

    def loss():
        return ((cell(xs, start) - target) ** 2).sum()

    cell.zero_grad()
    loss().backward()
    parameters = list(cell.parameters())
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in parameters), \
        [n for n, p in cell.named_parameters() if p.grad is None or p.grad.abs().max() == 0]
    direction = [torch.randn_like(p) for p in parameters]
    analytic = sum((p.grad * v).sum() for p, v in zip(parameters, direction)).item()
    epsilon = 1e-6
    with torch.no_grad():
        for p, v in zip(parameters, direction):
            p.add_(epsilon * v)
        plus = loss().item()
        for p, v in zip(parameters, direction):
            p.sub_(2 * epsilon * v)
        minus = loss().item()
    assert abs((plus - minus) / (2 * epsilon) - analytic) <= 1e-6 * max(1.0, abs(analytic))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_llrnn_form_on_cuda():
    model = MODELS["pattern_ntm-default"]()
    xs = torch.randn(2, 4, model.input_dim, dtype=torch.float64)
    expected = llrnn_form(model)(xs)
    cell = llrnn_form(model.to("cuda"))
    assert relative_error(cell(xs.cuda()).cpu(), expected) <= 1e-10


def test_the_stabilisers_outside_linear_logic_are_steps_around_the_masters():
    """Sharpening and content addressing are modules acting on the state around the (type-checked) masters,
    one per head; the gate is a command slot over the two closed terms pick_1, pick_2."""
    from lsrl.llrnn.forms import ContentAddressing, Sharpening
    from lsrl.llrnn.logic import type_of

    cell = llrnn_form(RING_MACHINES["pattern_ntm"](**explicit.ALL_STABILISERS))
    assert [type(step) for step in cell.before] == [ContentAddressing] * 4  # s1, q1 (gated ring 1), s2, q2
    assert [step.target for step in cell.between] == ["w1'", "r1'", "w2'", "r2'"]
    assert all(isinstance(step, Sharpening) for step in cell.between)
    assert all(type_of(m) == cell.expected_master_type() for m in cell.masters.values())
    assert [c.name for c in cell.commands if c.name.startswith("g")] == ["g1"]
    assert cell.state_dim == llrnn_form(RING_MACHINES["pattern_ntm"]()).state_dim  # scratch is not carried
    plain = llrnn_form(RING_MACHINES["pattern_ntm"]())
    assert plain.masters["addr"] is None and not plain.before and not plain.between


OPTIONS = {"erase": ("location", "matrix"), "content_softmax": (True, False), "gate": (False, True),
           "sharpen": (False, True), "content_addressing": (False, True), "controller": ("relu", "tanh")}


@pytest.mark.parametrize("name", ["pattern_ntm_small_pattern_ring", "dihedral_ntm"])
@pytest.mark.slow
def test_every_combination_of_the_options_has_an_equal_llrnn_form(name):
    """All 64 combinations of the six options (the tests above take each alone and all together)."""
    for values in itertools.product(*OPTIONS.values()):
        options = dict(zip(OPTIONS, values))
        torch.manual_seed(3)
        model = RING_MACHINES[name](**options)
        xs = torch.randn(2, 4, model.input_dim, dtype=torch.float64)
        start = torch.rand(2, model.state_dim, dtype=torch.float64) * 0.3
        assert relative_error(llrnn_form(model)(xs, start), model(xs, start)) <= 1e-10, options


@pytest.mark.parametrize("model", [
    lambda: explicit.NTM(1, 1, 2, memory_width=3000),  # erase by location: a sigmoid vector of 3,000 entries
    lambda: explicit.MultiplicativeRNN(1, 1, 3000),  # diag(V x) of 3,000 entries
], ids=["ntm-wide-memory", "multiplicative-wide-aux"])
def test_a_wide_diagonal_map_is_never_built_dense(model, monkeypatch):
    """The form built the diagonal maps (the location-weighted erase, diag(V x), diag(w')) as dense
    B x d x d matrices every step: a memory width of 16,000 took 4 GB. Now they act entry by entry; the form
    still equals the explicit equations, and torch.diag_embed is never called."""
    torch.manual_seed(0)
    model = model()
    xs = torch.rand(2, 3, model.input_dim, dtype=torch.float64)
    form = llrnn_form(model)

    def refused(*args, **kwargs):
        raise AssertionError("a dense diagonal was built")

    monkeypatch.setattr(torch, "diag_embed", refused)
    assert torch.allclose(form(xs), model(xs), rtol=0, atol=1e-12)


@pytest.mark.parametrize("model, words", [
    (lambda: explicit.NTM(1, 1, 200), "powers makes a program of 199 letters"),  # numeral 199: past the recursion limit
    (lambda: explicit.NTM(1, 1, 40), "term applications"),  # 40 numerals up to 39 on 40 positions: 2 minutes a step
    (lambda: explicit.NTM(1, 1, 1000, powers=(0, 1)), "multiply-adds"),  # dense 1000 x 1000 rotations, 4,000 times
    (lambda: explicit.PatternNTM(1, 2, 5, 1, pattern_powers=(0, -1)), "pattern_powers must be natural numbers"),
    (lambda: explicit.PolynomialStepNTM(1, 2, 5, 1, polynomials=((0, 300),)), "polynomials makes a program"),
])
def test_a_form_too_large_or_slow_to_run_is_refused_before_it_is_built(model, words):
    """Found by deep fuzzing: llrnn_form of an NTM with 200 slots built numerals for minutes and ran for
    hours; a negative pattern power raised numeral's raw ValueError. Each is a one-line LlrnnArgumentError."""
    with pytest.raises(LlrnnArgumentError, match=words) as error:
        llrnn_form(model())
    assert "\n" not in str(error.value) and "llrnn_form" in str(error.value)


def test_the_benchmarked_forms_are_within_the_caps():
    """The caps leave room for the forms benchmarks/llrnn.py times (rings of 32 slots)."""
    for model in (explicit.MultiplePatternNTM(8, 32, 8, slots=(32, 2, 2, 2)), explicit.NTM(8, 32, 32, powers=(0, 1, 31)),
                  explicit.DihedralNTM(8, 32, 32), explicit.NTM(10, 8, 6)):
        llrnn_form(model)
