"""CPU seconds per training step (forward, backward, RMSProp) of the LLRNN models at a preset's sizes,
on the longest training sequence of a task, one torch thread, median of several steps; the steps per
run and the implied time per run.

    python benchmarks/llrnn_training.py [--preset tf-cpu] [--task tf_copy] [--models ntm,lstm] [--compile] [--csv DIR]
"""

import argparse
import statistics
import time

import torch

from lsrl.llrnn.train import MODELS, Trainer, masked_loss, preset
from results import add_csv_option, write_csv


def seconds_per_step(config, repeats: int) -> tuple[float, int]:
    trainer = Trainer(config)
    batch = trainer.task.batch(config.batch_size, config.max_length, torch.Generator().manual_seed(0))
    batch = batch.to(config.device, trainer.dtype)

    def step():
        loss = masked_loss(trainer.net(batch.inputs), batch)
        trainer.optimizer.zero_grad()
        loss.backward()
        trainer.optimizer.step()

    step()  # warm-up (and compilation)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    return statistics.median(times), batch.inputs.shape[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tf-cpu")
    parser.add_argument("--task", default="tf_copy")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, default=0, help="override the preset's batch size")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="override the preset's torch.compile setting")
    parser.add_argument("--repeats", type=int, default=3)
    add_csv_option(parser)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    overrides = {"batch_size": arguments.batch} if arguments.batch else {}
    if arguments.compile is not None:
        overrides["compile"] = arguments.compile
    print("| model | preset | task | batch | tape | compile | s / step | steps | min / run |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for model in arguments.models.split(","):
        config = preset(arguments.preset, model, arguments.task, **overrides)
        seconds, tape = seconds_per_step(config, arguments.repeats)
        print(f"| {model} | {arguments.preset} | {arguments.task} | {config.batch_size} | {tape} | {config.compile} "
              f"| {seconds:.3f} | {config.steps} | {seconds * config.steps / 60:.1f} |", flush=True)
        rows.append({"model": model, "preset": arguments.preset, "task": arguments.task, "batch": config.batch_size,
                     "tape": tape, "compile": config.compile, "s / step": round(seconds, 3), "steps": config.steps,
                     "min / run": round(seconds * config.steps / 60, 1)})
    write_csv(arguments.csv, f"llrnn_training_{arguments.preset}", rows)


if __name__ == "__main__":
    main()
