"""The ``"trained"`` tier in the stock ``transformers`` architectures: a small ``MambaForCausalLM`` or
``RecurrentGemmaForCausalLM`` (Hawk: recurrent blocks only), built from a config object, trained by interchange
intervention training towards the program's causal graph, as ``lsrl.bench.eval.trained`` trains stock LSTMs and
GRUs (InterpBench's SIIT).

The model runs one token at a time through its own cache (``lsrl.bench.hf_loader``, which is also the folder's
``load_model.py``), and the interventions set coordinates of the state it carries between steps: each circuit
variable gets its own block of ``UNITS_PER_COMPONENT[arch]`` units per component in the carried state of layer
``level`` (Mamba's ``ssm_state``, two channels of ``STATE_SIZE`` each; Hawk's RG-LRU ``recurrent_state``), where
``level`` is the number of circuit variables chained before it within one step (``variable_levels``): a linear
recurrence holds a running value, and a function of it (``more_ones`` of ``ones_minus_zeros``) is held by the
next layer's state. The model has one layer more than the highest level. Every other unit of the ``ssm_state`` /
``recurrent_state`` hooks is free and trained to be inert; the conv windows hold the layer's recent inputs
(``helper``s, not scored). The losses, one per step in turn: the task; the outputs under the interchange of a
variable's units (against ``prog(xs, patch=...)``); no change under the interchange of the free units.

``train_hf(task, arch)`` returns an ``HFTrained`` with its task accuracy and interchange-intervention accuracy
(``lsrl.bench.eval.trained.measure``); ``write_hf_folder`` writes its suite folder; ``folder_subject`` reads one
for the harness.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lsrl.bench.circuit import Circuit, equivalent_components, program_graph
from lsrl.bench.eval.trained import STEPS, _batch, _targets, measure, measured, record_training
from lsrl.bench.hf_loader import RECORD, SteppedModel
from lsrl.bench.tasks import TASKS
from lsrl.bench.tiers import TASKS_TRAINED
from lsrl.errors import InternalError, LsrlError

if TYPE_CHECKING:
    from lsrl.bench.eval.hooked import HookedSubject
    from lsrl.lang.program import ForEach

HF_ARCHS = ("mamba", "hawk")
HIDDEN = 16  # d_model; Mamba's intermediate width is twice it, Hawk's lru_width equals it
STATE_SIZE = 4  # Mamba's state entries per channel
CONV = 2  # the conv window (Mamba conv_kernel, Hawk conv1d_width): the current input and one before
UNITS_PER_COMPONENT = {"mamba": 2 * STATE_SIZE, "hawk": 4}
WINDOW = "conv_window"  # the pseudo-variable of the conv windows' units (helpers)
FREE = "free"
LR = 1e-2
HF_BATCH = 32  # sequences per Adam step (run beside their 32 sources): the stepwise stock forward is the cost
HF_PAIRS = 8  # clean / corrupted pairs of data.npz per method when the table scores the models
MAMBA_BIAS = True  # in_proj / out_proj biases: a gate silu(z) constant across tokens is one bias away


def variable_levels(program: ForEach, variables: list[tuple[str, int]]) -> dict[str, int]:
    """Per circuit variable, how many circuit variables are chained before it within one step (a state node
    reads its own past, not its present)."""
    by_name = {program.names[node]: node for node in program.nodes}
    wanted = {name for name, _ in variables}
    levels: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in levels:
            node, above, seen = by_name[name], [], set()
            stack = list(node.inputs)
            while stack:  # the circuit variables this one reads within the step (the first met on each path)
                other = stack.pop()
                if id(other) in seen or other is node:
                    continue
                seen.add(id(other))
                if program.names.get(other) in wanted:
                    above.append(level(program.names[other]))
                else:
                    stack += list(other.inputs)
            levels[name] = 1 + max(above) if above else 0
        return levels[name]

    for name in wanted:
        level(name)
    return levels


def stock_model(arch: str, vocab: int, layers: int, seed: int) -> Any:
    """A small stock model from a config object (no hub), float64, its first logits the outputs."""
    from transformers import MambaConfig, MambaForCausalLM, RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    torch.manual_seed(seed)
    if arch == "mamba":
        config = MambaConfig(vocab_size=vocab, hidden_size=HIDDEN, state_size=STATE_SIZE, num_hidden_layers=layers,
                             expand=2, conv_kernel=CONV, use_bias=MAMBA_BIAS, tie_word_embeddings=False, use_cache=True)
        return MambaForCausalLM(config).double()
    config = RecurrentGemmaConfig(vocab_size=vocab, hidden_size=HIDDEN, lru_width=HIDDEN, num_hidden_layers=layers,
                                  num_attention_heads=2, intermediate_size=4 * HIDDEN, conv1d_width=CONV,
                                  block_types=("recurrent",), logits_soft_cap=1e4, tie_word_embeddings=False,
                                  attention_window_size=16, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    return RecurrentGemmaForCausalLM(config).double()


def state_hooks(arch: str, layers: int) -> list[dict[str, Any]]:
    """The hooks of a model (``lsrl.bench.hf_loader``): per layer its conv window and carried state, then
    ``readout`` (width filled in by the caller)."""
    inner = 2 * HIDDEN if arch == "mamba" else HIDDEN
    conv, state = (inner * CONV, inner * STATE_SIZE) if arch == "mamba" else (inner * (CONV - 1), inner)
    kind = "ssm_state" if arch == "mamba" else "recurrent_state"
    hooks = []
    for layer in range(layers):
        hooks += [{"name": f"layers.{layer}.conv_state", "width": conv, "per_step": True},
                  {"name": f"layers.{layer}.{kind}", "width": state, "per_step": True}]
    return hooks


@dataclass
class HFTrained:
    """A trained stock model; ``alignment``: variable -> ``(hook, units)``; ``free``: hook -> free units."""

    task: str
    arch: str
    net: SteppedModel
    alignment: dict[str, tuple[str, list[int]]]
    free: dict[str, list[int]]
    accuracy: float = float("nan")
    interchange_accuracy: dict[str, float] | None = None
    seconds: float = 0.0
    steps: int = 0
    seed: int = 0
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def run(self, xs: torch.Tensor, units: tuple[str, list[int]] | dict[str, list[int]] | None = None,
            source: dict | None = None, grad: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(outputs, {hook: values})``; ``units`` (``(hook, units)`` of ``alignment`` or ``{hook: units}``) take
        their values in ``source`` (the hooks' values of another run) at every step inside the recurrence."""
        patch = None
        if units is not None:
            patch = {}
            for hook, chosen in (dict([units]) if isinstance(units, tuple) else units).items():
                values = torch.full_like(source[hook], float("nan"))
                values[..., chosen] = source[hook][..., chosen]
                patch[hook] = values
        return self.net.run_with_cache(xs, patch, grad=grad)

    def paired(self, base: np.ndarray, source: np.ndarray, units: dict[str, list[int]]) -> torch.Tensor:
        """The outputs on ``base`` with ``units`` set to their values on ``source`` at every step, both run in
        one batch (the source's rows first), with the autograd graph (training)."""
        count = len(base)

        def patched(hook: str, t: int, values: torch.Tensor) -> torch.Tensor:
            if hook not in units:
                return values
            values = values.clone()
            values[count:, units[hook]] = values[:count, units[hook]]
            return values

        outputs, _ = self.net.run_steps(np.concatenate([source, base]), patched)
        return outputs[count:]

    @property
    def labels(self) -> dict[str, list[tuple[str, int, str]]]:
        """The unit labels per hook: an aligned unit ``(variable, component, "value")``, a free one ``("free",
        unit, "value")`` (never in the circuit), a conv window's ``("conv_window", unit, "helper")``, the readout
        the program's output."""
        per = UNITS_PER_COMPONENT[self.arch]
        labels = {}
        for hook in self.hooks[:-1]:
            name, width = hook["name"], hook["width"]
            role = "helper" if name.endswith("conv_state") else "value"
            labels[name] = [(WINDOW if role == "helper" else FREE, unit, role) for unit in range(width)]
        for variable, (hook, units) in self.alignment.items():
            for position, unit in enumerate(units):
                labels[hook][unit] = (variable, position // per, "value")
        program = TASKS[self.task].build()
        labels["readout"] = [(program.names[program.output], k, "value") for k in range(program.output.dim)]
        return labels

    def card(self) -> str:
        """What the model card says of its training and its measured accuracies."""
        where = ", ".join(f"`{variable}` → `{hook}[{units[0]}:{units[-1] + 1}]`"
                          for variable, (hook, units) in self.alignment.items())
        kind = "MambaForCausalLM" if self.arch == "mamba" else "RecurrentGemmaForCausalLM (Hawk: recurrent blocks)"
        return (f" **Tier `trained`**: a stock `transformers` `{kind}` built from a config object and trained by "
                f"interchange intervention training ({self.steps} Adam steps, seed {self.seed}; "
                f"`lsrl.bench.hf_trained`), each circuit variable aligned with its own units of a carried state "
                f"({where}); `free` units are trained to be inert, the conv windows are helpers. Load it with "
                f"`AutoModelForCausalLM.from_pretrained` (transformers), or `load_model.py`'s `load_folder`, which "
                f"runs it token by token through its own cache with the carried states hooked. "
                f"{measured(self.accuracy, self.interchange_accuracy)}")

    def circuit(self, data: dict[str, np.ndarray]) -> Circuit:
        """The ``Circuit``: a unit is live when it is not 0 at every real test step, in the circuit when it is
        live and aligned with a circuit variable (or is the readout); no unit edges (a trained model's weights
        are all non-zero)."""
        xs = data["test_inputs"]
        real = np.arange(xs.shape[1])[None] < data["test_lengths"][:, None]
        _, cache = self.net.run_with_cache(xs)
        program = TASKS[self.task].build()
        nodes, edges = program_graph(program)
        wanted = {*self.alignment, program.names[program.output]}
        units, holders = [], {}
        for hook, labels in self.labels.items():
            active = np.abs(cache[hook].detach().double().numpy()[real]).max(axis=0) > 0
            for unit, (node, index, role) in enumerate(labels):
                live = bool(active[unit])
                in_circuit = live and role == "value" and node in wanted
                units.append({"hook": hook, "unit": unit, "node": node, "index": index, "role": role, "live": live,
                              "in_circuit": in_circuit})
                if role == "value" and node != FREE:
                    holders.setdefault((node, index), []).append([hook, unit])
        touched = {unit["node"] for unit in units if unit["in_circuit"]}
        for node in nodes:
            node["in_circuit"] = node["reaches_output"] and node["name"] in touched
        trace = program.trace(xs, check_bounds=False)
        return Circuit(task=self.task, architecture=self.arch, output_hook="readout", hooks=self.hooks, units=units,
                       nodes=nodes, edges=edges, unit_edges=[],
                       variables=[{"node": node, "index": index, "units": holders[(node, index)]}
                                  for node, index in sorted(holders)],
                       equivalent=equivalent_components(trace, real))


def train_hf(name: str, arch: str, steps: int = STEPS, seed: int = 0, batch: int = HF_BATCH, lr: float = LR
             ) -> HFTrained:
    """Train the trained tier of task ``name`` as the stock ``arch`` (``HF_ARCHS``); see the module docstring."""
    task = TASKS.get(name)
    variables = task.circuit_nodes() if task is not None else []
    largest = getattr(getattr(task, "sample", None), "largest", None)
    if not variables or largest is None or arch not in HF_ARCHS:
        raise LsrlError(f"train_hf: needs a token program task with named circuit variables and arch in {HF_ARCHS}, "
                        f"got {name!r}, {arch!r}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    program = task.build()
    levels = variable_levels(program, variables)
    layers = max(levels.values()) + 1
    hf = stock_model(arch, max(largest + 1, program.output.dim), layers, seed)
    hooks = state_hooks(arch, layers) + [{"name": "readout", "width": program.output.dim, "per_step": True}]
    hf.config.lsrl_bench = {"task": name, "architecture": arch, "tier": "trained", "token_low": 0,
                            "output_logits": list(range(program.output.dim)), "hooks": hooks}
    alignment, taken = {}, {}
    per = UNITS_PER_COMPONENT[arch]
    for variable, dim in variables:
        hook = hooks[2 * levels[variable] + 1]["name"]
        first = taken.get(hook, 0)
        alignment[variable] = (hook, list(range(first, first + dim * per)))
        taken[hook] = first + dim * per
    free = {hook["name"]: [u for u in range(hook["width"]) if u >= taken.get(hook["name"], 0)]
            for hook in hooks[1:-1:2]}
    model = HFTrained(name, arch, SteppedModel(hf), alignment, free, hooks=hooks)
    hf.train()
    optimizer = torch.optim.Adam(hf.parameters(), lr=lr)
    for step in range(steps):
        length = int(rng.integers(task.train_lengths[0], task.train_lengths[1] + 1))
        base, source = _batch(task, rng, length, batch), _batch(task, rng, length, batch)
        kind = step % 3  # task, interchange, strictness
        variable = variables[int(rng.integers(len(variables)))][0] if kind == 1 else None
        expected = _targets(program, base, source, variable)
        units = dict([model.alignment[variable]]) if kind == 1 else free if kind == 2 else {}
        outputs = model.paired(base, source, units)
        loss = ((outputs - expected) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hf.eval()
    model.accuracy, model.interchange_accuracy = measure(model, program, rng)
    model.seconds, model.steps, model.seed = time.perf_counter() - start, steps, seed
    return model


# ---- folders ------------------------------------------------------------------------------------------


def write_hf_folder(folder: Path, model: HFTrained, data: dict[str, np.ndarray], data_bytes: bytes) -> Path:
    """The suite folder of ``model``: ``save_pretrained``'s ``config.json`` (with the ``lsrl_bench`` record) and
    ``model.safetensors``, and the suite's ``load_model.py`` (``lsrl.bench.hf_loader``), ``labels.json``,
    ``circuit.json``, ``data.npz``, ``program.py``, ``README.md`` and ``manifest.json``; loaded back once."""
    from lsrl.bench import hf_loader
    from lsrl.bench.build import program_source, write_manifest
    from lsrl.bench.cards import model_card

    task = TASKS[model.task]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)
    model.net.hf.save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)  # not read: the folder's files are the manifest's
    (folder / "labels.json").write_text(json.dumps({"available": True, "hooks": model.labels}))
    circuit = model.circuit(data)
    (folder / "circuit.json").write_text(json.dumps(circuit.to_json()))
    (folder / "load_model.py").write_text(Path(hf_loader.__file__).read_text(encoding="utf-8"))
    (folder / "data.npz").write_bytes(data_bytes)
    (folder / "program.py").write_text(program_source(task))
    widths = ", ".join(f"{hook['name']}({hook['width']})" for hook in model.hooks)
    (folder / "README.md").write_text(model_card(task, model.arch, widths, circuit, data, "trained", model.card()))
    record_training(folder, model)  # the accuracies and whether they meet the aim: config.json and the card
    write_manifest(folder)
    loaded = hf_loader.load_folder(folder)
    if loaded.hook_names != [hook["name"] for hook in model.hooks]:
        raise InternalError(f"bench: the folder {folder} just written does not load back with its hooks")
    return folder


def is_hf_folder(folder: str | Path) -> bool:
    """Whether a suite folder holds a stock ``transformers`` model (its ``config.json`` has the record)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get(RECORD), dict)


def load_hf_folder(folder: Path) -> tuple[SteppedModel, Circuit]:
    """The folder's ``SteppedModel`` (``from_pretrained``) and ``Circuit``; ``ModelFileError`` naming the file when
    a file differs from the manifest or is malformed."""
    from lsrl.bench import hf_loader, standalone
    from lsrl.errors import ModelFileError

    try:
        net = hf_loader.load_folder(folder)
        standalone.verify_checksums(folder, ("labels.json", "data.npz", "circuit.json", "load_model.py"))
        circuit = Circuit.from_json(json.loads((folder / "circuit.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelFileError(f"{folder}: {' '.join(str(error).split())}"[:300]) from None
    return net, circuit


def folder_subject(folder: str | Path) -> HookedSubject:
    """A stock ``transformers`` folder of the trained tier for the harness: patched through its loader's
    ``run_with_cache``, the truth its ``circuit.json``."""
    from lsrl.bench.eval.hooked import HookedSubject

    net, circuit = load_hf_folder(Path(folder))
    program = TASKS[circuit.task].build()
    return HookedSubject.from_circuit(circuit.task, "trained", net, circuit, program, program.output.dim)


def train_all_hf(tasks: tuple[str, ...] = TASKS_TRAINED, archs: tuple[str, ...] = HF_ARCHS, steps: int = STEPS,
                 suite: str | Path | None = None, progress: bool = False) -> list[dict[str, object]]:
    """Train every task as every arch of ``HF_ARCHS``; a row per model (``TRAINED_COLUMNS``: ``hidden`` the
    carried-state units): accuracies and the harness's unit AUROC of resample / zero patching and random scores
    against the alignment. ``suite``: also write each model's folder there (``DIR/trained/TASK/ARCH``)."""
    from tqdm import tqdm

    from lsrl.bench.build import tier_folder
    from lsrl.bench.data import npz_bytes, task_data
    from lsrl.bench.eval.harness import evaluate
    from lsrl.bench.eval.hooked import HookedSubject

    rows = []
    for name in tqdm(list(tasks), desc="trained tier (transformers)", disable=not progress):
        data = task_data(TASKS[name])
        data_bytes = npz_bytes(data) if suite is not None else b""
        for arch in archs:
            model = train_hf(name, arch, steps)
            circuit = model.circuit(data)
            if suite is not None:
                write_hf_folder(tier_folder(Path(suite), name, arch, "trained"), model, data, data_bytes)
            program = TASKS[name].build()
            subject = HookedSubject.from_circuit(name, "trained", model.net, circuit, program, program.output.dim)
            accuracies = list(model.interchange_accuracy.values())
            row = {"task": name, "arch": arch, "hidden": sum(h["width"] for h in model.hooks[1:-1:2]), "steps": steps,
                   "task_accuracy": model.accuracy, "interchange_accuracy": float(np.mean(accuracies)),
                   "worst_variable": min(accuracies)}
            for method in ("resample", "zero", "random"):
                row[f"{method}_unit_auroc"] = evaluate(subject, method, HF_PAIRS)["unit_auroc"]
            row["seconds"] = round(model.seconds, 1)
            rows.append(row)
    return rows
