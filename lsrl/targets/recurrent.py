"""Linear RNN (Eq. 3), Gated Linear RNN (Eq. 4), classic RNN (Eq. 2) and Gated RNN (Eq. 5) modules.

The classic ones run their recurrence in stock ``torch.nn.RNN(nonlinearity="relu")`` with the
state split of Eq. (11): ``[s+; s-] = ReLU([[A, -A], [-A, A]] [s+; s-] + [B; -B] x + [b; -b])``
keeps both halves non-negative, so the ReLU acts as the identity and ``s = s+ - s-``. The block
of a ReLUState needs no split: its update ``s_t = ReLU(A s_{t-1} + B x_t + b)`` is the RNN's own
step (Eq. 2), with ``h_0 = s_0 >= 0``.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from lsrl.ir.labels import negative_part, positive_part
from lsrl.targets.blocks import Block, BlockStack, Dense
from lsrl.targets.cache import CachedRun
from lsrl.targets.checks import checked_input
from lsrl.targets.hook_points import Layer, Recurrence, StepHook
from lsrl.targets.promises import KeptPromises


def float64_tensor(array: ArrayLike) -> torch.Tensor:
    return torch.as_tensor(np.asarray(array, dtype=np.float64))


class DenseStack(nn.Module):
    """An MLP given as ``Dense`` layers (``torch.nn.Linear`` + optional ReLU)."""

    def __init__(self, layers: list[Dense]) -> None:
        super().__init__()
        self.layers = nn.ModuleList()
        self.relu = []
        for dense in layers:
            linear = nn.Linear(dense.W.shape[1], dense.W.shape[0], dtype=torch.float64)
            with torch.no_grad():
                linear.weight.copy_(float64_tensor(dense.W))
                linear.bias.copy_(float64_tensor(dense.c))
            self.layers.append(linear)
            self.relu.append(dense.relu)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        for linear, relu in zip(self.layers, self.relu):
            v = linear(v)
            if relu:
                v = torch.relu(v)
        return v


class LinearRNNBlock(Recurrence, nn.Module):
    """``s_t = A s_{t-1} + B x_t + b``, ``y_t = phi(s_t)`` or ``gamma(x_t) * phi(s_t)``; its state ``s_t`` is the
    hook ``{name}.state`` (a patch overwrites it before it is carried: ``lsrl.targets.hook_points``)."""

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.A = nn.Parameter(float64_tensor(block.A))
        self.B = nn.Parameter(float64_tensor(block.B))
        self.b = nn.Parameter(float64_tensor(block.b))
        self.s0 = nn.Parameter(float64_tensor(block.s0))
        self.state = nn.Identity()  # outputs s_t, so that run_with_cache names it blocks.{i}.state as the labels do
        self.phi = DenseStack(block.phi)
        self.gamma = DenseStack(block.gamma) if block.gamma is not None else None

    def states(self, x: torch.Tensor) -> torch.Tensor:
        drive = x @ self.B.T + self.b
        state = self.s0.expand(x.shape[0], -1)
        hook = self.state_hook()
        states = []
        for t in range(x.shape[1]):
            state = state @ self.A.T + drive[:, t]
            if hook is not None:
                state = hook(state, t)
            states.append(state)
        return self.state(torch.stack(states, dim=1))

    def carried_states(self, name: str) -> dict[str, Layer]:
        return {f"{name}.state": None}

    @property
    def hidden_size(self) -> int:
        """The width of the state."""
        return self.A.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.phi(self.states(x))
        return y if self.gamma is None else self.gamma(x) * y


class ClassicRNNBlock(LinearRNNBlock):
    """The same layer with its recurrence in ``torch.nn.RNN(nonlinearity="relu")`` (Eq. (11))."""

    rnn: nn.RNN
    merge: torch.Tensor  # [s+; s-] -> s (a buffer)

    def __init__(self, block: Block) -> None:
        nn.Module.__init__(self)
        if block.relu_state is not None:
            self._init_relu_state(block)
            return
        d = block.d_state
        A, B, b = block.A, block.B, block.b
        self.rnn = _relu_rnn(block.d_in, np.block([[A, -A], [-A, A]]), np.vstack([B, -B]), np.concatenate([b, -b]))
        self.h0 = nn.Parameter(float64_tensor(np.concatenate([np.maximum(block.s0, 0), np.maximum(-block.s0, 0)])))
        self.register_buffer("merge", float64_tensor(np.hstack([np.eye(d), -np.eye(d)])))
        self.state = nn.Identity()
        self.phi = DenseStack(block.phi)
        self.gamma = DenseStack(block.gamma) if block.gamma is not None else None

    def _init_relu_state(self, block: Block) -> None:
        """The ReLUState's update as the RNN step itself (no sign split: ``merge = I``)."""
        d = block.d_state
        self.rnn = _relu_rnn(block.d_in, block.A, block.B, block.b)
        self.h0 = nn.Parameter(float64_tensor(block.s0))
        self.register_buffer("merge", float64_tensor(np.eye(d)))
        self.state = nn.Identity()
        self.phi = DenseStack(block.phi)
        self.gamma = DenseStack(block.gamma) if block.gamma is not None else None

    def carried_states(self, name: str) -> dict[str, Layer]:
        """The stock RNN's hidden ``[s+; s-]`` is what it carries: the hook ``{name}.rnn``."""
        return {f"{name}.rnn": None}

    @property
    def hidden_size(self) -> int:
        """The width of the stock RNN's state (``[s+; s-]``: twice the program's)."""
        return self.rnn.hidden_size

    def states(self, x: torch.Tensor) -> torch.Tensor:
        h0 = self.h0.expand(1, x.shape[0], -1).contiguous()
        hook = self.state_hook()
        split = self.rnn(x, h0)[0] if hook is None else self._patched_split(x, h0, hook)
        return self.state(split @ self.merge.T)

    def _patched_split(self, x: torch.Tensor, h: torch.Tensor, hook: StepHook) -> torch.Tensor:
        """The stock RNN one step at a time, its hidden ``[s+; s-]`` patched before it is carried."""
        steps = []
        for t in range(x.shape[1]):
            h = hook(self.rnn(x[:, t:t + 1], h)[1][0], t)[None]
            steps.append(h[0])
        return torch.stack(steps, dim=1)


def _relu_rnn(d_in: int, weight_hh: np.ndarray, weight_ih: np.ndarray, bias: np.ndarray) -> nn.RNN:
    """A one-layer float64 ``torch.nn.RNN(nonlinearity="relu")`` with these weights (``bias_hh`` 0)."""
    rnn = nn.RNN(d_in, weight_hh.shape[0], nonlinearity="relu", batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for name, value in (("weight_hh", weight_hh), ("weight_ih", weight_ih), ("bias_ih", bias),
                            ("bias_hh", np.zeros_like(bias))):
            getattr(rnn, f"{name}_l0").copy_(float64_tensor(value))
    return rnn


class BlockModel(KeptPromises, CachedRun, nn.Module):
    """Blocks applied one after the other: ``(B, T, d_in) -> (B, T, d_out)``."""

    def __init__(self, stack: BlockStack, block_type: type[LinearRNNBlock], architecture: str) -> None:
        super().__init__()
        self.architecture = architecture
        self.d_in = stack.d_in
        self.blocks = nn.ModuleList(block_type(block) for block in stack.blocks)
        self.labels = block_labels(stack, self.blocks)

    def forward(self, x: torch.Tensor, check_bounds: bool = True) -> torch.Tensor:
        x = checked_input(self, x, check_bounds)
        for block in self.blocks:
            x = block(x)
        return x


def dense_labels(name: str, layers: list[Dense]) -> dict:
    """Labels of a ``DenseStack`` named ``name`` built from Dense ``layers``: each
    ``name.layers.i`` (the ``nn.Linear``, before its ReLU) and ``name`` itself (its output)."""
    labels = {f"{name}.layers.{i}": dense.labels for i, dense in enumerate(layers)}
    if layers:
        labels[name] = layers[-1].out_labels
    return labels


def block_labels(stack: BlockStack, blocks: Iterable[nn.Module], state: str = "state") -> dict | None:
    """``net.labels`` of a model of ``blocks`` built from ``stack`` (see ``lsrl.targets.to_torch``),
    the state of block ``i`` under ``blocks.i.{state}``; None without labels."""
    if stack.input_labels is None:
        return None
    labels = {}
    for index, (block, module) in enumerate(zip(stack.blocks, blocks)):
        name = f"blocks.{index}"
        labels[f"{name}.{state}"] = block.state_labels
        if isinstance(module, ClassicRNNBlock):  # the stock RNN's hidden units: [s+; s-], a ReLUState's s
            labels[f"{name}.rnn"] = block.state_labels if block.relu_state is not None else [
                positive_part(label) for label in block.state_labels
            ] + [negative_part(label) for label in block.state_labels]
        labels.update(dense_labels(f"{name}.phi", block.phi))
        if not block.phi:  # an empty DenseStack passes the state on
            labels[f"{name}.phi"] = block.state_labels
        if block.gamma is not None:
            labels.update(dense_labels(f"{name}.gamma", block.gamma))
        labels[name] = block.labels
    return labels


class BlockModule(Protocol):
    """A model of blocks (``BlockModel``, ``DiagonalRNNModel``), as ``block_report`` reads it."""

    architecture: str
    blocks: nn.ModuleList


def block_report(module: BlockModule) -> list[dict]:
    """Per block of a model of blocks (``BlockModel``, ``DiagonalRNNModel``): the state's hidden size,
    the MLP widths and the non-zero parameters."""
    rows = []
    block: Any  # a LinearRNNBlock or DiagonalRNNBlock (a ModuleList holds them as nn.Module)
    for index, block in enumerate(module.blocks):
        mlps = [block.phi] + ([block.gamma] if block.gamma is not None else [])
        rows.append({
            "layer": index,
            "kind": module.architecture + (" (gated)" if block.gamma is not None else ""),
            "hidden": block.hidden_size,
            "mlp": [[linear.out_features for linear in mlp.layers] for mlp in mlps],
            "nonzeros": sum(int(torch.count_nonzero(p)) for p in block.parameters()),
        })
    return rows


def build_linear_rnn(stack: BlockStack) -> BlockModel:
    """The ``"linear_rnn"`` module (Eq. (3)): linear recurrences and MLPs; ``stack`` has no gate."""
    return BlockModel(stack, LinearRNNBlock, "linear_rnn")


def build_gated_linear_rnn(stack: BlockStack) -> BlockModel:
    """The ``"gated_linear_rnn"`` module (Eq. (4)): as ``linear_rnn``, an MLP's output times a gate MLP's."""
    return BlockModel(stack, LinearRNNBlock, "gated_linear_rnn")


def build_rnn(stack: BlockStack) -> BlockModel:
    """The ``"rnn"`` module (Eq. (2), (11)): each recurrence a stock ReLU ``torch.nn.RNN``; ``stack`` has no gate."""
    return BlockModel(stack, ClassicRNNBlock, "rnn")


def build_gated_rnn(stack: BlockStack) -> BlockModel:
    """The ``"gated_rnn"`` module (Eq. (5)): as ``rnn``, an MLP's output times a gate MLP's."""
    return BlockModel(stack, ClassicRNNBlock, "gated_rnn")
