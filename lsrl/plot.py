"""A compiled model drawn as its circuit: one column per layer, one dot per unit, a line per non-zero
weight from the unit it reads to the unit it feeds (``lsrl inspect --plot``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lsrl.errors import LsrlError
from lsrl.kinds import Kind

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lsrl.lang.nodes import Node
    from lsrl.model import CompiledProgram

KIND_COLOURS = {Kind.INPUT: "#555555", Kind.LINEAR: "#1f77b4", Kind.RELU: "#2ca02c", Kind.LINSTATE: "#d62728",
                Kind.MULTI: "#9467bd"}
MAX_EDGES = 3000
MAX_NAMED_UNITS = 40  # unit names are written only where every layer is at most this wide
COLUMN_INCHES, UNIT_INCHES = 1.6, 0.3  # the canvas grows with the model, so that no label overlaps another
MAX_INCHES = 320  # 32,000 pixels at 100 dpi, inside Agg's limit; an SVG or PDF zooms without one
TITLE_CHARS, UNIT_LABEL_CHARS = 22, 34  # what fits in a column at the label's font size
LEGEND_COLUMNS = 6
PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what plot_model writes, chosen by the file's suffix


def check_plot_path(path: str | Path) -> None:
    """Refuse, before any drawing, a ``path`` whose suffix is none of ``PLOT_SUFFIXES``."""
    if Path(path).suffix.lower() not in PLOT_SUFFIXES:
        raise LsrlError(f"plot path {str(path)!r}: the suffix must be one of {', '.join(PLOT_SUFFIXES)} (the "
                        "file's format)")


def plot_model(model: CompiledProgram, path: str | Path | None = None, max_edges: int = MAX_EDGES) -> Figure:
    """Draw ``model`` (a ``CompiledProgram``); save to ``path`` if given (.png, .svg, .pdf: by its suffix;
    a large model reads best as .svg, which zooms); returns the matplotlib figure.

    Units are coloured by role where the model carries unit labels (``model.labels``), else by layer
    kind. Edges: a Linear's ``A``, a LinState's ``B`` (its recurrent ``A`` is noted in the column
    title), a ReLU's identity, a Multi's two factors. Beyond ``max_edges`` edges, an even sample of
    them is drawn and the figure says so.
    """
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure  # no pyplot: no global figure state, any backend
    from matplotlib.lines import Line2D

    if path is not None:
        check_plot_path(path)
    columns = [model.input] + list(model.layers)
    widest = max(column.dim for column in columns)
    labels = getattr(model, "labels", None)
    figure = Figure(figsize=(min(MAX_INCHES, COLUMN_INCHES * len(columns) + 1),
                             min(MAX_INCHES, UNIT_INCHES * widest + 2.5)))
    axes = figure.subplots()
    edges, signs = _edges(columns)
    shown = np.linspace(0, len(edges) - 1, max_edges).astype(int) if len(edges) > max_edges else np.arange(len(edges))
    if len(edges):
        colours = np.where(np.array(signs)[shown] > 0, "#1f77b4", "#d62728")
        axes.add_collection(LineCollection(np.array(edges)[shown], colors=colours, linewidths=0.6, alpha=0.35))
    roles = sorted({unit[2] for layer in labels for unit in layer}) if labels is not None else []
    role_colours = {role: colormaps["tab10"](i % 10) for i, role in enumerate(roles)}
    for x, column in enumerate(columns):
        y = _unit_heights(column.dim)
        layer_labels = labels[x - 1] if labels is not None and x > 0 else None
        unit_colours = ([role_colours[unit[2]] for unit in layer_labels] if layer_labels
                        else KIND_COLOURS[column.kind])
        axes.scatter(np.full(column.dim, x), y, s=24, c=unit_colours, zorder=3, gid="units", edgecolors="none")
        recurrent = " ↻" if column.kind is Kind.LINSTATE else ""
        axes.text(x, y.max() + 1, f"{column.kind}({column.dim}){recurrent}\n{_shortened(column.name, TITLE_CHARS)}",
                  ha="center", va="bottom", fontsize=7, gid="column title")
        if layer_labels and widest <= MAX_NAMED_UNITS:
            for height, (node, index, role) in zip(y, layer_labels):
                axes.text(x + 0.08, height, _shortened(f"{node}[{index}] {role}", UNIT_LABEL_CHARS), fontsize=5,
                          va="center", gid="unit label")
    handles = [Line2D([], [], marker="o", ls="", color=c, label=k) for k, c in
               (role_colours.items() if labels is not None else KIND_COLOURS.items())]
    figure.legend(handles=handles, loc="lower center", ncol=min(LEGEND_COLUMNS, len(handles)), fontsize=7,
                  frameon=False,
                  title="unit role" if labels is not None else "layer kind", title_fontsize=7)
    note = f"; showing {len(shown)} of {len(edges)} edges" if len(shown) < len(edges) else ""
    axes.set_title(f"{model.name}: {len(model.layers)} layers, {sum(c.dim for c in columns[1:])} units{note}",
                   fontsize=9)
    axes.set_xlim(-0.6, len(columns) - 0.4)
    axes.set_ylim(-widest / 2 - 1, widest / 2 + 3)
    axes.axis("off")
    _leave_margins(figure, legend_rows=-(-len(handles) // LEGEND_COLUMNS) + 1)  # + 1: the legend's title
    if path is not None:
        figure.savefig(path, dpi=100)
    return figure


def _leave_margins(figure: Figure, legend_rows: int) -> None:
    """Margins in inches (the axes are off; the texts lie inside its limits): the title above, the
    legend below. Fixed sizes rather than tight_layout, which measures every text and is slow on a
    large circuit."""
    width, height = figure.get_size_inches()
    bottom, top, side = 0.15 + 0.18 * legend_rows, 0.35, 0.1
    figure.subplots_adjust(left=side / width, right=1 - side / width, bottom=min(0.5, bottom / height),
                           top=1 - top / height)


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _unit_heights(dim: int) -> np.ndarray:
    return (dim - 1) / 2 - np.arange(dim)


def _edges(columns: Sequence[Node]) -> tuple[list[tuple[tuple[int, float], tuple[int, float]]], list[float]]:
    """Line segments ``((x0, y0), (x1, y1))`` from a unit of column k - 1 to the unit of column k it feeds,
    and the sign of each weight."""
    from lsrl.lang.nodes import Linear, LinState  # as plot_model's model has: check_plot_path needs neither

    segments: list[tuple[tuple[int, float], tuple[int, float]]] = []
    signs: list[float] = []
    for x in range(1, len(columns)):
        layer, before, after = columns[x], _unit_heights(columns[x - 1].dim), _unit_heights(columns[x].dim)
        dim = layer.dim
        if isinstance(layer, (Linear, LinState)):
            matrix = layer.A if isinstance(layer, Linear) else layer.B
            pairs = [(j, i, float(value)) for i, j, value in matrix.entries()]
        elif layer.kind is Kind.RELU:
            pairs = [(i, i, 1.0) for i in range(dim)]
        else:  # Multi: unit i multiplies units i and dim + i
            pairs = [(j, i, 1.0) for i in range(dim) for j in (i, dim + i)]
        for j, i, value in pairs:
            segments.append(((x - 1, float(before[j])), (x, float(after[i]))))
            signs.append(float(np.sign(value)))
    return segments, signs
