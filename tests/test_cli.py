import numpy as np
from click.testing import CliRunner

from lsrl.cli import main

PROGRAM = '''
import lsrl
bits = lsrl.Input(1, name="bits")
counter = lsrl.ForEach(lsrl.LinState(2 * bits - 1, [[1]], [[1]]))
'''


def test_compile_run_inspect(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text(PROGRAM)
    runner = CliRunner()
    result = runner.invoke(main, ["compile", f"{source}:counter", "-o", str(tmp_path / "m"), "--target", "rnn"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.json").exists() and (tmp_path / "m" / "rnn.onnx").exists()
    np.save(tmp_path / "xs.npy", np.array([[1.0], [1.0], [0.0]]))
    result = runner.invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy"), "--exact"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["1", "2", "1"]
    result = runner.invoke(main, ["inspect", str(tmp_path / "m")])
    assert result.exit_code == 0 and "rnn: 1 layers" in result.output


def test_errors_are_one_line(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text(PROGRAM)
    runner = CliRunner()
    runner.invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    (tmp_path / "bad.txt").write_text("1 2\n3 4\n")
    result = runner.invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / "bad.txt")])
    assert result.exit_code != 0
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    assert "Input 'bits'" in result.output
    result = runner.invoke(main, ["compile", f"{source}:nothing", "-o", str(tmp_path / "n")])
    assert result.exit_code != 0 and "nothing" in result.output and result.output.count("\n") == 1


def test_demo_plots(tmp_path):
    from lsrl.demo import write_plots

    errors, stages = write_plots(tmp_path, side=12)
    assert all(later < earlier for earlier, later in zip(errors, errors[1:]))  # finer grids, smaller error
    assert all(later < earlier for earlier, later in zip(stages, stages[1:]))  # streaming refines
    assert errors[-1] <= (1 / 16) * np.hypot(3, 2) * np.sqrt(2) / 2  # App. B
    for name in ("heatmaps.png", "error_vs_grid.png", "streaming.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_the_llrnn_group_is_part_of_lsrl():
    result = CliRunner().invoke(main, ["llrnn", "sample", "repeat_copy", "--length", "3", "--count", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("∘") and "->" in line for line in lines)
    prompt, output = lines[0].split("->")
    letters = prompt.strip()[1:4]
    assert output.strip() == "".join(letter * 2 for letter in letters)  # each symbol repeated twice
    failed = CliRunner().invoke(main, ["llrnn", "train", "--model", "nope", "-o", "unused"])
    assert failed.exit_code != 0 and "unknown model 'nope'" in failed.output and "Traceback" not in failed.output
