"""The type checker (mypy, configured in pyproject.toml: every function typed) and ruff on the whole package."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["lsrl"]


def _run(*command):
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_mypy_passes_on_the_whole_package():
    result = _run("mypy", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_ruff_passes_on_the_whole_package():
    result = _run("ruff", "check", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr
