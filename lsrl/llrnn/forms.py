"""Every model of ``lsrl.llrnn.explicit`` as an LLRNN instance: a master term run by the generic cell.

``llrnn_form(model)`` builds the model's master terms from the term library (numerals, binary
integers, eval, feed, newfeed, repeat, Ψ), its command and data slots (Sec. 3.2: α = R and β = R^∨
fixed, erase and add vectors by ReLU or as below) and copies its weights, so that both forms can be run side
by side. Only the model's hyperparameters are read (powers, words, polynomials, ring sizes), never
its precomputed moves, so the two forms are independent constructions of the same equations.

The state is the explicit model's flat state; its components are typed

    h0 : H0,   r_i : W_i,   w_i : W_i^∨ = W_i ⊸ 1,   M_i : W_i ⊸ V_i   (V = H0 for the plain NTM),

and the NTM family's masters are (Sec. 3.2, with the state input ``s = |∅⟩_h``):

    Z_in(h)  = inj_h0(Q((proj_M1 s)(proj_r1 h)))
    Z_out(h) = Σ_i inj_wi(⟦s_i⟧(β_i)(proj_wi h)) + inj_ri(⟦q_i⟧(α_i)(proj_ri h))
               + inj_Mi(proj_Mi h) − inj_Mi(e_i ∘ proj_Mi h) + inj_Mi(Ψ(proj_wi h ⊗ a_i))

where ring 1's read address of the pattern models is moved instead by eval / feed / newfeed /
a word transform applied to the other rings' contents ``M_j(r_j)``. That is the paper-literal form
(``erase="matrix"``, linear contents). With Eq. (2.13)'s erase (the default) the erase vector is a
sigmoid data vector ``e_i`` on a diagonal space and the memory summands use the new write address
``w_i' = ⟦s_i⟧(β_i)(proj_wi h)``:

    inj_Mi(proj_Mi h) − inj_Mi(e_i ∘ (proj_Mi s) ∘ diag_i(w_i')) + inj_Mi(Ψ(w_i' ⊗ a_i)),

``diag_i : W_i^∨ ⊸ (W_i ⊸ W_i)`` a linear constant. With ``content_softmax`` a driver ring's content
is read through the constant ``softmax_Mj : !A ⊸ (W_j ⊸ V_j)``, a non-linear function of the state
(legitimate on a ``!``-typed argument), and its add vector is linear.

The TF code's other stabilisers:

- The **gate** is linear logic: ``g (q_1-move of r_1) + (1 - g) (pattern move of r_1)`` with
  ``g = sigmoid(W_g h0 + B_g)`` is a command slot ``g_1`` over the two closed terms
  ``pick_1, pick_2 : !(A ⊸ W_1) ⊸ !(A ⊸ W_1) ⊸ A ⊸ W_1`` (``library.choice``), applied to the two
  promoted moves and to ``h``; its logits are ``(W_g h0 + B_g, 0)``, and ``softmax(z, 0) = (sigmoid(z),
  1 - sigmoid(z))``. (Trained as an LLRNN, the second logit row is a free parameter too.)
- **Sharpening** ``(a + 1e-6)^γ / Σ`` (a power and a normalisation) and **content addressing**
  ``i softmax(β cos(k, M_{.,j})) + (1 - i) a`` (cosines and a softmax, an affine map of the address whose
  constant part is no linear function of it) are steps outside linear logic. The form applies them exactly
  where the explicit model does, to the inputs and outputs of the linear-logic moves, as modules of the
  cell (``ContentAddressing``, ``Sharpening``; their math is ``ring.content_weighting`` and ``ring.sharpen``,
  shared with the explicit model), and the step runs in stages (``cell.py``): content addressing fills
  scratch components ``w_i^``, ``r_i^`` (each controller head's input), ``master^addr`` (a term) moves the
  addresses into scratch components ``w_i'``, ``r_i'``, sharpening rewrites those, and ``master^in`` /
  ``master^out`` (terms) then read them linearly: ``inj_wi(proj_wi' h) + inj_ri(proj_ri' h)`` and the memory
  summands above with ``proj_wi' h`` for the new write address (Eq. (2.13)) or ``proj_wi h`` (Sec. 3.2).
  The scratch components are not carried from step to step: the state is the explicit model's.
- TF's **tanh controller** replaces the cell's ReLU by tanh (``LLRNN(activation="tanh")``): the masters
  are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

import torch
from torch import nn

from lsrl.errors import InternalError, LsrlError
from lsrl.llrnn import explicit
from lsrl.llrnn.cell import LLRNN, Commands, Data, Space, StateSpace
from lsrl.llrnn.logic.library import (
    MAX_TERM_WORD,
    binary, binary_identity, choice, compose, discarding, eval_term, feed, fresh, higher_order_master, newfeed,
    numeral, polynomial, psi, repeat, second_order_master, share,
)
from lsrl.llrnn.logic.semantics import (
    Diagonal, Function, Given, Matrix, Value, as_distribution, as_map, as_tensor, coordinates, scale, to_matrix, total,
)
from lsrl.llrnn.logic.terms import Const, Derelict, Lam, Pair, Promote, Scale, Sum, Term, Var, free_variables, lam
from lsrl.llrnn.logic.types import Atom, Bang, Lolli, Type, bint_type, dual, endo, int_type, lolli
from lsrl.llrnn.checks import LlrnnArgumentError
from lsrl.llrnn.recurrent import MAX_PARAMETERS, Factory, RecurrentModel
from lsrl.llrnn.ring import (
    MAX_DENSE_RING, content_weighting, reflection, ring_powers, rotation, sharpen, word_counts, word_transform,
)

STATE = Atom("A")
CONTROLLER = Atom("H0")
WORD_TRANSFORM_TERMS = {"id": binary_identity, "repeat": repeat}

Weights: TypeAlias = "dict[torch.Tensor, torch.Tensor]"  # a parameter of the cell -> the model's tensor it copies
Slot: TypeAlias = Callable[[str], Term]  # a command or data slot's name -> the variable it is bound to
Constants: TypeAlias = "dict[str, Given]"  # the denotations of the masters' constants, filled as they are built
# (uses, build): build(names, slot) moves ring 1's read address, from ``uses`` copies ``names`` of the state
RingOneRead: TypeAlias = "tuple[int, Callable[[Sequence[str], Slot], Term]]"


def llrnn_form(model: RecurrentModel) -> LLRNN:
    """The LLRNN form of an explicit model, with the model's weights and initial state."""
    builders: dict[type, Callable[..., tuple[LLRNN, Weights]]] = {
        explicit.SecondOrderRNN: _second_order,
        explicit.MultiplicativeRNN: _multiplicative,
        explicit.HigherOrderRNN: _higher_order,
    }
    builder = builders.get(type(model))
    if builder is None and isinstance(model, explicit.RingMachine):
        builder = _ring_machine
    if builder is None:
        raise LsrlError(f"llrnn_form: no LLRNN form for {type(model).__name__}")
    _check_form_size(model)
    factory: Factory = {"dtype": model.H.dtype, "device": model.H.device}
    cell, weights = builder(model, factory)
    with torch.no_grad():
        for target, source in weights.items():
            target.copy_(source.reshape(target.shape))
        cell.init_state.copy_(model.initial_state(1)[0])
    return cell


def form_elements(model: RecurrentModel) -> int:
    """The numbers ``llrnn_form`` allocates beyond the model's weights, from the model's sizes alone: the
    d x d input map of the second- and higher-order RNNs, and per ring its dense N x N rotations R, R^∨
    (and reflections P, P^∨ for the dihedral models) and its erase map (width x width, or width when
    it is a diagonal ``location`` map)."""
    if isinstance(model, (explicit.SecondOrderRNN, explicit.HigherOrderRNN)):
        return model.controller_dim ** 2
    if not isinstance(model, explicit.RingMachine):
        return 0
    dense = 4 if isinstance(model, (explicit.DihedralNTM, explicit.DihedralPolynomialStepNTM)) else 2
    location = model.stabilisers.erase == "location"
    return sum(dense * ring.slots ** 2 + (ring.width if location else ring.width ** 2) for ring in model.rings)


def _check_form_size(model: RecurrentModel) -> None:
    """Refuse, before any memory is asked for, a form the model's sizes make too large (``MAX_PARAMETERS``
    numbers, the explicit models' cap, or a ring beyond ``MAX_DENSE_RING`` slots), or too slow to run
    (``_check_form_work``)."""
    name = type(model).__name__
    for ring in getattr(model, "rings", ()):
        if ring.slots > MAX_DENSE_RING:
            raise LlrnnArgumentError(f"llrnn_form: {name} ring {ring.label!r} has {ring.slots:,} slots; its form "
                                     f"holds dense N x N rotations, at most {MAX_DENSE_RING:,} slots")
    elements = form_elements(model)
    if elements > MAX_PARAMETERS:
        raise LlrnnArgumentError(f"llrnn_form: {name} needs {elements:,} numbers for its dense maps (rotations, "
                                 f"erase, input maps), more than {MAX_PARAMETERS:,}: choose smaller sizes")
    if isinstance(model, explicit.RingMachine):
        _check_form_work(model)


# The form runs its programs (a numeral n̲ is n applications of a rotation, a word one per letter) by
# evaluating terms in Python, on each of a ring's N positions (a map's matrix is read off the unit vectors):
# per step a head costs N x (the letters of its programs) term applications, of about 50 µs each, and
# each application multiplies by a dense N x N rotation. Forms beyond these caps would take minutes a step.
MAX_FORM_LETTERS = MAX_TERM_WORD  # the longest program a form builds as a term (deeper terms pass the recursion limit)
MAX_FORM_APPLICATIONS = 20_000  # term applications per step, all rings together (about 1.5 s)
MAX_FORM_MULTIPLY_ADDS = 10**9  # multiply-adds of the rotations per step and batch element (about 1 s)


def _check_form_work(model: explicit.RingMachine) -> None:
    """Refuse a ring machine whose form builds a numeral of a negative number or a program longer than
    ``MAX_FORM_LETTERS`` letters, or costs more than ``MAX_FORM_APPLICATIONS`` term applications or
    ``MAX_FORM_MULTIPLY_ADDS`` multiply-adds a step (the cost model above)."""
    name = type(model).__name__
    for argument, letters in _built_programs(model):
        if min(letters, default=0) < 0:
            raise LlrnnArgumentError(f"llrnn_form: {name} {argument} must be natural numbers (a numeral n̲ is n "
                                     f"steps; use N - 1 for a step back), got {min(letters)}")
        if max(letters, default=0) > MAX_FORM_LETTERS:
            raise LlrnnArgumentError(f"llrnn_form: {name} {argument} makes a program of {max(letters):,} letters; the "
                                     f"form builds programs of at most {MAX_FORM_LETTERS} letters")
    applications = multiply_adds = 0
    for ring in model.rings:
        ring_applications = ring.slots * sum(max(letters, 1) for letters in _step_programs(model, ring))
        applications += ring_applications
        multiply_adds += ring_applications * ring.slots ** 2
    if applications > MAX_FORM_APPLICATIONS or multiply_adds > MAX_FORM_MULTIPLY_ADDS:
        raise LlrnnArgumentError(f"llrnn_form: {name} runs {applications:,} term applications ({multiply_adds:,} "
                                 f"multiply-adds) a step, more than {MAX_FORM_APPLICATIONS:,} "
                                 f"({MAX_FORM_MULTIPLY_ADDS:,}): the form is a reference for small rings; choose "
                                 "fewer slots, powers or words")


def _head_programs(model: explicit.RingMachine, ring: explicit.Ring) -> tuple[str, list[int]]:
    """The argument the programs of ``ring``'s controller heads come from, and their letters (a numeral n̲:
    n, a binary word: its length), as ``_head_commands`` builds them."""
    if isinstance(model, explicit.DihedralNTM):
        return "words", [len(word) for word in model.words]
    if isinstance(model, explicit.NTM):
        return "powers", list(model.powers)
    return "head_powers", list(ring_powers(ring.slots, getattr(model, "head_powers", None)))


def _built_programs(model: explicit.RingMachine) -> list[tuple[str, list[int]]]:
    """Every program the form builds as a term, by the argument it comes from: its letters (for a
    polynomial, the copies of its argument it makes)."""
    programs = [_head_programs(model, ring) for ring in model.rings]
    if isinstance(model, (explicit.PatternNTM, explicit.MultiplePatternNTM, explicit.PolynomialStepNTM)):
        programs.append(("pattern_powers", list(model.pattern_powers)))
    if isinstance(model, explicit.PolynomialStepNTM):
        programs.append(("polynomials", [min(coefficients, default=0) for coefficients in model.polynomials]))
        programs.append(("polynomials", [sum(coefficients) for coefficients in model.polynomials]))
    return programs


def _step_programs(model: explicit.RingMachine, ring: explicit.Ring) -> list[int]:
    """The letters of each program that moves ``ring`` in a step: its heads' programs, and for ring 1 of the
    pattern models the literal steps of the pattern (each a composite of that many rotations)."""
    letters = _head_programs(model, ring)[1] * len(model.heads(ring))
    if ring.read_moves is not None:
        return letters
    powers = getattr(model, "pattern_powers", ())
    if isinstance(model, explicit.PatternNTM):
        return letters + list(powers)
    if isinstance(model, explicit.MultiplePatternNTM):
        counts = [word_counts(word) for word in model.switch_words]
        return letters + [a * i + b * j for i in powers for j in powers for a, b in counts]
    if isinstance(model, explicit.PolynomialStepNTM):
        return letters + [explicit.evaluate_polynomial(a, p) for p in powers for a in model.polynomials]
    if isinstance(model, explicit.DihedralPolynomialStepNTM):
        return letters + [len(word_transform(f, word)) for word in model.pattern_words for f in model.transforms]
    raise LsrlError(f"llrnn_form: {type(model).__name__} has a ring without a read head")


def _controller_weights(cell: LLRNN, model: RecurrentModel) -> Weights:
    return {cell.H: model.H, cell.U: model.U, cell.B: model.B}


# ---- Sec. 2.2 and Example 3.1: one hidden vector ---------------------------------------------------


def _hidden_state(model: RecurrentModel) -> StateSpace:
    return StateSpace({"h0": Space(CONTROLLER, (model.controller_dim,))}, STATE)


def _second_order(model: explicit.SecondOrderRNN, factory: Factory) -> tuple[LLRNN, Weights]:
    d = model.controller_dim
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=second_order_master(STATE),
                 input_space=Space(endo(STATE), (d, d)), **factory)
    # W^c x = V(x): row (i, j) of W^c holds V[i, j, :]
    return cell, {**_controller_weights(cell, model), cell.input_map: model.V.reshape(d * d, -1)}


def _multiplicative(model: explicit.MultiplicativeRNN, factory: Factory) -> tuple[LLRNN, Weights]:
    d, k, aux = model.controller_dim, model.aux_dim, Atom("K")
    c, h = fresh("c"), fresh("h")
    master = lam((c, Bang(endo(aux))), (h, STATE),
                 Const("I", Lolli(aux, STATE))(Derelict(Var(c))(Const("J", Lolli(STATE, aux))(Var(h)))))
    learned = {"I": Space(Lolli(aux, STATE), (d, k)), "J": Space(Lolli(STATE, aux), (k, d))}
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=master, learned=learned,
                 input_space=Space(endo(aux), (k, k), diagonal=True), **factory)
    weights = {cell.input_map: model.V, cell.learned["I"]: model.I, cell.learned["J"]: model.J}
    return cell, {**_controller_weights(cell, model), **weights}


def _higher_order(model: explicit.HigherOrderRNN, factory: Factory) -> tuple[LLRNN, Weights]:
    d = model.controller_dim
    powers = Commands("p", int_type(STATE), tuple(numeral(n, STATE) for n in range(model.max_power + 1)))
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=higher_order_master(STATE), commands=[powers],
                 input_space=Space(endo(STATE), (d, d)), **factory)
    weights = {cell.input_map: model.V.reshape(d * d, -1), cell.W_p["p"]: model.W_p, cell.B_p["p"]: model.B_p}
    return cell, {**_controller_weights(cell, model), **weights}


# ---- the NTM family ----------------------------------------------------------------------------------


def contragredient(matrix: torch.Tensor) -> Function:
    """``g ↦ (g^{-1})^*`` on ``W^∨``: ``φ ↦ φ ∘ g^{-1}``, so a write address moves like a read address."""
    inverse = matrix.T  # the group elements are permutations

    def act(value: Value) -> Value:
        phi = as_map(value)
        if isinstance(phi, Matrix):
            return Matrix(phi.matrix @ inverse)
        return Function(lambda z: phi((inverse @ as_tensor(z).unsqueeze(-1)).squeeze(-1)))

    return Function(act)


class _Ring:
    """The types and state components of one memory ring."""

    def __init__(self, label: str, slots: int, width: int, coefficients: Atom) -> None:
        self.label = label
        self.address = Atom(f"W{label}")
        self.coefficients = coefficients
        self.components = {f"r{label}": Space(self.address, (slots,)),
                           f"w{label}": Space(dual(self.address), (1, slots)),
                           f"M{label}": Space(Lolli(self.address, coefficients), (width, slots))}


def _ring_machine(model: explicit.RingMachine, factory: Factory) -> tuple[LLRNN, Weights]:
    rings = [_Ring(ring.label, ring.slots, ring.width, CONTROLLER if model.Q is None else Atom(f"V{ring.label}"))
             for ring in model.rings]
    components = {"h0": Space(CONTROLLER, (model.controller_dim,))}
    for ring in rings:
        components.update(ring.components)
    options = model.stabilisers
    staged = options.gate or options.sharpen or options.content_addressing
    scratch = _scratch(model, rings) if staged else {}
    state = StateSpace({**{name: components[name] for name in model.layout}, **scratch}, STATE)  # the model's order
    word_heads = isinstance(model, explicit.DihedralNTM)  # heads move by words in R and R', not by powers of R
    commands, data = _ring_slots(model, rings, word_heads, factory)
    learned: dict[str, Space] = {} if model.Q is None else {"Q": Space(Lolli(rings[0].coefficients, CONTROLLER),
                                                     (model.controller_dim, model.rings[0].width))}
    variables = {slot.name: fresh(slot.name) for slot in commands + data}
    s, h = fresh("s"), fresh("h")
    slot = lambda name: Var(variables[name])  # noqa: E731
    proj = lambda name: state.projection(name)(Var(h))  # noqa: E731
    constants: Constants = {}
    ring_one_read = _ring_one_read(model, {ring.label: ring for ring in rings}, state, constants)
    summands_in = [_read_symbol(model, rings[0], state, s, h)]
    summands_addr: list[Term] = []
    summands_out: list[Term] = []
    for ring, explicit_ring in zip(rings, model.rings):
        ell = ring.label
        moves = _address_moves(model, ring, explicit_ring, state, slot, s, h, word_heads, ring_one_read,
                               variables, staged)
        if staged:  # the moves fill the scratch components; the non-linear steps act there in between
            summands_addr += [state.injection(f"w{ell}'")(moves[0]), state.injection(f"r{ell}'")(moves[1])]
            moves = (proj(f"w{ell}'"), proj(f"r{ell}'"))
        summands_out += _ring_summands(ring, state, slot, s, h, *moves, options.erase, constants,
                                       explicit_ring.slots, factory)
    binders = [(variables[c.name], Bang(c.type)) for c in commands + data] + [(s, Bang(STATE)), (h, STATE)]
    bang_names = [name for name, _ in binders[:-1]]

    def master(summands: list[Term]) -> Term | None:
        return lam(*binders, Sum(tuple(discarding(bang_names, t) for t in summands))) if summands else None

    before, between = _outside_steps(model, factory)
    cell = LLRNN(state, model.input_dim, master_in=master(summands_in), master_out=master(summands_out),
                 master_addr=master(summands_addr), scratch=tuple(scratch), before=before, between=between,
                 commands=commands, data=data, reads_state=True, controller="h0", learned=learned,
                 constants=constants, activation=options.controller, **factory)
    return cell, _ring_machine_weights(cell, model)


def _scratch(model: explicit.RingMachine, rings: list[_Ring]) -> dict[str, Space]:
    """The scratch components of a staged step: per ring the new addresses ``w'``, ``r'`` (filled by
    ``master^addr``, sharpened in place), and with content addressing each controller head's input
    ``w^`` / ``r^`` (filled before the masters)."""
    scratch: dict[str, Space] = {}
    for ring in rings:
        ell = ring.label
        scratch |= {f"w{ell}'": ring.components[f"w{ell}"], f"r{ell}'": ring.components[f"r{ell}"]}
    if model.stabilisers.content_addressing:
        for ring, explicit_ring in zip(rings, model.rings):
            for head, _ in model.heads(explicit_ring):
                address = ("w" if head == "s" else "r") + ring.label
                scratch[address + "^"] = ring.components[address]
    return scratch


def _ring_slots(model: explicit.RingMachine, rings: list[_Ring], word_heads: bool, factory: Factory
                ) -> tuple[list[Commands], list[Data]]:
    """Command slots (one per head the controller moves, and ring 1's gate) and data slots (fixed R, R^∨
    and, for the dihedral models, R', R'^∨; erase and add vectors by ReLU) of every ring."""
    reflections = word_heads or isinstance(model, explicit.DihedralPolynomialStepNTM)
    commands: list[Commands] = []
    data: list[Data] = []
    for ring, explicit_ring in zip(rings, model.rings):
        N, ell, width = explicit_ring.slots, ring.label, explicit_ring.width
        for head, _ in model.heads(explicit_ring):
            address = dual(ring.address) if head == "s" else ring.address  # write heads move W^∨
            commands.append(_head_commands(model, f"{head}{ell}", address, N))
        if _gated(model, explicit_ring):
            commands.append(Commands(f"g{ell}", lolli(*[Bang(Lolli(STATE, ring.address))] * 2, STATE, ring.address),
                                     tuple(choice(first, STATE, ring.address) for first in (True, False))))
        R = rotation(N, **factory)
        data += [Data(f"R{ell}", endo(ring.address), fixed=Matrix(R)),
                 Data(f"R{ell}v", endo(dual(ring.address)), fixed=contragredient(R))]
        if reflections:
            reflect = reflection(N, **factory)
            data += [Data(f"P{ell}", endo(ring.address), fixed=Matrix(reflect)),
                     Data(f"P{ell}v", endo(dual(ring.address)), fixed=contragredient(reflect))]
        location = model.stabilisers.erase == "location"  # Eq. (2.13): a sigmoid vector, as a diagonal map
        data += [Data(f"e{ell}", endo(ring.coefficients), Space(endo(ring.coefficients), (width, width), location),
                      activation="sigmoid" if location else "relu"),
                 Data(f"a{ell}", ring.coefficients, Space(ring.coefficients, (width,)),
                      activation="identity" if _logit_ring(model, explicit_ring) else "relu")]
    return commands, data


def _gated(model: explicit.RingMachine, explicit_ring: explicit.Ring) -> bool:
    """Whether the ring's read address is the gate of a controller move and the pattern move (ring 1, ``gate``)."""
    return model.stabilisers.gate and explicit_ring.read_moves is None and explicit_ring.label not in model.drivers


def _logit_ring(model: explicit.RingMachine, explicit_ring: explicit.Ring) -> bool:
    """A ring read through a softmax (``content_softmax``) holds logits: its add vector is linear."""
    return model.stabilisers.content_softmax and explicit_ring.label in model.drivers


def diagonal(N: int, factory: Factory) -> Function:
    """``diag : W^∨ ⊸ (W ⊸ W)``, ``φ ↦ Σ_i φ(e_i) e_i e_i^∨``: how Eq. (2.13) weights the erase by location."""
    return Function(lambda phi: Diagonal(to_matrix(as_map(phi), N, **factory)[..., 0, :]))


def column_softmax(state: StateSpace, name: str) -> Function:
    """``!A ⊸ (W ⊸ V)``: memory ``name`` of the state with a softmax over each location's entries.
    Not linear, hence a ``!``-typed argument: ``Σ c |∅⟩_h ↦ Σ c softmax(M(h))``."""
    return Function(lambda states: total(scale(Matrix(torch.softmax(state.view(as_tensor(h), name), dim=-2)), c)
                                         for c, h in as_distribution(states).items))


class _ControllerMaps(nn.Module):
    """Affine maps of the previous controller state ``W_name h0 + B_name``, copied from the model's."""

    def __init__(self, model: explicit.RingMachine, names: Iterable[str]) -> None:
        super().__init__()
        self.W = nn.ParameterDict({n: nn.Parameter(getattr(model, "W_" + n).detach().clone()) for n in names})
        self.B = nn.ParameterDict({n: nn.Parameter(getattr(model, "B_" + n).detach().clone()) for n in names})

    def affine(self, name: str, controller: torch.Tensor) -> torch.Tensor:
        return controller @ self.W[name].T + self.B[name]


class ContentAddressing(_ControllerMaps):
    """Outside linear logic, before the masters: a head's input address ``i c + (1 - i) a`` into the scratch
    component ``source^`` (``a`` read from ``source``), ``c`` the content weighting of the head's key against
    the memory (``ring.content_weighting``: cosines and a softmax), ``i = sigmoid(W_i h0 + B_i)``."""

    def __init__(self, model: explicit.RingMachine, head: str, source: str, memory: str) -> None:
        super().__init__(model, [f"{kind}{head}" for kind in ("k", "beta", "i")])
        self.head, self.source, self.memory = head, source, memory

    def forward(self, state: StateSpace, h: torch.Tensor, controller: torch.Tensor) -> torch.Tensor:
        content = content_weighting(self.affine("k" + self.head, controller),
                                    self.affine("beta" + self.head, controller), state.view(h, self.memory))
        interpolation = torch.sigmoid(self.affine("i" + self.head, controller))
        address = interpolation * content + (1 - interpolation) * state.flat(h, self.source)
        return state.replace(h, self.source + "^", address)


class Sharpening(_ControllerMaps):
    """Outside linear logic, between the address master and the others: the moved address in scratch
    component ``target`` becomes ``(a + 1e-6)^γ / Σ``, ``γ = 1 + ReLU(W_γ h0 + B_γ)`` (``ring.sharpen``)."""

    def __init__(self, model: explicit.RingMachine, head: str, target: str) -> None:
        super().__init__(model, ["gamma" + head])
        self.head, self.target = head, target

    def forward(self, state: StateSpace, h: torch.Tensor, controller: torch.Tensor) -> torch.Tensor:
        gamma = 1 + torch.relu(self.affine("gamma" + self.head, controller))
        return state.replace(h, self.target, sharpen(state.flat(h, self.target), gamma))


def _outside_steps(model: explicit.RingMachine, factory: Factory) -> tuple[list[nn.Module], list[nn.Module]]:
    """The steps outside linear logic: content addressing of every controller head (before the masters)
    and sharpening of every new address (after ``master^addr``)."""
    before: list[_ControllerMaps] = []
    between: list[_ControllerMaps] = []
    for ring in model.rings:
        ell = ring.label
        if model.stabilisers.content_addressing:
            before += [ContentAddressing(model, f"{head}{ell}", ("w" if head == "s" else "r") + ell, f"M{ell}")
                       for head, _ in model.heads(ring)]
        if model.stabilisers.sharpen:
            between += [Sharpening(model, f"s{ell}", f"w{ell}'"), Sharpening(model, f"q{ell}", f"r{ell}'")]
    return [step.to(**factory) for step in before], [step.to(**factory) for step in between]


def _ring_machine_weights(cell: LLRNN, model: explicit.RingMachine) -> Weights:
    """The cell's parameters -> the explicit model's (same names: W_s1, B_q2, W_e1, …, Q)."""
    weights = _controller_weights(cell, model)
    for name in cell.W_p:
        weights[cell.W_p[name]], weights[cell.B_p[name]] = getattr(model, "W_" + name), getattr(model, "B_" + name)
        if name.startswith("g"):  # the gate: softmax(z, 0) = (sigmoid(z), 1 - sigmoid(z)) over (pick_1, pick_2)
            for target in (cell.W_p[name], cell.B_p[name]):
                weights[target] = torch.cat([weights[target], torch.zeros_like(weights[target])])
    for name in cell.W_b:
        weights[cell.W_b[name]], weights[cell.B_b[name]] = getattr(model, "W_" + name), getattr(model, "B_" + name)
    if model.Q is not None:
        weights[cell.learned["Q"]] = model.Q
    return weights


def _head_commands(model: explicit.RingMachine, name: str, address: Type, slots: int) -> Commands:
    """A head's command slot: a distribution over the programs that may move it, at ``address``."""
    if isinstance(model, explicit.DihedralNTM):
        return Commands(name, bint_type(address), tuple(binary(word, address) for word in model.words))
    if isinstance(model, explicit.NTM):
        powers = model.powers
    else:
        powers = ring_powers(slots, getattr(model, "head_powers", None))
    return Commands(name, int_type(address), tuple(numeral(n, address) for n in powers))


def _operators(ring: _Ring, slot: Slot, word_heads: bool, dual_address: bool) -> list[Term]:
    """The fixed data vectors a head's program is fed: α = R (and α' = R' for word heads), on W or W^∨."""
    suffix = "v" if dual_address else ""
    return [slot(f"R{ring.label}{suffix}")] + ([slot(f"P{ring.label}{suffix}")] if word_heads else [])


def _address_moves(model: explicit.RingMachine, ring: _Ring, explicit_ring: explicit.Ring, state: StateSpace,
                   slot: Slot, s: str, h: str, word_heads: bool, ring_one_read: RingOneRead | None,
                   variables: dict[str, str], staged: bool) -> tuple[Term, Term]:
    """The terms (linear in ``h``) of the ring's moved write and read addresses: the controller's heads
    (Eq. (2.12)) on the address, or on its content-addressed version ``w^`` / ``r^`` (scratch); ring 1 of
    the pattern models by the pattern move, or by the gate of a controller move and the pattern move."""
    ell = ring.label
    inputs = lambda name: name + "^" if f"{name}^" in state.components else name  # noqa: E731
    proj = lambda name: state.projection(name)(Var(h))  # noqa: E731

    def head(name: str, dual_address: bool) -> Term:
        return Derelict(slot(name))(*_operators(ring, slot, word_heads, dual_address))

    new_write = head(f"s{ell}", True)(proj(inputs(f"w{ell}")))
    if explicit_ring.read_moves is not None:
        return new_write, head(f"q{ell}", False)(proj(inputs(f"r{ell}")))
    if ring_one_read is None:
        raise InternalError(f"llrnn_form: ring {ell} has no read head, and no ring 1 to drive it")
    uses, build = ring_one_read
    if not _gated(model, explicit_ring):
        return new_write, share(s, uses, lambda names: build(names, slot)(proj(f"r{ell}")))
    # g (q1-move of r1^) + (1 - g) (pattern move of r1): the gate's choice between two promoted operators
    z1, z2, q, alpha = fresh("z"), fresh("z"), fresh("q"), fresh("a")
    direct = lambda R: Promote((slot(f"q{ell}"), Var(R)), (q, alpha), Lam(  # noqa: E731
        z1, STATE, Derelict(Var(q))(Var(alpha))(state.projection(inputs(f"r{ell}"))(Var(z1)))))

    def driven(s_names: Sequence[str], R: str) -> Term:
        inner_s = [fresh("s") for _ in s_names]
        inner_slots: dict[str, str] = {name: fresh(name) for name in ("R1", "P1") if name in variables}
        body = Lam(z2, STATE, build(inner_s, lambda name: Var(inner_slots[name]))(state.projection(f"r{ell}")(Var(z2))))
        used = free_variables(body)
        outer: dict[str, str] = {"R1": R, **{name: variables[name] for name in inner_slots if name != "R1"}}
        sources = list(zip(s_names, inner_s)) + [(outer[name], inner) for name, inner in inner_slots.items()
                                                 if inner in used]
        return Promote(tuple(Var(a) for a, _ in sources), tuple(b for _, b in sources), body)

    gated = lambda Rs: share(s, uses, lambda names: Derelict(slot(f"g{ell}"))(  # noqa: E731
        direct(Rs[0]), driven(names, Rs[1]))(Var(h)))
    return new_write, share(variables["R1"], 2, gated)


def _ring_summands(ring: _Ring, state: StateSpace, slot: Slot, s: str, h: str, new_write: Term, new_read: Term,
                   erase: str, constants: Constants, slots: int, factory: Factory) -> list[Term]:
    """The summands of ``Z_out`` that update ring ``ring``: its new write and read address (terms linear in
    ``h``) and its memory, ``M' = M - e ∘ M + Ψ(w ⊗ a)`` (Sec. 3.2) or ``M' = M - e ∘ M_s ∘ diag(w') + Ψ(w' ⊗ a)``
    (Eq. (2.13)), where ``M_s`` is read off the state ``s`` so that the summand stays linear in ``h``."""
    ell = ring.label
    proj = lambda name: state.projection(name)(Var(h))  # noqa: E731
    inj = state.injection
    summands = [inj(f"w{ell}")(new_write), inj(f"r{ell}")(new_read)]
    memory, e = proj(f"M{ell}"), Derelict(slot(f"e{ell}"))
    if erase == "location":
        constants[f"diag{ell}"] = diagonal(slots, factory)
        located = Const(f"diag{ell}", Lolli(dual(ring.address), endo(ring.address)))(new_write)
        erased = compose(e, compose(state.projection(f"M{ell}")(Derelict(Var(s))), located, ring.address), ring.address)
        address = new_write
    else:
        erased, address = compose(e, memory, ring.address), proj(f"w{ell}")
    summands += [
        inj(f"M{ell}")(memory),
        Scale(-1, inj(f"M{ell}")(erased)),
        inj(f"M{ell}")(psi(ring.address, ring.coefficients)(Pair(address, Derelict(slot(f"a{ell}"))))),
    ]
    return summands


def _read_symbol(model: explicit.RingMachine, ring: _Ring, state: StateSpace, s: str, h: str) -> Term:
    """``inj_h0(Q(M_1(r_1)))``: the memory from the state ``s``, the address from the linear ``h``."""
    content = state.projection(f"M{ring.label}")(Derelict(Var(s)))(state.projection(f"r{ring.label}")(Var(h)))
    if model.Q is not None:
        content = Const("Q", Lolli(ring.coefficients, CONTROLLER))(content)
    return state.injection("h0")(content)


def _ring_one_read(model: explicit.RingMachine, rings: dict[str, _Ring], state: StateSpace, constants: Constants
                   ) -> RingOneRead | None:
    """``(uses, build)``: ``build(names, slot)`` is the term ``W1 ⊸ W1`` that moves ring 1's read address, from
    the contents ``M_j(r_j)`` of the driver rings read off ``uses`` copies ``names`` of the state ``s`` and the
    fixed operators ``slot("R1")`` (and ``slot("P1")``)."""
    if "1" not in rings:
        return None
    address = rings["1"].address

    def content(label: str, names: Sequence[str], decoder: str, decoded_type: Type, terms: Iterable[Term],
                bang: bool) -> Term:
        ring = rings[label]
        constants[decoder] = coordinates(terms, bang=bang)
        decode = Const(decoder, Lolli(ring.coefficients, Bang(decoded_type) if bang else decoded_type))
        if model.stabilisers.content_softmax:
            constants[f"softmax_M{label}"] = column_softmax(state, f"M{label}")
            softmax_type = Lolli(Bang(STATE), Lolli(ring.address, ring.coefficients))
            memory = Const(f"softmax_M{label}", softmax_type)(Var(names[0]))
        else:
            memory = state.projection(f"M{label}")(Derelict(Var(names[0])))
        return decode(memory(state.projection(f"r{label}")(Derelict(Var(names[1])))))

    def numerals(powers: Iterable[int]) -> list[Term]:
        return [numeral(p, address) for p in powers]

    if isinstance(model, explicit.PatternNTM):
        def build(names: Sequence[str], slot: Slot) -> Term:
            pattern = content("2", names, "decode2", int_type(address), numerals(model.pattern_powers), False)
            return eval_term(address)(pattern, slot("R1"))
        uses = 2
    elif isinstance(model, explicit.MultiplePatternNTM):
        def build(names: Sequence[str], slot: Slot) -> Term:
            first = content("2", names[0:2], "decode2", int_type(address), numerals(model.pattern_powers), True)
            second = content("3", names[2:4], "decode3", int_type(address), numerals(model.pattern_powers), True)
            switch = content("4", names[4:6], "decode4", bint_type(address),
                             [binary(word, address) for word in model.switch_words], False)
            return feed(address)(first, second, switch, slot("R1"))
        uses = 6
    elif isinstance(model, explicit.PolynomialStepNTM):
        def build(names: Sequence[str], slot: Slot) -> Term:
            pattern = content("2", names[0:2], "decode2", int_type(address), numerals(model.pattern_powers), True)
            step = content("3", names[2:4], "decode3", Lolli(Bang(int_type(address)), int_type(address)),
                           [polynomial(tuple(a), address) for a in model.polynomials], False)
            return newfeed(address)(pattern, step, slot("R1"))
        uses = 4
    elif isinstance(model, explicit.DihedralPolynomialStepNTM):
        def build(names: Sequence[str], slot: Slot) -> Term:
            words = content("2", names[0:2], "decode2", bint_type(address),
                            [binary(word, address) for word in model.pattern_words], True)
            transform = content("3", names[2:4], "decode3", Lolli(Bang(bint_type(address)), bint_type(address)),
                                [WORD_TRANSFORM_TERMS[f](address) for f in model.transforms], False)
            return transform(words)(slot("R1"), slot("P1"))
        uses = 4
    else:
        raise LsrlError(f"llrnn_form: {type(model).__name__} has a ring without a read head")

    return uses, build
