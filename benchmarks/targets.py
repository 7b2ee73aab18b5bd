"""Per compile target: layers, widest hidden size, non-zero parameters and run time (process CPU
seconds, median of 3, one torch thread) over a batch of 64 sequences of length 256.

    python benchmarks/targets.py

The whole script takes about half an hour on one core: Hawk and Griffin dominate (their temporal
convolutions span all 256 steps; one forward pass of discrete_approximator(3) as Hawk took 61 s of
CPU, 3 repeats x 4 programs x 2 architectures).
"""

import statistics
import time

import numpy as np
import torch

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator
from lsrl.targets import ARCHITECTURES, layer_report

BATCH, LENGTH, REPEATS = 64, 256, 3


def inputs(program, generator):
    if program.input.dim == 1:
        return generator.integers(0, 11, size=(BATCH, LENGTH, 1)).astype(np.float64)
    return generator.random((BATCH, LENGTH, program.input.dim))


def main():
    torch.set_num_threads(1)
    generator = np.random.default_rng(0)
    # a gated and an ungated variant of each, so that every architecture gets a row
    programs = [
        discrete_approximator(3, ifelse=variant) for variant in ("multiplicative", "optimized")
    ] + [continuous_approximator(2, 2, ifelse=variant) for variant in ("multiplicative", "optimized")]
    print(f"{'program':46} {'target':17} {'layers':>6} {'widest':>6} {'nonzeros':>9} {'run s':>7}")
    for program in programs:
        model = lsrl.compile(program, progress=False)
        xs = torch.as_tensor(inputs(program, generator))
        for arch in ARCHITECTURES:
            options = {"max_len": LENGTH} if arch in ("hawk", "griffin") else {}
            try:
                net = model.to_torch(arch, **options)
            except lsrl.LsrlError as error:
                print(f"{program.name:46} {arch:17} not available: {str(error)[:50]}")
                continue
            rows = layer_report(net)
            times = []
            with torch.no_grad():
                for _ in range(REPEATS):
                    start = time.process_time()
                    net(xs)
                    times.append(time.process_time() - start)
            layers = len({r["layer"] for r in rows})
            print(f"{program.name:46} {arch:17} {layers:6d} {max(r['hidden'] for r in rows):6d} "
                  f"{sum(r['nonzeros'] for r in rows):9d} {statistics.median(times):7.3f}", flush=True)


if __name__ == "__main__":
    main()
