"""``lsrl inspect --plot``: a compiled model drawn as layers of units with their weights."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import lsrl  # noqa: E402
from lsrl.cli import main  # noqa: E402
from lsrl.plot import plot_model  # noqa: E402


def _units(figure):
    return sum(len(c.get_offsets()) for c in figure.axes[0].collections if c.get_gid() == "units")


def _edges(figure):
    return sum(len(c.get_segments()) for c in figure.axes[0].collections if hasattr(c, "get_segments"))


def test_plot_draws_every_unit_and_weight():
    model = lsrl.compile(lsrl.programs.more_ones_than_zeros())
    figure = plot_model(model)
    assert _units(figure) == model.input.dim + sum(layer.dim for layer in model.layers)
    # LinState B (1 weight), Linear A (2), ReLU identity (2), Linear A (2)
    assert [layer.kind for layer in model.layers] == ["LinState", "Linear", "ReLU", "Linear"]
    assert _edges(figure) == 7
    assert figure.legends[0].get_title().get_text() == "unit role"  # compiled models carry unit labels
    roles = sorted({label.role for layer in model.labels for label in layer})
    assert sorted(t.get_text() for t in figure.legends[0].get_texts()) == roles


@pytest.mark.slow
def test_plot_caps_edges_of_large_models_and_says_so():
    model = lsrl.compile(lsrl.programs.discrete_approximator(1))
    figure = plot_model(model, max_edges=100)
    assert _units(figure) == model.input.dim + sum(layer.dim for layer in model.layers)
    assert _edges(figure) == 100
    assert "showing 100 of" in figure.axes[0].get_title()


def test_plot_colours_by_role_with_labels():
    model = lsrl.compile(lsrl.programs.more_ones_than_zeros())
    labels = [[("node", i, "value" if i % 2 == 0 else "pos") for i in range(layer.dim)] for layer in model.layers]
    labelled = SimpleNamespace(input=model.input, layers=model.layers, name="labelled", labels=labels)
    figure = plot_model(labelled)
    assert figure.legends[0].get_title().get_text() == "unit role"
    assert sorted(t.get_text() for t in figure.legends[0].get_texts()) == ["pos", "value"]
    assert sum(text.get_text() == "node[1] pos" for text in figure.axes[0].texts) == 2  # the two width-2 layers
    unlabelled = SimpleNamespace(input=model.input, layers=model.layers, name="unlabelled", labels=None)
    assert plot_model(unlabelled).legends[0].get_title().get_text() == "layer kind"


def test_cli_inspect_plot_writes_a_zoomable_svg(tmp_path):
    lsrl.compile(lsrl.programs.more_ones_than_zeros()).save(tmp_path / "model")
    target = tmp_path / "circuit.svg"
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "model"), "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert "<svg" in target.read_text()


def test_cli_inspect_plot(tmp_path):
    lsrl.compile(lsrl.programs.more_ones_than_zeros()).save(tmp_path / "model")
    target = tmp_path / "circuit.png"
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "model"), "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 5000
    height, width, _ = matplotlib.image.imread(target).shape
    assert 200 <= width <= 4000 and 100 <= height <= 4000


# ---- labels kept apart: measured on the drawn figure -------------------------------------------

def _boxes(figure):
    """(name, window extent) of every piece of text a reader must tell apart: tick labels, axis labels,
    titles, legends, and the circuit's column titles and unit labels."""
    renderer = FigureCanvasAgg(figure).get_renderer()  # lsrl.plot's figures have no pyplot canvas
    if any(axes.axison for axes in figure.axes):  # tick labels are placed by a draw (slow on a large canvas)
        figure.draw(renderer)
    named = [(f"legend {i}", legend) for i, legend in enumerate(figure.legends)]
    for k, axes in enumerate(figure.axes):
        if not axes.get_visible():
            continue
        named += [(f"axes {k} text {t.get_text()!r}", t) for t in axes.texts]
        if not axes.axison:  # a drawing without axes (the circuit): its texts only
            continue
        for letter, axis in (("x", axes.xaxis), ("y", axes.yaxis)):
            if axis.get_visible():  # a twin's shared axis is hidden
                named += [(f"axes {k} {letter} tick {t.get_text()!r}", t) for t in axis.get_ticklabels(which="both")]
                named += [(f"axes {k} {letter} label", axis.label)]
        named += [(f"axes {k} title", axes.title)]
        named += [(f"axes {k} legend", axes.get_legend())] if axes.get_legend() else []
    return [(name, artist.get_window_extent(renderer)) for name, artist in named
            if artist.get_visible() and (not hasattr(artist, "get_text") or artist.get_text().strip())]


def overlapping_labels(figure) -> list[tuple[str, str]]:
    """Pairs of labels whose boxes overlap (by more than a pixel: touching is allowed)."""
    boxes = [(name, box.expanded(1, 1).padded(-1)) for name, box in _boxes(figure)]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.width > 0 and box_b.width > 0 and box_a.overlaps(box_b)]


def points_cut_by_their_axes(figure) -> list[tuple[int, float, float]]:
    """Scatter points (axes, x, y in data units) whose marker does not lie wholly inside its axes."""
    cut = []
    for k, axes in enumerate(figure.axes):
        inside = axes.get_window_extent()
        for collection in axes.collections:
            offsets = collection.get_offsets()
            if not isinstance(collection, PathCollection) or not len(offsets) or not collection.get_clip_on():
                continue
            radius = np.sqrt(np.max(collection.get_sizes())) / 2 * figure.dpi / 72  # s is in points²
            for (x, y), (px, py) in zip(offsets, axes.transData.transform(offsets)):
                if not (inside.x0 + radius <= px <= inside.x1 - radius
                        and inside.y0 + radius <= py <= inside.y1 - radius):
                    cut.append((k, float(x), float(y)))
    return cut


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure a function saves with savefig (it closes them after), kept for the checks."""
    from matplotlib.figure import Figure

    saved, save = [], Figure.savefig

    def keep(figure, *args, **kwargs):
        saved.append(figure)
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_overlapping_labels_are_found():
    """The check itself: two labels drawn on top of each other are reported."""
    figure, axes = plt.subplots()
    axes.set_xticks([1, 1.001], ["first label", "second label"])
    axes.set_xlim(0, 2)
    assert any("first label" in a and "second label" in b for a, b in overlapping_labels(figure))
    plt.close(figure)


@pytest.mark.slow
def test_a_large_circuit_plot_keeps_its_titles_and_legend_apart():
    model = lsrl.compile(lsrl.programs.discrete_approximator(1))  # Listing 2: over 50 layers
    figure = plot_model(model)
    assert overlapping_labels(figure) == []
    titles = [text for text in figure.axes[0].texts if text.get_gid() == "column title"]
    assert len(titles) == len(model.layers) + 1
    assert figure.get_figwidth() >= len(titles)  # the canvas grew with the model: an inch and more per layer


@pytest.mark.slow
def test_a_circuit_plot_with_named_units_keeps_them_apart():
    model = lsrl.compile(lsrl.programs.continuous_approximator(2, 2))  # Listing 1: every unit named
    figure = plot_model(model)
    assert any(text.get_gid() == "unit label" for text in figure.axes[0].texts)
    assert overlapping_labels(figure) == []


@pytest.mark.slow
def test_the_demo_plots_keep_their_labels_apart(tmp_path, saved_figures):
    from lsrl.demo import write_plots

    write_plots(tmp_path, side=6)
    assert len(saved_figures) == 3
    for figure in saved_figures:
        assert overlapping_labels(figure) == [], figure.axes[0].get_title()
        assert points_cut_by_their_axes(figure) == []


@pytest.mark.slow
def test_the_noise_strip_plots_keep_labels_apart_and_points_whole(tmp_path, saved_figures):
    """Fig. 4's strips on errors that reach both ends of the axis: 0 (no error) and the largest."""
    from lsrl.experiments import noise

    generator = np.random.default_rng(0)
    for kind, largest in (("continuous", 3.3), ("discrete", 100.0)):
        rows = [noise.Row(kind, source, variant, sigma, "sample", sample, error)
                for source in noise.CONSTRUCTIONS.values() for variant in noise.IFELSE_VARIANTS
                for sigma in noise.SIGMAS
                for sample, error in enumerate([0.0, largest, *generator.uniform(0, largest, 3)])]
        rows.append(noise.Row(kind, noise.PAPER_FIG4, "original", 1e-3, "mean_at_least", "", largest))
        noise.strip_plot(rows, tmp_path / f"{kind}.png", kind)
    assert len(saved_figures) == 2
    for figure in saved_figures:
        assert overlapping_labels(figure) == []
        assert points_cut_by_their_axes(figure) == []  # a zero error sits above the axis, not cut by it


def test_the_training_curve_keeps_its_legend_off_the_axis_labels(tmp_path, saved_figures):
    from lsrl.llrnn.train import plot_error_curve

    history = [{"step": step, "running_error": 1 / (1 + step), "length": 1 + step // 10} for step in range(50)]
    plot_error_curve(history, tmp_path / "curve.png")
    assert overlapping_labels(saved_figures[0]) == []


@pytest.mark.slow
def test_the_reproduction_plot_keeps_its_labels_apart(tmp_path, saved_figures):
    from lsrl.llrnn.reproduce import plot_error_vs_length

    runs = [{"model": model, "task": task, "seed": 0, "parameters": 1, "wall_seconds": 1.0, "train_symbol_error": 0.0,
             "test_errors": {"15": 0.1 * k, "25": 0.2, "40": 0.5}}
            for k, model in enumerate(["ntm", "pattern_ntm", "lstm", "gru"]) for task in ["tf_copy", "tf_pattern1"]]
    plot_error_vs_length(runs, tmp_path / "errors.png")
    assert overlapping_labels(saved_figures[0]) == []


@pytest.mark.slow
def test_every_plot_of_a_training_run_keeps_its_labels_apart(tmp_path, saved_figures):
    result = CliRunner().invoke(main, ["llrnn", "train", "--preset", "smoke", "--model", "ntm", "--task", "copy",
                                       "--steps", "2", "--no-compile", "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert len(saved_figures) >= 2  # the error curve, the addresses (and the memories)
    for figure in saved_figures:
        assert overlapping_labels(figure) == [], figure.axes[0].get_title()
