"""An mkdocs hook: results tables are rendered from the CSV files the commands write, never typed.

A line ``{{ csv_table("results/benchmarks/targets.csv") }}`` in a page becomes a Markdown table of that
file (the path is relative to ``docs/``), followed by a link to the file. Keyword options:

- ``columns=["a", "b"]``: only these columns, in this order;
- ``percent=["a", "b"]``: these columns hold fractions and are shown as percentages (``0.0019`` → ``0.19 %``);
- ``headers={"a": "A"}``: column titles other than the CSV's own;
- ``pivot=["key", "value"]``: a long table made wide: one column per distinct ``key``, holding ``value``,
  and one row per distinct combination of the other columns.

An empty cell is shown as ``–``. A missing file or column is an error, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import ast
import csv
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

DIRECTIVE = re.compile(r"^\{\{\s*(csv_table\(.*\))\s*\}\}\s*$", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace every ``{{ csv_table(...) }}`` line of the page by its table."""
    page_folder = posixpath.dirname(page.file.src_uri)

    def render(match: re.Match) -> str:
        try:
            path, options = parse_directive(match.group(1))
            table = csv_to_markdown(Path(config["docs_dir"]) / path, **options)
        except (OSError, ValueError, SyntaxError, TypeError) as error:  # a clean build error, not a traceback
            raise PluginError(f"{page.file.src_uri}: {match.group(1)}: {error}") from error
        link = posixpath.relpath(path, page_folder or ".")
        return f"{table}\n\n<small>Generated from [`{path}`]({link}).</small>\n"

    return DIRECTIVE.sub(render, markdown)


def parse_directive(call: str) -> tuple[str, dict]:
    """``csv_table("path", columns=[...])`` → ("path", {"columns": [...]}); literal arguments only."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        raise ValueError(f"csv_table takes one path and keyword options: {call}")
    return ast.literal_eval(node.args[0]), {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords}


def csv_to_markdown(path: Path, columns: list[str] | None = None, percent: list[str] = (),
                    headers: dict[str, str] | None = None, pivot: list[str] | None = None) -> str:
    """The CSV file at ``path`` as a Markdown table."""
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        fields, rows = list(reader.fieldnames or []), list(reader)
    if pivot:
        fields, rows = pivoted(fields, rows, *pivot)
    columns = list(columns or fields)
    missing = [name for name in [*columns, *percent, *(headers or {})] if name not in fields]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; it has {fields}")
    titles = [(headers or {}).get(name, name) for name in columns]
    table = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [format_cell(row[name], name in percent) for name in columns]
        table.append("| " + " | ".join(cells) + " |")
    return "\n".join(table)


def pivoted(fields: list[str], rows: list[dict], key: str, value: str) -> tuple[list[str], list[dict]]:
    """``rows`` with one column per distinct ``rows[i][key]`` holding ``value``."""
    kept = [name for name in fields if name not in (key, value)]
    wide: dict[tuple, dict] = {}
    for row in rows:
        label = tuple(row[name] for name in kept)
        wide.setdefault(label, dict(zip(kept, label)))[row[key]] = row[value]
    new = list(dict.fromkeys(row[key] for row in rows))
    return kept + new, [{name: row.get(name, "") for name in kept + new} for row in wide.values()]


def format_cell(text: str, as_percent: bool) -> str:
    """A cell as shown: ``–`` when empty, a fraction as a percentage to three significant digits."""
    text = text.strip()
    if not text:
        return "–"
    if as_percent:
        return f"{float(text) * 100:.3g} %"
    return text.replace("|", "\\|")
