"""The ``"diagonal_linear_rnn"`` target: an LRU / S4D-style stack run on ``model.diagonal()``.

Each layer (one block of ``lsrl.targets.blocks``) computes

    u_t = B x_t + b                                   (dense input map)
    h_t = a * h_{t-1} + c * h_{t-1}[partner] + v_t    (diagonal recurrence; ``c`` couples the two
                                                       units of a 2x2 complex-pair block, as LRU's
                                                       complex diagonal does)
    y_t = phi(h_t)   or   gamma(x_t) * phi(h_t)       (dense output map / MLPs)

where ``v_t = u_t`` except on the units of a delay line (a nilpotent block, see
``lsrl.compiler.diagonal``), which are a short causal convolution of ``u`` with taps ``N^i``, the
width being the line's length. The recurrence runs step by step over the units that have one;
copies (``a = c = 0``) cost no loop. Any sequence length works.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lsrl.model.structure import DELAY, OTHER, PAIR, state_blocks
from lsrl.errors import LsrlError
from lsrl.numbers import FLOAT
from lsrl.targets.blocks import Block, BlockStack
from lsrl.targets.cache import CachedRun
from lsrl.targets.checks import checked_input
from lsrl.targets.hook_points import Layer, Recurrence, StepHook
from lsrl.targets.promises import KeptPromises
from lsrl.targets.recurrent import DenseStack, block_labels, float64_tensor


class DiagonalRecurrence(Recurrence, nn.Module):
    """``s_t = A s_{t-1} + u_t`` for an ``A`` in diagonal form, over a ``(B, T, d)`` drive ``u``; its output is
    the state it carries (a hook patched before it is carried runs every unit step by step)."""

    recurrent: torch.Tensor  # the units with a recurrence of their own (buffers: indices, and their values)
    partner: torch.Tensor
    delay: torch.Tensor
    fading: torch.Tensor

    def __init__(self, A: np.ndarray, s0: np.ndarray, where: str) -> None:
        super().__init__()
        d = self.width = A.shape[0]
        partner, coupling, delay = np.arange(d), np.zeros(d), []
        for kind, indices in state_blocks(FLOAT.matrix(A)):
            if kind == OTHER:
                raise LsrlError(
                    f"diagonal_linear_rnn: {where} has a state block {indices} that is not diagonal, a complex "
                    f"pair or a delay line; compile from model.diagonal()"
                )
            if kind == PAIR:
                i, j = indices
                partner[i], partner[j] = j, i
                coupling[i], coupling[j] = A[i, j], A[j, i]
            elif kind == DELAY:
                delay.extend(indices)
        recurrent = [i for i in range(d) if i not in delay and (A[i, i] != 0 or coupling[i] != 0)]
        self.register_buffer("recurrent", torch.tensor(recurrent, dtype=torch.long))
        partners = [recurrent.index(partner[i]) for i in recurrent]
        self.register_buffer("partner", torch.tensor(partners, dtype=torch.long))
        self.a = nn.Parameter(float64_tensor(np.diag(A)[recurrent]))
        self.c = nn.Parameter(float64_tensor(coupling[recurrent]))
        self.s0 = nn.Parameter(float64_tensor(s0[recurrent]))
        self.register_buffer("delay", torch.tensor(delay, dtype=torch.long))
        N = A[np.ix_(delay, delay)]
        powers = [np.eye(len(delay))]
        # N moves a delay line one place on, so N^len(delay) = 0: at most len(delay) powers (also checked)
        while len(delay) and np.any(powers[-1] @ N) and len(powers) <= len(delay):
            powers.append(powers[-1] @ N)
        self.taps = nn.Parameter(float64_tensor(np.stack(powers)))  # (width, k, k): N^i
        # the initial state's part on a delay line, N^t s0 for t = 1 .. width - 1 (then it is gone)
        fading = [power @ N @ s0[delay] for power in powers[:-1]] if delay else []
        self.register_buffer("fading", float64_tensor(np.array(fading).reshape(len(fading), len(delay))))

    def carried_states(self, name: str) -> dict[str, Layer]:
        return {name: None}

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        hook = self.state_hook()
        if hook is not None:
            return self._patched_steps(u, hook)
        states = u.clone()
        if len(self.delay):
            states[:, :, self.delay] = self._delay_lines(u[:, :, self.delay])
        if len(self.recurrent):
            drive = u[:, :, self.recurrent]
            h = self.s0.expand(u.shape[0], -1)
            out = []
            for t in range(u.shape[1]):
                h = self.a * h + self.c * h[:, self.partner] + drive[:, t]
                out.append(h)
            states[:, :, self.recurrent] = torch.stack(out, dim=1)
        return states

    def _patched_steps(self, u: torch.Tensor, hook: StepHook) -> torch.Tensor:
        """``s_t = A s_{t-1} + u_t`` one step at a time, the delay lines as ``N s_{t-1}`` (their first
        step from ``N s_0``, ``fading[0]``), ``s_t`` patched before it is carried."""
        state, out = None, []
        for t in range(u.shape[1]):
            s = u[:, t].clone()
            if len(self.recurrent):
                h = self.s0.expand(u.shape[0], -1) if state is None else state[:, self.recurrent]
                s[:, self.recurrent] = self.a * h + self.c * h[:, self.partner] + u[:, t, self.recurrent]
            if len(self.delay):
                carried = self.fading[0] if state is None else state[:, self.delay] @ self.taps[1].T
                s[:, self.delay] = carried + u[:, t, self.delay]
            state = hook(s, t)
            out.append(state)
        return torch.stack(out, dim=1)

    def _delay_lines(self, u: torch.Tensor) -> torch.Tensor:
        T = u.shape[1]
        out = torch.zeros_like(u)
        for lag, tap in enumerate(self.taps):
            if lag < T:  # N^lag u_{t-lag}; zero before the first step
                out = out + F.pad(u[:, : T - lag] @ tap.T, (0, 0, lag, 0))
        steps = min(T, len(self.fading))
        return torch.cat([out[:, :steps] + self.fading[:steps], out[:, steps:]], dim=1)


class DiagonalRNNBlock(nn.Module):
    """Dense input map, diagonal recurrence, MLP output map (and the gate ``gamma`` of Eq. (4))."""

    def __init__(self, block: Block, where: str = "block") -> None:
        super().__init__()
        self.B = nn.Parameter(float64_tensor(block.B))
        self.b = nn.Parameter(float64_tensor(block.b))
        self.recurrence = DiagonalRecurrence(block.A, block.s0, where)
        self.phi = DenseStack(block.phi)
        self.gamma = DenseStack(block.gamma) if block.gamma is not None else None

    @property
    def hidden_size(self) -> int:
        """The width of the state."""
        return self.B.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.phi(self.recurrence(x @ self.B.T + self.b))
        return y if self.gamma is None else self.gamma(x) * y


class DiagonalRNNModel(KeptPromises, CachedRun, nn.Module):
    """Blocks applied one after the other: ``(B, T, d_in) -> (B, T, d_out)``."""

    architecture = "diagonal_linear_rnn"

    def __init__(self, stack: BlockStack) -> None:
        super().__init__()
        self.d_in = stack.d_in
        self.blocks = nn.ModuleList(DiagonalRNNBlock(block, f"block {i}") for i, block in enumerate(stack.blocks))
        self.labels = block_labels(stack, self.blocks, state="recurrence")

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        x = checked_input(self, x, check_bounds)
        for block in self.blocks:
            x = block(x)
        return x


def build_diagonal_linear_rnn(stack: BlockStack) -> DiagonalRNNModel:
    """The ``"diagonal_linear_rnn"`` module for a block stack whose states are in diagonal form."""
    return DiagonalRNNModel(stack)
