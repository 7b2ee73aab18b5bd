"""Every compiled program in one stock ``torch.nn.LSTM`` / ``torch.nn.GRU``, with its own sigmoid and tanh.

``model.to_torch("stock_lstm" | "stock_gru", max_len=T, dtype=torch.float32)`` returns a ``StockRNNModel``: one
stacked stock ``nn.LSTM`` / ``nn.GRU`` (``core``) and a ``nn.Linear`` (``readout``), whose ``net.tolerance`` bounds
how far every output may lie from the exact interpreter for inputs within the declared bounds and sequences of at
most ``max_len`` steps. The construction and the proof of that bound: docs/stock.md. The modules:

* ``scales``: the constants and scales; ``lattices``: value lattices and exact sums; ``cells``: the units of a layer;
* ``bounds`` -> ``exact_units`` -> ``builder``: the walk over the compiled layers (bounds and errors, identity and
  threshold units, small-signal units) and ``build_stock_lstm`` / ``build_stock_gru``;
* ``plan``: what every unit holds; ``module``: ``StockRNNModel``, its patches and cache; ``onnx``: the ONNX export.
"""

from __future__ import annotations

from lsrl.targets.stock.builder import build_stock_gru, build_stock_lstm
from lsrl.targets.stock.module import StockRNNModel, layer_report
from lsrl.targets.stock.onnx import export_stock_onnx
from lsrl.targets.stock.scales import power_sum, stock_dtype

__all__ = [
    "StockRNNModel", "build_stock_gru", "build_stock_lstm", "export_stock_onnx", "layer_report", "power_sum",
    "stock_dtype",
]
