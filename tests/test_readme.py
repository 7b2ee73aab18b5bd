"""Every code block of README.md: Python blocks run as written; shell blocks name commands, options
and scripts that exist (the commands themselves are run by the CLI tests and CI)."""

import re
import runpy
import shlex
from pathlib import Path

import click
import matplotlib
import pytest

import lsrl.cli

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.M | re.S)
PYTHON = [code for language, code in BLOCKS if language == "python"]
SHELL = [line.split("  #")[0].split(" # ")[0].strip() for language, code in BLOCKS if language in ("bash", "sh")
         for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_has_code_blocks():
    assert len(PYTHON) >= 5 and len(SHELL) >= 5


@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs(index, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(PYTHON[index])
    runpy.run_path(str(script), run_name="__main__")


def _command(words):
    """The click command that ``lsrl words...`` names, and the words left after its name."""
    command = lsrl.cli.main
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command, words = command.commands[words[0]], words[1:]
    return command, words


@pytest.mark.parametrize("line", [line for line in SHELL if line.startswith("lsrl ")])
def test_lsrl_command_lines_name_real_commands_and_options(line):
    words = shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", line))[1:]  # "[--plots DIR]" marks an optional part
    command, rest = _command(words)
    if isinstance(command, click.Group):  # only the group's own options (lsrl --version)
        assert rest and rest[0].startswith("--"), f"{line!r}: no such command"
    known = {option for param in command.params for option in param.opts + param.secondary_opts}
    used = {word.split("=")[0] for word in rest if word.startswith("--")}
    assert used <= known, f"{line!r}: unknown options {used - known}"


@pytest.mark.parametrize("line", [line for line in SHELL if line.startswith("python benchmarks/")])
def test_benchmark_lines_name_scripts_that_exist(line):
    script = ROOT / shlex.split(line)[1]
    assert script.is_file(), line
    for option in re.findall(r"(--[\w-]+)", line):
        assert option in script.read_text(), f"{line!r}: {script.name} has no {option}"


def test_install_lines_name_what_the_package_has():
    pyproject = (ROOT / "pyproject.toml").read_text()
    for line in SHELL:
        if "pip install" in line:
            for extra in re.findall(r"\.\[(\w+)\]", line):
                assert f"{extra} = [" in pyproject, line
        for module in re.findall(r"-m (lsrl[\w.]*)", line):
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), line
