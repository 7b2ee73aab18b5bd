"""Hawk and Griffin models (De et al., 2024) that run a compiled program.

A Hawk model is a stack of *residual blocks*. Each residual block is a temporal-mixing block
followed by a gated MLP block. Hawk's temporal block is the **recurrent block**; Griffin replaces
the recurrent block of every third residual block by **local multi-query attention** (MQA).

Two constructions (``construction=``):

* ``"diagonal"`` (default) runs on ``model.diagonal()`` (``lsrl.compiler.diagonal``). A block
  ``s_t = A s_{t-1} + B x_t + b, y_t = gamma(x_t) * phi(s_t)`` with ``k = max(depth phi, depth gamma)``
  becomes ``k + 1`` residual blocks (``k`` without a gate): the *state* block, whose recurrent block
  computes ``a' = W_a [x; 1] = [B x + b; x; 1]``, the temporal convolution (taps ``N^i`` mixing a
  line's channels, as App. E.1's ``W_M[i]``) on the delay lines only
  (width = the line's length: 4 for Listing 2's shift register, the width of De et al.; no other
  unit is convolved) and the RG-LRU as a diagonal recurrence ``h_t = a h_{t-1} + a'_t`` (2x2 blocks
  for complex pairs), with the first layer of ``phi`` / ``gamma`` in its gated MLP; then the
  remaining layer blocks and the product block below, whose temporal blocks are identities and
  compute nothing. Where this RG-LRU differs from Eqs. (39)-(43), and why: its recurrence gate is
  constant, so ``a_t = a`` (the eigenvalue); ``a`` may be 1 (a counter) or negative, and the input
  normalisation ``sqrt(1 - a_t^2)`` is left out, since it would zero a counter's input; ``i_t = 1``,
  the gate branch ``g_t = 1`` and ``W_o = I`` are not computed; ``h_0`` is the program's initial
  state. Griffin's attention blocks pass their input (``W_v = 0`` in a residual connection) and are
  not computed. No ``max_len``: any sequence length.
* ``"app_e"``: App. E of the LSRL paper literally, as described below; needs ``max_len``.

Recurrent block (Eqs. 35-46), input ``a_t``::

    a'_t = W_a a_t                                     (no bias)
    z_t  = sum_{i=0}^{d_conv-1} W_M[i] a'_{t-i} + b_conv       (causal temporal conv1d, a'_{<1} = 0)
    r_t  = sigma(W_r z_t + b_r),   i_t = sigma(W_i z_t + b_i)
    a    = sigma(Lambda),          a_t = a ** (c r_t),  c = 8
    h_t  = a_t * h_{t-1} + sqrt(1 - a_t**2) * (i_t * z_t),      h_0 = 0      (RG-LRU)
    g_t  = sigma(W_g a_t + b_g)
    o_t  = W_o (g_t * h_t) + b_o

Gated MLP block (Eqs. 47-50)::

    e_t = W_e o_t + b_e,   f_t = sigma(W_f o_t + b_f),   m_t = W_m (e_t * f_t) + b_m

Local MQA block: ``heads`` query heads, one shared key head and one shared value head, causal
softmax attention over the last ``window`` positions, output projection ``W_o``.

As App. E assumes, ``sigma`` is ReLU everywhere (in place of the paper's Sigmoid and GeLU), and the
residual connections and RMS normalisations of Hawk/Griffin are omitted (footnote 4). The kernel of
the temporal convolution mixes channels (``W_M[i]`` are matrices, as in App. E.1), and its window
is ``d_conv = max_len``, the longest sequence the model accepts (App. E: ``d_conv = T``); longer
inputs raise ``SequenceError``.

Construction (App. E.6): a Gated Linear RNN block ``s_t = A s_{t-1} + B x_t + b``,
``y_t = gamma(x_t) * phi(s_t)`` with ``k = max(depth phi, depth gamma)`` becomes ``k + 2`` residual
blocks: the *state* block (the recurrence as a convolution, E.1, then an identity MLP, E.4), ``k``
*layer* blocks (identity recurrent block, E.2, then one layer of ``phi`` and of ``gamma`` side by
side in the gated MLP, E.3), and the *product* block (identity recurrent block, then
``gamma * phi`` in the gated MLP, E.5). An ungated block (Eq. 3, ``gamma`` absent) needs no product
block: ``k + 1`` residual blocks.

Where this differs from the printed construction, and why:

* **Constant channel.** Every residual block's output carries a last channel equal to 1 (set by
  ``b_m``), and the model starts with an affine input embedding ``x_t -> [x_t; 1]`` (a
  ``torch.nn.Linear``, the analogue of Griffin's input embedding); a final ``torch.nn.Linear``
  readout drops the channel. The conv bias is constant in time, but
  ``s_t = A^t s_0 + sum_{i<t} A^i b + sum_{i<t} A^i B x_{t-i}`` is not: the first two terms
  ``F(t)`` (the state under zero input) enter through the kernel acting on the constant channel.
  Thanks to the conv's zero padding that channel contributes ``sum_{i<t} W_M[i][:, 1]``, so the
  kernel column is ``F(1)`` at lag 0 and ``F(i+1) - F(i)`` at lag ``i``; the input columns are
  ``A^i B`` (``W_M[i] = Ã^i B̃`` as in E.1). No time-dependent bias is needed.
* **No lower bound k_lb.** The paper routes ``x_t`` through the ReLU gate ``g`` (Eq. 54) and the
  finished network's output through the ReLU branch ``f`` (Eq. 59, Eq. 61), which needs the inputs
  bounded below by ``k_lb`` and ReLU-terminated networks. Here values that may be negative never
  pass a ReLU: ``x_t`` rides through the conv itself (identity at lag 0), copied and linear
  (``relu=False``) values use the linear branch ``e`` with ``f = 1``, and ReLU layers use ``f`` with
  ``e = 1``. The product ``P * Q`` uses ``f = ReLU(Q)`` when ``Q`` ends in a ReLU and otherwise the
  sign split ``[Q+; Q-] = [ReLU(Q); ReLU(-Q)]``, ``e = [P; P]``, recombined by ``W_m = [I, -I]``:
  ``P Q+ - P Q- = P Q`` (one of the two terms is an exact zero, so the float result is the
  rounded product itself). No input bound is needed.
* **Identity blocks are exact in floating point:** the RG-LRU is set to ``Lambda = 0`` (so
  ``a_t = 0 ** 8 = 0``; ``r_t = 1`` keeps the exponent away from ``0 ** 0 = 1``), ``i_t = 1``,
  ``g_t = 1``; every copy multiplies by 1 and adds exact zeros.
* **Griffin's attention.** A softmax over a window cannot put weight exactly 1 on the current
  position (saturating scores only round to it), so the MQA block gets the one residual connection
  the paper mentions in footnote 4: ``o_t = a_t + MQA(a_t)`` with ``W_v = 0``, so the attention adds
  an exact zero and the block passes its input through. The attention blocks sit in layer and
  product blocks, whose temporal block is an identity anyway (App. E); when a *state* block would
  fall on an attention position, a pass-through residual block (attention + identity MLP) is
  inserted first, so Griffin can have a few more residual blocks than Hawk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike
from torch import nn

from lsrl.errors import LsrlError
from lsrl.ir.labels import PATCHABLE_ROLES, Label, UnitLabel, constant_for
from lsrl.targets.blocks import Block, BlockStack, Dense, to_blocks
from lsrl.targets.cache import CachedRun
from lsrl.targets.checks import MAX_HAWK_BYTES, check_hawk_size, checked_input
from lsrl.targets.diagonal import DiagonalRecurrence
from lsrl.targets.hawk_labels import (
    Stream, app_e_state_labels, copies, held, diagonal_temporal_labels, identity_mlp_labels, identity_recurrent_labels,
    layer_mlp_labels, product_mlp_labels,
)
from lsrl.targets.promises import KeptPromises
from lsrl.targets.recurrent import float64_tensor
from lsrl.targets.registry import whole_number_option

if TYPE_CHECKING:
    from lsrl.model.compiled import CompiledProgram

DTYPE = torch.float64
RGLRU_C = 8.0  # the fixed scalar c of Eq. (42)


def _linear(W: ArrayLike, c: ArrayLike | None = None) -> nn.Linear:
    W = np.asarray(W, dtype=np.float64)
    layer = nn.Linear(W.shape[1], W.shape[0], bias=c is not None, dtype=DTYPE)
    with torch.no_grad():
        layer.weight.copy_(float64_tensor(W))
        if c is not None:
            layer.bias.copy_(float64_tensor(c))
    return layer


# ---- the modules --------------------------------------------------------------------------------


class TemporalConv1d(nn.Module):
    """Causal ``z_t = sum_i W_M[i] a'_{t-i} + b_conv`` over a window of ``d_conv`` steps (Eq. 38)."""

    def __init__(self, taps: dict[int, np.ndarray], bias: np.ndarray, d_conv: int) -> None:
        """``taps``: dict lag -> (H, H) matrix ``W_M[lag]``; missing lags are zero."""
        super().__init__()
        width = len(bias)
        self.d_conv = d_conv
        self.conv = nn.Conv1d(width, width, kernel_size=d_conv, bias=True, dtype=DTYPE)
        kernel = np.zeros((width, width, d_conv))
        for lag, matrix in taps.items():
            kernel[:, :, d_conv - 1 - lag] = matrix  # Conv1d correlates: the last tap meets a'_t
        with torch.no_grad():
            self.conv.weight.copy_(float64_tensor(kernel))
            assert self.conv.bias is not None  # made with bias=True
            self.conv.bias.copy_(float64_tensor(bias))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        padded = F.pad(a.transpose(1, 2), (self.d_conv - 1, 0))  # zeros before the first step
        return self.conv(padded).transpose(1, 2)


class RGLRU(nn.Module):
    """Real-gated linear recurrent unit, Eqs. (39)-(43), with ReLU as the gates' non-linearity."""

    def __init__(self, W_r: np.ndarray, b_r: np.ndarray, W_i: np.ndarray, b_i: np.ndarray, Lambda: np.ndarray,
                 c: float = RGLRU_C) -> None:
        super().__init__()
        self.recurrence_gate = _linear(W_r, b_r)
        self.input_gate = _linear(W_i, b_i)
        self.Lambda = nn.Parameter(float64_tensor(Lambda))
        self.c = c

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        r = torch.relu(self.recurrence_gate(z))
        i = torch.relu(self.input_gate(z))
        a = torch.relu(self.Lambda) ** (self.c * r)  # a_t = a^{c r_t}
        driven = torch.sqrt(1.0 - a * a) * (i * z)
        h = torch.zeros_like(z[:, 0])
        out = []
        for t in range(z.shape[1]):
            h = a[:, t] * h + driven[:, t]
            out.append(h)
        return torch.stack(out, dim=1)


class RecurrentBlock(nn.Module):
    """Conv1d + RG-LRU branch times the gate branch ``g``, then ``W_o`` (Eqs. 35-46)."""

    kind = "recurrent"

    def __init__(self, spec: "RecurrentSpec", d_conv: int) -> None:
        super().__init__()
        self.W_a = _linear(spec.W_a)
        self.conv = TemporalConv1d(spec.taps, spec.b_conv, d_conv)
        self.rg_lru = RGLRU(spec.W_r, spec.b_r, spec.W_i, spec.b_i, spec.Lambda)
        self.W_g = _linear(spec.W_g, spec.b_g)
        self.W_o = _linear(spec.W_o, spec.b_o)

    @property
    def hidden(self) -> int:
        return self.rg_lru.Lambda.shape[0]

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        h = self.rg_lru(self.conv(self.W_a(a)))
        g = torch.relu(self.W_g(a))
        return self.W_o(g * h)


class DiagonalRecurrentBlock(nn.Module):
    """The recurrent block on a state in diagonal form: ``a' = W_a a``, the width-<=4 causal
    convolution on the delay lines, the RG-LRU's diagonal recurrence (``DiagonalRecurrence``); the
    gate branch ``g = 1`` and ``W_o = I`` of this construction are not computed."""

    kind = "recurrent"

    def __init__(self, spec: "DiagonalStateSpec") -> None:
        super().__init__()
        self.W_a = _linear(spec.W_a)
        self.rg_lru = DiagonalRecurrence(spec.A, spec.s0, spec.where)

    @property
    def hidden(self) -> int:
        return self.W_a.out_features

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.rg_lru(self.W_a(a))


class IdentityTemporal(nn.Module):
    """A temporal block that passes its input (App. E.2's identity recurrent block): nothing to compute."""

    kind = "identity"
    hidden = 0

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a


class LocalMQA(nn.Module):
    """Local multi-query attention: ``heads`` query heads share one key and one value head.

    Position t attends to positions ``t - window + 1 .. t`` (causal, softmax over the window).
    ``residual=True`` adds the block's input to its output, ``o_t = a_t + MQA(a_t)``.
    """

    kind = "attention"

    def __init__(self, W_q: np.ndarray, W_k: np.ndarray, W_v: np.ndarray, W_o: np.ndarray, b_o: np.ndarray, heads: int,
                 window: int, residual: bool = True) -> None:
        super().__init__()
        self.heads, self.window, self.residual = heads, window, residual
        self.head_dim = W_k.shape[0]
        self.W_q = _linear(W_q)  # (heads * head_dim, d)
        self.W_k = _linear(W_k)  # (head_dim, d): one key head
        self.W_v = _linear(W_v)  # (head_dim, d): one value head
        self.W_o = _linear(W_o, b_o)

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        if self.residual and not (torch.any(self.W_v.weight) and torch.any(self.W_o.weight)):
            return a + self.W_o.bias  # the attention adds nothing: not computed
        batch, T, _ = a.shape
        q = self.W_q(a).view(batch, T, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, T, hd)
        k = self.W_k(a).unsqueeze(1)  # (B, 1, T, hd), shared by every head
        v = self.W_v(a).unsqueeze(1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, heads, T, T)
        t = torch.arange(T)
        visible = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        heads = torch.softmax(scores, dim=-1) @ v  # (B, heads, T, hd)
        out = self.W_o(heads.transpose(1, 2).reshape(batch, T, self.hidden))
        return a + out if self.residual else out


class GatedMLP(nn.Module):
    """``m_t = W_m ((W_e o_t + b_e) * sigma(W_f o_t + b_f)) + b_m`` (Eqs. 47-50)."""

    kind = "mlp"

    def __init__(self, spec: "MLPSpec") -> None:
        super().__init__()
        self.W_e = _linear(spec.W_e, spec.b_e)
        self.W_f = _linear(spec.W_f, spec.b_f)
        self.W_m = _linear(spec.W_m, spec.b_m)

    @property
    def hidden(self) -> int:
        return self.W_e.out_features

    def forward(self, o: torch.Tensor) -> torch.Tensor:
        return self.W_m(self.W_e(o) * torch.relu(self.W_f(o)))


class ResidualBlock(nn.Module):
    """A temporal block (recurrent or attention) followed by a gated MLP block."""

    def __init__(self, temporal: nn.Module, mlp: GatedMLP, role: str) -> None:
        super().__init__()
        self.temporal = temporal
        self.mlp = mlp
        self.role = role  # "state", "layer", "product" or "pass" (Griffin alignment)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.temporal(a))


class HawkModel(KeptPromises, CachedRun, nn.Module):
    """Input embedding ``[x; 1]``, residual blocks, readout: ``(B, T, d_in) -> (B, T, d_out)``."""

    max_len_reason = "the window d_conv of the temporal convolution that computes the state (App. E.1)"
    labels: dict | None  # net.labels (lsrl.targets.to_torch), set by its builder
    unpatchable: dict[str, str]  # program node -> why no unit holds it

    def __init__(self, architecture: str, d_in: int, d_out: int, max_len: int | None,
                 blocks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.architecture = architecture
        self.d_in, self.d_out, self.max_len = d_in, d_out, max_len
        self.embedding = _linear(np.vstack([np.eye(d_in), np.zeros((1, d_in))]), np.eye(d_in + 1)[-1])
        self.blocks = nn.ModuleList(blocks)
        self.readout = _linear(np.eye(d_out, d_out + 1))

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        x = checked_input(self, x, check_bounds)  # refuses more than max_len steps (max_len_reason)
        v = self.embedding(x)
        for block in self.blocks:
            v = block(v)
        return self.readout(v)


# ---- weight construction (numpy) ----------------------------------------------------------------


@dataclass
class RecurrentSpec:
    W_a: np.ndarray
    taps: dict
    b_conv: np.ndarray
    W_g: np.ndarray
    b_g: np.ndarray
    W_o: np.ndarray
    b_o: np.ndarray
    # the RG-LRU's gates and decay, a pass-through where not given (filled in by __post_init__)
    W_r: np.ndarray = None  # type: ignore[assignment]  # None until __post_init__
    b_r: np.ndarray = None  # type: ignore[assignment]  # None until __post_init__
    W_i: np.ndarray = None  # type: ignore[assignment]  # None until __post_init__
    b_i: np.ndarray = None  # type: ignore[assignment]  # None until __post_init__
    Lambda: np.ndarray = None  # type: ignore[assignment]  # None until __post_init__

    def __post_init__(self) -> None:
        # the RG-LRU as a pass-through (App. E.1/E.2): Lambda = 0 -> a = 0, and r_t = 1 so that
        # a_t = 0 ** c = 0 (r_t = 0 would give 0 ** 0 = 1); i_t = 1, hence h_t = z_t.
        width = len(self.b_conv)
        self.W_r = np.zeros((width, width)) if self.W_r is None else self.W_r
        self.b_r = np.ones(width) if self.b_r is None else self.b_r
        self.W_i = np.zeros((width, width)) if self.W_i is None else self.W_i
        self.b_i = np.ones(width) if self.b_i is None else self.b_i
        self.Lambda = np.zeros(width) if self.Lambda is None else self.Lambda


@dataclass
class DiagonalStateSpec:
    W_a: np.ndarray  # (H, d_in + 1): [x; 1] -> the drive of the state and the carried channels
    A: np.ndarray  # (H, H) in diagonal form (lsrl.compiler.diagonal)
    s0: np.ndarray
    where: str


@dataclass
class MLPSpec:
    W_e: np.ndarray
    b_e: np.ndarray
    W_f: np.ndarray
    b_f: np.ndarray
    W_m: np.ndarray
    b_m: np.ndarray
    labels: dict | None = None  # "W_e", "W_f", "W_m" -> per output unit (None: unlabelled)


@dataclass
class ResidualSpec:
    # None: an identity temporal block (a recurrent one, or Griffin's MQA)
    temporal: RecurrentSpec | DiagonalStateSpec | None
    mlp: MLPSpec
    role: str
    width: int = field(default=0)  # the temporal block's input (= output) width when it is an identity
    labels: dict | None = None  # the temporal block's sub-modules ("" itself) -> per output unit


def _identity_recurrent(width: int) -> RecurrentSpec:
    """App. E.2: ``W_a = I``, ``W_M = [I, 0, ...]``, RG-LRU and gate ``g = 1`` pass, ``W_o = I``."""
    eye = np.eye(width)
    return RecurrentSpec(
        W_a=eye, taps={0: eye}, b_conv=np.zeros(width),
        W_g=np.zeros((width, width)), b_g=np.ones(width), W_o=eye, b_o=np.zeros(width),
    )


def _with_constant(W: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``W_m, b_m`` that append the constant-1 channel to ``W v + c``."""
    return np.vstack([W, np.zeros((1, W.shape[1]))]), np.append(c, 1.0)


def _state_residual(block: Block, max_len: int, carry_x: bool) -> ResidualSpec:
    """App. E.1 + E.4: input ``[x; 1]`` -> ``[s; x; 1]`` (``x`` only when ``carry_x``)."""
    A, B, b, s0 = block.A, block.B, block.b, block.s0
    d, n = block.d_state, block.d_in
    H = d + n + 1  # RG-LRU channels: [s; x; 1]
    xs, one = slice(d, d + n), H - 1
    W_a = np.zeros((H, n + 1))  # a'_t = [0; x_t; 1]
    W_a[xs, :n] = np.eye(n)
    W_a[one, n] = 1.0
    taps = {}
    power = B.copy()  # A^i B
    free = [s0]  # F(t) = A F(t-1) + b: the state under zero input, F(0) = s0
    for lag in range(max_len):
        free.append(A @ free[-1] + b)
        tap = np.zeros((H, H))
        tap[:d, xs] = power
        tap[:d, one] = free[-1] if lag == 0 else free[-1] - free[-2]
        if lag == 0:
            tap[xs, xs] = np.eye(n)  # x_t itself
        if not np.all(np.isfinite(tap)):
            raise LsrlError(
                f"hawk: the convolution kernel A^{lag} B of a state ({d} components) overflows float64 "
                f"within max_len={max_len} steps; use a smaller max_len"
            )
        if np.any(tap):
            taps[lag] = tap
        power = A @ power
    b_conv = np.zeros(H)
    b_conv[one] = 1.0
    keep = list(range(d)) + (list(range(d, d + n)) if carry_x else []) + [one]
    W_o = np.eye(H)[keep]
    temporal = RecurrentSpec(
        W_a=W_a, taps=taps, b_conv=b_conv, W_g=np.zeros((H, n + 1)), b_g=np.ones(H), W_o=W_o, b_o=np.zeros(len(keep))
    )
    return ResidualSpec(temporal, _identity_mlp(len(keep)), "state")


def _identity_mlp(width: int) -> MLPSpec:
    """App. E.4 on ``[v; 1]``: ``e = v``, ``f = 1``, ``m = [e * f; 1]``."""
    p = width - 1
    W_m, b_m = _with_constant(np.eye(p), np.zeros(p))
    return MLPSpec(
        W_e=np.eye(p, width), b_e=np.zeros(p), W_f=np.zeros((p, width)), b_f=np.ones(p), W_m=W_m, b_m=b_m
    )


def _layer_mlp(streams: list[Stream], width: int) -> MLPSpec:
    """App. E.3 on ``[v_1; ...; 1]``: each stream gets its next Dense layer, or is copied.

    ``streams``: list of (offset, size, dense or None). A ReLU layer goes through ``f`` (``e = 1``);
    a linear layer or a copy goes through ``e`` (``f = 1``), so no value that may be negative meets
    a ReLU it should not.
    """
    rows_e, rows_f, b_e, b_f = [], [], [], []
    for offset, size, dense in streams:
        if dense is None:
            W, c, relu = np.eye(size), np.zeros(size), False
        else:
            W, c, relu = dense.W, dense.c, dense.relu
        placed = np.zeros((W.shape[0], width))
        placed[:, offset:offset + size] = W
        zero, ones = np.zeros_like(placed), np.ones(W.shape[0])
        rows_e.append(zero if relu else placed)
        b_e.append(ones if relu else c)
        rows_f.append(placed if relu else zero)
        b_f.append(c if relu else ones)
    H = sum(len(part) for part in b_e)
    W_m, b_m = _with_constant(np.eye(H), np.zeros(H))
    return MLPSpec(np.vstack(rows_e), np.concatenate(b_e), np.vstack(rows_f), np.concatenate(b_f), W_m, b_m)


def _product_mlp(p: int, q: int, q_nonnegative: bool, width: int) -> MLPSpec:
    """App. E.5 on ``[...; 1]``: ``P * Q`` for the ``d``-wide values at offsets ``p`` and ``q``."""
    d = (width - 1) // 2
    P = np.zeros((d, width))
    P[:, p:p + d] = np.eye(d)
    Q = np.zeros((d, width))
    Q[:, q:q + d] = np.eye(d)
    if q_nonnegative:  # f = ReLU(Q) = Q
        W_e, W_f, W_m = P, Q, np.eye(d)
    else:  # sign split: e = [P; P], f = [Q+; Q-], m = P Q+ - P Q-
        W_e, W_f, W_m = np.vstack([P, P]), np.vstack([Q, -Q]), np.hstack([np.eye(d), -np.eye(d)])
    H = W_e.shape[0]
    W_m, b_m = _with_constant(W_m, np.zeros(d))
    return MLPSpec(W_e, np.zeros(H), W_f, np.zeros(H), W_m, b_m)


def _ends_in_relu(layers: list[Dense]) -> bool:
    return bool(layers) and layers[-1].relu


def _mlp_residuals(block: Block, x_labels: list[Label] | None = None, one: Label = None) -> list[ResidualSpec]:
    """The ``k`` layer specs and the product spec (gated blocks) that follow a block's state; their
    MLPs labelled when the block's input labels ``x_labels`` (and the constant's ``one``) are given."""
    gated = block.gamma is not None
    specs = []
    phi, gamma = block.phi, (block.gamma if block.gamma is not None else [])
    size_phi, size_gamma = block.d_state, (block.d_in if gated else 0)
    stream_labels = None if x_labels is None else [held(block.state_labels)] + ([copies(x_labels)] if gated else [])
    for j in range(max(len(phi), len(gamma))):
        width = size_phi + size_gamma + 1
        streams = [(0, size_phi, phi[j] if j < len(phi) else None)]
        if gated:
            streams.append((size_phi, size_gamma, gamma[j] if j < len(gamma) else None))
        specs.append(ResidualSpec(None, _layer_mlp(streams, width), "layer", width))
        if stream_labels is not None:
            specs[-1].mlp.labels, stream_labels = layer_mlp_labels(streams, stream_labels, one)
        size_phi = phi[j].W.shape[0] if j < len(phi) else size_phi
        size_gamma = gamma[j].W.shape[0] if gated and j < len(gamma) else size_gamma
    if gated:
        width = size_phi + size_gamma + 1
        relu_phi = _ends_in_relu(phi)
        if relu_phi:  # e = gamma, f = ReLU(phi) = phi
            mlp, q_nonnegative = _product_mlp(size_phi, 0, True, width), True
        else:  # e = phi, f = ReLU(gamma) = gamma, or the sign split of gamma
            mlp, q_nonnegative = _product_mlp(0, size_phi, _ends_in_relu(gamma), width), _ends_in_relu(gamma)
        if stream_labels is not None:
            phi_labels, gamma_labels = stream_labels
            P, Q = (gamma_labels, phi_labels) if relu_phi else (phi_labels, gamma_labels)
            mlp.labels = product_mlp_labels(P, Q, q_nonnegative, held(block.gate_labels), one)
        specs.append(ResidualSpec(None, mlp, "product", width))
    return specs


def block_to_residuals(block: Block, max_len: int, x_labels: list | None = None,
                       one: UnitLabel | None = None) -> list[ResidualSpec]:
    """App. E: one Gated Linear RNN block as ``k + 2`` residual-block specs (``k + 1`` without a gate)."""
    state = _state_residual(block, max_len, carry_x=block.gamma is not None)
    if x_labels is not None:
        state.labels = app_e_state_labels(block, x_labels, one)
        state.mlp.labels = identity_mlp_labels(state.labels[""][:-1], one)
    return [state] + _mlp_residuals(block, x_labels, one)


def diagonal_block_to_residuals(block: Block, where: str, x_labels: list | None = None,
                                one: UnitLabel | None = None) -> list[ResidualSpec]:
    """One block whose ``A`` is in diagonal form as ``k + 1`` residual-block specs (``k`` without a
    gate): the state block computes the state with the RG-LRU and the first MLP layer in its gated MLP."""
    gated = block.gamma is not None
    d, n = block.d_state, block.d_in
    carried = n if gated else 0
    H = d + carried + 1  # [s; x; 1]
    W_a = np.zeros((H, n + 1))  # a' = [B x + b; x; 1] from the input [x; 1]
    W_a[:d, :n], W_a[:d, n] = block.B, block.b
    W_a[d:d + carried, :n] = np.eye(n)[:carried]
    W_a[H - 1, n] = 1.0
    A, s0 = np.zeros((H, H)), np.zeros(H)
    A[:d, :d], s0[:d] = block.A, block.s0  # the carried x and the constant are copies (a = 0)
    rest = _mlp_residuals(block, x_labels, one)
    first = rest.pop(0).mlp if rest and rest[0].role == "layer" else _identity_mlp(H)
    state = ResidualSpec(DiagonalStateSpec(W_a, A, s0, where), first, "state")
    if x_labels is not None:
        state.labels = diagonal_temporal_labels(block, x_labels, one)
        first.labels = first.labels or identity_mlp_labels(state.labels[""][:-1], one)
    return [state] + rest


CONSTRUCTIONS = ("diagonal", "app_e")
DEFAULT_WINDOW = 1024  # Griffin's local attention window (De et al., 2024)
MAX_POSITION = 2**62  # positions and windows are compared as int64 (t - window must not overflow)
_POSITIONS = " (positions are int64 in torch)"


def _as_stack(stack: BlockStack | CompiledProgram, construction: str, max_len: int | None, architecture: str
              ) -> BlockStack:
    """``stack`` as a BlockStack (a CompiledProgram's blocks, of ``model.diagonal()`` for the diagonal
    construction) whose App. E kernels, if any, fit in memory (``check_hawk_size``)."""
    if not isinstance(stack, BlockStack) and hasattr(stack, "layers"):  # a CompiledProgram
        from lsrl.compiler.diagonal import float_diagonal

        stack = to_blocks(float_diagonal(stack) if construction == "diagonal" else stack)
    if not isinstance(stack, BlockStack):
        raise LsrlError(f"expected a BlockStack or a CompiledProgram, got {type(stack).__name__}")
    if max_len is not None:
        check_hawk_size(stack, architecture, max_len)
    return stack


def _check_max_len(max_len: Any, architecture: str, construction: Any) -> int | None:
    if not isinstance(construction, str) or construction not in CONSTRUCTIONS:
        raise LsrlError(f"{architecture}: construction must be one of {CONSTRUCTIONS}, got {construction!r}")
    if construction == "diagonal":
        if max_len is not None:
            raise LsrlError(
                f"{architecture}: max_len is only used by construction='app_e' (a convolution as long as the "
                f"sequence); the default diagonal construction runs any length"
            )
        return None
    if max_len is None:
        raise LsrlError(
            f"{architecture} with construction='app_e' needs max_len, the longest input sequence (a positive "
            f"integer): it is the window d_conv of the temporal convolution that computes each state (App. E.1)"
        )
    return whole_number_option(architecture, "max_len", max_len, MAX_POSITION, _POSITIONS)


def _identity_mqa(width: int, heads: int, window: int) -> LocalMQA:
    """MQA with ``W_v = 0`` inside a residual connection: ``a_t + 0``, an exact pass-through."""
    head_dim = max(1, -(-width // heads))
    needed = 8 * (2 * heads * head_dim + 2 * head_dim) * width  # W_q, W_o, W_k, W_v in float64
    if needed > MAX_HAWK_BYTES:
        raise LsrlError(f"griffin: heads={heads} needs {needed / 2**30:.1f} GiB for one attention block's projections "
                        f"(limit {MAX_HAWK_BYTES / 2**30:.0f} GiB); use fewer heads (at most the stream's width "
                        f"{width} gives every head a channel)")
    return LocalMQA(
        W_q=np.zeros((heads * head_dim, width)), W_k=np.zeros((head_dim, width)), W_v=np.zeros((head_dim, width)),
        W_o=np.zeros((width, heads * head_dim)), b_o=np.zeros(width), heads=heads, window=window, residual=True,
    )


def _constant_label(stack: BlockStack) -> Label:
    """The label of the constant-1 channel (None for a stack without labels)."""
    return None if stack.input_labels is None else constant_for(stack.input_labels[0] if stack.input_labels else None)


def _residual_specs(stack: BlockStack, max_len: int | None) -> list[ResidualSpec]:
    specs: list[ResidualSpec] = []
    x_labels, one = stack.input_labels, _constant_label(stack)
    for i, block in enumerate(stack.blocks):
        if max_len is None:
            specs += diagonal_block_to_residuals(block, f"block {i}", x_labels, one)
        else:
            specs += block_to_residuals(block, max_len, x_labels, one)
        x_labels = block.labels
    return specs


def _temporal(spec: ResidualSpec, max_len: int | None) -> nn.Module:
    if isinstance(spec.temporal, DiagonalStateSpec):
        return DiagonalRecurrentBlock(spec.temporal)
    if spec.temporal is not None:
        assert max_len is not None  # App. E's recurrent blocks (the diagonal construction has none)
        return RecurrentBlock(spec.temporal, max_len)
    if max_len is None:
        return IdentityTemporal()
    return RecurrentBlock(_identity_recurrent(spec.width), max_len)


def _build(stack: BlockStack, max_len: int | None, architecture: str, window: int = DEFAULT_WINDOW, heads: int = 2,
           attention_every: int = 3) -> HawkModel:
    modules: list[nn.Module] = []
    width = stack.d_in + 1
    one = _constant_label(stack)
    stream = None if one is None else held(stack.input_labels) + [one]  # the residual stream's labels
    labels: dict[str, Any] = {"embedding": stream}

    def add(temporal: nn.Module, mlp: MLPSpec, role: str, temporal_labels: dict | None) -> list[Label] | None:
        modules.append(ResidualBlock(temporal, GatedMLP(mlp), role))
        if stream is None:
            return None
        assert temporal_labels is not None and mlp.labels is not None  # a labelled stack labels every block
        labels.update(_residual_labels(len(modules) - 1, temporal_labels, mlp.labels))
        return mlp.labels["W_m"]

    for spec in _residual_specs(stack, max_len):
        attention_slot = architecture == "griffin" and len(modules) % attention_every == attention_every - 1
        if attention_slot and spec.temporal is not None:  # a state block must not lose its recurrence
            mlp = _identity_mlp(width)
            mlp.labels = None if stream is None else identity_mlp_labels(stream[:-1], one)
            stream = add(_identity_mqa(width, heads, window), mlp, "pass", {"": stream})
            attention_slot = False
        temporal = _identity_mqa(spec.width, heads, window) if attention_slot else _temporal(spec, max_len)
        temporal_labels: dict | None
        if spec.labels is not None or attention_slot or max_len is None:  # a state; an attention or identity
            temporal_labels = spec.labels or {"": stream}
        else:  # App. E's identity recurrent block
            temporal_labels = None if stream is None else identity_recurrent_labels(stream)
        stream = add(temporal, spec.mlp, spec.role, temporal_labels)
        width = spec.mlp.W_m.shape[0]
    model = HawkModel(architecture, stack.d_in, stack.d_out, max_len, modules)
    model.unpatchable = _convolved_states(stack) if max_len is not None else {}
    if stream is not None:
        labels["readout"] = copies(stream[:-1])
    model.labels = labels if stream is not None else None
    return model


def _convolved_states(stack: BlockStack) -> dict[str, str]:
    """App. E's state blocks compute every state as a convolution over the inputs: no state is
    carried from one step to the next, so a patched state could not reach the later steps. The
    program nodes held on a state unit that the recurrence reads (a non-zero column of ``A``)."""
    unpatchable: dict[str, str] = {}
    for index, block in enumerate(stack.blocks):
        for unit, label in enumerate(block.state_labels or []):
            if label is not None and label.role in PATCHABLE_ROLES and np.any(block.A[:, unit]):
                unpatchable[label.node] = (
                    f"construction='app_e' computes the state of block {index} as a convolution over the inputs "
                    "(App. E.1) and carries no state from one step to the next, so a patched state cannot reach "
                    "the later steps; use the default construction='diagonal'")
    return unpatchable


def _residual_labels(index: int, temporal_labels: dict, mlp_labels: dict) -> dict:
    """``net.labels`` entries of residual block ``index`` (see ``lsrl.targets.to_torch``)."""
    name = f"blocks.{index}"
    labels = {f"{name}.temporal" + (f".{key}" if key else ""): value for key, value in temporal_labels.items()}
    labels.update({f"{name}.mlp.{key}": value for key, value in mlp_labels.items()})
    labels[f"{name}.mlp"] = labels[name] = mlp_labels["W_m"]
    return labels


def build_hawk(stack: BlockStack | CompiledProgram, max_len: int | None = None,
               construction: str = "diagonal") -> HawkModel:
    """A Hawk model (recurrent blocks only) computing ``stack`` (a BlockStack or CompiledProgram).

    ``construction="diagonal"`` (default): states in diagonal form (``model.diagonal()``), RG-LRU
    recurrences and short convolutions, any sequence length. ``"app_e"``: the literal App. E
    construction, whose convolution spans ``max_len`` steps (the longest input it accepts).
    """
    max_len = _check_max_len(max_len, "hawk", construction)
    return _build(_as_stack(stack, construction, max_len, "hawk"), max_len, "hawk")


def build_griffin(stack: BlockStack | CompiledProgram, max_len: int | None = None, window: int | None = None,
                  heads: int = 2, construction: str = "diagonal") -> HawkModel:
    """A Griffin model: as Hawk, with local MQA (``heads`` query heads, ``window`` steps, default
    ``max_len`` for App. E and 1024 otherwise) as the temporal block of every third residual block."""
    max_len = _check_max_len(max_len, "griffin", construction)
    stack = _as_stack(stack, construction, max_len, "griffin")
    window = (max_len or DEFAULT_WINDOW) if window is None else window
    window = whole_number_option("griffin", "window", window, MAX_POSITION, _POSITIONS)
    heads = whole_number_option("griffin", "heads", heads, MAX_POSITION)  # the projections' size: _identity_mqa
    return _build(stack, max_len, "griffin", window=window, heads=heads)


def _nonzeros(module: nn.Module) -> int:
    return int(sum(torch.count_nonzero(p).item() for p in module.parameters()))


def layer_report(module: HawkModel) -> list:
    """One row per temporal block and per gated MLP block: ``layer`` is the residual block's index."""
    rows = []
    part: Any  # a temporal block or a GatedMLP: each says its kind and hidden width
    for i, block in enumerate(module.blocks):
        for part in (block.temporal, block.mlp):
            rows.append(dict(layer=i, kind=part.kind, hidden=part.hidden, nonzeros=_nonzeros(part)))
    return rows
