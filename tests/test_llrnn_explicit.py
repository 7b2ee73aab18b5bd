"""The explicit models of the LLRNN paper: ring operators, batched models against per-sample loops
written here with plain matrices, the hand-set behaviours of Secs. 4.1-4.3, and gradients."""

import pytest
import torch
from torch.func import functional_call

from lsrl.errors import DimensionError, SequenceError
from lsrl.llrnn.explicit import (
    ALL_STABILISERS,
    PAPER_LITERAL,
    NTM,
    DihedralNTM,
    DihedralPolynomialStepNTM,
    HigherOrderRNN,
    MultiplePatternNTM,
    MultiplicativeRNN,
    PatternNTM,
    PolynomialStepNTM,
    SecondOrderRNN,
)
from lsrl.llrnn.ring import apply_powers, reflection, rotation, sharpen, word_counts, word_operator

D = torch.float64


def basis(N, a):
    return torch.eye(N, dtype=D)[a % N]


# -- ring operators ----------------------------------------------------------------------------------


def test_rotation_and_reflection_move_basis_vectors():
    N = 5
    R, Rr = rotation(N), reflection(N)
    for a in range(N):
        assert torch.equal(R @ basis(N, a), basis(N, a + 1))
        assert torch.equal(Rr @ basis(N, a), basis(N, -a))


def test_dihedral_relations():
    N = 5
    R, Rr, one = rotation(N), reflection(N), torch.eye(N, dtype=D)
    assert not torch.equal(Rr @ R, R @ Rr)
    assert torch.equal((Rr @ R) @ (Rr @ R), one)
    assert torch.equal(Rr @ R @ Rr, torch.linalg.matrix_power(R, N - 1))  # R' R R' = R^-1
    assert torch.equal(torch.linalg.matrix_power(R, N), one) and torch.equal(Rr @ Rr, one)


def test_word_operator_reads_in_reverse_order():
    alpha, beta = torch.randn(3, 3, dtype=D), torch.randn(3, 3, dtype=D)
    assert torch.allclose(word_operator("001", alpha, beta), beta @ alpha @ alpha)
    assert torch.allclose(word_operator("10", alpha, beta), alpha @ beta)
    assert torch.equal(word_operator("", alpha, beta), torch.eye(3, dtype=D))
    assert word_counts("00101") == (3, 2)
    with pytest.raises(ValueError):
        word_operator("012", alpha, beta)


def test_apply_powers_is_a_mixture_of_matrix_powers():
    N, powers = 6, (0, 1, 4, 9)
    p, v = torch.rand(3, len(powers), dtype=D), torch.randn(3, N, dtype=D)
    R = rotation(N)
    mixtures = [sum(p[b, k] * torch.linalg.matrix_power(R, n) for k, n in enumerate(powers)) for b in range(3)]
    expected = torch.stack([mixture @ v[b] for b, mixture in enumerate(mixtures)])
    assert torch.allclose(apply_powers(p, v, powers), expected, atol=1e-14)


# -- per-sample references, written from the equations with plain matrices ------------------------


def relu(v):
    return torch.clamp(v, min=0)


def softmax(v):
    return torch.exp(v - v.max()) / torch.exp(v - v.max()).sum()


def weight(model, name):
    return getattr(model, name).detach()


def elman(model, h0, x):
    return weight(model, "H") @ h0 + weight(model, "U") @ x + weight(model, "B")


def ref_second_order(model, x, h):
    V = weight(model, "V")
    Vx = sum(V[:, :, k] * x[k] for k in range(x.shape[0]))
    return relu(Vx @ h + elman(model, h, x))


def ref_multiplicative(model, x, h):
    I, J, V = weight(model, "I"), weight(model, "J"), weight(model, "V")
    return relu(I @ torch.diag(V @ x) @ J @ h + elman(model, h, x))


def ref_higher_order(model, x, h):
    V = weight(model, "V")
    Vx = sum(V[:, :, k] * x[k] for k in range(x.shape[0]))
    p = softmax(weight(model, "W_p") @ h + weight(model, "B_p"))
    Z = sum(p[i] * torch.linalg.matrix_power(Vx, i) for i in range(model.max_power + 1))
    return relu(Z @ h + elman(model, h, x))


def command(model, name, h0):
    return weight(model, "W_" + name) @ h0 + weight(model, "B_" + name)


def head(model, name, h0, v, operators):
    """``sum_k softmax(W h0 + B)_k g_k v``."""
    p = softmax(command(model, name, h0))
    return sum(p[k] * g @ v for k, g in enumerate(operators))


def memory(model, label, h0, w, M):
    """``(1 - e) M + a w^T`` with the old write address."""
    d = M.shape[0]
    e = relu(command(model, "e" + label, h0)).reshape(d, d)
    a = relu(command(model, "a" + label, h0))
    return (torch.eye(d, dtype=D) - e) @ M + torch.outer(a, w)


def ref_ntm(model, x, h, operators):
    p = model.parts(h)
    h0, r, w, M = p["h0"], p["r"], p["w"], p["M"]
    new = [relu(M @ r + elman(model, h0, x)), head(model, "q", h0, r, operators), head(model, "s", h0, w, operators),
           memory(model, "", h0, w, M).flatten()]
    return torch.cat(new)


def ref_ring_machine(model, x, h, head_operators, ring1_operator):
    """Rings labelled 1..n; ``head_operators[label]`` the head moves, ``ring1_operator(contents)`` ring 1's move."""
    p = model.parts(h)
    labels = [name[1:] for name in p if name[0] == "M"]
    h0 = p["h0"]
    contents = {label: p["M" + label] @ p["r" + label] for label in labels}
    new_h0 = relu(weight(model, "Q") @ contents["1"] + elman(model, h0, x))
    addresses = []
    for label in labels:
        r, w, ops = p["r" + label], p["w" + label], head_operators[label]
        new_r = ring1_operator(contents) @ r if label == "1" else head(model, "q" + label, h0, r, ops)
        addresses += [new_r, head(model, "s" + label, h0, w, ops)]
    memories = [memory(model, label, h0, p["w" + label], p["M" + label]).flatten() for label in labels]
    return torch.cat([new_h0, *addresses, *memories])


def powers_of(R, powers):
    return [torch.linalg.matrix_power(R, n) for n in powers]


def ref_pattern(model, x, h):
    R = rotation(model.slots)
    heads = powers_of(R, model.head_powers)

    def move(c):
        return sum(lam * torch.linalg.matrix_power(R, n) for lam, n in zip(c["2"], model.pattern_powers))

    return ref_ring_machine(model, x, h, {"1": heads, "2": heads}, move)


def ref_multiple_pattern(model, x, h):
    rotations = {str(i + 1): rotation(N) for i, N in enumerate(model.slots)}
    heads = {label: powers_of(R, range(R.shape[0])) for label, R in rotations.items()}

    def move(c):
        total = 0
        for i, p_i in enumerate(model.pattern_powers):
            for j, p_j in enumerate(model.pattern_powers):
                for k, S in enumerate(model.switch_words):
                    a, b = S.count("0"), S.count("1")
                    step = torch.linalg.matrix_power(rotations["1"], a * p_i + b * p_j)
                    total = total + c["2"][i] * c["3"][j] * c["4"][k] * step
        return total

    return ref_ring_machine(model, x, h, heads, move)


def ref_polynomial(model, x, h):
    R = rotation(model.slots)
    heads = powers_of(R, model.head_powers)

    def move(c):
        total = 0
        for j, a in enumerate(model.polynomials):
            for i, p in enumerate(model.pattern_powers):
                step = sum(coefficient * p**k for k, coefficient in enumerate(a))
                total = total + c["3"][j] * c["2"][i] * torch.linalg.matrix_power(R, step)
        return total

    return ref_ring_machine(model, x, h, {"1": heads, "2": heads, "3": heads}, move)


def ref_dihedral_polynomial(model, x, h):
    R, Rr = rotation(model.slots), reflection(model.slots)
    heads = powers_of(R, model.head_powers)
    transform = {"id": lambda S: S, "repeat": lambda S: S + S}

    def move(c):
        total = 0
        for j, f in enumerate(model.transforms):
            for i, S in enumerate(model.pattern_words):
                total = total + c["3"][j] * c["2"][i] * word_operator(transform[f](S), R, Rr)
        return total

    return ref_ring_machine(model, x, h, {"1": heads, "2": heads, "3": heads}, move)


def ntm_reference(operators_of):
    return lambda model, x, h: ref_ntm(model, x, h, operators_of(model))


CASES = {
    "second_order": (lambda: SecondOrderRNN(3, 4), ref_second_order),
    "multiplicative": (lambda: MultiplicativeRNN(3, 4, 5), ref_multiplicative),
    "higher_order": (lambda: HigherOrderRNN(3, 4, 3), ref_higher_order),
    "ntm": (lambda: NTM(3, 4, 5, powers=(0, 1, 3), **PAPER_LITERAL), ntm_reference(lambda m: powers_of(rotation(m.slots), m.powers))),
    "dihedral_ntm": (
        lambda: DihedralNTM(3, 4, 5, **PAPER_LITERAL),
        ntm_reference(lambda m: [word_operator(F, rotation(m.slots), reflection(m.slots)) for F in m.words]),
    ),
    "pattern_ntm": (lambda: PatternNTM(3, 4, 5, 3, head_powers=(0, 1, 2), **PAPER_LITERAL), ref_pattern),
    "multiple_pattern_ntm": (
        lambda: MultiplePatternNTM(3, 4, 3, (7, 2, 3, 2), pattern_powers=(0, 1, 2), switch_words=("0", "1", "01"), **PAPER_LITERAL),
        ref_multiple_pattern,
    ),
    "polynomial_step_ntm": (lambda: PolynomialStepNTM(3, 4, 6, 3, polynomials=((1, 1), (0, 0, 1)), **PAPER_LITERAL), ref_polynomial),
    "dihedral_polynomial_step_ntm": (lambda: DihedralPolynomialStepNTM(3, 4, 5, 3, **PAPER_LITERAL), ref_dihedral_polynomial),
}


def random_state(model, batch):
    """Random non-negative states with addresses spread over all positions (distributions)."""
    parts = model.parts(torch.rand(batch, model.state_dim, dtype=D))
    addresses = {name: v / v.sum(-1, keepdim=True) for name, v in parts.items() if name[0] in "rw"}
    return model.pack(**(parts | addresses))


@pytest.mark.parametrize("case", CASES)
def test_model_matches_per_sample_loop(case):
    torch.manual_seed(0)
    build, reference = CASES[case]
    model = build()
    B, T = 3, 4
    xs, h = torch.randn(B, T, model.input_dim, dtype=D), random_state(model, B)
    with torch.no_grad():
        states = model(xs, h)
    assert states.shape == (B, T, model.state_dim)
    for b in range(B):
        state = h[b]
        for t in range(T):
            state = reference(model, xs[b, t], state)
            assert torch.allclose(states[b, t], state, rtol=1e-12, atol=1e-12), (case, b, t)


@pytest.mark.parametrize("case", CASES)
def test_layout_parts_and_initial_state(case):
    model = CASES[case][0]()
    offset = 0
    for name, (start, shape) in model.layout.items():
        assert start == offset
        offset += torch.Size(shape).numel()
    assert offset == model.state_dim
    h = torch.randn(2, 3, model.state_dim, dtype=D)
    parts = model.parts(h)
    assert list(parts) == list(model.layout)
    assert all(parts[name].shape == (2, 3, *shape) for name, (_, shape) in model.layout.items())
    assert torch.equal(model.pack(**parts), h)
    h0 = model.initial_state(2)
    assert h0.shape == (2, model.state_dim)
    drivers = {"M" + label for label in getattr(model, "drivers", ())}
    for name, value in model.parts(h0[0]).items():
        expected = torch.zeros_like(value)
        if name[0] in "rw":
            expected[0] = 1  # addresses start focused at position 0
        if name in drivers:
            expected[0, :] = 1  # rings that drive ring 1 hold their first program everywhere
        assert torch.equal(value, expected), name
    model.init_state = torch.arange(model.state_dim, dtype=D)
    assert torch.equal(model.initial_state(2)[1], model.init_state)
    with pytest.raises(SequenceError):
        model(torch.zeros(2, 3, model.input_dim + 1, dtype=D))


def test_write_head_command_moves_forward_like_the_read_head():
    model = NTM(1, 2, 5, powers=(0, 2), **PAPER_LITERAL)
    silence(model)
    with torch.no_grad():
        model.B_s[1] = model.B_q[1] = 100.0  # command "R^2" for both heads
    states = model(torch.zeros(1, 2, 1, dtype=D))
    parts = model.parts(states[0])
    assert torch.allclose(parts["w"], torch.stack([basis(5, 2), basis(5, 4)]), atol=1e-12)
    assert torch.allclose(parts["r"], parts["w"], atol=1e-12)


# -- hand-set behaviours of Sec. 4 -----------------------------------------------------------------------


def silence(model):
    """All weights zero: uniform head commands, no erasing, nothing added, h0 driven by reads only."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()


def hold(contents, width):
    """A ring memory (width, N) holding the basis vectors ``e_c`` at successive positions."""
    return torch.eye(width, dtype=D)[list(contents)].T


def test_pattern_ntm_delivers_the_sequence_of_section_4_1():
    """Timing: the symbol read from state h^(t) is M1 r1^(t); it enters h0^(t+1). With both read
    addresses at position 0 in h^(0), the ring-2 entry at r2^(t) moves r1 from t to t+1, so
    the reads of h^(0..9) are a b b b d d e e e b (h0 of the outputs h^(1..10), with Q = 1)."""
    model = PatternNTM(1, 5, 5, 5, pattern_powers=(0, 1, 2), **PAPER_LITERAL)
    silence(model)
    with torch.no_grad():
        model.Q.copy_(torch.eye(5, dtype=D))
        model.B_q2[1] = 100.0  # ring 2's read head: R^1 each step
    symbols = hold(range(5), 5)  # a, b, c, d, e at positions 0..4
    pattern = hold([1, 0, 0, 2, 0], 3)  # [[1]], [[0]], [[0]], [[2]], [[0]]
    model.init_state = model.pack(M1=symbols, M2=pattern)
    states = model(torch.zeros(1, 10, 1, dtype=D))[0]
    history = torch.cat([model.init_state[None], states])
    parts = model.parts(history)
    reads = (parts["M1"] @ parts["r1"][..., None])[..., 0]
    assert "".join("abcde"[i] for i in reads[:10].argmax(-1)) == "abbbddeeeb"
    assert torch.allclose(reads[:10], torch.eye(5, dtype=D)[reads[:10].argmax(-1)], atol=1e-12)
    assert torch.allclose(parts["h0"][1:], reads[:10], atol=1e-12)


def positions(model, label, states):
    """Focus positions of ring ``label``'s read address, checking that it stays one-hot."""
    r = model.parts(states)["r" + label]
    assert torch.allclose(r, torch.eye(r.shape[-1], dtype=D)[r.argmax(-1)], atol=1e-12)
    return r.argmax(-1).tolist()


@pytest.mark.parametrize(
    "switch, expected",
    [
        ([0, 0, 0, 0], [1, 3, 3, 4, 6, 6]),  # "0": ring 2's steps 1, 2, 0, 1, 2, 0
        ([1, 1, 1, 1], [2, 2, 4, 4, 6, 6]),  # "1": ring 3's steps 2, 0, 2, 0, ...
        ([2, 2, 2, 2], [2, 6, 6, 8, 12, 12]),  # "00": ring 2's steps doubled
        ([0, 0, 1, 1], [1, 3, 5, 5, 7, 7]),  # switch ring advancing: 2, 2, 3, 3, then 2, 2 again
    ],
)
def test_multiple_pattern_ntm_switches_between_patterns(switch, expected):
    model = MultiplePatternNTM(1, 2, 2, slots=(13, 3, 2, 4), pattern_powers=(0, 1, 2), switch_words=("0", "1", "00"), **PAPER_LITERAL)
    silence(model)
    with torch.no_grad():
        for name in ("B_q2", "B_q3", "B_q4"):
            getattr(model, name)[1] = 100.0  # every read head but ring 1's advances one position per step
    model.init_state = model.pack(M2=hold([1, 2, 0], 3), M3=hold([2, 0], 3), M4=hold(switch, 3))
    states = model(torch.zeros(1, 6, 1, dtype=D))[0]
    assert positions(model, "1", states) == expected


@pytest.mark.parametrize("polynomial, expected", [(0, [1, 3, 6]), (1, [1, 5, 4])])  # x: 1+2+3; x^2: 1+4+9 mod 10
def test_polynomial_step_ntm_squares_steps(polynomial, expected):
    model = PolynomialStepNTM(1, 2, 10, 2, pattern_powers=(1, 2, 3), **PAPER_LITERAL)
    silence(model)
    with torch.no_grad():
        model.B_q2[1] = 100.0
    model.init_state = model.pack(M2=hold([0, 1, 2] + [0] * 7, 3), M3=hold([polynomial] * 10, 2))
    states = model(torch.zeros(1, 3, 1, dtype=D))[0]
    assert positions(model, "1", states) == expected


def test_polynomial_step_ntm_is_multilinear_in_the_pattern():
    """Focused at x^2, lambda = ([[1]] + [[2]]) / 2 moves r1 by (R + R^4) / 2, not by ((R + R^2) / 2)^2."""
    model = PolynomialStepNTM(1, 2, 10, 2, pattern_powers=(1, 2), **PAPER_LITERAL)
    silence(model)
    model.init_state = model.pack(M2=torch.full((2, 10), 0.5, dtype=D), M3=hold([1] * 10, 2))
    r1 = model.parts(model(torch.zeros(1, 1, 1, dtype=D))[0, 0])["r1"]
    assert torch.allclose(r1, (basis(10, 1) + basis(10, 4)) / 2, atol=1e-12)


@pytest.mark.parametrize("word", ["0", "1", "01"])
def test_dihedral_polynomial_step_ntm_squares_group_elements(word):
    model = DihedralPolynomialStepNTM(1, 2, 5, 2, pattern_words=("0", "1", "01"), **PAPER_LITERAL)
    silence(model)
    g = word_operator(word, rotation(5), reflection(5))
    r1 = torch.rand(5, dtype=D)
    for transform, expected in ((0, g @ r1), (1, g @ g @ r1)):
        M2 = hold([model.pattern_words.index(word)] * 5, 3)
        model.init_state = model.pack(r1=r1, M2=M2, M3=hold([transform] * 5, 2))
        moved = model.parts(model(torch.zeros(1, 1, 1, dtype=D))[0, 0])["r1"]
        assert torch.allclose(moved, expected, atol=1e-12), (word, transform)


# -- gradients ------------------------------------------------------------------------------------------------

TINY = {
    "second_order": lambda **o: SecondOrderRNN(2, 2),
    "multiplicative": lambda **o: MultiplicativeRNN(2, 2, 2),
    "higher_order": lambda **o: HigherOrderRNN(2, 2, 2),
    "ntm": lambda **o: NTM(2, 2, 3, **o),
    "dihedral_ntm": lambda **o: DihedralNTM(2, 2, 3, words=("", "1", "01"), **o),
    "pattern_ntm": lambda **o: PatternNTM(2, 2, 3, 2, pattern_powers=(0, 1), **o),
    "multiple_pattern_ntm": lambda **o: MultiplePatternNTM(2, 2, 2, slots=(3, 2, 2, 2), **o),
    "polynomial_step_ntm": lambda **o: PolynomialStepNTM(2, 2, 3, 2, pattern_powers=(0, 1), **o),
    "dihedral_polynomial_step_ntm": lambda **o: DihedralPolynomialStepNTM(2, 2, 3, 2, pattern_words=("1", "01"), **o),
}
VARIANTS = {"paper": PAPER_LITERAL, "default": {}, "all_stabilisers": ALL_STABILISERS}


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", TINY)
def test_gradients_reach_every_parameter(case, variant):
    torch.manual_seed(1)
    model = TINY[case](**VARIANTS[variant])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("B"):
                parameter.add_(0.5)  # no ReLU unit dead for every input: test the wiring, not the draw
    B, T = 4, 3
    xs, h = torch.randn(B, T, model.input_dim, dtype=D), random_state(model, B)
    names = [name for name, _ in model.named_parameters()]
    projection = torch.randn(B * T * model.state_dim, 3, dtype=D)

    def outputs(*parameters):
        states = functional_call(model, dict(zip(names, parameters)), (xs, h))
        return states.flatten() @ projection

    parameters = tuple(p.detach().clone().requires_grad_() for p in model.parameters())
    if variant == "paper":  # the finite-difference check once per model; every variant must reach every weight
        assert torch.autograd.gradcheck(outputs, parameters, fast_mode=True)
    gradients = torch.autograd.grad(outputs(*parameters).sum(), parameters)
    for name, gradient in zip(names, gradients):
        assert gradient.abs().max() > 0, name


# -- the TF stabilisers, on hand-set weights ------------------------------------------------------------


def test_sharpening_raises_the_moved_address_to_gamma():
    """gamma = 1 + ReLU(B_gamma) = 2: an address (0.75, 0.25, 0, 0) becomes (0.9, 0.1, 0, 0) (plus the 1e-6 floor)."""
    model = NTM(1, 2, 4, powers=(0, 1), sharpen=True)
    silence(model)
    with torch.no_grad():
        model.B_q[0] = model.B_s[0] = 100.0  # stand still
        model.B_gammaq.fill_(1.0)
    r = torch.tensor([0.75, 0.25, 0, 0], dtype=D)
    moved = model.parts(model.step(model.pack(r=r), torch.zeros(1, 1, dtype=D)))["r"][0]
    assert torch.allclose(moved, torch.tensor([0.9, 0.1, 0, 0], dtype=D), atol=1e-5)


def test_sharpening_by_a_large_gamma_gives_the_largest_position_not_nan():
    """Float32 powers (a + 1e-6)^gamma all underflow to 0 once gamma is in the hundreds; the sharpened
    address must still be the one-hot of the largest entry (its limit), and stay exact at gamma = 2."""
    address = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    for gamma in (300.0, 5e4):
        sharpened = sharpen(address, torch.tensor([[gamma]]))
        assert torch.isfinite(sharpened).all() and torch.equal(sharpened, basis(4, 0).float()[None])
    floor = address.double() + 1e-6
    expected = floor**2 / (floor**2).sum()
    assert torch.allclose(sharpen(address.double(), torch.tensor([[2.0]], dtype=D)), expected, rtol=1e-12)
    signed = torch.tensor([[0.8, -0.2, 0.4]], dtype=D) - 1e-6  # a signed address keeps its signs
    cubed = torch.tensor([[0.512, -0.008, 0.064]], dtype=D)
    assert torch.allclose(sharpen(signed, torch.tensor([[3.0]], dtype=D)), cubed / cubed.sum())


@pytest.mark.parametrize("controller, squash", [("relu", torch.relu), ("tanh", torch.tanh)])
def test_the_controller_activation_is_relu_or_tfs_tanh(controller, squash):
    """h0' = act(M r + H h0 + U x + B) with only the bias set: ReLU keeps 3 and clips -2; tanh squashes both."""
    model = NTM(1, 2, 3, powers=(0, 1), controller=controller)
    silence(model)
    with torch.no_grad():
        model.B.copy_(torch.tensor([3.0, -2.0], dtype=D))
    h0 = model.parts(model.step(model.initial_state(1), torch.zeros(1, 1, dtype=D)))["h0"][0]
    assert torch.equal(h0, squash(torch.tensor([3.0, -2.0], dtype=D)))


def test_an_unknown_controller_activation_is_refused():
    with pytest.raises(DimensionError, match="controller must be one of"):
        NTM(1, 2, 3, controller="sigmoid")


def test_content_addressing_finds_the_column_matching_the_key():
    model = NTM(1, 3, 5, powers=(0, 1), content_addressing=True, memory_width=3)
    silence(model)
    memory = torch.tensor([[1, 0, 0, 1, 0], [0, 1, 0, 1, 1], [0, 0, 1, 0, 1]], dtype=D)  # column 3 = (1, 1, 0)
    with torch.no_grad():
        model.B_q[0] = 100.0  # no shift after the content weighting
        model.B_kq.copy_(torch.tensor([2.0, 2.0, 0.0], dtype=D))  # the direction of column 3
        model.B_betaq.fill_(200.0)  # key strength softplus(200) = 200: a sharp softmax
        model.B_iq.fill_(100.0)  # interpolation gate 1: the content weighting replaces the old address
    r = model.parts(model.step(model.pack(M=memory), torch.zeros(1, 1, dtype=D)))["r"][0]
    assert torch.allclose(r, basis(5, 3), atol=1e-6)


@pytest.mark.parametrize("gate_bias, expected", [(100.0, 1), (-100.0, 2)])
def test_the_gate_chooses_between_direct_head_and_pattern(gate_bias, expected):
    """Ring 2 holds the step 2 everywhere; ring 1's direct head commands R^1; the gate picks one."""
    model = PatternNTM(1, 2, 6, 2, pattern_powers=(0, 2), head_powers=(0, 1), gate=True, content_softmax=False)
    silence(model)
    with torch.no_grad():
        model.B_q1[1] = 100.0
        model.B_g1.fill_(gate_bias)
    model.init_state = model.pack(M2=hold([1] * 6, 2))
    states = model(torch.zeros(1, 1, 1, dtype=D))[0]
    assert positions(model, "1", states) == [expected]
