"""The LLRNN cell (Sec. 3, Eqs. (3.1)–(3.2)), a ``torch.nn.Module`` for any well-typed master term:

    h' = ReLU(Z_in(h) + H h + U x + B) + Z_out(h),   Z_z = ⟦master^z⟧_nl(p_1..p_r, b_1..b_s, c[, h])

with command vectors ``p_i = softmax(W^p_i h + B^p_i)`` (coordinates over denotations of closed
terms), data vectors ``b_j = ReLU(W^b_j h + B^b_j)`` (or fixed, as the paper fixes α = R) and the
input vector ``c = W^c x``.

The state space ``⟦A⟧`` is a direct sum of named components (the controller h_0, addresses,
memories); the cell supplies constants ``proj_c : A ⊸ T_c`` and ``inj_c : T_c ⊸ A`` for each.
One extension of the paper's definition: a master term may take the previous state itself as a
last ``!A`` argument (``reads_state=True``). The paper's own NTM masters need it: ``Z_in(h) =
(M(r), 0, 0, 0)`` reads the memory M and the address r, both parts of h, so it is not linear in
h unless the operator is generated from the state ``|∅⟩_h`` and applied to the linear h.
As in the NTM (Sec. 3.2), ``controller=`` restricts H, U, B and every command and data network to
one component (h_0): the paper's "H is the projection to H_0 followed by H_0".

Steps outside linear logic (the TF code's sharpening and content addressing, ``lsrl.llrnn.forms``) are
not terms: they are ``nn.Module``s that rewrite components of the state around the masters. A step then
runs in stages, each master still a linear-logic term:

    h~ = before(h ⊕ 0)                       scratch components appended to the state, filled here
    h~ = between(h~ + Z_addr(h~))             Z_addr = ⟦master^addr⟧(...)(h~): the new addresses, in scratch
    h' = [ReLU(Z_in(h~) + H h_0 + U x + B) + Z_out(h~)] without the scratch components

with every command, data vector and ``|∅⟩_h~`` computed once, from ``h~`` after ``before``, and every
step reading the previous controller state h_0. Without such steps and ``master_addr`` the step is
Eq. (3.1) as it stands. ``activation="tanh"`` replaces the ReLU of the controller by the TF code's tanh
(it only acts on the controller: every other component of ``inside`` is 0, which both maps to 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import DimensionError, shown
from lsrl.llrnn.checks import LlrnnArgumentError, check_inputs, count, integers, strings
from lsrl.llrnn.recurrent import MAX_PARAMETERS, Factory
from lsrl.llrnn.logic.check import IllTypedTerm, LogicError, type_of
from lsrl.llrnn.logic.semantics import (
    Combination, Diagonal, Distribution, Function, Given, Matrix, Tensors, Value, as_map, as_tensor, as_value, combine,
    denote, dirac, split, to_matrix,
)
from lsrl.llrnn.logic.terms import Const, Term, children, free_variables
from lsrl.llrnn.logic.types import Atom, Bang, Lolli, One, Type, endo, is_first_order, lolli

T = TypeVar("T")  # the class a value is checked to be


class _Named(Protocol):
    """A record with a name (``Commands``, ``Data``)."""

    @property
    def name(self) -> str: ...


NamedRecord = TypeVar("NamedRecord", bound=_Named)

# The records below (Space, Commands, Data, StateSpace) and LLRNN check what they are given: each wrong value is
# an LlrnnArgumentError (or the LogicError / DimensionError of the logic) whose one-line message names the owner
# and the argument.


def _of_class(owner: str, name: str, value: object, cls: type[T] | tuple[type[T], ...], kind: str) -> T:
    if not isinstance(value, cls) or isinstance(value, bool) and cls is not bool:
        raise LlrnnArgumentError(f"{owner}: {name} must be {kind}, got {shown(value)}")
    return value


def _a_name(owner: str, name: str, value: object) -> str:
    """A non-empty string without "." (it names torch parameters)."""
    text = _of_class(owner, name, value, str, "a string")
    if not text or "." in text:
        raise LlrnnArgumentError(f"{owner}: {name} must be a non-empty string without '.', got {text!r}")
    return text


def _a_type(owner: str, name: str, value: object) -> Type:
    return _of_class(owner, name, value, Type, "a linear-logic type (lsrl.llrnn.logic.types)")


def _an_option(owner: str, name: str, value: object, known: Mapping[str, object]) -> str:
    if not isinstance(value, str) or value not in known:
        raise LlrnnArgumentError(f"{owner}: unknown {name} {shown(value)}; known: {sorted(known)}")
    return value


def _records(owner: str, name: str, values: object, cls: type[NamedRecord]) -> list[NamedRecord]:
    """``values`` (an iterable of ``cls``, not a string) as a list whose records have distinct names."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise LlrnnArgumentError(f"{owner}: {name} must be a sequence of {cls.__name__}, got {shown(values)}")
    records = [_of_class(owner, name, record, cls, f"a sequence of {cls.__name__}") for record in values]
    names = [record.name for record in records]
    if len(set(names)) != len(names):
        raise LlrnnArgumentError(f"{owner}: {name} has two records named alike: {names}")
    return records


def _spaces(owner: str, name: str, value: object) -> dict[str, Space]:
    """``value`` (a mapping of names to ``Space``) as a dict."""
    spaces = _of_class(owner, name, value, Mapping, "a mapping of names to Space")
    for key, space in spaces.items():
        _a_name(owner, f"{name} key", key)
        _of_class(owner, f"{name}[{key!r}]", space, Space, "a Space")
    return dict(spaces)


@dataclass(frozen=True)
class Space:
    """A first-order space of coordinates: an atom (``shape = (d,)``) or maps ``S ⊸ T`` (``shape =
    (d_T, d_S)``), optionally restricted to diagonal maps (the multiplicative RNN's V)."""

    type: Type
    shape: tuple[int, ...]
    diagonal: bool = False

    def __post_init__(self) -> None:
        if not is_first_order(_a_type("Space", "type", self.type)):
            raise LogicError(f"Space: type {self.type}: a space of coordinates needs an atom or a map between atoms")
        shape = tuple(count("Space", "shape", n, high=MAX_PARAMETERS) for n in integers("Space", "shape", self.shape))
        axes = 1 if isinstance(self.type, (Atom, One)) else 2
        _of_class("Space", "diagonal", self.diagonal, bool, "True or False")
        # the cap counts coordinates (a diagonal map has d of them), as the explicit models count parameters
        coordinates = shape[0] if self.diagonal and len(shape) == 2 else math.prod(shape)
        if len(shape) != axes or coordinates > MAX_PARAMETERS:
            raise DimensionError(f"Space: shape {shape} for type {self.type}: expected {axes} size(s) of at most "
                                 f"{MAX_PARAMETERS:,} coordinates in all")
        object.__setattr__(self, "shape", shape)
        if self.diagonal and shape[0] != shape[1]:
            raise DimensionError(f"Space: a diagonal space needs a square shape, got {shape}")

    @property
    def dim(self) -> int:
        return self.shape[0] if self.diagonal else math.prod(self.shape)

    def value(self, coordinates: torch.Tensor) -> torch.Tensor | Matrix:
        if len(self.shape) == 1:
            return coordinates
        if self.diagonal:  # entry by entry: d numbers per batch element, never a dense d x d
            return Diagonal(coordinates)
        return Matrix(coordinates.reshape(*coordinates.shape[:-1], *self.shape))


@dataclass(frozen=True)
class Commands:
    """``p = softmax(W^p h + B^p)`` read as ``Σ p_i |∅⟩_{⟦basis_i⟧}`` for an argument ``!type``."""

    name: str
    type: Type
    basis: tuple[Term, ...]
    dirac_of_sum: bool = False

    def __post_init__(self) -> None:
        owner = f"Commands {_a_name('Commands', 'name', self.name)}"
        _a_type(owner, "type", self.type)
        basis = _terms(owner, self.basis)
        for i, term in enumerate(basis):
            if free_variables(term):
                raise LlrnnArgumentError(f"{owner}: basis[{i}] must be a closed term, it uses "
                                         f"{', '.join(sorted(free_variables(term)))}")
            try:
                actual = type_of(term)
            except LogicError as error:
                raise LlrnnArgumentError(f"{owner}: basis[{i}] is ill-typed: {error}") from None
            if actual != self.type:
                raise LlrnnArgumentError(f"{owner}: basis[{i}] has type {actual}, not the type {self.type}")
        object.__setattr__(self, "basis", basis)
        _of_class(owner, "dirac_of_sum", self.dirac_of_sum, bool, "True or False")


def _terms(owner: str, basis: object) -> tuple[Term, ...]:
    """``basis`` (a non-empty iterable of terms, not a string) as a tuple."""
    if isinstance(basis, (str, bytes)) or not isinstance(basis, Iterable):
        raise LlrnnArgumentError(f"{owner}: basis must be a sequence of closed terms, got {shown(basis)}")
    terms = tuple(basis)
    if not terms:
        raise LlrnnArgumentError(f"{owner}: basis must hold at least one term, got none")
    for term in terms:
        _of_class(owner, "basis", term, Term, "a sequence of terms (lsrl.llrnn.logic.terms)")
    return terms


ACTIVATIONS = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "identity": lambda z: z}
FIXED_VALUES = (torch.Tensor, Matrix, Function, Tensors, Distribution, Combination)  # what a fixed data value may be


@dataclass(frozen=True)
class Data:
    """``b = ReLU(W^b h + B^b)`` in ``space`` (or another of ``ACTIVATIONS``: the NTM's sigmoid erase
    vector of Eq. (2.13), a pattern ring's linear add vector), or the ``fixed`` value (then no weights)."""

    name: str
    type: Type
    space: Space | None = None
    fixed: Given | None = None
    activation: str = "relu"

    def __post_init__(self) -> None:
        owner = f"Data {_a_name('Data', 'name', self.name)}"
        _a_type(owner, "type", self.type)
        _an_option(owner, "activation", self.activation, ACTIVATIONS)
        if (self.space is None) == (self.fixed is None):
            raise LlrnnArgumentError(f"{owner}: give exactly one of space (learned coordinates) and fixed (a value), "
                                     f"got {'neither' if self.space is None else 'both'}")
        if self.space is not None:
            _of_class(owner, "space", self.space, Space, "a Space")
            if self.space.type != self.type:
                raise LlrnnArgumentError(f"{owner}: space has type {self.space.type}, not the data's type {self.type}")
        else:
            _of_class(owner, "fixed", self.fixed, FIXED_VALUES, "a torch.Tensor or a value of lsrl.llrnn.logic")


_STATE_ATOM = Atom("A")


class StateSpace:
    """``⟦A⟧`` as the direct sum of named components, each a ``Space`` stored flat, in order."""

    def __init__(self, components: Mapping[str, Space], atom: Atom = _STATE_ATOM) -> None:
        _of_class("StateSpace", "atom", atom, Atom, "an Atom")
        self.atom = atom
        self.components = _spaces("StateSpace", "components", components)
        if not self.components:
            raise LlrnnArgumentError("StateSpace: components must hold at least one Space, got none")
        self.layout, offset = {}, 0
        for name, space in self.components.items():
            self.layout[name] = (offset, tuple(space.shape))
            offset += math.prod(space.shape)
        self.dim = offset

    def flat(self, h: torch.Tensor, name: str) -> torch.Tensor:
        offset, shape = self.layout[name]
        return h[..., offset : offset + math.prod(shape)]

    def view(self, h: torch.Tensor, name: str) -> torch.Tensor:
        return self.flat(h, name).reshape(*h.shape[:-1], *self.layout[name][1])

    def projection(self, name: str) -> Const:
        return Const(f"proj_{name}", Lolli(self.atom, self.components[name].type))

    def injection(self, name: str) -> Const:
        return Const(f"inj_{name}", Lolli(self.components[name].type, self.atom))

    def constant_types(self) -> dict[str, Type]:
        return {c.name: c.type for name in self.components for c in (self.projection(name), self.injection(name))}

    def constants(self, dtype: torch.dtype, device: torch.device | str | None) -> dict[str, Function]:
        """The denotations of every ``proj_c`` and ``inj_c``."""
        constants = {}
        for name, space in self.components.items():
            constants[f"proj_{name}"] = Function(partial(self._project, name, space))
            constants[f"inj_{name}"] = Function(partial(self._inject, name, dtype=dtype, device=device))
        return constants

    def place(self, name: str, flat: torch.Tensor) -> torch.Tensor:
        """A state that holds ``flat`` in component ``name`` and zeros elsewhere."""
        offset, shape = self.layout[name]
        return F.pad(flat, (offset, self.dim - offset - math.prod(shape)))

    def replace(self, h: torch.Tensor, name: str, flat: torch.Tensor) -> torch.Tensor:
        """``h`` with component ``name`` replaced by ``flat`` (..., size of the component)."""
        offset, shape = self.layout[name]
        return torch.cat([h[..., :offset], flat, h[..., offset + math.prod(shape):]], dim=-1)

    def _project(self, name: str, space: Space, h: Value) -> Value:
        return space.value(self.flat(as_tensor(h), name))

    def _inject(self, name: str, value: Value, dtype: torch.dtype, device: torch.device | str | None
                ) -> torch.Tensor:
        shape = self.layout[name][1]
        if len(shape) == 1:
            return self.place(name, as_tensor(value))
        return self.place(name, to_matrix(as_map(value), shape[1], dtype, device).flatten(-2))


def constants_of(term: Term) -> set[Const]:
    """Every constant occurring in ``term``."""
    if isinstance(term, Const):
        return {term}
    return set().union(*(constants_of(child) for child in children(term)))


class LLRNN(nn.Module):
    """An LLRNN; follows the interface of the explicit models (``initial_state``, ``step``, ``forward``,
    ``parts``, ``layout``) so that the two can be run and trained alike."""

    def __init__(self, state: StateSpace, input_dim: int, *, master_in: Term | None = None,
                 master_out: Term | None = None, commands: Iterable[Commands] = (), data: Iterable[Data] = (),
                 input_space: Space | None = None, reads_state: bool = False, controller: str | None = None,
                 learned: Mapping[str, Space] | None = None, constants: Mapping[str, Given] | None = None,
                 master_addr: Term | None = None, scratch: Iterable[str] = (), before: Iterable[nn.Module] = (),
                 between: Iterable[nn.Module] = (), activation: str = "relu", dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        input_dim = count("LLRNN", "input_dim", input_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise LlrnnArgumentError(f"LLRNN: dtype must be a floating torch.dtype (torch.float32, torch.float64), "
                                     f"got {dtype!r}")
        _of_class("LLRNN", "state", state, StateSpace, "a StateSpace")
        self.activation = ACTIVATIONS[_an_option("LLRNN", "activation", activation, ACTIVATIONS)]  # ReLU in the paper
        self.state, self.input_dim = state, input_dim
        self.scratch = strings("LLRNN", "scratch", scratch, nonempty=False)  # the last components of ``state``:
        # working space of one step, not carried
        if self.scratch and tuple(state.components)[-len(self.scratch):] != self.scratch:
            raise DimensionError(f"scratch components {self.scratch} must be the last ones of the state")
        carried = [name for name in state.components if name not in self.scratch]
        self.layout = {name: state.layout[name] for name in carried}
        self.state_dim = sum(math.prod(shape) for _, shape in self.layout.values())
        self.before, self.between = (nn.ModuleList(_modules(name, steps)) for name, steps in (("before", before),
                                                                                             ("between", between)))
        self.commands = _records("LLRNN", "commands", commands, Commands)
        self.data = _records("LLRNN", "data", data, Data)
        if input_space is not None:
            _of_class("LLRNN", "input_space", input_space, Space, "a Space or None")
        self.input_space = input_space
        _of_class("LLRNN", "reads_state", reads_state, bool, "True or False")
        if controller is not None and (not isinstance(controller, str) or controller not in carried):
            raise LlrnnArgumentError(f"LLRNN: controller must be None or a carried component of the state "
                                     f"({', '.join(carried)}), got {shown(controller)}")
        self.reads_state, self.controller = reads_state, controller
        self.masters = {"in": master_in, "out": master_out, "addr": master_addr}
        for which, master in self.masters.items():
            if master is not None:
                _of_class("LLRNN", f"master_{which}", master, Term, "a term (lsrl.llrnn.logic.terms) or None")
        self.fixed_constants = {} if constants is None else _fixed_constants(constants)
        learned = {} if learned is None else _spaces("LLRNN", "learned", learned)
        self._check_masters(learned)
        factory: Factory = {"dtype": dtype, "device": device}
        self.controller_dim = self.state_dim if controller is None else math.prod(state.layout[controller][1])
        self._check_size(learned)
        d_c = self.controller_dim
        self.H = _parameter((d_c, d_c), d_c, factory)
        self.U = _parameter((d_c, input_dim), input_dim, factory)
        self.B = _parameter((d_c,), d_c, factory)
        self.W_p = nn.ParameterDict({c.name: _parameter((len(c.basis), d_c), d_c, factory) for c in self.commands})
        self.B_p = nn.ParameterDict({c.name: _parameter((len(c.basis),), d_c, factory) for c in self.commands})
        generated = {d.name: d.space.dim for d in self.data if d.space is not None}  # the rest are fixed
        self.W_b = nn.ParameterDict({name: _parameter((dim, d_c), d_c, factory) for name, dim in generated.items()})
        self.B_b = nn.ParameterDict({name: _parameter((dim,), d_c, factory) for name, dim in generated.items()})
        self.W_c = _parameter((input_space.dim, input_dim), input_dim, factory) if input_space else None
        # learned constants (the multiplicative RNN's I and J, the pattern NTM's Q), as coordinates
        self.learned_spaces = dict(learned or {})
        self.learned = nn.ParameterDict({name: _parameter((space.dim,), space.shape[-1], factory)
                                         for name, space in self.learned_spaces.items()})
        self.register_buffer("init_state", torch.zeros(self.state_dim, **factory))
        self.init_state: torch.Tensor
        # closed basis terms: their denotations do not change
        self._basis_values = {c.name: [denote(t) for t in c.basis] for c in self.commands}

    # ---- construction checks --------------------------------------------------------------------
    def expected_master_type(self) -> Type:
        sources = [Bang(c.type) for c in self.commands] + [Bang(d.type) for d in self.data]
        if self.input_space is not None:
            sources.append(Bang(self.input_space.type))
        if self.reads_state:
            sources.append(Bang(self.state.atom))
        return lolli(*sources, endo(self.state.atom))

    def _check_size(self, learned: Mapping[str, Space]) -> None:
        """Refuse, before any memory is asked for, more parameters than ``MAX_PARAMETERS``."""
        d_c = self.controller_dim
        rows = d_c + 1 + sum(len(c.basis) for c in self.commands)
        rows += sum(d.space.dim for d in self.data if d.space is not None)  # the rest are fixed
        entries = rows * d_c + d_c * self.input_dim + sum(space.dim for space in learned.values()) + len(self.commands)
        entries += self.input_space.dim * self.input_dim if self.input_space else 0
        if entries > MAX_PARAMETERS:
            raise LlrnnArgumentError(f"LLRNN: {entries:,} parameters are more than {MAX_PARAMETERS:,}; the state, "
                                     "input_dim, commands and data ask for them: choose smaller spaces")

    def _check_masters(self, learned: Mapping[str, Space]) -> None:
        expected = self.expected_master_type()
        supplied = {**self.state.constant_types(), **{name: space.type for name, space in learned.items()}}
        for which, master in self.masters.items():
            if master is None:
                continue
            actual = type_of(master)
            if actual != expected:
                raise IllTypedTerm(f"master^{which} has type {actual}; an LLRNN with these slots needs {expected}")
            for constant in sorted(constants_of(master), key=lambda c: c.name):
                if constant.name in supplied and supplied[constant.name] != constant.type:
                    raise IllTypedTerm(f"master^{which}: the constant {constant.name} is used at type {constant.type}, "
                                       f"but the cell supplies {supplied[constant.name]}")
                if constant.name not in supplied and constant.name not in self.fixed_constants:
                    raise LogicError(f"master^{which} uses the constant {constant.name}, which was not given")

    @property
    def input_map(self) -> nn.Parameter:
        """``W^c`` (its rows the input space's coordinates); a cell without an input space has none."""
        if self.W_c is None:
            raise LlrnnArgumentError("LLRNN: this cell has no input space, hence no input map W^c")
        return self.W_c

    # ---- the interface shared with the explicit models ----------------------------------------------
    def initial_state(self, batch: int) -> torch.Tensor:
        return self.init_state.expand(batch, -1).clone()

    def parts(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: self.state.view(h, name) for name in self.layout}

    def forward(self, xs: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(xs, torch.Tensor) and (xs.dim() != 3 or xs.shape[-1] != self.input_dim):
            raise DimensionError(f"LLRNN: inputs must be (B, T, {self.input_dim}), got {tuple(xs.shape)}")
        check_inputs("LLRNN", xs, self.input_dim, self.init_state.dtype, self.init_state.device)
        h = self.initial_state(xs.shape[0]) if h is None else h
        masters = self._denote_masters()
        states = []
        for t in range(xs.shape[1]):
            h = self._step(h, xs[:, t], masters)
            states.append(h)
        return torch.stack(states, dim=1)

    def step(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._step(h, x, self._denote_masters())

    # ---- one step of Eq. (3.1) ----------------------------------------------------------------------
    def _denote_masters(self) -> dict[str, Value]:
        constants: dict[str, Given] = {**self.state.constants(self.init_state.dtype, self.init_state.device),
                                       **self.fixed_constants}
        constants.update({name: self.learned_spaces[name].value(p) for name, p in self.learned.items()})
        return {which: denote(master, constants) for which, master in self.masters.items() if master is not None}

    def _arguments(self, h: torch.Tensor, controller: torch.Tensor, x: torch.Tensor) -> list[Value]:
        arguments: list[Value] = []
        for c in self.commands:
            p = torch.softmax(controller @ self.W_p[c.name].T + self.B_p[c.name], dim=-1)
            arguments.append(combine(split(p), self._basis_values[c.name], bang=True, dirac_of_sum=c.dirac_of_sum))
        for d in self.data:
            if d.space is not None:
                coordinates = ACTIVATIONS[d.activation](controller @ self.W_b[d.name].T + self.B_b[d.name])
                arguments.append(dirac(d.space.value(coordinates)))
            elif d.fixed is not None:  # a data slot has exactly one of the two
                arguments.append(as_value(Bang(d.type), d.fixed))
        if self.input_space is not None and self.W_c is not None:  # W_c is made exactly with an input space
            arguments.append(dirac(self.input_space.value(x @ self.W_c.T)))
        if self.reads_state:
            arguments.append(dirac(h))
        return arguments

    def _step(self, h: torch.Tensor, x: torch.Tensor, masters: dict[str, Value]) -> torch.Tensor:
        controller = h if self.controller is None else self.state.view(h, self.controller)
        if self.scratch:
            h = F.pad(h, (0, self.state.dim - self.state_dim))  # room for the scratch components
        for outside in self.before:
            h = outside(self.state, h, controller)
        arguments = self._arguments(h, controller, x)
        operators: dict[str, Value] = {}
        for which, master in masters.items():
            for argument in arguments:
                master = as_map(master)(argument)
            operators[which] = master

        def apply(which: str, state: torch.Tensor) -> torch.Tensor:  # Z_which(state)
            return as_tensor(as_map(operators[which])(state))

        if "addr" in operators:
            h = h + apply("addr", h)
            for outside in self.between:
                h = outside(self.state, h, controller)
        drive = controller @ self.H.T + x @ self.U.T + self.B
        if self.controller is not None:
            drive = self.state.place(self.controller, drive)
        inside = drive + apply("in", h) if "in" in operators else drive
        h_next = self.activation(inside)
        h_next = h_next + apply("out", h) if "out" in operators else h_next
        return h_next[..., :self.state_dim] if self.scratch else h_next


def _modules(name: str, modules: object) -> list[nn.Module]:
    """``before`` or ``between``: an iterable of ``nn.Module`` steps (not a string)."""
    if isinstance(modules, (str, bytes, nn.Module)) or not isinstance(modules, Iterable):
        raise LlrnnArgumentError(f"LLRNN: {name} must be a sequence of torch.nn.Module steps, got {shown(modules)}")
    steps = list(modules)
    for step in steps:
        _of_class("LLRNN", name, step, nn.Module, "a sequence of torch.nn.Module steps")
    return steps


def _fixed_constants(constants: object) -> dict[str, Given]:
    """``constants``: a mapping of constant names to fixed values (``FIXED_VALUES``)."""
    given = _of_class("LLRNN", "constants", constants, Mapping, "a mapping of constant names to values")
    for name, value in given.items():
        _of_class("LLRNN", "constants key", name, str, "a constant's name")
        _of_class("LLRNN", f"constants[{name!r}]", value, FIXED_VALUES, "a torch.Tensor or a value of lsrl.llrnn.logic")
    return dict(given)


def _parameter(shape: tuple[int, ...], fan_in: int, factory: Factory) -> nn.Parameter:
    bound = 1.0 / math.sqrt(max(1, fan_in))
    return nn.Parameter(torch.empty(shape, **factory).uniform_(-bound, bound))
