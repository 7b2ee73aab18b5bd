"""A multiple pattern NTM that solves the swap task of Sec. 4.2 by construction.

``∘ x₁..x_k S y₁..y_k S z₁..z_k •`` → ``x₁..x_k y₁y₁..y_ky_k z₁..z_k``: the first pattern (ring 2,
the identity) and the second (ring 3, doubling) alternate, ring 4 says which one drives ring 1's
read address (Eq. (crazyhorse) with the words "0" and "1"), and the controller only moves the read
heads of rings 3 and 4 and writes the data symbols onto ring 1 — the paper's seven steps, with
three changes that its timing forces:

1. The pattern rings are filled in the initial state, not written on ∘ (step 1). Ring 1's read
   address at step 1 is computed from the rings' contents at step 0; empty rings would make it 0,
   and a read address, moved only by linear maps, never recovers from 0.
2. The S symbols are not written onto ring 1. Every output step must emit a data symbol, so the read
   head may never rest on S; the segment boundaries live in the controller's counters instead.
3. The controller switches patterns two steps ahead. Commands are computed from h0^(t-1), and the
   read heads they move at step t drive ring 1 at step t+1; so the switch before output n is
   decided while output n-2 is read. Since all segments have the same length k (the task's), the
   controller counts k on the first segment and predicts every switch, the first one (• is due)
   included: it knows the number of segments.

The controller is a ReLU RNN ``h0' = ReLU(Q M1 r1 + H h0 + U x + B)`` whose units are exact
integers (counters and ReLU "bump" features); every command is a softmax of logits ±``sharpness``
(e^-100: the heads stay one-hot to float precision). All weights are set by name below.
"""

from __future__ import annotations

import torch

from lsrl.errors import InternalError, LsrlError
from lsrl.llrnn.checks import count, real
from lsrl.llrnn.explicit import PAPER_LITERAL, MultiplePatternNTM
from lsrl.llrnn.tasks import BLANK, END, SWAP, Alphabet, MultiplePattern

BIG = 1000.0  # larger than every counter: a gate that switches a unit off


class _Controller:
    """Named blocks of h0 and their weights ``H`` (from h0), ``U`` (from x) and ``B``."""

    def __init__(self, blocks: dict[str, int], input_dim: int, dtype: torch.dtype) -> None:
        self.index: dict[str, list[int]] = {}
        size = 0
        for name, width in blocks.items():
            self.index[name] = list(range(size, size + width))
            size += width
        self.size = size
        self.H = torch.zeros(size, size, dtype=dtype)
        self.U = torch.zeros(size, input_dim, dtype=dtype)
        self.B = torch.zeros(size, dtype=dtype)

    def unit(self, name: str, position: int = 0) -> int:
        return self.index[name][position]


def swap_solution(task: MultiplePattern, max_length: int = 20, sharpness: float = 100.0, margin: float = 50.0,
                  dtype: torch.dtype = torch.float64) -> tuple[MultiplePatternNTM, dict[str, torch.Tensor]]:
    """``(model, readout)``: a ``MultiplePatternNTM`` solving ``task`` for segment lengths up to
    ``max_length``, and the weights of the trainer's read-out ``(W_y, B_y, W_o, B_o)``."""
    if not isinstance(task, MultiplePattern):
        raise LsrlError(f"swap_solution: task must be a MultiplePattern task, got {type(task).__name__}")
    max_length = count("swap_solution", "max_length", max_length)
    sharpness = real("swap_solution", "sharpness", sharpness, low=0, low_open=True)
    margin = real("swap_solution", "margin", margin, low=0, low_open=True)
    if tuple(task.repeats) != (1, 2):
        raise LsrlError(f"swap_solution: built for repeats (1, 2) (identity, doubling), not {task.repeats}")
    if task.segments < 2:
        raise LsrlError("swap_solution: needs at least 2 segments (the segment length is read off the first S)")
    alphabet = task.alphabet
    symbols, vocabulary, segments = alphabet.data, alphabet.size, task.segments
    starts = _segment_starts(segments)  # output offsets c_j of the segments, in units of k
    blocks = {"symbol": symbols, "input": symbols, "swaps": 1, "count": 1, "first_step": 1, "k": 1, "blanks": 1,
              "end_bump": 3, **{f"start{j}": 3 for j in range(1, segments + 1)}}
    controller = _Controller(blocks, vocabulary, dtype)
    _wire_counters(controller, alphabet, segments, starts)
    slots = segments * max_length + 4
    model = MultiplePatternNTM(vocabulary, controller.size, symbols, slots=(slots, 2, 2, 2), pattern_powers=(0, 1),
                               switch_words=("0", "1"), dtype=dtype, **PAPER_LITERAL)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        model.H.copy_(controller.H)
        model.U.copy_(controller.U)
        model.B.copy_(controller.B)
        symbol_map = _symbol_map(model)
        symbol_map[controller.index["symbol"], range(symbols)] = 1.0  # the symbol read lands in its own block
        _wire_heads(model, controller, segments, starts, sharpness)
        model.init_state = _initial_state(model)
    readout = _readout(controller, alphabet, margin, dtype)
    return model, readout


def _symbol_map(model: MultiplePatternNTM) -> torch.Tensor:
    """``Q``, which a model with a symbol space has."""
    if model.Q is None:
        raise InternalError("swap_solution: the model was built without a symbol space")
    return model.Q


def _segment_starts(segments: int) -> list[int]:
    """``c_j``: output n = c_j k starts segment j (identity segments emit k symbols, doubling 2k)."""
    starts = [0]
    for j in range(segments):
        starts.append(starts[-1] + (1 if j % 2 == 0 else 2))
    return starts


def _wire_counters(c: _Controller, alphabet: Alphabet, segments: int, starts: list[int]) -> None:
    """The controller's units; each is ReLU of a linear function of h0^(t-1) and x^(t)."""
    data = range(alphabet.data)
    swap, end, blank = alphabet.index(SWAP), alphabet.index(END), alphabet.index(BLANK)
    u = c.unit
    for i in data:
        c.U[u("input", i), i] = 1  # the data symbol read now, written onto ring 1 at the next step
    c.H[u("swaps"), u("swaps")], c.U[u("swaps"), swap] = 1, 1  # S seen so far
    # data symbols in the current segment (reset by S)
    c.H[u("count"), u("count")], c.U[u("count"), list(data)], c.U[u("count"), swap] = 1, 1, -BIG
    # a data symbol of the first segment; k sums them one step later
    c.U[u("first_step"), list(data)], c.H[u("first_step"), u("swaps")] = 1, -BIG
    c.H[u("k"), u("k")], c.H[u("k"), u("first_step")] = 1, 1
    c.H[u("blanks"), u("blanks")], c.U[u("blanks"), blank] = 1, 1  # output steps so far
    # end_bump: ReLU(d + 1), ReLU(d), ReLU(d - 1) for d = count - k at a data symbol of the last segment;
    # d = 0 at the last data symbol, one step before •
    for position, delta in enumerate((1, 0, -1)):
        unit = u("end_bump", position)
        c.H[unit, u("count")], c.H[unit, u("k")], c.H[unit, u("swaps")] = 1, -1, BIG
        c.U[unit, list(data)] = 1 + BIG
        c.B[unit] = delta - BIG - BIG * (segments - 1)
    # start_j: the same for d = ν - c_j k, where ν = blanks + 1 is the output whose move is being set
    for j in range(1, segments + 1):
        for position, delta in enumerate((1, 0, -1)):
            unit = u(f"start{j}", position)
            c.H[unit, u("blanks")], c.H[unit, u("k")] = 1, -starts[j]
            c.U[unit, blank], c.U[unit, end] = 1 + BIG, BIG
            c.B[unit] = 1 + delta - BIG


def _bump(c: _Controller, name: str) -> torch.Tensor:
    """Weights on h0 of ``ReLU(d+1) - 2 ReLU(d) + ReLU(d-1)``: 1 exactly when the integer d is 0."""
    row = torch.zeros(c.size, dtype=c.H.dtype)
    for position, weight in enumerate((1, -2, 1)):
        row[c.unit(name, position)] = weight
    return row


def _beyond(c: _Controller, name: str) -> torch.Tensor:
    """Weights of ``ReLU(d) - ReLU(d-1)``: 1 exactly when the integer d is at least 1."""
    row = torch.zeros(c.size, dtype=c.H.dtype)
    row[c.unit(name, 1)], row[c.unit(name, 2)] = 1, -1
    return row


def _command(model: MultiplePatternNTM, head: str, choose: torch.Tensor, sharpness: float) -> None:
    """Head ``head`` takes power 1 where ``choose · h0`` is 1 and power 0 where it is 0."""
    weights, biases = getattr(model, "W_" + head), getattr(model, "B_" + head)
    weights[1], weights[0] = sharpness * choose, -sharpness * choose
    biases[0] = sharpness


def _wire_heads(model: MultiplePatternNTM, c: _Controller, segments: int, starts: list[int], sharpness: float
                ) -> None:
    for head in ("s2", "s3", "s4", "q2"):
        getattr(model, "B_" + head)[0] = sharpness  # stay: rings 2-4 are read, never written
    data = torch.zeros(c.size, dtype=c.H.dtype)
    data[c.index["input"]] = 1
    _command(model, "s1", data, sharpness)  # the write head moves on after each data symbol
    model.get_parameter("W_a1")[:, c.index["input"]] = torch.eye(len(c.index["input"]), dtype=c.H.dtype)
    # ring 4 toggles at every segment start (the first one predicted from the end of the input)
    toggle = _bump(c, "end_bump") + sum((_bump(c, f"start{j}") for j in range(1, segments)), torch.zeros_like(data))
    _command(model, "q4", toggle, sharpness)
    # ring 3 advances inside every doubling segment (after its first output) and once after it,
    # so that it rests at ⟦0⟧ when the next doubling segment starts
    advance = sum((_beyond(c, f"start{j}") - _beyond(c, f"start{j + 1}") for j in range(1, segments, 2)),
                  torch.zeros_like(data))
    _command(model, "q3", advance, sharpness)


def _initial_state(model: MultiplePatternNTM) -> torch.Tensor:
    """Rings 2-4 hold the patterns (ring 2: ⟦1⟧ ⟦1⟧, ring 3: ⟦0⟧ ⟦1⟧, ring 4: "0" "1"); ring 4's
    read head starts on "1", so that ring 3, resting on ⟦0⟧, keeps ring 1's read head still while
    the input is written."""
    dtype = model.B.dtype
    return model.pack(M2=torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=dtype), M3=torch.eye(2, dtype=dtype),
                      M4=torch.eye(2, dtype=dtype), r4=torch.tensor([0.0, 1.0], dtype=dtype))


def _readout(c: _Controller, alphabet: Alphabet, margin: float, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``y = ReLU(W_y h0 + B_y)`` copies the symbol read; ``logits = W_o y + B_o`` = margin × it."""
    symbols = alphabet.data
    W_y = torch.zeros(symbols, c.size, dtype=dtype)
    W_y[range(symbols), c.index["symbol"]] = 1
    W_o = torch.zeros(alphabet.size, symbols, dtype=dtype)
    W_o[range(symbols), range(symbols)] = margin
    return {"W_y": W_y, "B_y": torch.zeros(symbols, dtype=dtype), "W_o": W_o,
            "B_o": torch.zeros(alphabet.size, dtype=dtype)}
