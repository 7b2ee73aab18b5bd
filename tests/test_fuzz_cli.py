"""The command line, fuzzed: every option and argument of every ``lsrl`` command, found by walking
the click commands (a new option is fuzzed without a change here), gets hostile values for its type: out of
range, NaN, inf, huge, negative, malformed, empty, a file where a folder is wanted. Each run either succeeds
(exit 0) or exits non-zero with one ``Error: ...`` line naming the option and no traceback.

The other options keep small valid values so that an accepted value runs in a second. The commands whose
whole run takes minutes (demo, experiment noise, llrnn experiment / reproduce) have their long loop replaced
by a stub that still builds what the command validates; the library behind them is fuzzed by
tests/test_fuzz_api.py.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_strategies import bad_sequence, deadline, in_a_scratch_folder  # noqa: F401 (an autouse fixture)
from lsrl.cli import main

PROGRAM = '''
import lsrl
x = lsrl.Input(2, name="x", bounds=(-4, 4))
program = lsrl.ForEach(lsrl.LinState(x[0:1] - x[1:2], [[1]], [[1]], name="total"))
'''


def leaf_commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    """Every command under ``group`` by its path of names (``("llrnn", "train")``)."""
    commands = {}
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        if isinstance(command, click.Group):
            commands.update(leaf_commands(command, (*path, name)))
        else:
            commands[(*path, name)] = command
    return commands


COMMANDS = leaf_commands(main)


@functools.cache
def workspace() -> Path:
    """A folder with the program file, its compiled model, an input file and the parity folders of the
    benchmark suite (made once)."""
    root = Path(tempfile.mkdtemp(prefix="lsrl-fuzz-cli-"))
    (root / "prog.py").write_text(PROGRAM)
    assert CliRunner().invoke(main, ["compile", str(root / "prog.py"), "-o", str(root / "model")]).exit_code == 0
    np.save(root / "xs.npy", np.array([[1.0, 0.5], [0.0, 2.0]]))
    (root / "a-file").write_text("not a folder")
    assert CliRunner().invoke(main, ["bench", "build", str(root / "suite"), "--task", "parity"]).exit_code == 0
    (root / "submission.json").write_text(halves_submission(root / "suite" / "parity" / "path"))
    return root


def halves_submission(folder: Path) -> str:
    """A submission for ``lsrl bench score`` scoring every unit of ``folder`` (a parity suite folder) 0.5."""
    import json

    from lsrl.bench import read_circuit
    from lsrl.bench.eval.submission import FORMAT

    units = {hook["name"]: [0.5] * hook["width"] for hook in read_circuit(folder / "circuit.json").hooks}
    return json.dumps({"format": FORMAT, "method": "halves", "folders": {"parity/path": {"units": units}}})


def fresh(name: str) -> str:
    return str(Path(tempfile.mkdtemp(prefix="lsrl-fuzz-cli-")) / name)


# Small valid arguments per command, so that a run a hostile value does not stop is quick; a callable
# so that the outputs go to a fresh folder each time.
TINY_TRAINING = ["--steps", "1", "--batch-size", "1", "--controller-dim", "2", "--readout-dim", "2",
                 "--max-length", "2"]
BASE = {
    ("demo",): lambda w: ["--plots", fresh("plots")],
    ("compile",): lambda w: [str(w / "prog.py"), "-o", fresh("out")],
    ("run",): lambda w: [str(w / "model"), "--input", str(w / "xs.npy")],
    ("inspect",): lambda w: [str(w / "model")],
    ("experiment", "noise"): lambda w: ["--output", fresh("noise"), "--workers", "1", "--quick"],
    ("bench", "build"): lambda w: [fresh("bench"), "--task", "parity"],
    ("bench", "eval"): lambda w: [str(w / "suite" / "parity" / "rnn"), "--method", "random", "--pairs", "2"],
    ("bench", "score"): lambda w: [str(w / "submission.json"), str(w / "suite"), "-o", fresh("score"), "--pairs", "2"],
    ("bench", "eval-all"): lambda w: ["-o", fresh("eval"), "--task", "parity", "--pairs", "2"],
    ("bench", "train-tier"): lambda w: ["-o", fresh("trained"), "--task", "count_ones", "--steps", "1", "--workers", "1"],
    ("llrnn", "sample"): lambda w: ["copy", "--length", "2", "--count", "1"],
    ("llrnn", "train"): lambda w: [*TINY_TRAINING, "--checkpoint-every", "1", "--output", fresh("train")],
    ("llrnn", "experiment"): lambda w: [*TINY_TRAINING, "--models", "ntm", "--tasks", "copy", "--seeds", "1", "--workers", "1",
                                        "--output", fresh("experiment")],
    ("llrnn", "reproduce"): lambda w: ["--models", "ntm", "--tasks", "tf_copy", "--seeds", "1", "--steps", "1",
                                       "--workers", "1", "--output", fresh("reproduce")],
}


def test_every_command_has_small_valid_arguments() -> None:
    """A new command needs its entry in BASE (and thereby gets fuzzed)."""
    assert set(BASE) == set(COMMANDS)


@pytest.fixture
def stubbed(monkeypatch):
    """The long loops of demo, experiment noise, bench eval-all / train-tier and llrnn experiment / reproduce
    replaced by quick stubs that write what the command reads back (bench: the real loops, cut to one
    tier, architecture and method, one training step)."""
    import lsrl.bench.eval.harness as harness
    import lsrl.bench.trained_tier as trained
    import lsrl.demo
    import lsrl.experiments.noise as noise
    import lsrl.llrnn.experiment as llrnn_experiment
    import lsrl.llrnn.reproduce as llrnn_reproduce
    from lsrl.llrnn.train import preset

    def write(out_dir, name):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / name).write_text("")
        return []

    def reproduction(out_dir, preset_name, models, tasks, seeds, workers, ray_address, finished_only, **overrides):
        for model in models:
            for task in tasks:
                preset(preset_name, model, task, **overrides)  # what the runs would be given, checked
        return write(out_dir, "reproduction.md")

    monkeypatch.setattr(lsrl.demo, "main", lambda plots: len(write(plots, "demo")))
    monkeypatch.setattr(noise, "run", lambda out_dir, protocol, **grid: write(out_dir, "noise.csv"))
    monkeypatch.setattr(noise, "summary_markdown", lambda rows: "")
    monkeypatch.setattr(llrnn_experiment, "run_experiment",
                        lambda out_dir, *args, **kwargs: write(out_dir, "experiment.md"))
    monkeypatch.setattr(llrnn_reproduce, "run_reproduction", reproduction)
    evaluate_all, train_all = harness.evaluate_all, trained.train_all
    monkeypatch.setattr(harness, "evaluate_all", lambda tasks, pairs, progress, workers, ray_address, **chosen: evaluate_all(
        tasks, tiers=("compiled",), archs=("path",), methods=("random",), pairs=pairs, workers=workers,
        ray_address=ray_address))
    monkeypatch.setattr(trained, "train_all", lambda tasks, steps, progress, **grid: [
        {**row, "steps": steps} for row in train_all(tasks[:1], archs=("lstm",), steps=1, **grid)])


def hostile_values(parameter: click.Parameter) -> st.SearchStrategy[str]:
    """Command-line text a careless or hostile user types for ``parameter``, by its click type."""
    kind = parameter.type
    malformed = st.sampled_from(["", " ", "abc", "nan", "inf", "-inf", "1e400", "-1", "0", "1.5", "0x10", "1" + "0" * 400,
                                 "-" + "9" * 30, "None", "--help", "ü", "1,2", ",", "a,,b"])
    if isinstance(kind, click.IntRange):
        outside = [str(bound + step) for bound, step in ((kind.min, -1), (kind.max, 1)) if bound is not None]
        return st.one_of(malformed, st.sampled_from(outside or ["-1"]), st.integers(-(10**30), -1).map(str))
    if isinstance(kind, click.FloatRange):
        outside = [repr(bound + step) for bound, step in ((kind.min, -1.0), (kind.max, 1.0)) if bound is not None]
        return st.one_of(malformed, st.sampled_from(outside or ["-1"]),
                         st.floats(allow_nan=True, allow_infinity=True).map(repr))
    if isinstance(kind, click.Choice):
        return st.one_of(malformed, st.text(max_size=6), st.sampled_from([str(c).upper() for c in kind.choices]))
    if isinstance(kind, click.Path):
        w = workspace()
        # (no NUL byte: a command line cannot hold one)
        return st.sampled_from(["", str(w / "a-file"), str(w / "a-file" / "below"), str(w / "missing"),
                                "/proc/no-such-dir/x", str(w)])
    return st.one_of(malformed, st.text(max_size=8))


def fuzzable(command: click.Command) -> list[click.Parameter]:
    """The parameters that take a value (not flags, not --help)."""
    return [p for p in command.params if not getattr(p, "is_flag", False) and p.name != "help"]


def with_value(args: list[str], parameter: click.Parameter, value: str) -> list[str]:
    """``args`` with ``parameter`` set to ``value``: an option replaced or appended, an argument replaced."""
    if isinstance(parameter, click.Option):
        flags = set(parameter.opts)
        kept, skip = [], False
        for arg in args:
            if skip:
                skip = False
                continue
            if arg in flags:
                skip = True
                continue
            kept.append(arg)
        return [*kept, parameter.opts[-1], value]
    position = [p for p in COMMAND_OF[id(parameter)].params if isinstance(p, click.Argument)].index(parameter)
    if position >= len(args) or args[position].startswith("-"):  # an optional argument the base leaves out
        return [*args[:position], value, *args[position:]]
    return [value if i == position else arg for i, arg in enumerate(args)]


COMMAND_OF = {id(p): command for command in COMMANDS.values() for p in command.params}


PATH_WORDS = ("folder", "file", "path", "directory", "root")  # how errors about a path name it


def names_option(line: str, parameter: click.Parameter) -> bool:
    """Whether the one error line names the parameter: a flag (``--lr``), its name, or for an argument its
    metavar or name in capitals; an error about a path may say which kind of path it wanted instead."""
    if line.startswith("Error: Invalid value for"):  # click's own refusal, naming the option or metavar
        return True
    flags = getattr(parameter, "opts", ())
    words = [*flags, *(flag.lstrip("-") for flag in flags), parameter.name, parameter.name.replace("_", "-"),
             parameter.human_readable_name, parameter.name.upper(),
             *(PATH_WORDS if isinstance(parameter.type, click.Path) else ())]
    return any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", line, re.IGNORECASE) for word in words if word)


def refusal(path: tuple[str, ...], args: list[str], output: str) -> list[str]:
    """The lines of a run's refusal, asserted to be one ``Error:`` line, or for ``bench score``, which checks a
    whole submission first, that or one line per problem, each starting with the submission's path."""
    lines = output.splitlines()
    errors = [line for line in lines if line.startswith("Error:")]
    if path == ("bench", "score") and not errors and args and not args[0].startswith("-"):
        assert lines and all(line.startswith(f"{args[0]}: ") for line in lines), output
        return lines
    assert len(errors) == 1, output
    return errors


CASES = [(path, parameter.name) for path, command in COMMANDS.items() for parameter in fuzzable(command)]


# each example runs a command (a second or more): a fifth of the profile's examples per option, at least 2
CLI_EXAMPLES = settings(max_examples=max(2, settings().max_examples // 5))


@pytest.mark.usefixtures("stubbed")
@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{' '.join(p)} {n}" for p, n in CASES])
@CLI_EXAMPLES
@given(data=st.data())
@pytest.mark.slow
def test_a_hostile_option_exits_in_one_line_or_runs(path: tuple[str, ...], name: str, data: st.DataObject) -> None:
    command = COMMANDS[path]
    parameter = next(p for p in command.params if p.name == name)
    value = data.draw(hostile_values(parameter), label=name)
    args = with_value(BASE[path](workspace()), parameter, value)
    with deadline(60):
        result = CliRunner().invoke(main, [*path, *args])
    assert "Traceback" not in result.output, result.output
    if result.exit_code == 0:
        return
    errors = refusal(path, args, result.output)
    # the value itself, when it is not blank, also tells the user which option was wrong
    assert any(names_option(line, parameter) or value.strip() and value in line for line in errors), result.output


@pytest.mark.slow
@given(xs=bad_sequence(2))
def test_a_hostile_input_file_for_run_exits_in_one_line_or_runs(xs) -> None:
    """``lsrl run --input`` reads .npy and text files: their contents fuzzed like a program's input."""
    w = workspace()
    path = Path(fresh("xs.npy"))
    try:
        np.save(path, np.ma.filled(xs) if isinstance(xs, np.ma.MaskedArray) else np.asarray(xs))
    except (TypeError, ValueError):
        return  # not storable in a .npy file: nothing a user could pass
    with deadline(60):
        result = CliRunner().invoke(main, ["run", str(w / "model"), "--input", str(path)])
    assert "Traceback" not in result.output, result.output
    if result.exit_code != 0:
        assert [line.startswith("Error:") for line in result.output.splitlines()] == [True], result.output


# ---------------------------------------------------------------- whole command lines, drawn

def command_line_words(path: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Words a user may type after ``lsrl PATH``: the command's own flags (and --help), other commands'
    flags, the hostile values of its parameters, paths of the workspace and stray words."""
    command = COMMANDS[path]
    own = sorted({flag for p in command.params for flag in getattr(p, "opts", ())} | {"--help"})
    others = sorted({flag for c in COMMANDS.values() for p in c.params for flag in getattr(p, "opts", ())})
    return st.one_of(st.sampled_from(own), st.sampled_from(others), *[hostile_values(p) for p in fuzzable(command)],
                     st.sampled_from(["--", "-", "-x", "--no-such-option", "=", *(" ".join(p) for p in COMMANDS)]))


@st.composite
def command_lines(draw: st.DrawFn, path: tuple[str, ...]) -> list[str]:
    """The command's small valid arguments with one to four words inserted, replaced, dropped or repeated."""
    args = BASE[path](workspace())
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["insert", "replace", "drop", "repeat"]))
        at = draw(st.integers(0, len(args)))
        if how == "insert" or not args:
            args = [*args[:at], draw(command_line_words(path)), *args[at:]]
        elif how == "replace":
            args = [*args[:at - 1], draw(command_line_words(path)), *args[at:]] if at else args
        elif how == "drop":
            args = [arg for i, arg in enumerate(args) if i != min(at, len(args) - 1)]
        else:
            args = [*args, *args[max(at - 2, 0):at]]
    return args


@pytest.mark.usefixtures("stubbed")
@CLI_EXAMPLES
@given(path=st.sampled_from(sorted(COMMANDS)), data=st.data())
def test_a_drawn_command_line_exits_in_one_line_or_runs(path: tuple[str, ...], data: st.DataObject) -> None:
    """Any command line (words missing, repeated, misplaced, of another command) either runs or exits with
    one ``Error:`` line: never a traceback, never a request to report a bug in lsrl."""
    args = data.draw(command_lines(path), label="args")
    with deadline(60):
        result = CliRunner().invoke(main, [*path, *args])
    assert "Traceback" not in result.output and "bug in lsrl" not in result.output, result.output
    if result.exit_code != 0:
        refusal(path, args, result.output)


PROGRAM_PIECES = [  # lines a program file may hold: the valid program's, and a user's mistakes
    "import lsrl", "import sys", "x = lsrl.Input(2, name='x', bounds=(-4, 4))",
    "program = lsrl.ForEach(lsrl.LinState(x[0:1], [[1]], [[1]], name='total'))", "program = 5", "program = None",
    "def (:", "raise ValueError('mine')", "raise RuntimeError('mine')", "raise KeyboardInterrupt", "sys.exit(3)",
    "sys.exit(0)", "sys.exit('bye')", "import no_such_module_here", "x = 1 / 0", "del program", "lsrl.Input(-1)",
    "program = lsrl.ForEach(x)", "program = lsrl.ForEach(lsrl.Multi(x[0:1]))", "\t  indented = 1", "",
]


@given(lines=st.lists(st.sampled_from(PROGRAM_PIECES), min_size=0, max_size=6),
       suffix=st.sampled_from([".py", ".py", ".txt", ""]))
def test_a_drawn_program_file_compiles_or_exits_with_an_error_that_blames_it(lines: list[str], suffix: str) -> None:
    """``lsrl compile FILE``: a program file of the user's (with mistakes in it: syntax, exceptions, sys.exit,
    no program) either compiles or exits non-zero with an ``Error:`` line; a mistake in the file is never
    reported as a bug in lsrl."""
    source = Path(fresh(f"prog{suffix}"))
    source.write_text("\n".join(lines) + "\n")
    out = fresh("out")
    with deadline(60):
        result = CliRunner().invoke(main, ["compile", str(source), "-o", out])
    assert "bug in lsrl" not in result.output, result.output
    if result.exit_code == 0:
        assert (Path(out) / "model.json").is_file(), result.output
    else:  # (a KeyboardInterrupt the program raises ends as Ctrl-C does: click's "Aborted!")
        assert any(line.startswith("Error:") or line == "Aborted!" for line in result.output.splitlines()), \
            result.output
