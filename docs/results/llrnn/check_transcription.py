"""Checks the transcribed LLRNN medians against the README they were typed from (run once, by hand):

    git show f57087a:README.md > /tmp/old-readme.md
    python docs/results/llrnn/check_transcription.py /tmp/old-readme.md

Every percentage of the old README's two ``tf-cpu`` tables (the cosine grid, and the constant
against the cosine schedule) must equal the CSV's fraction, every "–" an empty cell, and the
"reached" column of the CSVs (the command's own ``target``) must say what the old tables said.
The multiple pattern NTM's medians come from the old README's prose and are checked against it.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASKS = {"copy": "tf_copy", "repeat copy": "tf_repeat_copy", **{f"pattern {k}": f"tf_pattern{k}" for k in range(1, 6)},
         "multiple pattern 3": "tf_multiple_pattern3", "multiple pattern 4": "tf_multiple_pattern4",
         "variable pattern 1": "tf_variable_pattern1"}


def summary(folder: str) -> dict:
    with open(HERE / folder / "reproduction_summary.csv", newline="") as file:
        return {(row["task"], row["model"]): row for row in csv.DictReader(file)}


def table_rows(readme: str, header_start: str) -> list[list[str]]:
    """The cells of the Markdown table whose header starts with ``header_start``."""
    rows = []
    for line in readme[readme.index(header_start):].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def percentages(cell: str) -> list[float]:
    """``**0.19 %** (51.9, 75.9)`` → [0.0019, 0.519, 0.759]."""
    numbers = re.findall(r"[\d.]+", cell.replace("%", ""))
    return [float(n) / 100 for n in numbers]


def same(expected: list[float], row: dict, lengths: tuple[int, ...]) -> None:
    got = [float(row[f"error_at_{n}"]) for n in lengths[:len(expected)]]
    assert all(abs(a - b) < 1e-12 for a, b in zip(got, expected)), (row["task"], row["model"], got, expected)


def main(readme_path: str) -> None:
    readme = Path(readme_path).read_text()
    cosine, constant = summary("tf-cpu-cosine"), summary("tf-cpu-constant")
    checked = 0
    for cells in table_rows(readme, "| task | NTM | pattern NTM | LSTM | GRU |"):
        task = TASKS[cells[0]]
        for model, cell in zip(("ntm", "pattern_ntm", "lstm", "gru"), cells[1:5]):
            if cell == "–":
                assert (task, model) not in cosine, (task, model)
                continue
            same(percentages(cell), cosine[task, model], (15, 25, 40))
            checked += len(percentages(cell))
        reached = {m for m in ("ntm", "pattern_ntm") if cosine.get((task, m), {}).get("reached") == "yes"}
        word = cells[6]
        expected = {"yes": {"ntm"}, "no": set(), "both": {"ntm", "pattern_ntm"}, "neither": set()}[word]
        assert reached == expected, (task, reached, word)
    for cells in table_rows(readme, "| task | NTM constant | NTM cosine |"):
        task = TASKS[cells[0]]
        for model, table, cell in (("ntm", constant, cells[1]), ("ntm", cosine, cells[2]),
                                   ("pattern_ntm", constant, cells[3]), ("pattern_ntm", cosine, cells[4])):
            if cell == "–":
                assert (task, model) not in table, (task, model)
                continue
            same(percentages(cell), table[task, model], (15, 25))
            checked += len(percentages(cell))
        before, after = cells[5].replace("*", "").split(" → ")
        for words, table in ((before, constant), (after, cosine)):
            reached = {m for m in ("ntm", "pattern_ntm") if table.get((task, m), {}).get("reached") == "yes"}
            expected = {"NTM yes": {"ntm"}, "yes": {"ntm"}, "NTM no": set(), "no": set(),
                        "both": {"ntm", "pattern_ntm"},
                        "neither": set(), "pattern NTM": {"pattern_ntm"}}[words.strip()]
            assert reached == expected, (task, reached, words)
    prose = re.search(r"9\.8 % at 15 \(([\d.]+) % at 25\) on\s+multiple pattern 3 and ([\d.]+) % \(([\d.]+) %\)",
                      readme)
    same([0.098, float(prose.group(1)) / 100], cosine["tf_multiple_pattern3", "multiple_pattern_ntm"], (15, 25))
    same([float(prose.group(2)) / 100, float(prose.group(3)) / 100],
         cosine["tf_multiple_pattern4", "multiple_pattern_ntm"], (15, 25))
    checked += 4
    print(f"{checked} numbers and every 'reached' agree with {readme_path}")


if __name__ == "__main__":
    main(sys.argv[1])
