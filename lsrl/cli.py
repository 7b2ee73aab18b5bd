"""The ``lsrl`` command: demo, compile, run, inspect, experiment noise, and the LLRNN group ``llrnn``.

Errors an LSRL user can cause are printed as one line (``error: ...``), not as a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click
import numpy as np

import lsrl
from lsrl.cli_errors import one_line_errors
from lsrl.errors import LsrlError
from lsrl.llrnn.cli import llrnn
from lsrl.targets import ARCHITECTURES


def _load_program(spec: str) -> lsrl.ForEach:
    """``FILE.py`` or ``FILE.py:name``: a module-level ForEach (the only one, or the named one)."""
    path, _, name = spec.partition(":")
    if not Path(path).is_file():
        raise LsrlError(f"{path}: no such file")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    programs = {key: value for key, value in vars(module).items() if isinstance(value, lsrl.ForEach)}
    if name:
        if name not in programs:
            raise LsrlError(f"{path}: no module-level ForEach named {name!r} (found: {sorted(programs) or 'none'})")
        return programs[name]
    if len(programs) != 1:
        raise LsrlError(f"{path}: expected one module-level ForEach, found {sorted(programs) or 'none'}; use FILE.py:name")
    return next(iter(programs.values()))


@click.group()
def main():
    """LSRL: programs that run exactly inside recurrent neural networks."""


@main.command()
@click.option("--plots", default="lsrl-demo", show_default=True, type=click.Path(file_okay=False),
              help="folder for the plots (heat maps, error against grid size, streaming)")
@one_line_errors
def demo(plots):
    """Compile and run the more-ones-than-zeros program and both universal approximators."""
    from lsrl.demo import main as run_demo

    sys.exit(run_demo(plots))


@main.command(name="compile")
@click.argument("source")
@click.option("--backend", type=click.Choice(["exact", "float"]), default="exact", show_default=True)
@click.option("--target", type=click.Choice(["path", *ARCHITECTURES]),
              default="path", show_default=True, help="also export this architecture (ONNX for rnn/gru/lstm)")
@click.option("--max-len", type=int, default=None,
              help="hawk / griffin: use the literal App. E construction, accepting inputs up to this length")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
@one_line_errors
def compile_command(source, backend, target, max_len, out_dir):
    """Compile a program (FILE.py[:name]) and write safetensors + JSON to OUT_DIR."""
    program = _load_program(source)
    model = lsrl.compile(program, backend=backend)
    folder = model.save(out_dir)
    click.echo(model.summary())
    if target != "path":
        options = {"max_len": max_len, "construction": "app_e"} if max_len and target in ("hawk", "griffin") else {}
        module = model.to_torch(target, **options)
        if target in ("rnn", "gated_rnn", "gru", "lstm"):
            from lsrl.targets.onnx_export import export_onnx

            export_onnx(module, folder / f"{target}.onnx", target)
            click.echo(f"wrote {folder / f'{target}.onnx'}")
    click.echo(f"wrote {folder}")


@main.command()
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--input", "input_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help=".npy array or text file (one token per line, values separated by spaces)")
@click.option("--exact", is_flag=True, help="exact rational outputs (exact-backend models)")
@one_line_errors
def run(model_dir, input_file, exact):
    """Run a compiled model on an input sequence and print its outputs."""
    model = lsrl.load(model_dir)
    xs = np.load(input_file) if input_file.endswith(".npy") else np.loadtxt(input_file, ndmin=2)
    outputs = model(xs, exact=exact)
    for row in np.asarray(outputs).reshape(-1, outputs.shape[-1]):
        click.echo(" ".join(str(v) for v in row))


@main.command()
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--max-len", type=int, default=None,
              help="hawk / griffin rows: the literal App. E construction for inputs up to this length")
@one_line_errors
def inspect(model_dir, max_len):
    """Per architecture: layers, hidden sizes, non-zero parameters."""
    from lsrl.targets import inspect as describe

    click.echo(describe(lsrl.load(model_dir), max_len=max_len))


@main.group()
def experiment():
    """Reproducible studies."""


@experiment.command(name="noise")
@click.option("-o", "--output", "out_dir", default="noise", show_default=True, type=click.Path(file_okay=False))
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--quick", is_flag=True, help="A tiny protocol (2 targets / maps, n = 3) that runs in seconds.")
@one_line_errors
def noise_command(out_dir, workers, quick):
    """Fig. 4: parameter noise on both approximators, all ifelse variants, the paper's constants and
    the robust construction (CSV, survival table, strip plots)."""
    from lsrl.experiments import noise

    rows = noise.run(out_dir, protocol=noise.QUICK if quick else noise.Protocol(), workers=workers)
    click.echo(noise.summary_markdown(rows))
    files = ("noise.csv", "survival.csv", "summary.md", "noise_continuous.png", "noise_discrete.png")
    click.echo(f"wrote {', '.join(str(Path(out_dir) / name) for name in files)}")


main.add_command(llrnn)

if __name__ == "__main__":
    main()
