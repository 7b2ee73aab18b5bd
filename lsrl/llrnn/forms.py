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
(legitimate on a ``!``-typed argument), and its add vector is linear. The gate, sharpening and
content addressing have no form here: ``llrnn_form`` refuses them.
"""

from __future__ import annotations

import torch

from lsrl.errors import LsrlError
from lsrl.llrnn import explicit
from lsrl.llrnn.cell import LLRNN, Commands, Data, Space, StateSpace
from lsrl.llrnn.logic.library import (
    binary, binary_identity, compose, discarding, eval_term, feed, fresh, higher_order_master, newfeed, numeral,
    polynomial, psi, repeat, second_order_master, share,
)
from lsrl.llrnn.logic.semantics import Function, Matrix, coordinates, scale, to_matrix, total
from lsrl.llrnn.logic.terms import Const, Derelict, Pair, Scale, Sum, Var, lam
from lsrl.llrnn.logic.types import Atom, Bang, Lolli, bint_type, dual, endo, int_type
from lsrl.llrnn.ring import reflection, ring_powers, rotation

STATE = Atom("A")
CONTROLLER = Atom("H0")
WORD_TRANSFORM_TERMS = {"id": binary_identity, "repeat": repeat}


def llrnn_form(model) -> LLRNN:
    """The LLRNN form of an explicit model, with the model's weights and initial state."""
    builders = {
        explicit.SecondOrderRNN: _second_order,
        explicit.MultiplicativeRNN: _multiplicative,
        explicit.HigherOrderRNN: _higher_order,
    }
    builder = builders.get(type(model))
    if builder is None and isinstance(model, explicit.RingMachine):
        builder = _ring_machine
    if builder is None:
        raise LsrlError(f"llrnn_form: no LLRNN form for {type(model).__name__}")
    options = getattr(model, "stabilisers", None)
    if options is not None and (options.gate or options.sharpen or options.content_addressing):
        raise LsrlError(f"llrnn_form: {type(model).__name__} uses gate / sharpen / content_addressing, which act "
                        "non-linearly on addresses and memories; only the erase and content_softmax variants "
                        "have an LLRNN form")
    factory = {"dtype": model.H.dtype, "device": model.H.device}
    cell, weights = builder(model, factory)
    with torch.no_grad():
        for target, source in weights.items():
            target.copy_(source.reshape(target.shape))
        cell.init_state.copy_(model.initial_state(1)[0])
    return cell


def _controller_weights(cell, model) -> dict:
    return {cell.H: model.H, cell.U: model.U, cell.B: model.B}


# ---- Sec. 2.2 and Example 3.1: one hidden vector ---------------------------------------------------


def _hidden_state(model) -> StateSpace:
    return StateSpace({"h0": Space(CONTROLLER, (model.controller_dim,))}, STATE)


def _second_order(model, factory):
    d = model.controller_dim
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=second_order_master(STATE),
                 input_space=Space(endo(STATE), (d, d)), **factory)
    # W^c x = V(x): row (i, j) of W^c holds V[i, j, :]
    return cell, {**_controller_weights(cell, model), cell.W_c: model.V.reshape(d * d, -1)}


def _multiplicative(model, factory):
    d, k, aux = model.controller_dim, model.aux_dim, Atom("K")
    c, h = fresh("c"), fresh("h")
    master = lam((c, Bang(endo(aux))), (h, STATE),
                 Const("I", Lolli(aux, STATE))(Derelict(Var(c))(Const("J", Lolli(STATE, aux))(Var(h)))))
    learned = {"I": Space(Lolli(aux, STATE), (d, k)), "J": Space(Lolli(STATE, aux), (k, d))}
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=master, learned=learned,
                 input_space=Space(endo(aux), (k, k), diagonal=True), **factory)
    weights = {cell.W_c: model.V, cell.learned["I"]: model.I, cell.learned["J"]: model.J}
    return cell, {**_controller_weights(cell, model), **weights}


def _higher_order(model, factory):
    d = model.controller_dim
    powers = Commands("p", int_type(STATE), tuple(numeral(n, STATE) for n in range(model.max_power + 1)))
    cell = LLRNN(_hidden_state(model), model.input_dim, master_in=higher_order_master(STATE), commands=[powers],
                 input_space=Space(endo(STATE), (d, d)), **factory)
    weights = {cell.W_c: model.V.reshape(d * d, -1), cell.W_p["p"]: model.W_p, cell.B_p["p"]: model.B_p}
    return cell, {**_controller_weights(cell, model), **weights}


# ---- the NTM family ----------------------------------------------------------------------------------


def contragredient(matrix: torch.Tensor) -> Function:
    """``g ↦ (g^{-1})^*`` on ``W^∨``: ``φ ↦ φ ∘ g^{-1}``, so a write address moves like a read address."""
    inverse = matrix.T  # the group elements are permutations

    def act(phi):
        if isinstance(phi, Matrix):
            return Matrix(phi.matrix @ inverse)
        return Function(lambda z: phi((inverse @ z.unsqueeze(-1)).squeeze(-1)))

    return Function(act)


class _Ring:
    """The types and state components of one memory ring."""

    def __init__(self, label: str, slots: int, width: int, coefficients):
        self.label = label
        self.address = Atom(f"W{label}")
        self.coefficients = coefficients
        self.components = {f"r{label}": Space(self.address, (slots,)),
                           f"w{label}": Space(dual(self.address), (1, slots)),
                           f"M{label}": Space(Lolli(self.address, coefficients), (width, slots))}


def _ring_machine(model, factory):
    rings = [_Ring(ring.label, ring.slots, ring.width, CONTROLLER if model.Q is None else Atom(f"V{ring.label}"))
             for ring in model.rings]
    components = {"h0": Space(CONTROLLER, (model.controller_dim,))}
    for ring in rings:
        components.update(ring.components)
    state = StateSpace({name: components[name] for name in model.layout}, STATE)  # the explicit model's order
    word_heads = isinstance(model, explicit.DihedralNTM)  # heads move by words in R and R', not by powers of R
    commands, data = _ring_slots(model, rings, word_heads, factory)
    learned = {} if model.Q is None else {"Q": Space(Lolli(rings[0].coefficients, CONTROLLER),
                                                     (model.controller_dim, model.rings[0].width))}
    variables = {slot.name: fresh(slot.name) for slot in commands + data}
    s, h = fresh("s"), fresh("h")
    slot = lambda name: Var(variables[name])  # noqa: E731
    constants = {}
    ring_one_read = _ring_one_read(model, {ring.label: ring for ring in rings}, state, slot, s, constants)
    summands_in = [_read_symbol(model, rings[0], state, s, h)]
    summands_out = []
    for ring, explicit_ring in zip(rings, model.rings):
        summands_out += _ring_summands(ring, state, slot, s, h, word_heads,
                                       ring_one_read if explicit_ring.read_moves is None else None,
                                       model.stabilisers.erase, constants, explicit_ring.slots, factory)
    binders = [(variables[c.name], Bang(c.type)) for c in commands + data] + [(s, Bang(STATE)), (h, STATE)]
    bang_names = [name for name, _ in binders[:-1]]

    def master(summands):
        return lam(*binders, Sum(tuple(discarding(bang_names, t) for t in summands)))

    cell = LLRNN(state, model.input_dim, master_in=master(summands_in), master_out=master(summands_out),
                 commands=commands, data=data, reads_state=True, controller="h0", learned=learned,
                 constants=constants, **factory)
    return cell, _ring_machine_weights(cell, model)


def _ring_slots(model, rings, word_heads: bool, factory) -> tuple:
    """Command slots (one per head the controller moves) and data slots (fixed R, R^∨ and, for the
    dihedral models, R', R'^∨; erase and add vectors by ReLU) of every ring."""
    reflections = word_heads or isinstance(model, explicit.DihedralPolynomialStepNTM)
    commands, data = [], []
    for ring, explicit_ring in zip(rings, model.rings):
        N, ell, width = explicit_ring.slots, ring.label, explicit_ring.width
        commands.append(_head_commands(model, f"s{ell}", dual(ring.address), N))
        if explicit_ring.read_moves is not None:
            commands.append(_head_commands(model, f"q{ell}", ring.address, N))
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


def _logit_ring(model, explicit_ring) -> bool:
    """A ring read through a softmax (``content_softmax``) holds logits: its add vector is linear."""
    return model.stabilisers.content_softmax and explicit_ring.label in model.drivers


def diagonal(N: int, factory: dict) -> Function:
    """``diag : W^∨ ⊸ (W ⊸ W)``, ``φ ↦ Σ_i φ(e_i) e_i e_i^∨``: how Eq. (2.13) weights the erase by location."""
    return Function(lambda phi: Matrix(torch.diag_embed(to_matrix(phi, N, **factory)[..., 0, :])))


def column_softmax(state: StateSpace, name: str) -> Function:
    """``!A ⊸ (W ⊸ V)``: memory ``name`` of the state with a softmax over each location's entries.
    Not linear, hence a ``!``-typed argument: ``Σ c |∅⟩_h ↦ Σ c softmax(M(h))``."""
    return Function(lambda states: total(scale(Matrix(torch.softmax(state.view(h, name), dim=-2)), c)
                                         for c, h in states.items))


def _ring_machine_weights(cell, model) -> dict:
    """The cell's parameters -> the explicit model's (same names: W_s1, B_q2, W_e1, …, Q)."""
    weights = _controller_weights(cell, model)
    for name in cell.W_p:
        weights[cell.W_p[name]], weights[cell.B_p[name]] = getattr(model, "W_" + name), getattr(model, "B_" + name)
    for name in cell.W_b:
        weights[cell.W_b[name]], weights[cell.B_b[name]] = getattr(model, "W_" + name), getattr(model, "B_" + name)
    if model.Q is not None:
        weights[cell.learned["Q"]] = model.Q
    return weights


def _head_commands(model, name: str, address, slots: int) -> Commands:
    """A head's command slot: a distribution over the programs that may move it, at ``address``."""
    if isinstance(model, explicit.DihedralNTM):
        return Commands(name, bint_type(address), tuple(binary(word, address) for word in model.words))
    powers = model.powers if isinstance(model, explicit.NTM) else ring_powers(slots, getattr(model, "head_powers", None))
    return Commands(name, int_type(address), tuple(numeral(n, address) for n in powers))


def _operators(ring: _Ring, slot, word_heads: bool, dual_address: bool):
    """The fixed data vectors a head's program is fed: α = R (and α' = R' for word heads), on W or W^∨."""
    suffix = "v" if dual_address else ""
    return [slot(f"R{ring.label}{suffix}")] + ([slot(f"P{ring.label}{suffix}")] if word_heads else [])


def _ring_summands(ring: _Ring, state, slot, s, h, word_heads, ring_one_read, erase, constants, slots, factory):
    """The summands of ``Z_out`` that update ring ``ring``: its write and read address and its memory,
    ``M' = M - e ∘ M + Ψ(w ⊗ a)`` (Sec. 3.2) or ``M' = M - e ∘ M_s ∘ diag(w') + Ψ(w' ⊗ a)`` (Eq. (2.13)),
    where ``M_s`` is read off the state ``s`` so that the summand stays linear in ``h``."""
    ell = ring.label
    proj = lambda name: state.projection(name)(Var(h))  # noqa: E731
    inj = state.injection
    write = Derelict(slot(f"s{ell}"))(*_operators(ring, slot, word_heads, True))
    new_write = write(proj(f"w{ell}"))
    summands = [inj(f"w{ell}")(new_write)]
    if ring_one_read is None:
        read = Derelict(slot(f"q{ell}"))(*_operators(ring, slot, word_heads, False))
        summands.append(inj(f"r{ell}")(read(proj(f"r{ell}"))))
    else:
        summands.append(inj(f"r{ell}")(ring_one_read(proj(f"r{ell}"))))
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


def _read_symbol(model, ring: _Ring, state, s, h):
    """``inj_h0(Q(M_1(r_1)))``: the memory from the state ``s``, the address from the linear ``h``."""
    content = state.projection(f"M{ring.label}")(Derelict(Var(s)))(state.projection(f"r{ring.label}")(Var(h)))
    if model.Q is not None:
        content = Const("Q", Lolli(ring.coefficients, CONTROLLER))(content)
    return state.injection("h0")(content)


def _ring_one_read(model, rings: dict, state, slot, s, constants):
    """A function building the term that moves ring 1's read address (``W1 ⊸ W1`` applied to its
    argument), from the contents ``M_j(r_j)`` of the driver rings read off the state ``s``."""
    if "1" not in rings:
        return None
    address = rings["1"].address
    alpha = slot("R1")

    def content(label: str, names, decoder: str, decoded_type, terms, bang: bool) -> object:
        ring = rings[label]
        constants[decoder] = coordinates(terms, bang=bang)
        decode = Const(decoder, Lolli(ring.coefficients, Bang(decoded_type) if bang else decoded_type))
        if model.stabilisers.content_softmax:
            constants[f"softmax_M{label}"] = column_softmax(state, f"M{label}")
            memory = Const(f"softmax_M{label}", Lolli(Bang(STATE), Lolli(ring.address, ring.coefficients)))(Var(names[0]))
        else:
            memory = state.projection(f"M{label}")(Derelict(Var(names[0])))
        return decode(memory(state.projection(f"r{label}")(Derelict(Var(names[1])))))

    numerals = lambda powers: [numeral(p, address) for p in powers]  # noqa: E731
    if isinstance(model, explicit.PatternNTM):
        def build(names):
            pattern = content("2", names, "decode2", int_type(address), numerals(model.pattern_powers), False)
            return eval_term(address)(pattern, alpha)
        uses = 2
    elif isinstance(model, explicit.MultiplePatternNTM):
        def build(names):
            first = content("2", names[0:2], "decode2", int_type(address), numerals(model.pattern_powers), True)
            second = content("3", names[2:4], "decode3", int_type(address), numerals(model.pattern_powers), True)
            switch = content("4", names[4:6], "decode4", bint_type(address),
                             [binary(word, address) for word in model.switch_words], False)
            return feed(address)(first, second, switch, alpha)
        uses = 6
    elif isinstance(model, explicit.PolynomialStepNTM):
        def build(names):
            pattern = content("2", names[0:2], "decode2", int_type(address), numerals(model.pattern_powers), True)
            step = content("3", names[2:4], "decode3", Lolli(Bang(int_type(address)), int_type(address)),
                           [polynomial(a, address) for a in model.polynomials], False)
            return newfeed(address)(pattern, step, alpha)
        uses = 4
    elif isinstance(model, explicit.DihedralPolynomialStepNTM):
        def build(names):
            words = content("2", names[0:2], "decode2", bint_type(address),
                            [binary(word, address) for word in model.pattern_words], True)
            transform = content("3", names[2:4], "decode3", Lolli(Bang(bint_type(address)), bint_type(address)),
                                [WORD_TRANSFORM_TERMS[f](address) for f in model.transforms], False)
            return transform(words)(alpha, slot("P1"))
        uses = 4
    else:
        raise LsrlError(f"llrnn_form: {type(model).__name__} has a ring without a read head")

    # the copies of s are made in front of the operator applied to r1
    return lambda address_term: share(s, uses, lambda names: build(names)(address_term))
