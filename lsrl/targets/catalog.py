"""The targets lsrl makes, the papers' constructions, registered in the order ``ARCHITECTURES`` lists them.

Adding a target: write its builder (``stack, **options -> nn.Module``) and its layer report in a module
of this package, which may import torch (it is imported only when the target is built), and register
one ``Target`` naming them, here or in a module that ``lsrl.targets`` imports.
"""

from __future__ import annotations

from lsrl.targets.registry import Target, register
from lsrl.targets.stock_target import ProgramTarget


def _block_labels(state: str) -> str:
    return (
        "``blocks.{i}`` (the block's output), ``blocks.{i}.phi`` / ``.gamma`` (the MLPs) and ``.phi.layers.{j}`` / "
        f"``.gamma.layers.{{j}}`` (each ``nn.Linear``, before its ReLU); the state ``s_t``: {state}"
    )


_STATE = "``blocks.{i}.state`` (the identity module ``block.state`` outputs ``block.states(x)``)"
_BLOCK_LABELS = _block_labels(_STATE)
_CLASSIC_LABELS = _block_labels(_STATE + ", and the stock RNN's ``[s+; s-]`` (Eq. (11)): ``blocks.{i}.rnn``")
_DIAGONAL_LABELS = _block_labels("``blocks.{i}.recurrence``")
_CELL_LABELS = (
    "``rnn.l{k}`` (layer k's ``h``; ``module.rnn.layer(k, x)`` computes it), its gates after their activation, "
    "named by PyTorch's letters: ``rnn.l{k}.r``, ``.z``, ``.n`` (GRU), ``rnn.l{k}.i``, ``.f``, ``.g``, ``.o`` and "
    "the cell ``rnn.l{k}.c`` (LSTM), and ``readout``"
)
_RESIDUAL_LABELS = (
    "``embedding``, ``blocks.{i}`` (the residual stream after block i), ``blocks.{i}.temporal`` and its "
    "sub-modules (``W_a``, ``rg_lru``; App. E adds ``conv``, ``rg_lru.recurrence_gate``, ``rg_lru.input_gate``, "
    "``W_g``, ``W_o``), ``blocks.{i}.mlp`` and ``.mlp.W_e``, ``.mlp.W_f`` (before its ReLU), ``.mlp.W_m``; "
    "``readout``. Griffin's attention blocks pass their input: ``blocks.{i}.temporal`` is labelled, its "
    "projections (never run) are not; neither is App. E's ``conv.conv`` (channels first)"
)
_BLOCK_REPORT = "lsrl.targets.recurrent:block_report"
_STOCK_LABELS = ("``core.l{k}`` (layer k's ``h``: a labelled unit holds ``net.unit_scales`` times its value, a "
                 "sign pair's or a product's units are helpers) and ``readout``; ``run_with_cache`` adds the gates "
                 "``core.l{k}.i`` ... (``lsrl.targets.stock.StockRNNModel``)")

# Eq. (3) and (4): a linear recurrence, then an MLP (times the gate MLP gamma(x) when gated)
register(Target("linear_rnn", "lsrl.targets.recurrent:build_linear_rnn", _BLOCK_REPORT, _BLOCK_LABELS, gated=False))
register(Target("gated_linear_rnn", "lsrl.targets.recurrent:build_gated_linear_rnn", _BLOCK_REPORT, _BLOCK_LABELS))
# an LRU / S4D-style stack: the recurrence of model.diagonal(), element-wise
register(Target(
    "diagonal_linear_rnn", "lsrl.targets.diagonal:build_diagonal_linear_rnn", _BLOCK_REPORT,
    _DIAGONAL_LABELS, diagonal=True,
))
# Eq. (2) and (5): the recurrence in a stock torch.nn.RNN(nonlinearity="relu"), split in [s+; s-] (Eq. (11))
register(Target("rnn", "lsrl.targets.recurrent:build_rnn", _BLOCK_REPORT, _CLASSIC_LABELS, gated=False,
                relu_state=True))
register(Target("gated_rnn", "lsrl.targets.recurrent:build_gated_rnn", _BLOCK_REPORT, _CLASSIC_LABELS,
                relu_state=True))
# App. C and D: ReLU GRU and LSTM layers
register(Target("gru", "lsrl.targets.gru_lstm:build_gru", "lsrl.targets.gru_lstm:layer_report", _CELL_LABELS,
                options=("gate_bound",), relu_state=True))
register(Target("lstm", "lsrl.targets.gru_lstm:build_lstm", "lsrl.targets.gru_lstm:layer_report", _CELL_LABELS,
                relu_state=True))
# App. E: residual blocks of RG-LRU recurrences (Griffin: local attention every third block), by default
# on model.diagonal(); construction="app_e" is the literal convolution over max_len steps
register(Target("hawk", "lsrl.targets.hawk:build_hawk", "lsrl.targets.hawk:layer_report", _RESIDUAL_LABELS,
                options=("max_len", "construction"), diagonal=True))
register(Target("griffin", "lsrl.targets.hawk:build_griffin", "lsrl.targets.hawk:layer_report", _RESIDUAL_LABELS,
                options=("max_len", "window", "heads", "construction"), diagonal=True))
# Every program in one stock torch.nn.LSTM / GRU with its own sigmoid and tanh (saturated gates,
# small-signal values, scales from value_bounds at max_len); built from the compiled program itself
register(ProgramTarget(
    "stock_lstm", "lsrl.targets.stock:build_stock_lstm", "lsrl.targets.stock:layer_report",
    _STOCK_LABELS,
    options=("max_len", "dtype", "amplitude", "gate_amplitude", "gain", "runtime"), relu_state=True,
))
register(ProgramTarget(
    "stock_gru", "lsrl.targets.stock:build_stock_gru", "lsrl.targets.stock:layer_report",
    _STOCK_LABELS,
    options=("max_len", "dtype", "amplitude", "gate_amplitude", "gain", "runtime"), relu_state=True,
))
