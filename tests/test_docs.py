"""The documentation: README.md and every page of docs/.

Every code block runs or names what exists (Python blocks and ``lsrl ...`` lines run as written, a
line marked as long with its quick-check flags; ``python benchmarks/...`` lines name real scripts and
options; pip lines real extras), the site builds with warnings as errors, and its results tables
come from CSV files in the format the commands write."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from click.testing import CliRunner

import lsrl.cli
from lsrl.llrnn import reproduce

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [(page.relative_to(ROOT).as_posix(), language, code) for page in PAGES
          for language, code in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), flags=re.M | re.S)]
PYTHON = {f"{page}:{index}": code for index, (page, language, code) in enumerate(BLOCKS) if language == "python"}
SHELL = [line.split("  #")[0].split(" # ")[0].strip() for _, language, code in BLOCKS if language in ("bash", "sh")
         for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
README = (ROOT / "README.md").read_text()


def test_the_docs_have_code_blocks():
    assert len(PYTHON) >= 15 and len(SHELL) >= 15
    assert sum(key.startswith("README.md:") for key in PYTHON) >= 3  # the tour runs too


@pytest.mark.parametrize("key", list(PYTHON))
@pytest.mark.slow
def test_python_block_runs(key, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(_written(tmp_path, PYTHON[key])), run_name="__main__")


PRINTED_SUMMARIES = [key for key, code in PYTHON.items()  # a summary printed, and shown as comment lines
                     if "print(model.summary())" in code and "\n# " in code]


def test_the_docs_show_printed_summaries():
    assert {key.split(":")[0] for key in PRINTED_SUMMARIES} >= {"README.md", "docs/language.md"}


@pytest.mark.parametrize("key", PRINTED_SUMMARIES)
def test_the_summaries_the_blocks_promise_are_what_the_code_prints(key, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the blocks save a model folder
    runpy.run_path(str(_written(tmp_path, PYTHON[key])), run_name="__main__")
    promised = [line[2:] for line in PYTHON[key].splitlines() if line.startswith("# ")]
    assert promised and set(promised) <= set(capsys.readouterr().out.splitlines())


def _written(folder: Path, code: str) -> Path:
    script = folder / "block.py"
    script.write_text(code)
    return script


QUICK_CHECK = re.compile(r"quick check: (.+)$")
ON_A_CLUSTER = "on a Ray cluster"  # a line whose comment says so needs one: its command and options are checked
CLUSTER_LINES = [line.partition("  #")[0].strip() for _, language, code in BLOCKS if language in ("bash", "sh")
                 for line in code.splitlines() if line.startswith("lsrl ") and ON_A_CLUSTER in line]


def _lsrl_lines(page: Path) -> list[tuple[str, list[str]]]:
    """Each ``lsrl ...`` line of the page's shell blocks but those for a Ray cluster, and the flags its comment
    names after "quick check:" (a line marked as taking long is run with them appended; click keeps the last
    value of an option given twice)."""
    lines = []
    for language, code in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), flags=re.M | re.S):
        for line in code.splitlines() if language in ("bash", "sh") else []:
            command, _, comment = line.partition("  #")
            if command.strip().startswith("lsrl ") and ON_A_CLUSTER not in comment:
                quick = QUICK_CHECK.search(comment)
                assert ("long" in comment) == bool(quick), f"{page.name}: {line!r}: a long line names a quick check"
                lines.append((command.strip(), shlex.split(quick.group(1)) if quick else []))
    return lines


LSRL_LINES = {page.relative_to(ROOT).as_posix(): lines for page in PAGES if (lines := _lsrl_lines(page))}


def test_the_docs_show_lsrl_lines_and_how_to_reach_the_command():
    assert {"README.md", "docs/cli.md", "docs/llrnn.md"} <= set(LSRL_LINES)
    assert "source .venv/bin/activate" in README
    assert 'lsrl = "lsrl.cli:main"' in (ROOT / "pyproject.toml").read_text()  # what pip puts in .venv/bin
    assert any(line.startswith("lsrl compile examples/my_program.py:prog") for line, _ in LSRL_LINES["README.md"])


@pytest.mark.parametrize("page", sorted(LSRL_LINES))
@pytest.mark.slow
def test_every_lsrl_line_of_a_page_runs_as_written(page, tmp_path, monkeypatch):
    """The page's lines one after the other (a later line may read what an earlier one wrote), beside a
    copy of the repository's examples, as the ``lsrl`` command runs them."""
    matplotlib.use("Agg")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    for line, quick in LSRL_LINES[page]:
        result = CliRunner().invoke(lsrl.cli.main, shlex.split(line)[1:] + quick)
        assert result.exit_code == 0, f"{page}: {line!r} {quick} failed:\n{result.output[-3000:]}"


@pytest.mark.parametrize("line", CLUSTER_LINES)
def test_a_line_for_a_cluster_names_a_command_and_options_that_exist(line):
    """Not run (it needs a Ray cluster: tests/test_grid_ray.py runs the grids on one); click parses it, and an
    unknown option fails before ``--help`` prints the command's help."""
    result = CliRunner().invoke(lsrl.cli.main, shlex.split(line)[1:] + ["--help"])
    assert result.exit_code == 0 and "--ray-address" in line and "Usage:" in result.output, result.output


def _script_options(script: str) -> set[str]:
    """The options a benchmark script's argparse parser declares (``--csv`` through ``add_csv_option``)."""
    text = (ROOT / script).read_text()
    options = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", text))
    return options | ({"--csv"} if "add_csv_option(parser)" in text else set())


@pytest.mark.parametrize("line", sorted({line for line in SHELL if line.startswith("python benchmarks/")}))
def test_benchmark_lines_name_scripts_and_options_that_exist(line):
    script = shlex.split(line)[1]
    assert (ROOT / script).is_file(), line
    options = _script_options(script)
    assert set(re.findall(r"(--[\w-]+)", line)) <= options, f"{line!r}: {script} has only {sorted(options)}"


@pytest.mark.parametrize("script", sorted(path.name for path in (ROOT / "benchmarks").glob("*.py")
                                          if path.name != "results.py"))
def test_every_benchmark_script_writes_its_tables_as_csv(script):
    assert "--csv" in _script_options(f"benchmarks/{script}")
    assert "write_csv(" in (ROOT / "benchmarks" / script).read_text()


def test_install_lines_name_what_the_package_has():
    pyproject = (ROOT / "pyproject.toml").read_text()
    for line in SHELL:
        if "pip install" in line:
            for extra in re.findall(r"\.\[(\w+)\]", line):
                assert f"\n{extra} = [" in pyproject, line
        for module in re.findall(r"-m (lsrl[\w.]*)", line):
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), line


def test_the_readme_is_an_entry_page_whose_links_lead_somewhere():
    assert len(README.splitlines()) <= 300
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", README)
    assert len(links) >= 15
    for link in links:
        assert (ROOT / link).is_file(), link


def test_ci_runs_the_test_command_the_readme_gives():
    commands = [code.strip() for page, language, code in BLOCKS if page == "README.md" and "pytest" in code]
    assert len(commands) == 1
    assert commands[0] in (ROOT / ".ci" / "run").read_text()


def test_every_package_of_lsrl_has_an_api_page_in_the_site():
    packages = sorted(init.parent.name for init in (ROOT / "lsrl").glob("*/__init__.py"))
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "hf" in packages and "model" in packages
    for package in packages:
        page = ROOT / "docs" / "api" / f"lsrl.{package}.md"
        assert page.is_file() and f"::: lsrl.{package}\n" in page.read_text(), page
        assert f": api/lsrl.{package}.md\n" in nav, package


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    reference = (tmp_path / "site" / "api" / "lsrl.compiler" / "index.html").read_text()
    assert 'id="lsrl.compiler.compile"' in reference  # the API reference is generated, not empty
    reproduction = (tmp_path / "site" / "reproduction" / "index.html").read_text()
    assert "<td>tf_pattern2</td>" in reproduction and "0.19 %" in reproduction  # rendered from the CSV


# ---- the hook that renders results tables from CSV ----------------------------------------------

def _hook():
    spec = importlib.util.spec_from_file_location("csv_tables", ROOT / "docs" / "hooks" / "csv_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_renders_columns_percentages_and_empty_cells(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("task,model,error_at_15\ncopy,ntm,0.0019\ncopy,gru,\n")
    table = _hook().csv_to_markdown(path, columns=["model", "error_at_15"], percent=["error_at_15"],
                                    headers={"error_at_15": "at 15"})
    assert table.splitlines() == ["| model | at 15 |", "|---|---|", "| ntm | 0.19 % |", "| gru | – |"]


def test_the_hook_pivots_a_long_table(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("program,source,variant,sigma\nd,ours,step,0\nd,robust,step,1e-3\nc,ours,step,1e-7\n")
    table = _hook().csv_to_markdown(path, pivot=["source", "sigma"])
    assert table.splitlines()[2:] == ["| d | step | 0 | 1e-3 |", "| c | step | 1e-7 | – |"]


def test_the_hook_refuses_a_column_the_file_lacks(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="no column"):
        _hook().csv_to_markdown(path, columns=["c"])


# ---- the transcribed LLRNN results ---------------------------------------------------------------

SUMMARIES = sorted((ROOT / "docs" / "results" / "llrnn").rglob("reproduction_summary.csv"))


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda path: path.parent.name)
def test_transcribed_llrnn_results_are_in_the_format_the_command_writes(path, tmp_path):
    runs = [{"model": "ntm", "task": "tf_copy", "seed": 0, "parameters": 1, "wall_seconds": 1.0,
             "train_symbol_error": 0.0, "test_errors": {"15": 0.0, "25": 0.0, "40": 0.5}}]
    reproduce.write_summary(runs, tmp_path / "written.csv")
    with open(tmp_path / "written.csv", newline="") as written, open(path, newline="") as transcribed:
        assert next(csv.reader(transcribed)) == next(csv.reader(written))
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows
    for row in rows:  # the derived columns say what the command's own target() says of these medians
        errors = {int(key[len("error_at_"):]): float(value) for key, value in row.items()
                  if key.startswith("error_at_") and value}
        goal, reached = reproduce.target(row["task"], row["model"], errors)
        assert (row["target"], row["reached"]) == (goal, "" if reached is None else "yes" if reached else "no")
