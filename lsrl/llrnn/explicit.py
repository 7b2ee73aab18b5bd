"""The models of "Linear logic and recurrent neural networks", written from their explicit equations.

Second-order, multiplicative and higher-order RNNs (Sec. 2.2, 3.1), and the NTM family: NTM
(Sec. 2.3, in the form of Sec. 3.2's displayed evolution equation), dihedral NTM (Sec. 3.2, its
Example), pattern NTM (Sec. 4.1 and its Remark), multiple pattern NTM (Sec. 4.2), polynomial step
NTM (Sec. 4.3) and its dihedral variant (Sec. 4.3.1). These are the references the LLRNN forms (a master
term run by the generic cell) are checked against.

Every model is a ``RecurrentModel`` (``lsrl.llrnn.recurrent``: a flat state split into named parts).
Every controller network reads the controller part ``h0`` of the previous state ``h^(t)``.

Conventions of the NTM family (binding for the LLRNN forms):

- a memory ``M in Hom(W, V)`` is a ``(d_mem, N)`` matrix, column ``i`` stored at location ``i``,
  flattened row-major into the state; reading is ``M(r) = M @ r``; writing ``w (x) a`` is ``a w^T``;
- by default (``Stabilisers``) the memory is erased as in Eq. (2.13): a sigmoid vector ``e`` weighted
  by the **new** write address, ``M' = M ⊙ (1 - e w'^T) + a w'^T``; with ``erase="matrix"``
  (``PAPER_LITERAL``) the erase operator ``e in End(V)`` is a full ``(d_mem, d_mem)`` matrix
  ``ReLU(W_e h0 + B_e)`` reshaped row-major, ``(1 - e) o M = M - e @ M``, and the update uses the
  **old** write address ``w^(t)``, as in Sec. 3.2's display and the Sec. 4.1 Remark;
- addresses and write addresses move by the group elements of ``ring.py`` (write addresses by the
  contragredient action, the same permutation matrices).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from itertools import product
from typing import TypedDict, Unpack

import torch
from torch import nn

from lsrl.errors import DimensionError, listed, shown
from lsrl.llrnn.logic.library import MAX_TERM_WORD
from lsrl.llrnn.checks import LlrnnArgumentError, count, integers, strings
from lsrl.llrnn.recurrent import MAX_PARAMETERS, RecurrentModel, checked_width
from lsrl.llrnn.settings import CONTROLLER_NAMES, ERASES, MAX_POWER, MAX_SLOTS
from lsrl.llrnn.ring import (
    WORD_TRANSFORMS, content_weighting, mix, power_index, ring_powers, sharpen, word_counts, word_index,
    word_transform,
)

MAX_MOVES = MAX_PARAMETERS // 8  # gather indices K x N of one head (50 MB of int64); a step gathers B x K x N

DIHEDRAL_WORDS = ("", "0", "1", "00", "01", "10", "11")


def _optional_size(owner: str, name: str, value: int | None) -> int | None:
    """None (the default size) or a size of at least 1."""
    if value is None:
        return None
    return count(owner, name, value, high=MAX_SLOTS) if "slots" in name else checked_width(owner, name, value)


def binary_words(owner: str, name: str, words: Iterable[str]) -> tuple[str, ...]:
    """``words`` as a non-empty tuple of strings over the letters 0 and 1, each of at most ``MAX_TERM_WORD``
    letters (what ``llrnn_form`` can build as a term of the logic)."""
    words = strings(owner, name, words)
    for word in words:
        if set(word) - {"0", "1"}:
            raise LlrnnArgumentError(f"{owner}: {name} must hold binary words (letters 0 and 1), got {shown(word)}")
        if len(word) > MAX_TERM_WORD:
            raise LlrnnArgumentError(f"{owner}: {name} must hold words of at most {MAX_TERM_WORD} letters (the "
                                     f"longest llrnn_form builds), got one of {len(word):,}")
    return words


# -- second-order, multiplicative and higher-order RNNs (Sec. 2.2, 3.1) --------------------


class SecondOrderRNN(RecurrentModel):
    """Sec. 2.2, second-order RNN: ``h' = ReLU(V(x) h + H h + U x + B)``, ``V(x)_ij = sum_k V[i,j,k] x_k``."""

    controller_dim_name = "hidden_dim"
    V: torch.Tensor

    def __init__(self, input_dim: int, hidden_dim: int, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__(input_dim, hidden_dim, dtype, device)
        hidden_dim, input_dim = self.controller_dim, self.input_dim
        self.add_weight("V", (hidden_dim, hidden_dim, input_dim), hidden_dim * input_dim)
        self.add_controller()
        self.set_layout({"h0": (hidden_dim,)})

    def step_parts(self, parts: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = parts["h0"]
        return {"h0": torch.relu(torch.einsum("ijk,bj,bk->bi", self.V, h, x) + self.elman(h, x))}


class MultiplicativeRNN(RecurrentModel):
    """Sec. 2.2, the Remark on Sutskever et al.: ``h' = ReLU(I diag(V x) J h + H h + U x + B)``."""

    controller_dim_name = "hidden_dim"
    V: torch.Tensor
    I: torch.Tensor  # noqa: E741 (the paper's name)
    J: torch.Tensor

    def __init__(self, input_dim: int, hidden_dim: int, aux_dim: int, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__(input_dim, hidden_dim, dtype, device)
        aux_dim = checked_width(self.name, "aux_dim", aux_dim)
        hidden_dim, input_dim = self.controller_dim, self.input_dim
        self.aux_dim = aux_dim
        self.add_weight("V", (aux_dim, input_dim), input_dim)
        self.add_weight("I", (hidden_dim, aux_dim), aux_dim)
        self.add_weight("J", (aux_dim, hidden_dim), hidden_dim)
        self.add_controller()
        self.set_layout({"h0": (hidden_dim,)})

    def step_parts(self, parts: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = parts["h0"]
        diagonal = x @ self.V.T  # diag(V x) acts on K coordinate-wise
        return {"h0": torch.relu((diagonal * (h @ self.J.T)) @ self.I.T + self.elman(h, x))}


class HigherOrderRNN(RecurrentModel):
    """Sec. 3.1, the higher-order RNN example: ``h' = ReLU(Z h + H h + U x + B)``, ``Z = sum_i p_i V(x)^i``,
    ``p = softmax(W_p h + B_p)`` over the powers ``0 .. L``.

    Initialisation: the power ``V(x)^0 = I`` adds ``p_0 h`` to the linear map of ``h``, about
    ``1 / (L + 1)`` at first, so ``H`` is drawn at ``1 - 1 / (L + 1)`` of the usual scale; and ``W_p``
    starts at 0, so that a growing ``h`` cannot push ``p`` onto the identity and feed its own growth.
    Drawn as the other models are, 2.5 % of untrained models overflowed within 1,000 steps."""

    controller_dim_name = "hidden_dim"
    V: torch.Tensor
    W_p: torch.Tensor
    B_p: torch.Tensor

    def __init__(self, input_dim: int, hidden_dim: int, max_power: int, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        super().__init__(input_dim, hidden_dim, dtype, device)
        hidden_dim, input_dim = self.controller_dim, self.input_dim
        max_power = count(self.name, "max_power", max_power, low=0, high=MAX_POWER)
        self.max_power = max_power
        self.add_weight("V", (hidden_dim, hidden_dim, input_dim), hidden_dim * input_dim)
        self.add_weight("W_p", (max_power + 1, hidden_dim), hidden_dim)
        self.add_weight("B_p", (max_power + 1,), hidden_dim)
        self.add_controller()
        with torch.no_grad():
            self.W_p.zero_()
            self.H.mul_(1 - 1 / (max_power + 1))
        self.set_layout({"h0": (hidden_dim,)})

    def step_parts(self, parts: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = parts["h0"]
        p = torch.softmax(h @ self.W_p.T + self.B_p, dim=-1)
        operator = torch.einsum("ijk,bk->bij", self.V, x)
        power_h, Z_h = h, p[:, :1] * h  # V(x)^0 h = h
        for i in range(1, self.max_power + 1):
            power_h = (operator @ power_h[..., None])[..., 0]
            Z_h = Z_h + p[:, i : i + 1] * power_h
        return {"h0": torch.relu(Z_h + self.elman(h, x))}


# -- the NTM family ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ring:
    """One memory ring: its label (the parameters' suffix), coefficient width and head moves.

    ``write_moves`` and ``read_moves`` are gather indices (K, N) of the group elements the controller's
    softmax commands choose from (``ring.py``); ``read_moves=None`` means the read address is not
    under the controller but driven by the contents of other rings (``RingMachine.drivers``).
    """

    label: str
    width: int
    write_moves: torch.Tensor
    read_moves: torch.Tensor | None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str):
            raise LlrnnArgumentError(f"Ring: label must be a string, got {shown(self.label)}")
        count(f"Ring {self.label!r}", "width", self.width)
        slots = moves_of(f"Ring {self.label!r}", "write_moves", self.write_moves).shape[1]
        if self.read_moves is not None:
            moves_of(f"Ring {self.label!r}", "read_moves", self.read_moves, slots)

    @property
    def slots(self) -> int:
        return self.write_moves.shape[1]


def moves_of(owner: str, name: str, moves: object, slots: int | None = None) -> torch.Tensor:
    """``moves``: gather indices, an integer tensor (K, N) with K, N >= 1 (N = ``slots`` if given) whose rows
    are permutations of 0 .. N-1 (the group elements of ``ring.py``)."""
    if not isinstance(moves, torch.Tensor) or moves.dtype != torch.long or moves.dim() != 2 or 0 in moves.shape:
        raise LlrnnArgumentError(f"{owner}: {name} must be a torch.long tensor (K, N) of gather indices, K, N >= 1, "
                                 f"got {shown(moves)}")
    N = moves.shape[1]
    if slots is not None and N != slots:
        raise LlrnnArgumentError(f"{owner}: {name} moves {N} slots, the ring has {slots}")
    if not torch.equal(moves.sort(dim=1).values, torch.arange(N, device=moves.device).expand_as(moves)):
        raise LlrnnArgumentError(f"{owner}: {name} must hold permutations of 0 .. {N - 1} (one per row)")
    return moves


def read(parts: dict[str, torch.Tensor], label: str) -> torch.Tensor:
    """``M(r)``: ring ``label``'s memory at its read address, (..., d)."""
    return (parts["M" + label] @ parts["r" + label][..., None])[..., 0]


def rotation_moves(N: int, powers: Iterable[int]) -> torch.Tensor:
    """Gather indices (K, N) of ``R^n`` for ``n`` in ``powers``."""
    powers = _few_moves(N, powers)
    return torch.stack([power_index(N, n) for n in powers])


def word_moves(N: int, words: Iterable[str]) -> torch.Tensor:
    """Gather indices (K, N) of ``[[S]](R, R')`` for ``S`` in ``words``."""
    words = _few_moves(N, words)
    return torch.stack([word_index(N, word) for word in words])


def _few_moves(N: int, moves: Iterable) -> list:
    """``moves`` as a list, refused before the (K, N) indices are built if they exceed ``MAX_PARAMETERS``."""
    moves = list(moves)
    if len(moves) * N > MAX_MOVES:
        raise LlrnnArgumentError(f"a ring of {N:,} slots with {len(moves):,} head moves needs {len(moves) * N:,} "
                                 f"gather indices, more than {MAX_MOVES:,}: choose fewer slots or moves")
    return moves


CONTROLLERS = dict(zip(CONTROLLER_NAMES, (torch.relu, torch.tanh)))

# The paper-literal forms: Sec. 3.2's ReLU erase matrix on the whole memory, and pattern rings whose
# contents are read as linear coefficients (Sec. 4's multilinear formulas).
class StabiliserOptions(TypedDict, total=False):
    """The keyword options of a ring machine: the fields of ``Stabilisers``."""

    erase: str
    content_softmax: bool
    gate: bool
    sharpen: bool
    content_addressing: bool
    controller: str


PAPER_LITERAL: StabiliserOptions = {"erase": "matrix", "content_softmax": False}
ALL_STABILISERS: StabiliserOptions = {  # TF's NTMs
    "gate": True, "sharpen": True, "content_addressing": True, "controller": "tanh",
}


@dataclass(frozen=True)
class Stabilisers:
    """How a ring machine updates its memories and addresses (Sec. 2.3 and the TF code's stabilisers).

    - ``erase="location"`` (default): Eq. (2.13), ``e = sigmoid(W_e h0 + B_e)`` in ``R^d`` and
      ``M'_{.,i} = M_{.,i} - w'_i (M_{.,i} ⊙ e) + w'_i a`` with the **new** write address ``w'``;
      ``"matrix"``: Sec. 3.2's display, ``e = ReLU(W_e h0 + B_e)`` a ``(d, d)`` matrix, ``M' = (1 - e) M + a w^T``
      with the old ``w`` (paper-literal; its memory grows geometrically at random initialisation).
    - ``content_softmax`` (default on): a ring that drives ring 1 is read as ``sum_i r_i softmax(M_{.,i})``,
      so its coefficients form a distribution and ring 1's read address keeps mass 1; its add vector is
      then linear (the contents are logits). Off: the paper's linear ``M(r)`` and ReLU add vector.
    - ``gate``: ring 1 of the pattern models also gets a controller read head ``q1`` and a gate
      ``g = sigmoid(W_g h0 + B_g)``; its read address becomes ``g (q1-move) + (1 - g) (pattern move)``.
    - ``sharpen``: every address is sharpened after its move, ``a' = (a + 1e-6)^gamma / sum``,
      ``gamma = 1 + ReLU(W_gamma h0 + B_gamma)`` per head.
    - ``content_addressing``: before its move a controller head's address is interpolated with the
      content weighting ``softmax(beta cos(k, M_{.,i}))`` of the key ``k = W_k h0 + B_k``, key strength
      ``beta = softplus(W_beta h0 + B_beta)`` and gate ``sigmoid(W_i h0 + B_i)`` (Graves et al., Sec. 3.3).
    - ``controller="tanh"``: the TF code's ``h0' = tanh(...)`` instead of the paper's ReLU. A ReLU
      controller is unbounded, and with it the ReLU add vectors it writes and the memory it reads
      back: trained on TF's variable pattern 1 with tf-cpu's settings, it reached 7,600 (memory 9,600)
      within 25 steps of a sequence.
    """

    erase: str = "location"
    content_softmax: bool = True
    gate: bool = False
    sharpen: bool = False
    content_addressing: bool = False
    controller: str = "relu"

    def __post_init__(self) -> None:
        if not isinstance(self.erase, str) or self.erase not in ERASES:
            raise DimensionError(f"erase must be one of {ERASES}, got {shown(self.erase)}")
        if not isinstance(self.controller, str) or self.controller not in CONTROLLERS:
            raise DimensionError(f"controller must be one of {tuple(CONTROLLERS)}, got {shown(self.controller)}")
        for switch in ("content_softmax", "gate", "sharpen", "content_addressing"):
            if not isinstance(getattr(self, switch), bool):
                raise LlrnnArgumentError(f"{switch} must be True or False, got {shown(getattr(self, switch))}")


class RingMachine(RecurrentModel):
    """A controller with memory rings (Sec. 2.3, 3.2, 4): the shared part of every NTM of the paper.

    For each ring ``i`` (labels ``""`` or ``"1".."4"``), from the controller state ``h0`` of ``h^(t)``:
    ``s_i = softmax(W_s h0 + B_s)``, ``q_i = softmax(W_q h0 + B_q)`` (controller-driven read heads),
    add ``a_i = ReLU(W_a h0 + B_a)``, erase ``e_i`` (``Stabilisers.erase``), and

        w_i' = sum_k s_ik g_k w_i,   r_i' = sum_k q_ik g_k r_i,   M_i' = M_i - erase + a_i w_i'^T.

    A ring without a controller read head (ring 1 of the pattern models) moves its read address by
    ``sum_K c_K g_K r_1``, where ``c`` is the outer product of the contents of the driver rings
    (multilinear, as the denotations of Sec. 4 are) and ``g_K`` the group element of
    ``pattern_moves[K]``, listed in the same (row-major) order. The controller reads ring 1:

        h0' = ReLU(Q M_1(r_1) + H h0 + U x + B)      (Q = identity when there is no symbol space).

    ``stabilisers`` (keyword options ``erase``, ``content_softmax``, ``gate``, ``sharpen``,
    ``content_addressing``, ``controller``; see ``Stabilisers``) choose the TF code's variants; ``PAPER_LITERAL``
    gives the paper's own equations.
    """

    Q: torch.Tensor | None  # the symbol space's map into the controller (None: the identity)
    pattern_moves: torch.Tensor  # registered when ring 1 is driven by other rings

    def __init__(self, input_dim: int, controller_dim: int, rings: list[Ring], symbol_dim: int | None = None,
                 drivers: Iterable[str] = (), pattern_moves: torch.Tensor | None = None, *, dtype: torch.dtype,
                 device: torch.device | str | None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        super().__init__(input_dim, controller_dim, dtype, device)
        controller_dim = self.controller_dim
        self.rings, self.drivers = self.checked_rings(rings, symbol_dim, drivers, pattern_moves)
        unknown = sorted(set(stabilisers) - {field.name for field in fields(Stabilisers)})
        if unknown:
            raise LlrnnArgumentError(f"{self.name}: unknown option(s) {', '.join(unknown)}; the stabilisers are "
                                     f"{', '.join(field.name for field in fields(Stabilisers))}")
        self.stabilisers = Stabilisers(**stabilisers)
        d0 = controller_dim
        self.add_controller()
        if symbol_dim is None:
            self.register_parameter("Q", None)
        else:
            self.add_weight("Q", (d0, symbol_dim), symbol_dim)
        for ring in rings:
            self.add_ring_weights(ring)
        if pattern_moves is not None:
            self.register_buffer("pattern_moves", pattern_moves.to(device), persistent=False)
        self.gathered_per_step = sum(buffer.numel() for name, buffer in self.named_buffers()
                                     if name.startswith(("moves_", "pattern_moves")))
        shapes: dict[str, tuple[int, ...]] = {"h0": (d0,)}
        for ring in rings:
            shapes |= {"r" + ring.label: (ring.slots,), "w" + ring.label: (ring.slots,)}
        shapes |= {"M" + ring.label: (ring.width, ring.slots) for ring in rings}
        # Rings that drive ring 1 start holding their first program (with the default bases ⟦0⟧ or
        # the word "0": stand still): empty, they would make ring 1's read address 0 at the first
        # step, and an address moved only by linear maps never recovers from 0.
        self.set_layout(shapes, addresses=tuple(name for name in shapes if name[0] in "rw"),
                        first_program=tuple("M" + label for label in self.drivers))

    def checked_rings(self, rings: object, symbol_dim: object, drivers: object, pattern_moves: object
                      ) -> tuple[list[Ring], tuple[str, ...]]:
        """``rings`` and ``drivers`` if they make a machine: ring 1 as wide as ``symbol_dim`` (or the controller),
        other rings with a read head, and ring 1 without one exactly when driver rings and ``pattern_moves``
        (K = the product of the drivers' widths, ring 1's slots) move it."""
        given = listed(rings)
        if given is None:
            raise LlrnnArgumentError(f"{self.name}: rings must be a sequence of Ring, got {shown(rings)}")
        rings = given
        if not rings or not all(isinstance(ring, Ring) for ring in rings):
            raise LlrnnArgumentError(f"{self.name}: rings must be a non-empty sequence of Ring, got {shown(rings)}")
        labels = [ring.label for ring in rings]
        if len(set(labels)) != len(labels):
            raise LlrnnArgumentError(f"{self.name}: rings must have distinct labels, got {labels}")
        width = self.controller_dim if symbol_dim is None else checked_width(self.name, "symbol_dim", symbol_dim)
        if rings[0].width != width:
            raise LlrnnArgumentError(f"{self.name}: ring 1 has width {rings[0].width}, but the controller reads "
                                     f"{width} (symbol_dim, else controller_dim)")
        drivers = strings(self.name, "drivers", drivers, nonempty=False)
        if any(label not in labels[1:] for label in drivers) or len(set(drivers)) != len(drivers):
            raise LlrnnArgumentError(f"{self.name}: drivers must name distinct rings after the first ({labels[1:]}), "
                                     f"got {drivers}")
        if any(ring.read_moves is None for ring in rings[1:]):
            raise LlrnnArgumentError(f"{self.name}: only ring 1 may have no read head (read_moves None)")
        if (rings[0].read_moves is None) != bool(drivers) or bool(drivers) != (pattern_moves is not None):
            raise LlrnnArgumentError(f"{self.name}: ring 1 without a read head needs drivers and pattern_moves, and "
                                     "they need it: give all three or none")
        if drivers:
            moves = moves_of(self.name, "pattern_moves", pattern_moves, rings[0].slots)
            width_of = {ring.label: ring.width for ring in rings}
            if moves.shape[0] != math.prod(width_of[label] for label in drivers):
                raise LlrnnArgumentError(f"{self.name}: pattern_moves has {moves.shape[0]} rows, the drivers' widths "
                                         f"make {math.prod(width_of[label] for label in drivers)}")
        return rings, drivers

    def heads(self, ring: Ring) -> list[tuple[str, torch.Tensor]]:
        """The controller's heads on ``ring``: ``("s", moves)`` and, when it has one, ``("q", moves)``."""
        if ring.read_moves is not None:
            return [("s", ring.write_moves), ("q", ring.read_moves)]
        gated = self.stabilisers.gate and ring.label not in self.drivers
        return [("s", ring.write_moves)] + ([("q", ring.write_moves)] if gated else [])

    def add_ring_weights(self, ring: Ring) -> None:
        d0, d, label, options = self.controller_dim, ring.width, ring.label, self.stabilisers
        extras: dict[str, int] = {}  # name -> size of the per-head vectors of the stabilisers
        for head, moves in self.heads(ring):
            self.add_weight(f"W_{head}{label}", (moves.shape[0], d0), d0)
            self.add_weight(f"B_{head}{label}", (moves.shape[0],), d0)
            self.register_buffer(f"moves_{head}{label}", moves.to(self.factory["device"]), persistent=False)
            if options.content_addressing:
                extras |= {f"k{head}{label}": d, f"beta{head}{label}": 1, f"i{head}{label}": 1}
        if options.sharpen:  # every address, ring 1's driven read address included
            extras |= {f"gamma{head}{label}": 1 for head in ("s", "q")}
        for name, size in extras.items():
            self.add_weight(f"W_{name}", (size, d0), d0)
            self.add_weight(f"B_{name}", (size,), d0)
        if options.gate and ring.read_moves is None and label not in self.drivers:
            self.add_weight(f"W_g{label}", (1, d0), d0)
            self.register_parameter(f"B_g{label}", nn.Parameter(torch.ones(1, **self.factory)))  # g ≈ 0.73 (TF)
        erase = d if options.erase == "location" else d * d
        self.add_weight(f"W_e{label}", (erase, d0), d0)
        self.add_weight(f"B_e{label}", (erase,), d0)
        self.add_weight(f"W_a{label}", (d, d0), d0)
        self.add_weight(f"B_a{label}", (d,), d0)

    def command(self, name: str, h0: torch.Tensor) -> torch.Tensor:
        """``W_name h0 + B_name`` for a command or data vector ``name`` (e.g. ``"s1"``)."""
        return h0 @ getattr(self, "W_" + name).T + getattr(self, "B_" + name)

    def move_head(self, head: str, address: torch.Tensor, memory: torch.Tensor, h0: torch.Tensor,
                  sharpen: bool = True) -> torch.Tensor:
        """A controller head's new address: content addressing (if on), the softmax move, sharpening (if on)."""
        if self.stabilisers.content_addressing:
            address = self.content_addressed(head, address, memory, h0)
        moved = mix(torch.softmax(self.command(head, h0), dim=-1), address, getattr(self, "moves_" + head))
        return self.sharpened(head, moved, h0) if sharpen else moved

    def content_addressed(self, head: str, address: torch.Tensor, memory: torch.Tensor, h0: torch.Tensor
                          ) -> torch.Tensor:
        """``i c + (1 - i) a``: the address interpolated with the content weighting ``c`` of the head's key."""
        content = content_weighting(self.command("k" + head, h0), self.command("beta" + head, h0), memory)
        interpolation = torch.sigmoid(self.command("i" + head, h0))
        return interpolation * content + (1 - interpolation) * address

    def sharpened(self, head: str, address: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        if not self.stabilisers.sharpen:
            return address
        return sharpen(address, 1 + torch.relu(self.command("gamma" + head, h0)))

    def ring_step(self, ring: Ring, parts: dict[str, torch.Tensor], h0: torch.Tensor) -> dict[str, torch.Tensor]:
        """The new ``r``, ``w`` and ``M`` of one ring, from the parts of ``h^(t)``."""
        label, d = ring.label, ring.width
        w, M, r = parts["w" + label], parts["M" + label], parts["r" + label]
        add = self.command("a" + label, h0)
        linear_add = self.stabilisers.content_softmax and label in self.drivers  # contents are logits
        a = add if linear_add else torch.relu(add)
        if self.stabilisers.erase == "location":  # Eq. (2.13), with the new write address
            w_new = self.move_head("s" + label, w, M, h0)
            e = torch.sigmoid(self.command("e" + label, h0))
            # M ⊙ (1 - e w'^T) + a w'^T: two products of memory size (forward and backward)
            M_new = torch.addcmul(M * (1 - e[..., :, None] * w_new[..., None, :]), a[..., :, None], w_new[..., None, :])
        else:  # Sec. 3.2's display and the Remark of Sec. 4.1: the old write address
            w_new = self.move_head("s" + label, w, M, h0)  # moves as in Eq. (2.12); the memory uses w
            e = torch.relu(self.command("e" + label, h0)).unflatten(-1, (d, d))
            M_new = M - e @ M + a[..., :, None] * w[..., None, :]
        new = {"w" + label: w_new, "M" + label: M_new}
        if ring.read_moves is not None:
            new["r" + label] = self.move_head("q" + label, r, M, h0)
        else:
            driven = mix(self.pattern_coefficients(parts), r, self.pattern_moves)
            if self.stabilisers.gate:
                g = torch.sigmoid(self.command("g" + label, h0))
                direct = self.move_head("q" + label, r, M, h0, sharpen=False)  # sharpened after the gate
                driven = g * direct + (1 - g) * driven
            new["r" + label] = self.sharpened("q" + label, driven, h0)
        return new

    def content(self, parts: dict[str, torch.Tensor], label: str) -> torch.Tensor:
        """What a driver ring hands ring 1: ``M(r)``, or ``sum_i r_i softmax(M_{.,i})`` (``content_softmax``)."""
        memory = parts["M" + label]
        if self.stabilisers.content_softmax:
            memory = torch.softmax(memory, dim=-2)
        return (memory @ parts["r" + label][..., None])[..., 0]

    def pattern_coefficients(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """Outer product (..., K) of the driver rings' contents, flattened row-major."""
        coefficients = self.content(parts, self.drivers[0])
        for label in self.drivers[1:]:
            content = self.content(parts, label)
            coefficients = (coefficients[..., :, None] * content[..., None, :]).flatten(-2)
        return coefficients

    def step_parts(self, parts: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
        h0, first = parts["h0"], self.rings[0].label
        symbol = read(parts, first) if self.Q is None else read(parts, first) @ self.Q.T
        new = {"h0": CONTROLLERS[self.stabilisers.controller](symbol + self.elman(h0, x))}
        for ring in self.rings:
            new |= self.ring_step(ring, parts, h0)
        return new


class NTM(RingMachine):
    """The NTM of Sec. 2.3 in the LLRNN form of Sec. 3.2 (its displayed evolution equation).

    State ``(h0, r, w, M)``, memory width ``d_mem = controller_dim`` (V = H_0); read and write heads
    choose among the rotations ``R^n``, ``n`` in ``powers`` (default all ``N``):

        h0' = ReLU(M r + H h0 + U x + B),  r' = sum_k q_k R^{n_k} r,  w' = sum_k s_k R^{n_k} w,
        M' = (1 - e) M + a w^T.

    Parameters: ``H, U, B, W_q, B_q, W_s, B_s, W_e, B_e, W_a, B_a``.
    """

    def __init__(self, input_dim: int, controller_dim: int, slots: int, powers: Iterable[int] | None = None,
                 memory_width: int | None = None, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = count(self.name, "slots", slots, high=MAX_SLOTS)
        controller_dim = checked_width(self.name, "controller_dim", controller_dim)
        memory_width = _optional_size(self.name, "memory_width", memory_width)
        powers = ring_powers(slots, None if powers is None else integers(self.name, "powers", powers))
        moves = rotation_moves(slots, powers)
        ring = Ring("", memory_width or controller_dim, moves, moves)
        super().__init__(input_dim, controller_dim, [ring], memory_width, dtype=dtype, device=device, **stabilisers)
        self.slots, self.powers = slots, powers


class DihedralNTM(RingMachine):
    """Sec. 3.2, Example (dihedral NTM): heads choose among binary words ``F``, applied as ``[[F]](R, R')``.

    Default words: every word of length at most 2. Parameters are named as in ``NTM``.
    """

    def __init__(self, input_dim: int, controller_dim: int, slots: int, words: Iterable[str] | None = None,
                 memory_width: int | None = None, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = count(self.name, "slots", slots, high=MAX_SLOTS)
        controller_dim = checked_width(self.name, "controller_dim", controller_dim)
        memory_width = _optional_size(self.name, "memory_width", memory_width)
        words = DIHEDRAL_WORDS if words is None else binary_words(self.name, "words", words)
        moves = word_moves(slots, words)
        ring = Ring("", memory_width or controller_dim, moves, moves)
        super().__init__(input_dim, controller_dim, [ring], memory_width, dtype=dtype, device=device, **stabilisers)
        self.slots, self.words = slots, words


class PatternNTM(RingMachine):
    """Sec. 4.1, in the explicit form of its Remark: ring 2's content drives ring 1's read address.

    Ring 1 holds symbols (width ``symbol_dim``), ring 2 coefficients over ``[[p]]`` for ``p`` in
    ``pattern_powers``; ring 1 has ``slots`` positions, ring 2 ``pattern_slots`` (default ``slots``).
    Write heads and ring 2's read head choose among
    ``R^n``, ``n`` in ``head_powers`` (default all). With ``lambda = M_2(r_2)``, the Remark's
    Eq. (pattern_ntm_distinction):

        r_1' = sum_j lambda_j R^{pattern_powers[j]} r_1,    h0' = ReLU(Q M_1(r_1) + H h0 + U x + B).

    Parameters: ``H, U, B, Q``; ``W_s1, B_s1, W_e1, B_e1, W_a1, B_a1``; the same with suffix 2 and
    ``W_q2, B_q2``. State ``(h0, r1, w1, r2, w2, M1, M2)``.
    """

    def __init__(self, input_dim: int, controller_dim: int, slots: int, symbol_dim: int,
                 pattern_powers: Iterable[int] = (0, 1, 2), head_powers: Sequence[int] | None = None,
                 pattern_slots: int | None = None, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = count(self.name, "slots", slots, high=MAX_SLOTS)
        symbol_dim = checked_width(self.name, "symbol_dim", symbol_dim)
        pattern_slots = _optional_size(self.name, "pattern_slots", pattern_slots)
        pattern_powers = integers(self.name, "pattern_powers", pattern_powers)
        head_powers = None if head_powers is None else integers(self.name, "head_powers", head_powers)
        heads, pattern_heads = (rotation_moves(N, ring_powers(N, head_powers)) for N in (slots, pattern_slots or slots))
        head_powers = ring_powers(slots) if head_powers is None else tuple(head_powers)  # per ring modulo its size
        rings = [Ring("1", symbol_dim, heads, None), Ring("2", len(pattern_powers), pattern_heads, pattern_heads)]
        pattern = rotation_moves(slots, pattern_powers)
        super().__init__(input_dim, controller_dim, rings, symbol_dim, ("2",), pattern,
                         dtype=dtype, device=device, **stabilisers)
        self.slots, self.symbol_dim = slots, symbol_dim
        self.pattern_powers, self.head_powers = pattern_powers, head_powers


class MultiplePatternNTM(RingMachine):
    """Sec. 4.2: two pattern rings (2, 3) over ``[[p]]`` and a switch ring (4) over binary words ``[[S_k]]``.

    Ring ``i`` has ``slots[i-1]`` positions (the paper's example: N_1 > 18, N_2 = N_3 = N_4 = 2); its
    heads choose among the rotations ``head_powers`` modulo its size (default: all). With
    ``lambda = M_2(r_2)``, ``mu = M_3(r_3)``, ``kappa = M_4(r_4)`` and ``a_k, b_k`` the numbers of 0s
    and 1s in ``S_k``, Eq. (crazyhorse):

        r_1' = sum_{i,j,k} lambda_i mu_j kappa_k R_1^{a_k p_i + b_k p_j} r_1.

    So switch word "0" follows ring 2's pattern, "1" ring 3's, "00" ring 2's with doubled steps.
    Parameters as in ``PatternNTM`` for rings 1..4 (``W_s1..W_s4``, ``W_q2..W_q4``, ``W_e1..``, ``W_a1..``, ``Q``).
    State ``(h0, r1, w1, r2, w2, r3, w3, r4, w4, M1, M2, M3, M4)``.
    """

    def __init__(self, input_dim: int, controller_dim: int, symbol_dim: int, slots: Sequence[int] = (20, 2, 2, 2),
                 pattern_powers: Iterable[int] = (0, 1), switch_words: Iterable[str] = ("0", "1"),
                 head_powers: Sequence[int] | None = None, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = integers(self.name, "slots", slots)
        if len(slots) != 4:
            raise DimensionError(f"MultiplePatternNTM: slots must give the sizes of 4 rings, got {slots}")
        slots = tuple(count(self.name, f"slots[{i}]", N, high=MAX_SLOTS) for i, N in enumerate(slots))
        symbol_dim = checked_width(self.name, "symbol_dim", symbol_dim)
        pattern_powers = integers(self.name, "pattern_powers", pattern_powers)
        switch_words = binary_words(self.name, "switch_words", switch_words)
        head_powers = None if head_powers is None else integers(self.name, "head_powers", head_powers)
        widths = (symbol_dim, len(pattern_powers), len(pattern_powers), len(switch_words))
        rings = []
        for label, N, width in zip("1234", slots, widths):
            heads = rotation_moves(N, ring_powers(N, head_powers))
            rings.append(Ring(label, width, heads, None if label == "1" else heads))
        counts = [word_counts(S) for S in switch_words]
        steps = [a * i + b * j for i, j, (a, b) in product(pattern_powers, pattern_powers, counts)]
        pattern = rotation_moves(slots[0], steps)
        drivers = ("2", "3", "4")
        super().__init__(input_dim, controller_dim, rings, symbol_dim, drivers, pattern,
                         dtype=dtype, device=device, **stabilisers)
        self.slots, self.symbol_dim, self.head_powers = slots, symbol_dim, head_powers
        self.pattern_powers, self.switch_words = pattern_powers, switch_words


def evaluate_polynomial(coefficients: Iterable[int], n: int) -> int:
    """``a(n)`` for ``a = c_0 + c_1 x + c_2 x^2 + ...`` given as ``(c_0, c_1, ...)``."""
    return sum(c * n**k for k, c in enumerate(coefficients))


def three_rings(slots: int, symbol_dim: int, width2: int, width3: int, head_powers: Sequence[int] | None,
                pattern_slots: int | None = None) -> list[Ring]:
    """Rings of the polynomial step NTMs: symbols (``slots`` positions), a pattern ring and a ring that
    transforms the pattern (``pattern_slots`` positions each, default ``slots``)."""
    heads, pattern_heads = (rotation_moves(N, ring_powers(N, head_powers)) for N in (slots, pattern_slots or slots))
    return [Ring("1", symbol_dim, heads, None), Ring("2", width2, pattern_heads, pattern_heads),
            Ring("3", width3, pattern_heads, pattern_heads)]


class PolynomialStepNTM(RingMachine):
    """Sec. 4.3: ring 3 holds coefficients over polynomials ``a_j in N[x]`` that reshape ring 2's steps.

    ``polynomials`` are coefficient tuples ``(c_0, c_1, ...)`` (default ``x`` and ``x^2``). With
    ``lambda = M_2(r_2)`` and ``mu = M_3(r_3)``:

        r_1' = sum_j mu_j sum_i lambda_i R^{a_j(p_i)} r_1.

    The paper's Eq. (crazyhorse2) prints ``a_j(sum_i lambda_i R^i)``, which contradicts its own text:
    focused at ``x^2`` a step of size ``s`` must become ``s^2``, but ``(R^s)^2 = R^{2s}``. We follow the
    text and the Church-numeral meaning of the term ``a``: ``n -> a(n)``, extended multilinearly in the
    ring coefficients as in Sec. 4.2. Three rings of ``slots`` positions; read heads ``q2, q3``.
    State ``(h0, r1, w1, r2, w2, r3, w3, M1, M2, M3)``.
    """

    def __init__(self, input_dim: int, controller_dim: int, slots: int, symbol_dim: int,
                 pattern_powers: Iterable[int] = (0, 1, 2), polynomials: Iterable[Iterable[int]] = ((0, 1), (0, 0, 1)),
                 head_powers: Sequence[int] | None = None, pattern_slots: int | None = None,
                 *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = count(self.name, "slots", slots, high=MAX_SLOTS)
        symbol_dim = checked_width(self.name, "symbol_dim", symbol_dim)
        pattern_slots = _optional_size(self.name, "pattern_slots", pattern_slots)
        pattern_powers = integers(self.name, "pattern_powers", pattern_powers)
        if isinstance(polynomials, (str, bytes)) or not isinstance(polynomials, Iterable):
            raise LlrnnArgumentError(f"{self.name}: polynomials must be a sequence of coefficient tuples, "
                                     f"got {polynomials!r}")
        polynomials = tuple(integers(self.name, "each polynomial", a) for a in polynomials)
        if not polynomials:
            raise LlrnnArgumentError(f"{self.name}: polynomials must hold at least one polynomial, got none")
        head_powers = None if head_powers is None else integers(self.name, "head_powers", head_powers)
        rings = three_rings(slots, symbol_dim, len(pattern_powers), len(polynomials), head_powers, pattern_slots)
        head_powers = ring_powers(slots) if head_powers is None else tuple(head_powers)  # per ring modulo its size
        steps = [evaluate_polynomial(a, p) for p, a in product(pattern_powers, polynomials)]
        pattern = rotation_moves(slots, steps)
        super().__init__(input_dim, controller_dim, rings, symbol_dim, ("2", "3"), pattern,
                         dtype=dtype, device=device, **stabilisers)
        self.slots, self.symbol_dim, self.head_powers = slots, symbol_dim, head_powers
        self.pattern_powers, self.polynomials = pattern_powers, polynomials


class DihedralPolynomialStepNTM(RingMachine):
    """Sec. 4.3.1: ring 2 over binary words ``S_i``, ring 3 over word transforms ``f_j`` (``id``, ``repeat``).

    With ``lambda = M_2(r_2)`` and ``mu = M_3(r_3)``:

        r_1' = sum_j mu_j sum_i lambda_i [[f_j(S_i)]](R, R') r_1;

    focused at ``repeat`` each word's group element ``g`` is applied as ``g^2``. Parameters and state
    as in ``PolynomialStepNTM``.
    """

    def __init__(self, input_dim: int, controller_dim: int, slots: int, symbol_dim: int,
                 pattern_words: Iterable[str] = ("0", "1", "01"), transforms: Iterable[str] = ("id", "repeat"),
                 head_powers: Sequence[int] | None = None, pattern_slots: int | None = None,
                 *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, **stabilisers: Unpack[StabiliserOptions]) -> None:
        slots = count(self.name, "slots", slots, high=MAX_SLOTS)
        symbol_dim = checked_width(self.name, "symbol_dim", symbol_dim)
        pattern_slots = _optional_size(self.name, "pattern_slots", pattern_slots)
        pattern_words = binary_words(self.name, "pattern_words", pattern_words)
        transforms = strings(self.name, "transforms", transforms)
        unknown = [name for name in transforms if name not in WORD_TRANSFORMS]
        if unknown:
            raise LlrnnArgumentError(f"{self.name}: unknown word transform(s) {', '.join(map(repr, unknown))}; "
                                     f"known: {', '.join(WORD_TRANSFORMS)}")
        head_powers = None if head_powers is None else integers(self.name, "head_powers", head_powers)
        rings = three_rings(slots, symbol_dim, len(pattern_words), len(transforms), head_powers, pattern_slots)
        head_powers = ring_powers(slots) if head_powers is None else tuple(head_powers)  # per ring modulo its size
        words = [word_transform(f, S) for S, f in product(pattern_words, transforms)]
        pattern = word_moves(slots, words)
        super().__init__(input_dim, controller_dim, rings, symbol_dim, ("2", "3"), pattern,
                         dtype=dtype, device=device, **stabilisers)
        self.slots, self.symbol_dim, self.head_powers = slots, symbol_dim, head_powers
        self.pattern_words, self.transforms = pattern_words, transforms
