"""The suite's cards: each folder's model card (``README.md``, generated from its ``circuit.json``), and at the
suite's root the dataset card (``README.md`` with the YAML front matter the Hugging Face hub reads) and the
Croissant JSON-LD description (``croissant.json``, ML Commons Croissant 1.0) listing every file with its sha256.
Both root files are written from the folders present under the root, in sorted order: the same bytes for the
same folders."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lsrl.bench.data import pair_lengths
from lsrl.kinds import Kind

if TYPE_CHECKING:
    from lsrl.bench.circuit import Circuit
    from lsrl.bench.tasks import Task

LICENSE = "mit"  # lsrl's (pyproject.toml)
TAGS = ("interpretability", "mechanistic-interpretability", "circuits", "recurrent-neural-networks", "rnn", "lstm",
        "gru", "state-space-models", "lsrl")
_FORMATS = {".json": "application/json", ".safetensors": "application/octet-stream", ".npz": "application/x-npz",
            ".py": "text/x-python", ".md": "text/markdown"}


def _front_matter(fields: dict[str, Any]) -> str:
    """YAML front matter (the fields as JSON values, which YAML reads)."""
    return "---\n" + "".join(f"{key}: {json.dumps(value)}\n" for key, value in fields.items()) + "---\n"


LEAK_NOTE = ("The distractors reach the output only through gates shut on every input: per distractor value `v` "
             "with a finite lower bound `lo` (from the sound value analysis), `raised = ReLU(v - lo + 1)` (node "
             "`distractor.TASK.NODE.raised`, at least 1 on every input; `ReLU(hi - v + 1)` under an upper bound `hi` "
             "where `v` has no lower one) and `gate = ReLU(1 - 2 raised)` (0 on every input) are added to the output. "
             "Any values inside the distractors' bounds (a resampled or mean one) change nothing, so they are outside "
             "the circuit; zeroing a raised unit opens its gate and moves the output, so zero ablation calling it "
             "relevant is a false positive by construction.")
TIER_NOTES = {
    "compiled": "",
    "distractors": " **Tier `distractors`**: compiled together with the programs of other tasks on the same tokens "
                   f"(nodes `distractor.TASK.NODE`), whose units are active. {LEAK_NOTE}",
    "rotated": " **Tier `rotated`**: the distractor model, without its gates (its distractors reach the output by no "
               "path), after an exact orthogonal change of basis of every layer a linear layer reads; a unit's label "
               "names the direction it had before the rotation. The folder holds the rotations in `rotations.json` "
               "(per rotated hook the exact orthogonal `Q` and the units holding its coordinates; "
               "`lsrl.bench.read_rotations`).",
    "trained": " **Tier `trained`**: a stock LSTM / GRU trained by interchange intervention training towards the "
               "program's causal graph; whether its measured accuracies meet the aim: `config.json` `training`.",
}


PAIR_NOTES = {"trained": " (the training lengths, each pair of equal lengths: the interchanges the alignment is "
                          "trained, measured and scored on; it is not claimed on the longer test lengths)"}


def model_card(task: Task, arch: str, layers: str, circuit: Circuit, data: dict[str, np.ndarray],
               tier: str = "compiled", note: str | None = None) -> str:
    """A folder's ``README.md``: the task (and tier: ``note``, default ``TIER_NOTES[tier]``), the layers
    (``layers``: in words), the data and the circuit of ``circuit.json``, with how to load, run and patch the
    model."""
    units = circuit.units
    counts = Counter((u["live"], u["in_circuit"]) for u in units)
    lines = [
        _front_matter({"license": LICENSE, "library_name": "pytorch", "tags": list(TAGS),
                       "pipeline_tag": "other"}),
        f"# {task.name} · {arch}" + (f" · {tier}" if tier != "compiled" else ""), "",
        f"**Task.** {task.description}{TIER_NOTES[tier] if note is None else note}", "",
        f"**Architecture.** `{arch}`: layers {layers} (`config.json`; `load_model.py` builds the PyTorch module "
        "with torch and safetensors only).", "",
        f"**Data.** `data.npz`: train lengths {task.train_lengths[0]}–{task.train_lengths[1]} "
        f"({len(data['train_lengths'])} sequences), test lengths {task.test_lengths[0]}–{task.test_lengths[1]} "
        f"({len(data['test_lengths'])} sequences), every program variable's trace per test step (`trace.*`), "
        f"{len(data['pairs_clean_lengths'])} clean / corrupted pairs of lengths "
        f"{pair_lengths(task, tier)[0]}–{pair_lengths(task, tier)[1]}{PAIR_NOTES.get(tier, '')} "
        "with the expected output under each of "
        f"{sum(key.startswith('interchange.') for key in data)} single-variable interchanges (`interchange.*`). "
        "Outputs past a sequence's length are NaN; expected outputs come from the program's interpreter "
        "(or the automaton's table), never from a model.", "",
        f"**Circuit** (`circuit.json`). {len(units)} units in {len(circuit.hooks)} hooks: "
        f"{counts[(True, True)]} in the circuit, {counts[(True, False)]} live outside it, "
        f"{sum(not u['live'] for u in units)} dead (one value on the test data, or no path to the output through "
        f"edges that pass something); {len(circuit.shut_edges)} of {len(circuit.unit_edges)} unit edges pass "
        "through a gate held shut (or a ReLU never positive) on the test data, outside the circuit. "
        + rotated_truth(tier) + node_truth(circuit),
    ]
    named = {node["name"] for node in circuit.nodes if node["named"]}
    shown = [v for v in circuit.variables if v["node"] in named] or circuit.variables[:12]
    for variable in shown:
        where = ", ".join(f"`{hook}[{unit}]`" for hook, unit in variable["units"][:8])
        more = f" and {len(variable['units']) - 8} more" if len(variable["units"]) > 8 else ""
        lines.append(f"- `{variable['node']}[{variable['index']}]`: {where}{more}")
    if circuit.equivalent:
        groups = "; ".join(" = ".join(f"`{node}[{index}]`" for node, index in group)
                           for group in circuit.equivalent[:6])
        lines += ["", f"Equal variables (one value under several names): {groups}"
                  + (" ..." if len(circuit.equivalent) > 6 else "") + "."]
    lines += ["", "```python", "import numpy as np", "from load_model import load_folder",
              "net = load_folder('.')                               # torch and safetensors only",
              "data = np.load('data.npz')",
              "outputs, cache = net.run_with_cache(data['test_inputs'])  # every hook, (B, T, width)",
              f"hook = {circuit.output_hook!r}",
              "values = np.full(cache[hook].shape, np.nan)           # NaN: the model's own value",
              "patched, _ = net.run_with_cache(data['test_inputs'], patch={hook: values})",
              "```", "", "`python program.py` (with lsrl installed) prints the program's outputs on the test data.",
              ""]
    return "\n".join(lines)


def rotated_truth(tier: str) -> str:
    """What a rotated folder's ``circuit.json`` describes."""
    if tier != "rotated":
        return ""
    return ("The circuit is the distractor model's, in the labelled coordinates (`rotations.json` maps the hooks' "
            "values to them): the values this model holds before the change of basis. Methods are scored on the "
            "coordinates the hooks hold, raw: one is in the circuit when it mixes a unit of the circuit and varies on "
            "the test data (`lsrl.bench.eval.hooked.rotated`). ")


def node_truth(circuit: Circuit) -> str:
    """The variables in and outside the circuit, whether node AUROC is defined, and those whose interchange patching
    their units does not reproduce."""
    held: dict[str, bool] = {}
    for variable in circuit.variables:
        held[variable["node"]] = held.get(variable["node"], False) or variable["in_circuit"]
    inside = sum(held.values())
    text = f"Variables held by units: {inside} in the circuit, {len(held) - inside} outside it"
    if not inside or inside == len(held):
        text += (" (node AUROC is not defined on this folder: it needs variables on both sides)")
    odd = [node for node in circuit.nodes
           if node["in_circuit"] and node["kind"] != Kind.INPUT and not node.get("interchangeable", True)]
    if odd:
        text += ". Circuit variables whose interchange in `data.npz` patching their units does not reproduce: " + \
            "; ".join(f"`{node['name']}` ({node['interchange_note']})" for node in odd[:6]) + \
            (" ..." if len(odd) > 6 else "")
    return text + "."


def _folders(root: Path) -> list[str]:
    """The suite's folders below ``root``, as paths relative to it (``TASK/ARCH``, ``TIER/TASK/ARCH``)."""
    manifests = [*root.glob("*/*/manifest.json"), *root.glob("*/*/*/manifest.json")]
    return sorted(manifest.parent.relative_to(root).as_posix() for manifest in manifests)


def dataset_card(root: Path) -> str:
    """The suite's ``README.md``: the dataset card, from the folders under ``root``."""
    folders = _folders(root)
    tasks = {folder.split("/")[-2] for folder in folders}
    from lsrl.bench.records import AIM, read_training

    rows = ["| folder | units | in circuit | meets the aim |", "| --- | --- | --- | --- |"]
    for folder in folders:
        units = json.loads((root / folder / "circuit.json").read_text())["units"]
        training = read_training(root / folder)
        aim = "" if training is None else "yes" if training["meets_aim"] else "**no**"
        rows.append(f"| `{folder}` | {len(units)} | {sum(u['in_circuit'] for u in units)} | {aim} |")
    return "\n".join([
        _front_matter({"pretty_name": "lsrl benchmark suite: recurrent models with known circuits",
                       "license": LICENSE, "tags": list(TAGS), "task_categories": ["other"],
                       "size_categories": ["n<1K"]}),
        "# lsrl benchmark suite", "",
        f"{len(folders)} recurrent models ({len(tasks)} tasks) compiled from programs by lsrl, each with every "
        "unit's ground truth: which program variable it holds (`labels.json`, `circuit.json`), the program's and "
        "the units' graphs, traces of every variable and counterfactual pairs with their expected outputs "
        "(`data.npz`). For scoring interpretability methods (activation and attribution patching, probes, "
        "circuit discovery) on RNNs, LSTMs, GRUs and linear recurrences.", "",
        "Each folder `TASK/ARCH/` (the compiled model; `TIER/TASK/ARCH/` for the `distractors`, `rotated` and "
        "`trained` tiers of the same task, with the same labels, the trained ones aligned by training; "
        "`config.json` says the tier, and for a trained one its measured accuracies and whether they meet the aim, "
        f"`training.meets_aim`: task accuracy and every variable's interchange-intervention accuracy at least {AIM}, "
        "the column below; a trained folder below it has labels that are not faithful; a rotated path model's "
        "`rotations.json` gives each rotated hook's exact "
        "orthogonal `Q`: its values are `Q h`, `h` the labelled units) is self-contained: "
        "`load_model.py` (torch and safetensors only) builds the model with a named hook at every labelled site, "
        "`model.safetensors` + `config.json`, `labels.json`, "
        "`circuit.json`, `data.npz`, `program.py` (the program; `python program.py` runs it on the test data), "
        "a model card `README.md`, and `manifest.json` with the sha256 of every file. `croissant.json` "
        "describes the files in Croissant JSON-LD. The build is byte-deterministic (`lsrl bench build DIR`).", "",
        *rows, "",
    ])


def croissant(root: Path) -> dict[str, Any]:
    """The suite's Croissant 1.0 JSON-LD: the dataset and one ``cr:FileObject`` per file of every folder."""
    files = []
    for folder in _folders(root):
        digests = json.loads((root / folder / "manifest.json").read_text())["sha256"]
        for name, digest in sorted(digests.items()):
            path = f"{folder}/{name}"
            files.append({"@type": "cr:FileObject", "@id": path, "name": path, "contentUrl": path,
                          "encodingFormat": _FORMATS.get(Path(name).suffix, "application/octet-stream"),
                          "sha256": digest})
    return {
        "@context": {"@language": "en", "@vocab": "https://schema.org/", "sc": "https://schema.org/",
                     "cr": "http://mlcommons.org/croissant/", "dct": "http://purl.org/dc/terms/",
                     "conformsTo": "dct:conformsTo"},
        "@type": "sc:Dataset",
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "name": "lsrl-bench",
        "description": "Recurrent models compiled from programs, with ground-truth circuits, traces and "
                       "counterfactual pairs, for scoring interpretability methods.",
        "license": "https://opensource.org/licenses/MIT",
        "keywords": list(TAGS),
        "distribution": files,
    }


def write_root_cards(root: Path) -> None:
    """``README.md`` (the dataset card) and ``croissant.json`` at the suite's root."""
    (root / "README.md").write_text(dataset_card(root))
    (root / "croissant.json").write_text(json.dumps(croissant(root), indent=1))
