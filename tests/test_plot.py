"""``lsrl inspect --plot``: a compiled model drawn as layers of units with their weights."""

from types import SimpleNamespace

import matplotlib.image
from click.testing import CliRunner

import lsrl
from lsrl.cli import main
from lsrl.plot import plot_model


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


def test_cli_inspect_plot(tmp_path):
    lsrl.compile(lsrl.programs.more_ones_than_zeros()).save(tmp_path / "model")
    target = tmp_path / "circuit.png"
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "model"), "--plot", str(target)])
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 5000
    height, width, _ = matplotlib.image.imread(target).shape
    assert 200 <= width <= 4000 and 100 <= height <= 4000
