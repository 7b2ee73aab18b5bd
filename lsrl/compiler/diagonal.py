"""``model.diagonal()``: rewrite a compiled program so that every ``LinState`` has a diagonal ``A``.

Each ``LinState`` ``s_t = A s_{t-1} + u_t`` (``u_t = B x_t + b``) is taken apart as follows.

1. **Independent blocks.** The connected components of ``A``'s off-diagonal sparsity graph do not
   interact; a component of one unit is already diagonal and is left alone.
2. **Exact Jordan form of each component** (sympy, over the rationals): ``A_c = V J V^-1`` with ``J``
   made of Jordan blocks of the rational eigenvalues and one 2x2 rational block per irreducible
   quadratic factor of the characteristic polynomial with complex roots (a rotation: its real form
   needs no irrational number when kept as a 2x2 block). Any other factor (real irrational or
   complex roots of degree > 2) cannot be diagonalised over the rationals: ``LsrlError`` naming the
   layer and the polynomial.
3. **Jordan chains become cascades.** In the new coordinates ``z = V^-1 s`` a chain reads
   ``z_i,t = l z_i,t-1 + z_{i+1},t-1 + w_i,t``. Its tail is a diagonal state; one layer later,
   ``z_{i+1},t-1`` is a function of values of step t only, ``(z_{i+1},t - w_{i+1},t - z_{i+2},t-1) / l``,
   so ``z_i`` is a diagonal state of the next layer. The drive rows ``w_j = (V^-1 B)_j x`` that later
   layers need are carried as copies (states with ``A = 0``), as are the finished ``z``.
4. **Delay lines stay short convolutions.** A chain of eigenvalue 0 (a shift register) has no
   diagonal realisation at all: every diagonal linear recurrence, and every cascade of them, has a
   transfer function ``P(q)/Q(q)`` with ``deg P <= deg Q``, and a delay ``q`` is not of this form.
   Such a chain is kept as its nilpotent Jordan block (a *delay line*: ``z_t`` is a fixed linear map
   of the last ``k`` inputs, a convolution of width ``k``), and listed by ``summary()``.
5. The map back, ``s = V z``, is folded into the next layer when that is a ``Linear`` (or the next
   ``LinState``'s ``B``); otherwise it becomes a ``Linear`` layer.

A ``ReLUState`` has no linear recurrence to diagonalise: it is kept as it is (a pending ``s = V z``
becomes a ``Linear`` in front of it), and the linear targets refuse it.

Every number stays in the model's backend; on the exact backend the result is bit-exact. On the
float backend the decomposition is computed exactly on the floats' rational values and rounded
once; a block whose eigenvalues are irrational (a rotation, a random matrix) is diagonalised
numerically instead (numpy's eigenvectors, real ones as 1x1 blocks and each complex pair
``a +- ib`` as the 2x2 block ``[[a, b], [-b, a]]``). Its error: the state is rebuilt as ``V z``
with ``V`` rounded, so each step's state carries a relative error of about ``cond(V) * 2^-52``;
``cond(V) >= 1e6`` is refused. The tests check the outputs to 1e-9 (relative, floored at 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lsrl.ir.labels import Label, UnitLabel
from lsrl.errors import InternalError, LsrlError
from lsrl.kinds import Kind
from lsrl.lang.nodes import Linear, LinState, Multi, ReLU, ReLUState
from lsrl.model.compiled import CompiledProgram
from lsrl.model.extensions import register_model_pass
from lsrl.model.structure import OTHER, components, state_blocks
from lsrl.numbers import EXACT, FLOAT, Backend, ExactBackend, FloatBackend, Matrix, mpq, to_rational_exactly

Layer = Any  # a compiled layer, an lsrl node (Linear, LinState, ...): lsrl.lang has no type hints
Slot = tuple[str, int]  # ("z", j): mode j of a rewritten state; ("w", j): its drive j
MAX_CONDITION = 1e6  # float backend: the eigenbasis V of a block with irrational eigenvalues


# ---- exact decomposition of one component -------------------------------------------------------


@dataclass
class Chain:
    """Coordinates ``z[columns]`` of one Jordan block: ``eigenvalue`` on the diagonal, unit coupling
    ``z_i <- z_{i+1}`` (the last one is the tail), or a 2x2 ``pair`` block (``rotation``)."""

    columns: list[int]
    eigenvalue: Any = None
    rotation: Any = None  # 2x2 sympy Matrix (or nested list) for a complex pair


def _jordan_of_component(block: Any, where: str, numeric: bool, keep: bool = False) -> tuple[Any, list[Chain]]:
    """``(V, chains)`` with ``block = V J V^-1``: a sympy matrix over the rationals, or (``numeric``:
    the float backend, when some eigenvalues are irrational) a float64 numpy array. ``keep``: an
    irreducible factor ``p`` with irrational roots, of multiplicity ``k``, stays a rational block ``J_p``, the state
    on its invariant subspace ``ker p(A)**k`` (``rational_block_diagonal``)."""
    import sympy

    size = block.shape[0]
    x = sympy.Symbol("x")
    _, factors = sympy.factor_list(block.charpoly(x).as_expr(), x)
    bases: list[Any] = []  # sympy matrices, or numpy arrays for a numeric block
    chains: list[Chain] = []
    for factor, multiplicity in factors:
        poly = sympy.Poly(factor, x)
        kernel = _evaluate(poly, block) ** multiplicity
        basis = sympy.Matrix.hstack(*kernel.nullspace())
        restricted = (basis.T * basis).inv() * basis.T * block * basis  # block on its invariant subspace
        offset = sum(b.shape[1] for b in bases)
        if poly.degree() == 1:
            P, J = restricted.jordan_form()
            bases.append(basis * P)
            chains.extend(_chains_of(J, offset))
        elif poly.degree() == 2 and multiplicity == 1 and sympy.discriminant(poly) < 0:
            bases.append(basis)
            chains.append(Chain([offset, offset + 1], rotation=restricted))
        elif keep:  # the state on ker p(A)**k: one rational block of k times p's degree
            bases.append(basis)
            chains.append(Chain(list(range(offset, offset + basis.shape[1])), rotation=restricted))
        elif numeric and multiplicity == 1:  # distinct irrational eigenvalues: real Schur-like form in float64
            Q, local = _real_eigenbasis(np.array(restricted.tolist(), dtype=float), offset)
            bases.append(np.array(basis.tolist(), dtype=float) @ Q)
            chains.extend(local)
        else:
            kind = "a repeated complex pair" if poly.degree() == 2 and sympy.discriminant(poly) < 0 else (
                "irrational real eigenvalues" if poly.degree() == 2
                else f"an irreducible factor of degree {poly.degree()}")
            raise LsrlError(
                f"{where}: A has {kind} (factor {factor} of its characteristic polynomial); it has no "
                f"exact diagonal (or 2x2 complex-pair) form over the rationals; compile with backend='float' "
                f"for a float64 one"
            )
    if any(isinstance(b, np.ndarray) for b in bases):
        return np.hstack([np.array(b.tolist(), dtype=float) for b in bases]), chains
    V = sympy.Matrix.hstack(*bases)
    if V.shape != (size, size):
        raise InternalError(f"{where}: the eigenbases span {V.shape[1]} of {size} dimensions")
    return V, chains


def _real_eigenbasis(R: np.ndarray, offset: int) -> tuple[np.ndarray, list[Chain]]:
    """Columns ``Q`` with ``R Q = Q D``: ``D`` diagonal for real eigenvalues and ``[[a, b], [-b, a]]``
    for each complex pair ``a +- ib`` (columns ``Re v, Im v``), as LRU's complex diagonal in real form."""
    values, vectors = np.linalg.eig(R)
    columns: list[np.ndarray] = []
    chains: list[Chain] = []
    for value, vector in zip(values, vectors.T):
        if value.imag == 0:
            chains.append(Chain([offset + len(columns)], eigenvalue=float(value.real)))
            columns.append(vector.real)
        elif value.imag > 0:
            a, b = float(value.real), float(value.imag)
            chains.append(Chain([offset + len(columns), offset + len(columns) + 1], rotation=[[a, b], [-b, a]]))
            columns.extend([vector.real, vector.imag])
    return np.column_stack(columns), chains


def _evaluate(poly: Any, M: Any) -> Any:
    import sympy

    result = sympy.zeros(*M.shape)
    for coefficient in poly.all_coeffs():
        result = result * M + coefficient * sympy.eye(M.shape[0])
    return result


def _chains_of(J: Any, offset: int) -> list[Chain]:
    chains, start = [], 0
    for i in range(J.shape[0]):
        if i == J.shape[0] - 1 or J[i, i + 1] == 0:
            chains.append(Chain(list(range(offset + start, offset + i + 1)), eigenvalue=J[i, i]))
            start = i + 1
    return chains


# ---- rewriting one LinState ---------------------------------------------------------------------


def _to_sympy(value: Any) -> Any:
    import sympy

    q = mpq(value)
    return sympy.Rational(int(q.numerator), int(q.denominator))


def _from_sympy(value: Any, backend: Backend) -> Any:
    if isinstance(value, (float, np.floating)):  # a float backend's numeric eigenvalue
        return float(value)
    q = mpq(int(value.p), int(value.q))
    return q if backend is EXACT else float(q)


@dataclass
class Decomposition:
    """``A = V J V^-1`` for a whole state: ``V`` and ``V^-1`` as lsrl matrices and ``J``'s chains."""

    V: Matrix
    V_inv: Matrix
    chains: list[Chain]


def decompose(layer: Layer, keep: bool = False) -> Decomposition:
    """The exact Jordan decomposition of ``layer.A``, component by component (``keep``: see
    ``_jordan_of_component``)."""
    import sympy

    A, backend, d = layer.A, layer.A.backend, layer.dim
    where = f"LinState '{layer.name}'"
    V_entries, V_inv_entries, chains = [], [], []
    for indices in components(A):
        if len(indices) == 1:
            i = indices[0]
            V_entries.append((i, i, 1))
            V_inv_entries.append((i, i, 1))
            chains.append(Chain([i], eigenvalue=A.entry(i, i)))
            continue
        block = sympy.Matrix([[_to_sympy(A.entry(r, c)) for c in indices] for r in indices])
        V, local = _jordan_of_component(block, where, numeric=backend is not EXACT, keep=keep)
        V_inv = _inverse(V, where)
        for r in range(len(indices)):
            for c in range(len(indices)):
                if V[r, c]:
                    V_entries.append((indices[r], indices[c], _from_sympy(V[r, c], backend)))
                if V_inv[r, c]:
                    V_inv_entries.append((indices[r], indices[c], _from_sympy(V_inv[r, c], backend)))
        for chain in local:
            rotation = chain.rotation.tolist() if hasattr(chain.rotation, "tolist") else chain.rotation
            chains.append(Chain(
                [indices[c] for c in chain.columns],
                None if chain.eigenvalue is None else _from_sympy(chain.eigenvalue, backend),
                None if rotation is None else [[_from_sympy(v, backend) for v in row] for row in rotation],
            ))
    return Decomposition(backend.from_entries(V_entries, (d, d)), backend.from_entries(V_inv_entries, (d, d)), chains)


def _inverse(V: Any, where: str) -> Any:
    if not isinstance(V, np.ndarray):
        return V.inv()
    condition = np.linalg.cond(V)
    if not condition < MAX_CONDITION:
        raise LsrlError(
            f"{where}: the float64 eigenbasis of A is ill-conditioned (condition number {condition:.3g} >= "
            f"{MAX_CONDITION:g}); its diagonal form would lose about {np.log10(condition):.0f} digits"
        )
    return np.linalg.inv(V)


def _is_cascade(chain: Chain) -> bool:
    return chain.rotation is None and len(chain.columns) > 1 and chain.eigenvalue != 0


def _previous_value(chain: Chain, position: int, backend: ExactBackend | FloatBackend) -> dict[Slot, Any]:
    """``z_j,t-1`` for ``j = chain.columns[position]`` as ``{("z"|"w", index): coefficient}`` of step-t values."""
    inverse = 1 / backend.scalar(chain.eigenvalue)
    terms = {}
    sign = inverse
    for j in chain.columns[position:]:  # z_j,t-1 = (z_j,t - w_j,t - z_{j+1},t-1) / l, unrolled
        terms[("z", j)] = sign
        terms[("w", j)] = -sign
        sign = -sign * inverse
    return terms


def _cascade_layers(layer: Layer, decomposition: Decomposition,
                    previous: Layer) -> tuple[list[Layer], dict[Slot, int], list[list[Label] | None]]:
    """The LinState(s) computing ``z``; returns (layers, slots of the last one)."""
    backend = layer.A.backend
    zero = backend.zero
    drive, bias = decomposition.V_inv @ layer.B, decomposition.V_inv @ layer.b
    init = decomposition.V_inv @ layer.init_state
    bias_values, init_values = bias.values(), init.values()
    cascades = [chain for chain in decomposition.chains if _is_cascade(chain)]
    depth = max((len(chain.columns) for chain in cascades), default=1)

    # layer 0: every chain's coordinates except the non-tail coordinates of cascades, plus copies of w
    slots: list[Slot] = []
    A_entries: list[tuple[int, int, Any]] = []
    B_rows: dict[int, Mapping[int, Any]] = {}
    b_entries: list[Any] = []
    s0: list[Any] = []
    position = {}

    def add(slot: Slot, b_value: Any, s_value: Any) -> None:
        position[slot] = len(slots)
        slots.append(slot)
        b_entries.append(b_value)
        s0.append(s_value)

    for chain in decomposition.chains:
        members = chain.columns[-1:] if _is_cascade(chain) else chain.columns
        for j in members:
            add(("z", j), bias_values[j], init_values[j])
            B_rows[position[("z", j)]] = drive.row(j)
        if chain.rotation is not None:
            for r, i in enumerate(chain.columns):
                for c, j in enumerate(chain.columns):
                    A_entries.append((position[("z", i)], position[("z", j)], chain.rotation[r][c]))
        elif _is_cascade(chain) or len(chain.columns) == 1:
            A_entries.append((position[("z", chain.columns[-1])], position[("z", chain.columns[-1])], chain.eigenvalue))
        else:  # a delay line: z_i <- z_{i+1}
            for i, j in zip(chain.columns, chain.columns[1:]):
                A_entries.append((position[("z", i)], position[("z", j)], 1))
    for chain in cascades:
        for j in chain.columns:
            add(("w", j), zero, zero)
            B_rows[position[("w", j)]] = drive.row(j)
    width = len(slots)
    labels: list[list[Label] | None] = [_slot_labels(layer.name, slots)]
    built = LinState(
        previous,
        backend.from_entries(A_entries, (width, width)),
        backend._assemble(((r, c, v) for r, row in B_rows.items() for c, v in row.items()), (width, previous.dim)),
        backend.vector(b_entries, width),
        backend.vector(s0, width),
        name=layer.name if depth == 1 else f"{layer.name}.level0",
    )
    layers = [built]

    # layer l: the coordinates at distance l from their chain's tail; the rest is carried as copies
    for level in range(1, depth):
        old = position
        slots, A_entries, b_entries, s0, position = [], [], [], [], {}
        B_entries: list[tuple[int, int, Any]] = []
        for chain in cascades:
            if len(chain.columns) <= level:
                continue
            k = len(chain.columns) - 1 - level
            j = chain.columns[k]
            add(("z", j), bias_values[j], init_values[j])
            row = position[("z", j)]
            A_entries.append((row, row, chain.eigenvalue))
            terms = _previous_value(chain, k + 1, backend)  # the drive's w_j terms carry w's bias too
            b_entries[row] += sum((value * bias_values[key[1]] for key, value in terms.items() if key[0] == "w"), zero)
            terms[("w", j)] = terms.get(("w", j), zero) + 1
            B_entries.extend((row, old[key], value) for key, value in terms.items() if value)
        for slot in old:
            keep = slot[0] == "z" or any(
                slot[1] in chain.columns and len(chain.columns) - 2 >= level for chain in cascades
            )
            if keep:
                add(slot, zero, zero)
                B_entries.append((position[slot], old[slot], 1))
        width = len(slots)
        built = LinState(
            layers[-1],
            backend.from_entries(A_entries, (width, width)),
            backend.from_entries(B_entries, (width, layers[-1].dim)),
            backend.vector(b_entries, width),
            backend.vector(s0, width),
            name=f"{layer.name}.level{level}",
        )
        layers.append(built)
        labels.append(_slot_labels(layer.name, slots))
    return layers, position, labels


def _slot_labels(name: str, slots: Iterable[Slot]) -> list[Label]:
    """The labels of a cascade layer's units: ``("z", j)`` is mode j, ``("w", j)`` drive j of ``name``."""
    return [UnitLabel(name, j, "mode" if kind == "z" else "drive") for kind, j in slots]


def _rewrite(layer: Layer, previous: Layer, keep: bool = False) -> tuple[
    list[Layer], Matrix | None, list[list[Label] | None] | None, Decomposition | None
]:
    """``layer`` as diagonal LinState(s) reading ``previous``, the map ``s = M z`` from the last
    one's output (``None`` when the state is unchanged), the new layers' labels (``None``: unchanged)
    and the decomposition (``None``: unchanged)."""
    if all(kind != OTHER for kind, _ in state_blocks(layer.A)):
        return [LinState(previous, layer.A, layer.B, layer.b, layer.init_state, name=layer.name)], None, None, None
    decomposition = decompose(layer, keep)
    layers, position, labels = _cascade_layers(layer, decomposition, previous)
    order = [position[("z", j)] for j in range(layer.dim)]  # z_j's place in the last layer
    readback = decomposition.V.times_selection(order, layers[-1].dim)
    return layers, readback, labels, decomposition


def _copy(layer: Layer, previous: Layer, convert: Callable[[Matrix], Matrix] | None = None) -> Layer:
    """``layer`` reading ``previous``, its weights passed through ``convert`` if one is given."""
    def weight(matrix: Matrix) -> Matrix:
        return matrix if convert is None else convert(matrix)

    if layer.kind is Kind.LINEAR:
        return Linear(previous, weight(layer.A), weight(layer.b), name=layer.name)
    if layer.kind is Kind.RELU:
        return ReLU(previous, name=layer.name)
    if layer.kind is Kind.MULTI:
        return Multi(previous, name=layer.name)
    if layer.kind is Kind.RELUSTATE:  # no linear recurrence to diagonalise: kept as it is
        return ReLUState(
            previous, weight(layer.A), weight(layer.B), weight(layer.b), weight(layer.init_state), name=layer.name
        )
    return LinState(
        previous, weight(layer.A), weight(layer.B), weight(layer.b), weight(layer.init_state), name=layer.name
    )


def float_diagonal(model: CompiledProgram) -> CompiledProgram:
    """``model.diagonal()``, or, where exact rationals cannot express it (irrational eigenvalues), the
    diagonal form of a float64 copy of ``model`` (what the float64 targets need)."""
    try:
        return diagonalise(model)
    except LsrlError:
        if model.backend != "exact":
            raise
    return diagonalise(_converted(model, FLOAT, FLOAT.convert))


def exact_diagonal(model: CompiledProgram) -> CompiledProgram:
    """``model.diagonal()`` in exact rationals: a float model's weights are read as the binary values
    they hold (not as the decimals they print as), so the result computes exactly what ``model``
    computes in real arithmetic. ``LsrlError`` (naming the layer and the polynomial) where a state's
    eigenvalues are irrational."""
    if model.backend == "exact":
        return diagonalise(model)
    return diagonalise(_converted(model, EXACT, _binary_values))


def rational_block_diagonal(model: CompiledProgram) -> CompiledProgram:
    """``exact_diagonal``, except that each irreducible factor of a state's characteristic polynomial whose
    roots are irrational (and simple) is kept as one rational block of its degree: ``A`` restricted to the
    invariant subspace ``ker p(A)``, in a rational basis. Its eigenvalues are left to the user (the
    ``lsrl.hf`` targets enclose them: ``lsrl.hf.enclosure``); exact rationals throughout. A repeated factor ``p**k``
    is kept as one block of ``k`` times its degree (no diagonal form over the reals that rationals can reach)."""
    exact = model if model.backend == "exact" else _converted(model, EXACT, _binary_values)
    return diagonalise(exact, keep_irrational=True)


def _binary_values(matrix: Matrix) -> Matrix:
    """``matrix`` in the exact backend, each float read as the rational it is."""
    entries = ((i, j, to_rational_exactly(value)) for i, j, value in matrix.entries())
    return EXACT.from_entries(entries, matrix.shape2d, matrix.is_vector)


def _converted(model: CompiledProgram, backend: Backend, convert: Callable[[Matrix], Matrix]) -> CompiledProgram:
    """A copy of ``model`` in ``backend``, its weights passed through ``convert``."""
    start = model.input.fresh()
    layers: list[Layer] = []
    for layer in model.layers:
        layers.append(_copy(layer, layers[-1] if layers else start, convert))
    copy = CompiledProgram(start, layers, backend, dict(model.stats), model.name, model.labels)
    copy.entangled, copy.node_widths = model.entangled, model.node_widths
    return copy


def _absorbing(layer: Layer, readback: Matrix, previous: Layer) -> Layer:
    """``layer`` (a Linear or LinState) reading ``previous`` through ``s = readback z``."""
    if layer.kind is Kind.LINEAR:
        return Linear(previous, layer.A @ readback, layer.b, name=layer.name)
    return LinState(previous, layer.A, layer.B @ readback, layer.b, layer.init_state, name=layer.name)


def diagonalise(model: CompiledProgram, keep_irrational: bool = False) -> CompiledProgram:
    """A new ``CompiledProgram`` computing the same outputs as ``model`` whose every ``LinState`` has
    a diagonal ``A``, up to 2x2 blocks for complex pairs and delay lines (see the module doc).

    Its ``labels``: a layer that keeps its outputs keeps its labels, a readback Linear (``s = V z``)
    has those of the state it rebuilds, and a rewritten state's units are ``mode`` and ``drive``
    units of the original layer (``lsrl.ir.labels``). ``eigenbases`` maps each rewritten
    layer's name to its ``(index in model.layers, V^-1, V^-1 B)``, with which ``eigen_trace`` checks those claims.
    ``keep_irrational``: irreducible factors with irrational roots stay rational blocks (``rational_block_diagonal``).
    """
    start = model.input.fresh()
    old_labels: list[list[Label] | None] = ([list(layer) for layer in model.labels] if model.labels is not None
                                            else [None] * len(model.layers))
    layers: list[Layer] = []
    labels: list[list[Label] | None] = []
    previous: Layer = start
    readback, eigenbases = None, {}
    state_labels: list[Label] | None = None
    entangled = set(model.entangled)
    source_layers: list[Layer] = model.layers
    for index, (layer, layer_labels) in enumerate(zip(source_layers, old_labels)):
        # nothing to fold s = V z into
        if readback is not None and layer.kind in (Kind.RELU, Kind.MULTI, Kind.RELUSTATE):
            previous = Linear(previous, readback, None, name=f"{previous.name}.readback")
            layers.append(previous)
            labels.append(state_labels)
            readback = None
        source = layer if readback is None else _absorbing(layer, readback, previous)
        if layer.kind is Kind.LINSTATE:
            new, readback, new_labels, decomposition = _rewrite(source, previous, keep_irrational)
            if decomposition is not None:
                eigenbases[layer.name] = (index, decomposition.V_inv, decomposition.V_inv @ layer.B)
                # its state now recurs in eigen-coordinates: a patched readback would not reach it
                entangled |= {label.node for label in layer_labels or [] if label}
            new_labels, state_labels = new_labels or [layer_labels], layer_labels
        else:
            new, new_labels = [source if readback is not None else _copy(layer, previous)], [layer_labels]
            readback = None
        layers.extend(new)
        labels.extend(new_labels)
        previous = new[-1]
    if readback is not None:
        layers.append(Linear(previous, readback, None, name=f"{previous.name}.readback"))
        labels.append(state_labels)
    known = [layer_labels for layer_labels in labels if layer_labels is not None]
    if model.labels is not None and len(known) != len(layers):
        raise InternalError(f"diagonal(): {len(layers)} layers but {len(known)} of them labelled")
    diagonal = CompiledProgram(start, layers, model.backend, dict(model.stats), model.name,
                               known if model.labels is not None else None)
    diagonal.eigenbases = eigenbases  # only a diagonal model has them (eigen_trace)
    diagonal.entangled, diagonal.node_widths = frozenset(entangled), model.node_widths
    return diagonal


def eigen_trace(diagonal: CompiledProgram, inputs: np.ndarray, layer_values: Sequence[np.ndarray]) -> dict:
    """The values that ``mode`` and ``drive`` labels of ``diagonal`` (``model.diagonal()``) claim,
    from the original model's input ``inputs`` and per-layer outputs ``layer_values`` (each
    ``(..., T, dim)``, exact or float): ``{(name, "mode"): V^-1 s, (name, "drive"): V^-1 B x}`` per
    rewritten LinState ``name`` (``s`` its output, ``x`` its input)."""
    if not hasattr(diagonal, "eigenbases"):
        raise LsrlError(f"{diagonal.name}: eigen_trace needs the program made by model.diagonal()")
    trace = {}
    for name, (index, V_inv, drive) in diagonal.eigenbases.items():
        trace[(name, "mode")] = _times(V_inv, layer_values[index])
        trace[(name, "drive")] = _times(drive, layer_values[index - 1] if index else inputs)
    return trace


def _times(matrix: Matrix, values: np.ndarray) -> np.ndarray:
    """``values @ matrix.T`` for an lsrl matrix and exact (object) or float values ``(..., d)``."""
    out = np.zeros(values.shape[:-1] + (matrix.shape2d[0],), dtype=values.dtype)
    out[...] = 0 * values[..., :1] if values.shape[-1] else 0  # exact zeros on the exact backend
    for i, j, weight in matrix.entries():
        out[..., i] = out[..., i] + weight * values[..., j]
    return out


register_model_pass("diagonal", diagonalise)  # model.diagonal() runs this pass (lsrl.model.extensions)
