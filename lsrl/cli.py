"""The ``lsrl`` command: demo, compile, run, inspect, experiment noise, and the LLRNN group ``llrnn``.

Errors an LSRL user can cause are printed as one line (``Error: ...``), bugs with their traceback
(``lsrl.cli_errors``); what a program file raises is the program's (``lsrl.cli_program``). This module
imports only click and lsrl's light modules: each command imports what it uses (numpy, the compiler,
torch), so ``lsrl --version`` and every ``--help`` start quickly (``benchmarks/cli_startup.py``).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import lsrl
from lsrl.cli_errors import ReportingGroup, first_line
from lsrl.errors import InternalError, LsrlError, SequenceError
from lsrl.grid import grid_options
from lsrl.workers import MAX_WORKERS

if TYPE_CHECKING:
    import numpy as np

# The choices of the options, here so that --help imports no target: lsrl.targets.ARCHITECTURES,
# lsrl.targets.STOCK and lsrl.hf.ARCHITECTURES (tests/test_habits.py keeps them equal)
ARCHITECTURES = ("linear_rnn", "gated_linear_rnn", "diagonal_linear_rnn", "rnn", "gated_rnn", "gru", "lstm", "hawk",
                 "griffin", "stock_lstm", "stock_gru")
STOCK = ("stock_lstm", "stock_gru")
HF_ARCHITECTURES = ("hf-mamba", "hf-mamba2", "hf-hawk", "hf-griffin")


class LazyGroup(ReportingGroup):
    """The commands of the group at ``source`` (``"module:attribute"``), imported when one is looked up.

    Its ``--help`` lists them from ``summaries`` (each command's first sentence) without importing the
    module: ``lsrl llrnn --help`` needs no torch.
    """

    def __init__(self, name: str, source: str, summaries: dict[str, str], **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.source = source
        self.summaries = summaries

    @functools.cached_property
    def imported(self) -> click.Group:
        """The group at ``source``, imported."""
        module, _, attribute = self.source.partition(":")
        return getattr(importlib.import_module(module), attribute)

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        return self.imported.commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        """click.Group.__init__ assigns an empty dict here: the commands are the imported group's."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.summaries)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listing = click.Group(commands=[click.Command(name, help=text) for name, text in self.summaries.items()])
        listing.format_commands(ctx, formatter)


def _prepare_export(model: lsrl.CompiledProgram, target: str, max_len: int | None, onnx_dtype: str,
                    allow_inexact: bool, generate: bool = False, words_file: str | None = None
                    ) -> tuple[str, Callable[[Path], object]]:
    """Build and check the ``target`` module before anything is written; returns (file name, writer)."""
    if target in HF_ARCHITECTURES:
        return target, _prepare_hf(model, target, max_len, onnx_dtype, generate, words_file)
    from lsrl.targets.onnx_export import ARCHS, check_precision, export_onnx

    literal = max_len is not None and target in ("hawk", "griffin")  # App. E: a convolution max_len steps long
    options = {"max_len": max_len, "construction": "app_e"} if literal else {}
    if target in STOCK:  # one stock LSTM / GRU in the ONNX dtype, its scales from the bounds at --max-len
        from lsrl.targets.stock import StockRNNModel, export_stock_onnx, stock_dtype

        if max_len is None:
            raise LsrlError(f"--target {target} needs --max-len (the longest sequence: the scales come from the "
                            "value bounds at that length)")
        # float32 files run in onnxruntime: the tolerance charges its activations (float64: no onnxruntime kernels)
        runtime = "onnxruntime" if onnx_dtype == "float32" else "torch"
        stock = model.to_torch(target, max_len=max_len, dtype=stock_dtype(onnx_dtype), runtime=runtime)
        if not isinstance(stock, StockRNNModel):
            raise InternalError(f"--target {target}: to_torch built a {type(stock).__name__}, not a stock model")
        return f"{target}.onnx", lambda path: export_stock_onnx(stock, path)
    module = model.to_torch(target, **options)
    if target in ARCHS and not literal:
        check_precision(module, target, onnx_dtype, allow_inexact)
        return f"{target}.onnx", lambda path: export_onnx(module, path, target, onnx_dtype, allow_inexact)
    from safetensors.torch import save_file  # no ONNX operators for these: the torch module's weights

    from lsrl.model.writing import written

    metadata = {"architecture": target, **{key: str(value) for key, value in options.items()}}
    weights = {name: tensor.detach().contiguous() for name, tensor in module.state_dict().items()}

    def write_weights(path: Path) -> None:
        with written(path, "lsrl compile --target") as partial:  # whole or not at all, as model.save writes
            save_file(weights, str(partial), metadata=metadata)

    return f"{target}.safetensors", write_weights


def _prepare_hf(model: lsrl.CompiledProgram, target: str, max_len: int | None, dtype: str, generate: bool,
                words_file: str | None) -> Callable[[Path], None]:
    """The stock transformers model of ``target`` (a next-token head with ``generate``), and its tokenizer's
    words from ``words_file``, built and checked; returns the writer of its folder."""
    if max_len is None:
        raise LsrlError(f"--target {target} needs --max-len (the longest sequence the model must run exactly)")
    hf_model = model.to_hf(target.removeprefix("hf-"), max_len=max_len, dtype=dtype, generate=generate)
    words = None if words_file is None else _read_words(words_file)
    if words is not None:
        from lsrl.hf.tokenizer import tokenizer

        try:
            tokenizer(hf_model, words)  # checked before anything is written
        except LsrlError as error:
            raise LsrlError(f"--words {words_file}: {error}") from None

    def write_hf(path: Path) -> None:
        lsrl.hf.save(hf_model, path, words=words)

    return write_hf


def _read_words(path: str) -> dict:
    """The ``{word: token}`` map in the JSON file of ``--words``; ``LsrlError`` naming the file where it is no
    JSON object."""
    import json

    try:
        words = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # unreadable, not UTF-8, not JSON
        raise LsrlError(f"--words {path}: expected a JSON object of word -> token, could not read it "
                        f"({first_line(error)})") from None
    if not isinstance(words, dict):
        raise LsrlError(f"--words {path}: expected a JSON object of word -> token, got a JSON {type(words).__name__}")
    return words


def _require_hf_target(target: str, generate: bool, words_file: str | None) -> None:
    """``--generate`` and ``--words`` are options of a stock transformers folder (``--target hf-*``)."""
    given = [option for option, value in (("--generate", generate), ("--words", words_file)) if value]
    if given and target not in HF_ARCHITECTURES:
        raise LsrlError(f"{given[0]} is an option of a stock transformers folder: it needs --target one of "
                        f"{', '.join(HF_ARCHITECTURES)}, got --target {target}")


@click.group(cls=ReportingGroup)
@click.version_option(lsrl.__version__, prog_name="lsrl")
@click.option("--debug", is_flag=True, help="print the traceback of every error, a mistake's too")
def main(debug: bool) -> None:
    """LSRL: programs that run exactly inside recurrent neural networks."""


@main.command()
@click.option("--plots", default="lsrl-demo", show_default=True, type=click.Path(file_okay=False),
              help="folder for the plots (heat maps, error against grid size, streaming)")
def demo(plots: str) -> None:
    """Compile and run the more-ones-than-zeros program and both universal approximators."""
    from lsrl.demo import main as run_demo

    sys.exit(run_demo(plots))


@main.command(name="compile")
@click.argument("source")
@click.option("--backend", type=click.Choice(["exact", "float"]), default="exact", show_default=True)
@click.option("--target", type=click.Choice(["path", *ARCHITECTURES, *HF_ARCHITECTURES]), default="path",
              show_default=True,
              help="also export this architecture: TARGET.onnx where ONNX has the operators (rnn, gated_rnn, gru, "
                   "lstm, diagonal_linear_rnn, hawk, griffin), else the torch module's weights as TARGET.safetensors; "
                   "hf-*: a stock transformers model in the folder TARGET (from_pretrained loads it)")
@click.option("--max-len", type=click.IntRange(min=1), default=None,
              help="hawk / griffin: use the literal App. E construction, accepting inputs up to this length; "
                   "stock_lstm / stock_gru and hf-* (required): the longest sequence the model runs exactly")
@click.option("--onnx-dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True,
              help="ONNX element type (onnxruntime runs float32 only for the RNN / GRU / LSTM operators); "
                   "hf-*: the model's dtype")
@click.option("--allow-inexact", is_flag=True,
              help="export ONNX even where the weights are too large for --onnx-dtype (e.g. lambda=1e10 in float32)")
@click.option("--generate", is_flag=True,
              help="hf-*: a next-token head for a token program (one integer input and output): the argmax of the "
                   "logits is the program's output token, so generate() continues a prompt with its outputs")
@click.option("--words", "words_file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="hf-*: a JSON file {word: token} naming every token of the program in the folder's tokenizer "
                   "(default: the token numbers)")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
def compile_command(source: str, backend: str, target: str, max_len: int | None, onnx_dtype: str,
                    allow_inexact: bool, generate: bool, words_file: str | None, out_dir: str) -> None:
    """Compile a program (FILE.py[:name]) and write safetensors + JSON to OUT_DIR.

    OUT_DIR is written as a unit (an earlier model there is replaced whole, with no file of it left)."""
    from lsrl.cli_program import load_program
    from lsrl.model.saving import write_files
    from lsrl.model.folders import replaced_folder

    _require_hf_target(target, generate, words_file)
    program = load_program(source)
    model = lsrl.compile(program, backend=backend)
    export = (_prepare_export(model, target, max_len, onnx_dtype, allow_inexact, generate, words_file)
              if target != "path" else None)
    name, write = export or (None, None)
    with replaced_folder(out_dir, "lsrl compile") as staging:
        write_files(model, staging)
        if name and write:
            write(staging / name)
    click.echo(model.summary())
    if name:
        click.echo(f"wrote {Path(out_dir) / name}")
    click.echo(f"wrote {out_dir}")


@main.command()
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--input", "input_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help=".npy array or text file (one step per line, values separated by spaces)")
@click.option("--exact", is_flag=True, help="exact rational outputs (exact-backend models)")
@click.option("--no-check-bounds", is_flag=True, help="run on inputs outside the Input's declared bounds")
def run(model_dir: str, input_file: str, exact: bool, no_check_bounds: bool) -> None:
    """Run a compiled model on an input sequence and print its outputs."""
    import numpy as np

    model = lsrl.load(model_dir)
    outputs = model(_read_sequence(input_file), exact=exact, check_bounds=not no_check_bounds)
    for row in np.asarray(outputs).reshape(-1, outputs.shape[-1]):
        click.echo(" ".join(str(v) for v in row))


def _read_sequence(path: str) -> np.ndarray:
    """The sequence in the file of ``--input``: a ``.npy`` array, else text (one step per line, values separated
    by spaces, ``#`` comments); one that cannot be read or holds no step is a ``SequenceError`` naming the file."""
    import warnings

    import numpy as np

    expected = "a .npy array, or a text file with one step per line, values separated by spaces"
    try:
        if path.endswith(".npy"):
            with open(path, "rb") as file:  # read as an array file only (np.load would try unpickling others)
                xs = np.lib.format.read_array(file, allow_pickle=False)
        else:
            with warnings.catch_warnings():  # an empty text file is refused below, not warned about
                warnings.simplefilter("ignore", UserWarning)
                xs = np.loadtxt(path, ndmin=2)
    except (ValueError, EOFError, OSError) as error:  # unreadable: a corrupt .npy, a binary or ragged text file
        raise SequenceError(f"--input {path}: cannot read a sequence ({first_line(error)}); "
                            f"expected {expected}") from None
    if xs.size == 0:
        raise SequenceError(f"--input {path}: the file holds no step; expected {expected}")
    return xs


@main.command()
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--max-len", type=click.IntRange(min=1), default=None,
              help="hawk / griffin rows: the literal App. E construction for inputs up to this length")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None,
              help="also draw the model's layers, units and weights to this file (.png, .svg, .pdf; .svg zooms)")
def inspect(model_dir: str, max_len: int | None, plot_file: str | None) -> None:
    """Per architecture: layers, hidden sizes, non-zero parameters."""
    from lsrl.plot import check_plot_path, plot_model
    from lsrl.targets import inspect as describe

    if plot_file:
        check_plot_path(plot_file)  # before the tables: a path it cannot write is refused first
    model = lsrl.load(model_dir)
    click.echo(describe(model, max_len=max_len))
    if plot_file:
        plot_model(model, plot_file)
        click.echo(f"wrote {plot_file}")


@main.group()
def experiment() -> None:
    """Reproducible studies."""


@experiment.command(name="noise")
@click.option("-o", "--output", "out_dir", default="noise", show_default=True, type=click.Path(file_okay=False))
@grid_options(workers=2)
@click.option("--quick", is_flag=True, help="A tiny protocol (2 targets / maps, n = 3) that runs in seconds.")
def noise_command(out_dir: str, workers: int, ray_address: str | None, quick: bool) -> None:
    """Parameter noise (Fig 4) on both approximators: all ifelse variants, the paper's constants and
    the robust construction (CSV, survival table, strip plots)."""
    from lsrl.experiments import noise

    rows = noise.run(out_dir, protocol=noise.QUICK if quick else noise.Protocol(), workers=workers,
                     ray_address=ray_address)
    click.echo(noise.summary_markdown(rows))
    files = ("noise.csv", "survival.csv", "summary.md", "noise_continuous.png", "noise_discrete.png")
    click.echo(f"wrote {', '.join(str(Path(out_dir) / name) for name in files)}")


@main.group()
def bench() -> None:
    """The benchmark suite of compiled models with known circuits."""


# lsrl.bench imports torch: the tiers of its folders (lsrl.bench.tiers.FOLDER_TIERS, kept equal by tests/test_habits.py)
BUILD_TIERS = ("compiled", "distractors", "rotated", "trained", "all")
# the trained tier's architectures: lsrl.bench.build.TRAINED_ARCHS, then lsrl.bench.training.hf.HF_ARCHS (stock
# transformers models; tests/test_bench_hf.py keeps them equal)
TRAINED_ARCHS = ("lstm", "gru", "mamba", "mamba2", "hawk", "griffin")
TRAINED_ARCH_HELP = ("an architecture of the trained tier (repeatable; default: lstm and gru; mamba, mamba2, hawk, "
                     "griffin: stock transformers models, lsrl[hf])")


@bench.command(name="build")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--task", "tasks", multiple=True, help="only this task (repeatable; default: all)")
@click.option("--tier", "tiers", multiple=True, type=click.Choice(BUILD_TIERS),
              help="write this tier (repeatable; default: compiled; all: every tier a task has); others go to "
                   "OUT_DIR/TIER/TASK/ARCH")
@click.option("--steps", default=600, show_default=True, type=click.IntRange(min=1),
              help="training steps per model of the trained tier")
@click.option("--arch", "archs", multiple=True, type=click.Choice(TRAINED_ARCHS), help=TRAINED_ARCH_HELP)
@grid_options(workers=1)
def bench_build(out_dir: str, tasks: tuple[str, ...], tiers: tuple[str, ...], steps: int,
                archs: tuple[str, ...], workers: int, ray_address: str | None) -> None:
    """Write one folder per task and architecture to OUT_DIR (weights, config, labels, data, model card);
    a run per task and tier."""
    from lsrl.bench import build_suite

    folders = build_suite(out_dir, tasks or None, tiers=tiers or ("compiled",), train_steps=steps,
                          trained_archs=archs or TRAINED_ARCHS[:2], workers=workers, ray_address=ray_address)
    click.echo(f"wrote {len(folders)} models to {out_dir}")
    if "trained" in tiers or "all" in tiers:
        _say_aim(folders)


def _say_aim(folders: list[Path]) -> None:
    """A line on the trained folders that miss the aim (``lsrl.bench.records.AIM``), whose labels are not
    faithful; or that every one meets it."""
    from lsrl.bench.records import AIM, below_aim, read_training

    trained = [folder for folder in folders if read_training(folder) is not None]
    missed = below_aim(trained)
    if missed:
        click.echo(f"warning: {len(missed)} of {len(trained)} trained folders miss the aim (task accuracy and every "
                   f"variable's interchange-intervention accuracy >= {AIM}; config.json 'meets_aim' false: their "
                   f"labels are not faithful): {'; '.join(missed)}", err=True)
    elif trained:
        click.echo(f"all {len(trained)} trained folders meet the aim (accuracies >= {AIM})")


# lsrl.bench.eval imports torch: its method and tier names, kept equal to METHODS and TIERS by tests/test_habits.py
EVAL_METHODS = ("resample", "mean", "zero", "attribution", "probe", "path_patching", "acdc", "edge_attribution", "das",
                "random")
EVAL_TIERS = ("compiled", "distractors", "rotated")


@bench.command(name="eval")
@click.argument("folder", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--method", required=True, type=click.Choice(EVAL_METHODS),
              help="the method to score (every one on every model but path_patching and acdc: path models only)")
@click.option("--task", default=None, help="score on this task's tier model instead of a FOLDER")
@click.option("--tier", default=None, type=click.Choice(EVAL_TIERS),
              help="with --task: the tier (default: distractors); with a FOLDER: must be the folder's own")
@click.option("--arch", default=None, type=click.Choice(["path", *ARCHITECTURES]),
              help="with --task: the path model (default) or a torch target; with a FOLDER: must be the folder's own")
@click.option("--pairs", default=32, show_default=True, type=click.IntRange(min=2), help="clean/corrupted pairs")
def bench_eval(folder: str | None, method: str, task: str | None, tier: str | None, arch: str | None,
               pairs: int) -> None:
    """Score an interpretability METHOD against the known circuit of a suite FOLDER (or of --task's tier):
    node, unit and edge AUROC, TPR / FPR, interchange accuracy."""
    from lsrl.bench.eval import COLUMNS, evaluate, tier_subject
    from lsrl.bench.eval.hooked import HookedSubject
    from lsrl.bench.tiers import tier_model

    if task is not None and folder is None:
        subject = tier_subject(tier_model(task, tier or "distractors"), arch or "path")
    elif folder is not None and task is None:  # the folder says its tier and architecture: an option naming
        subject = HookedSubject.from_folder(folder, tier=tier, arch=arch)  # another is refused, not ignored
    else:
        raise LsrlError("lsrl bench eval: give a suite FOLDER or --task, not both")
    row = evaluate(subject, method, pairs)
    for column in COLUMNS:
        click.echo(f"{column}: {_rounded(row[column])}")


def _rounded(value: object) -> object:
    """A score as printed: a float to 4 decimals, anything else as it is."""
    return round(value, 4) if isinstance(value, float) else value


def _program_tasks(tasks: tuple[str, ...], command: str) -> None:
    """Refuse, before any work, a --task that is no program task of the suite."""
    from lsrl.bench import TASKS

    unknown = [task for task in tasks if task not in TASKS or TASKS[task].build is None]
    if unknown:
        raise LsrlError(f"lsrl bench {command}: --task {unknown[0]!r} is not a program task of the suite "
                        f"(see lsrl.bench.TASKS)")


@bench.command(name="eval-all")
@click.option("-o", "--output", "out_dir", default="docs/results/bench", show_default=True,
              type=click.Path(file_okay=False), help="writes eval.csv, eval_summary.csv and eval.png here")
@click.option("--task", "tasks", multiple=True, help="only this task (repeatable; default: ten token tasks)")
@click.option("--tier", "tiers", multiple=True, type=click.Choice(EVAL_TIERS), help="only this tier (repeatable)")
@click.option("--method", "methods", multiple=True, type=click.Choice(EVAL_METHODS),
              help="only this method (repeatable)")
@click.option("--pairs", default=32, show_default=True, type=click.IntRange(min=2), help="clean/corrupted pairs")
@click.option("--suite", default=None, type=click.Path(file_okay=False),
              help="score the folders of this suite (those missing are built there; default: a temporary one)")
@grid_options(workers=1)
def bench_eval_all(out_dir: str, tasks: tuple[str, ...], tiers: tuple[str, ...], methods: tuple[str, ...], pairs: int,
                   suite: str | None, workers: int, ray_address: str | None) -> None:
    """Every method × tier × architecture on the tasks (a run per task and tier), each scored on its built folder
    against its circuit.json: the results table (CSV), its summary and a plot."""
    from lsrl.bench.eval.harness import (DEFAULT_TASKS, SUMMARY_COLUMNS, evaluate_all, plot_summary, summary,
                                         write_csv)

    _program_tasks(tasks, "eval-all")
    chosen = {"tiers": tiers} if tiers else {}
    chosen |= {"methods": methods} if methods else {}
    rows = evaluate_all(tasks or DEFAULT_TASKS, pairs=pairs, progress=True, workers=workers, ray_address=ray_address,
                        suite=suite, **chosen)
    table = summary(rows)
    folder = Path(out_dir)
    written = [write_csv(rows, folder / "eval.csv"), write_csv(table, folder / "eval_summary.csv", SUMMARY_COLUMNS),
               plot_summary(table, folder / "eval.png")]
    click.echo(f"wrote {', '.join(str(path) for path in written)}")


@bench.command(name="score")
@click.argument("submission", type=click.Path(exists=True, dir_okay=False))
@click.argument("suite", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "out_dir", default="score", show_default=True, type=click.Path(file_okay=False),
              help="writes score.csv and .eval_results/lsrl_bench.yaml (Hugging Face's eval results) here")
@click.option("--pairs", default=32, show_default=True, type=click.IntRange(min=2), help="clean/corrupted pairs")
def bench_score(submission: str, suite: str, out_dir: str, pairs: int) -> None:
    """Score a method of your own: SUBMISSION (JSON of scores per folder, docs/bench.md) against the circuits of
    SUITE (a folder lsrl bench build wrote). Checks the whole submission first (one line per problem)."""
    from lsrl.bench.eval.submission import (SCORE_COLUMNS, eval_results_yaml, problems, read_submission,
                                            score_submission)
    from lsrl.bench.eval.harness import write_csv

    stored = read_submission(submission)
    found = problems(stored, suite)
    if found:
        for problem in found:
            click.echo(f"{submission}: {problem}", err=True)
        raise click.exceptions.Exit(2)
    rows = score_submission(stored, suite, pairs)
    for row in rows:
        click.echo(", ".join(f"{column} {_rounded(row[column])}" for column in
                             ("folder", "method", "node_auroc", "unit_auroc", "edge_auroc", "cpr", "cmd")))
    folder = Path(out_dir)
    results = folder / ".eval_results" / "lsrl_bench.yaml"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(eval_results_yaml(rows), encoding="utf-8")
    click.echo(f"wrote {write_csv(rows, folder / 'score.csv', SCORE_COLUMNS)}, {results}")


@bench.command(name="train-tier")
@click.option("-o", "--output", "out_dir", default="docs/results/bench", show_default=True,
              type=click.Path(file_okay=False), help="writes trained.csv here")
@click.option("--task", "tasks", multiple=True, help="only this task (repeatable; default: ten small tasks)")
@click.option("--steps", default=600, show_default=True, type=click.IntRange(min=1), help="training steps per model")
@click.option("--arch", "archs", multiple=True, type=click.Choice(TRAINED_ARCHS), help=TRAINED_ARCH_HELP)
@click.option("--suite", default=None, type=click.Path(file_okay=False),
              help="with a transformers --arch: also write each of their models' suite folder under SUITE/trained/")
@grid_options(workers=1)
@click.option("--jobs", default=None, type=click.IntRange(1, MAX_WORKERS), hidden=True,
              help="deprecated: the old name of --workers")
def bench_train_tier(out_dir: str, tasks: tuple[str, ...], steps: int, archs: tuple[str, ...],
                     suite: str | None, workers: int, ray_address: str | None, jobs: int | None) -> None:
    """The trained tier: stock LSTM / GRU (trained.csv) or stock transformers Mamba, Mamba-2, Hawk, Griffin
    (trained_hf.csv, whose rows of the tasks and archs run are replaced, the others kept) trained by interchange
    intervention training towards each task's causal graph; task and interchange accuracy, and the harness's unit
    AUROC on them (CSV)."""
    from lsrl.bench.eval.harness import write_csv
    from lsrl.bench.records import AIM
    from lsrl.bench.tiers import TASKS_TRAINED
    from lsrl.bench.trained_tier import TRAINED_COLUMNS, train_all, with_aim

    _program_tasks(tasks, "train-tier")
    stock = tuple(arch for arch in dict.fromkeys(archs) if arch in TRAINED_ARCHS[:2])
    hf = tuple(arch for arch in dict.fromkeys(archs) if arch not in TRAINED_ARCHS[:2])
    if jobs is not None:
        click.echo("warning: --jobs is deprecated and will be removed; use --workers", err=True)
        workers = jobs
    if suite is not None and not hf:
        raise LsrlError("lsrl bench train-tier: --suite is for a transformers --arch; give one")
    written, models = [], []
    if stock or not archs:
        chosen: dict[str, Any] = {"archs": stock} if archs else {}  # else train_all's own
        rows = train_all(tasks or TASKS_TRAINED, steps=steps, progress=True, **chosen, workers=workers,
                         ray_address=ray_address)
        written.append(write_csv(rows, Path(out_dir) / "trained.csv", TRAINED_COLUMNS))
        models += rows
    if hf:
        from lsrl.bench.trained_tier import merged_rows, train_all_hf

        table = Path(out_dir) / "trained_hf.csv"  # the rows of the tasks and archs run replace theirs, others kept

        def write(row: dict[str, object]) -> None:  # as each model is measured: a stopped run keeps its rows
            import fcntl

            table.parent.mkdir(parents=True, exist_ok=True)
            with open(table, "a") as lock:  # a run of other archs may write the table too: one at a time
                fcntl.flock(lock, fcntl.LOCK_EX)
                write_csv(with_aim(merged_rows([row], table)), table, TRAINED_COLUMNS)

        models += with_aim(train_all_hf(tasks or TASKS_TRAINED, hf, steps, suite=suite, progress=True, done=write,
                                        workers=workers, ray_address=ray_address))
        written.append(table)
    click.echo(f"wrote {', '.join(str(path) for path in written)}")
    missed = [f"{row['task']}/{row['arch']}" for row in models if not row["meets_aim"]]
    click.echo(f"{len(models) - len(missed)} of {len(models)} models meet the aim (task accuracy and every variable's "
               f"interchange-intervention accuracy >= {AIM})" + (f"; below it: {', '.join(missed)}" if missed else ""))


# lsrl.llrnn imports torch: its group is listed from these texts (tests/test_habits.py keeps them equal to the
# commands' own) and imported when one of its commands runs
LLRNN = LazyGroup(
    "llrnn", "lsrl.llrnn.cli:llrnn",
    help='LLRNN: the NTM family of "Linear logic and recurrent neural networks" and its tasks.',
    summaries={
        "sample": "Print random examples of a task: input, then the expected output.",
        "train": "Train a model on a task; write checkpoint, history, evaluation and plots to OUTPUT.",
        "experiment": "Every model on every task and seed (one CPU thread each): test errors and costs as CSV "
                      "and Markdown.",
        "reproduce": "Train models × TF tasks × seeds; the median errors beside the TF medians, plots and heat maps.",
    },
)
main.add_command(LLRNN)

if __name__ == "__main__":
    main()
