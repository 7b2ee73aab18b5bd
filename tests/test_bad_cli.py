"""Command line: every error a user can cause is one line, nothing is written before a
refusal, and every --target writes a file."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors import safe_open

import lsrl
from lsrl.cli import main
from lsrl.errors import InternalError

PROGRAM = '''
import lsrl
from helper import SIGN  # a module beside the program file
bits = lsrl.Input(1, name="bits")
counter = lsrl.ForEach(lsrl.LinState(SIGN * (2 * bits - 1), [[1]], [[1]]))
'''
ORIGINAL = '''
from lsrl.programs import discrete_approximator
program = discrete_approximator(2, ifelse="original")
'''


@pytest.fixture
def source(tmp_path):
    (tmp_path / "helper.py").write_text("SIGN = 1\n")
    (tmp_path / "prog.py").write_text(PROGRAM)
    return tmp_path / "prog.py"


def _fails_in_one_line(args, *words):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and result.output.strip().count("\n") == 0, result.output
    for word in words:
        assert word in result.output, result.output
    return result.output


def test_a_failed_weight_write_is_one_line_and_leaves_no_partial_file(source, tmp_path, monkeypatch):
    """The torch weights are written through lsrl.model.writing as model.save writes (a temporary
    name renamed into place): a disk that fails mid-write leaves neither the file nor a partial one."""
    import safetensors.torch

    def disk_full(tensors, filename, metadata=None):
        with open(filename, "wb") as file:
            file.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", disk_full)
    out = tmp_path / "m"
    result = CliRunner().invoke(main, ["compile", str(source), "-o", str(out), "--target", "linear_rnn"])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]  # after the summary
    assert result.exit_code != 0 and "Traceback" not in result.output and len(errors) == 1, result.output
    assert all(word in errors[0] for word in ("lsrl compile --target", "linear_rnn.safetensors", "No space left"))
    assert not out.exists() and not [path.name for path in tmp_path.iterdir() if path.name.startswith(".lsrl-")]


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and lsrl.__version__ in result.output


@pytest.mark.parametrize("target", ["linear_rnn", "gated_linear_rnn", "hawk", "griffin"])
def test_targets_without_onnx_operators_write_the_torch_weights(source, tmp_path, target):
    out = tmp_path / "m"
    result = CliRunner().invoke(main, ["compile", str(source), "-o", str(out), "--target", target, "--max-len", "5"])
    assert result.exit_code == 0, result.output
    with safe_open(str(out / f"{target}.safetensors"), "pt") as weights:
        assert weights.metadata()["architecture"] == target
        saved = {name: weights.get_tensor(name) for name in weights.keys()}
    # the file rebuilds the module: same weights as a fresh build from the saved model
    literal = {"max_len": 5, "construction": "app_e"}  # --max-len selects App. E's Hawk / Griffin: no ONNX ops
    fresh = lsrl.load(out).to_torch(target, **(literal if target in ("hawk", "griffin") else {}))
    assert set(saved) == set(fresh.state_dict())
    assert all(np.array_equal(saved[name].numpy(), tensor.numpy()) for name, tensor in fresh.state_dict().items())


def test_hawk_without_max_len_exports_the_diagonal_construction_to_onnx(source, tmp_path):
    result = CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m"), "--target", "hawk"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "hawk.onnx").exists() and not (tmp_path / "m" / "hawk.safetensors").exists()


@pytest.mark.slow
def test_float32_onnx_of_lambda_1e10_is_refused_before_writing(tmp_path):
    (tmp_path / "orig.py").write_text(ORIGINAL)
    _fails_in_one_line(["compile", str(tmp_path / "orig.py"), "-o", str(tmp_path / "m"), "--target", "gru"],
                       "multiplicative", "--allow-inexact")
    assert not (tmp_path / "m").exists()
    result = CliRunner().invoke(main, ["compile", str(tmp_path / "orig.py"), "-o", str(tmp_path / "m64"),
                                       "--target", "gated_rnn", "--onnx-dtype", "float64"])
    assert result.exit_code == 0 and (tmp_path / "m64" / "gated_rnn.onnx").exists()


def test_inspect_refuses_a_hawk_that_does_not_fit(source, tmp_path):
    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "m"), "--max-len", "100000000"])
    assert result.exit_code == 0 and "rnn: 1 layers" in result.output  # the other architectures
    assert "hawk: not available" in result.output and "GiB" in result.output
    _fails_in_one_line(["compile", str(source), "-o", str(tmp_path / "h"), "--target", "griffin",
                        "--max-len", "100000000"], "GiB")
    assert not (tmp_path / "h").exists()
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "m"), "--max-len", "0"])
    assert result.exit_code == 2 and "--max-len" in result.output


def test_complex_input_to_run_fails(source, tmp_path):
    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    np.save(tmp_path / "xs.npy", np.array([[1 + 1j], [0]]))
    _fails_in_one_line(["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy")], "complex")


def test_run_of_a_tampered_model_is_one_line(source, tmp_path):
    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    (tmp_path / "m" / "weights.safetensors").write_bytes(b"garbage")
    np.save(tmp_path / "xs.npy", np.array([[1.0]]))
    _fails_in_one_line(["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy")], "weights.safetensors")


@pytest.mark.parametrize("args, word", [
    (["sample", "copy", "--count", "0"], "--count"),
    (["sample", "copy", "--length", "0"], "--length"),
    (["train", "--batch-size", "0"], "--batch-size"),
    (["train", "--device", "tpu"], "--device"),
    (["train", "--lr", "0"], "--lr"),
    (["experiment", "--seeds", "0"], "--seeds"),
    (["experiment", "--workers", "0"], "--workers"),
])
def test_llrnn_arguments_are_validated(args, word):
    result = CliRunner().invoke(main, ["llrnn", *args])
    assert result.exit_code == 2 and word in result.output and "Traceback" not in result.output


def test_resume_from_a_corrupt_checkpoint_is_one_line(tmp_path):
    from lsrl.llrnn.train import SIDECAR, WEIGHTS

    (tmp_path / WEIGHTS).write_bytes(b"not safetensors")
    (tmp_path / SIDECAR).write_bytes(b"not a torch file")
    _fails_in_one_line(["llrnn", "train", "-o", str(tmp_path), "--resume"], "corrupt checkpoint")


def test_help_texts_are_not_cut():
    result = CliRunner().invoke(main, ["experiment", "--help"])
    assert "Fig.\n" not in result.output and "Parameter noise" in result.output
    assert "gated_rnn" in CliRunner().invoke(main, ["compile", "--help"]).output


def test_run_checks_the_declared_bounds_unless_told_not_to(tmp_path):
    (tmp_path / "bounded.py").write_text(
        "import lsrl\nx = lsrl.Input(1, name='level', bounds=(0, 1))\nprogram = lsrl.ForEach(2 * x)\n")
    CliRunner().invoke(main, ["compile", str(tmp_path / "bounded.py"), "-o", str(tmp_path / "m")])
    np.save(tmp_path / "xs.npy", np.array([[3.0]]))
    _fails_in_one_line(["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy")], "Input 'level'")
    result = CliRunner().invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy"),
                                       "--no-check-bounds"])
    assert result.exit_code == 0 and result.output.split() == ["6.0"]


def test_the_fig1_summary_in_the_readme_is_what_the_code_prints(tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "docs" / "language.md").read_text()  # README's Fig. 1 section moved there
    section = readme[readme.index("## Learn the language on Fig. 1"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    promised = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    monkeypatch.chdir(tmp_path)  # the block saves a model folder
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == promised


def test_a_user_error_is_one_line_and_debug_shows_its_traceback(source, tmp_path):
    _fails_in_one_line(["compile", f"{source}:nothing", "-o", str(tmp_path / "m")], "nothing")
    result = CliRunner().invoke(main, ["--debug", "compile", f"{source}:nothing", "-o", str(tmp_path / "m")])
    assert result.exit_code == 1 and "Traceback" in result.output and "load_program" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ") and "report" not in result.output


def test_debug_reaches_the_llrnn_commands(tmp_path):
    from lsrl.llrnn.train import SIDECAR, WEIGHTS

    (tmp_path / WEIGHTS).write_bytes(b"not safetensors")
    (tmp_path / SIDECAR).write_bytes(b"not a torch file")
    result = CliRunner().invoke(main, ["--debug", "llrnn", "train", "-o", str(tmp_path), "--resume"])
    assert result.exit_code == 1 and "Traceback" in result.output and "corrupt checkpoint" in result.output


def _bug(*args, **kwargs):
    raise InternalError("the walk repeated a case")


@pytest.mark.parametrize("bug", [_bug, lambda *args, **kwargs: {}["missing"]], ids=["InternalError", "KeyError"])
def test_a_bug_inside_a_command_shows_its_traceback_and_asks_for_a_report(source, tmp_path, monkeypatch, bug):
    monkeypatch.setattr(lsrl, "compile", bug)
    result = CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    assert result.exit_code == 1 and "Traceback" in result.output and "please report it" in result.output
    assert result.output.count("please report it") == 1 and "\nError: " not in result.output  # not a mistake
    assert ("the walk repeated a case" if bug is _bug else "KeyError: 'missing'") in result.output


def test_a_bug_inside_an_llrnn_command_shows_its_traceback(monkeypatch):
    import lsrl.llrnn.tasks

    monkeypatch.setitem(lsrl.llrnn.tasks.TASKS, "copy", _bug)
    result = CliRunner().invoke(main, ["llrnn", "sample", "copy"])
    assert result.exit_code == 1 and "Traceback" in result.output and "please report it" in result.output


# ---- a program file's errors are the program's: its own traceback, then one line saying so ---------------

RAISES = '''
import lsrl
from signs import check_sign  # a module beside the program file
bits = lsrl.Input(1, name="bits")
check_sign(-1)
'''
SIGNS = '''
def check_sign(sign):
    if sign < 0:
        raise ValueError("the sign must be positive")
'''


def _program_error(tmp_path, text, name="prog.py"):
    """``lsrl compile`` of a program file holding ``text``: its output, after checking that it failed as the
    program's error (a last line ``Error: ...`` naming the file and the program, no report request, no frame
    of lsrl or of the import machinery)."""
    (tmp_path / name).write_text(text)
    result = CliRunner().invoke(main, ["compile", str(tmp_path / name), "-o", str(tmp_path / "m")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1].startswith(f"Error: {tmp_path / name}: the program "), result.output
    assert "please report it" not in result.output and "bug in lsrl" not in result.output, result.output
    assert "lsrl/" not in result.output and "importlib" not in result.output, result.output
    assert not (tmp_path / "m").exists()
    return result.output


def test_a_syntax_error_in_a_program_file_shows_where_and_blames_the_program(tmp_path):
    output = _program_error(tmp_path, "import lsrl\nbits = lsrl.Input(1)\nif bits\n")
    assert f'File "{tmp_path / "prog.py"}", line 3' in output and "if bits" in output
    assert "SyntaxError: expected ':'" in output and "(an error in the program, not in lsrl" in output


def test_an_exception_in_a_program_file_shows_the_programs_frames_only(tmp_path):
    (tmp_path / "signs.py").write_text(SIGNS)
    output = _program_error(tmp_path, RAISES)
    frames = [line.strip() for line in output.splitlines() if line.strip().startswith("File ")]
    assert frames == [f'File "{tmp_path / "prog.py"}", line 5, in <module>',
                      f'File "{tmp_path / "signs.py"}", line 4, in check_sign'], output
    assert output.splitlines()[-1].endswith("raised ValueError: the sign must be positive (an error in the program, "
                                            "not in lsrl; the program's traceback is above)")


def test_an_lsrl_refusal_while_a_program_file_runs_shows_the_programs_line(tmp_path):
    output = _program_error(tmp_path, 'import lsrl\nx = lsrl.Input(2, name="x")\ny = lsrl.Linear(x, [[1, 2, 3]])\n')
    assert f'File "{tmp_path / "prog.py"}", line 3, in <module>' in output
    assert "y = lsrl.Linear(x, [[1, 2, 3]])" in output and "raised DimensionError: Linear" in output


def test_an_error_of_a_library_the_program_calls_is_the_programs(tmp_path):
    output = _program_error(tmp_path, "import numpy as np\nnp.zeros(3).reshape(2, 2)\n")
    assert "raised ValueError: cannot reshape array of size 3" in output and "line 2, in <module>" in output


@pytest.mark.parametrize("code", [3, 0, "'stopped'"])
def test_sys_exit_in_a_program_file_is_one_line_naming_where(tmp_path, code):
    output = _program_error(tmp_path, f"import sys\n\nsys.exit({code})\n")
    assert output.strip().count("\n") == 0, output
    assert output.strip().endswith(
        f"the program ended the command with sys.exit({code}) at {tmp_path / 'prog.py'}, line 3 while it was "
        "loaded; a program file only defines its ForEach")


def test_a_bug_inside_lsrl_while_a_program_file_runs_is_lsrls(source, tmp_path, monkeypatch):
    import lsrl.lang.nodes

    monkeypatch.setattr(lsrl.lang.nodes, "whole_number", {}.__getitem__)  # a KeyError raised in Input's own frame
    result = CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    assert result.exit_code == 1 and "please report it" in result.output and "\nError: " not in result.output
    assert "lsrl/lang/nodes.py" in result.output and "KeyError" in result.output


@pytest.mark.parametrize("name, words", [("prog.txt", "ends in .py"), ("folder", "not a file"),
                                         ("missing.py", "no such file")])
def test_a_source_that_is_no_python_file_is_one_line(tmp_path, name, words):
    (tmp_path / "prog.txt").write_text("import lsrl\nx = lsrl.Input(1)\nprogram = lsrl.ForEach(x)\n")
    (tmp_path / "folder").mkdir()
    _fails_in_one_line(["compile", str(tmp_path / name), "-o", str(tmp_path / "m")], repr(str(tmp_path / name)),
                       words)
    assert not (tmp_path / "m").exists()


# ---- --input files: one that holds no step or cannot be read is one line naming it -------------------------

def _write_inputs(folder):
    (folder / "empty.txt").write_text("")
    (folder / "comments.txt").write_text("# no step here\n\n")
    (folder / "empty.npy").write_bytes(b"")
    np.save(folder / "no_steps.npy", np.zeros((0, 1)))
    (folder / "garbage.npy").write_text("not an array\n")
    np.savez(folder / "arrays.npz", xs=np.ones((2, 1)))
    (folder / "commas.csv").write_text("1,0\n")
    (folder / "ragged.txt").write_text("1 0\n1\n")


@pytest.mark.parametrize("name, words", [
    ("empty.txt", "the file holds no step"), ("comments.txt", "the file holds no step"),
    ("no_steps.npy", "the file holds no step"),
    ("empty.npy", "cannot read a sequence"), ("garbage.npy", "cannot read a sequence"),
    ("arrays.npz", "cannot read a sequence"), ("commas.csv", "cannot read a sequence"),
    ("ragged.txt", "cannot read a sequence"),
])
def test_an_input_file_with_no_step_or_unreadable_is_one_line(source, tmp_path, name, words):
    import warnings

    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    _write_inputs(tmp_path)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        _fails_in_one_line(["run", str(tmp_path / "m"), "--input", str(tmp_path / name)],
                           f"--input {tmp_path / name}: {words}", "expected a .npy array, or a text file")
    assert [str(warning.message) for warning in warned] == []  # numpy's "no data" warning is not leaked


def test_input_files_that_hold_steps_still_run(source, tmp_path):
    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    np.save(tmp_path / "xs.npy", np.array([[1.0], [1.0], [0.0]]))
    (tmp_path / "xs.txt").write_text("# bits\n1\n1\n0\n")
    for name in ("xs.npy", "xs.txt"):
        result = CliRunner().invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / name), "--exact"])
        assert result.exit_code == 0 and result.output.split() == ["1", "2", "1"], result.output


@pytest.mark.parametrize("name", ["circuit.txt", "circuit"])
def test_inspect_refuses_a_plot_path_of_no_known_format_before_any_work(source, tmp_path, name):
    CliRunner().invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    _fails_in_one_line(["inspect", str(tmp_path / "m"), "--plot", str(tmp_path / name)],
                       f"plot path {str(tmp_path / name)!r}: the suffix must be one of .png, .svg, .pdf")
    assert not (tmp_path / name).exists()
