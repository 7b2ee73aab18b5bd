"""Per compile target: layers, widest hidden size, parameters (all, and non-zero), largest weight, run
time (process CPU seconds, median of 3) over a batch of 64 sequences of length 256, float64, and the
tolerance a target states. The stock Hugging Face targets (``model.to_hf``, float32, ``max_len`` = the
length) run the robust approximators, whose inputs are bounded.

    python benchmarks/targets.py [--threads 1] [--batch 64] [--length 256] [--app-e] [--targets A,B] [--csv DIR]
                                                                                   # DIR/targets.csv

One torch thread by default: on a loaded machine more threads made the step loops much slower.
``--app-e`` adds Hawk / Griffin rows for the literal App. E construction (a convolution as long
as the sequence: slow). The stock LSTM / GRU (``stock_lstm``, ``stock_gru``) are built for
``max_len = --length`` in float32 and float64 (their inputs in that dtype) and add the tolerance they
state; they need declared input bounds, so Fig. 1 and the robust Listing 2 (tokens up to 10) join the
programs. ``--targets`` keeps only the named architectures.
"""

import argparse
import functools
import statistics
import time

import numpy as np
import torch

import lsrl
from lsrl.programs import continuous_approximator, discrete_approximator, more_ones_than_zeros
from lsrl.targets import ARCHITECTURES, STOCK, layer_report
from lsrl.targets.precision import Tolerance
from results import add_csv_option, write_csv

REPEATS = 3
COLUMNS = ("layers", "widest", "params", "nonzeros", "largest weight", "cpu s", "tolerance")  # beside program, target


def inputs(program, generator, batch, length):
    if program.input.dim == 1:
        high = min(10, float(program.input.bounds[1][0]))  # tokens up to 10, within a declared bound
        return generator.integers(0, int(high) + 1, size=(batch, length, 1)).astype(np.float64)
    return generator.random((batch, length, program.input.dim))


def targets_to_run(args):
    """(label, architecture, options) per target row."""
    targets = [(arch, arch, {}) for arch in ARCHITECTURES if arch not in STOCK]
    if args.app_e:
        targets += [(arch + " (App. E)", arch, {"construction": "app_e", "max_len": args.length})
                    for arch in ("hawk", "griffin")]
    targets += [(f"{arch} ({str(dtype)[6:]})", arch, {"max_len": args.length, "dtype": dtype})
                for arch in STOCK for dtype in (torch.float32, torch.float64)]
    chosen = args.targets.split(",") if args.targets else None
    return [target for target in targets if chosen is None or target[1] in chosen]


def cpu_seconds(net, xs):
    times = []
    with torch.no_grad():
        for _ in range(REPEATS):
            start = time.process_time()
            net(xs)
            times.append(time.process_time() - start)
    return statistics.median(times)


def stated_tolerance(net, xs):
    """The error ``net`` states for a run on ``xs``: a ``Tolerance``'s bound at that length and input size,
    or the stock targets' number."""
    tolerance = getattr(net, "tolerance", None)
    if isinstance(tolerance, Tolerance):
        return tolerance.bound(xs.shape[-2], float(xs.abs().max()))
    return tolerance


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--app-e", action="store_true", help="also the literal App. E Hawk / Griffin")
    parser.add_argument("--targets", default="", help="comma-separated architectures (default: all)")
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = np.random.default_rng(0)
    # a gated and an ungated variant of each, so that every architecture gets a row
    programs = [
        discrete_approximator(3, ifelse=variant) for variant in ("multiplicative", "optimized")
    ] + [continuous_approximator(2, 2, ifelse=variant) for variant in ("multiplicative", "optimized")]
    programs += [more_ones_than_zeros(), discrete_approximator(3, robust=True, vocabulary=10)]
    targets = targets_to_run(args)
    table = []
    print(f"{'program':46} {'target':22} {'layers':>6} {'widest':>6} {'params':>9} {'nonzeros':>9} {'largest':>9} "
          f"{'cpu s':>7} {'tolerance':>9}")
    for program in programs:
        model = lsrl.compile(program, progress=False)
        xs = torch.as_tensor(inputs(program, generator, args.batch, args.length))
        for label, arch, options in targets:
            try:
                net = model.to_torch(arch, **options)
            except lsrl.LsrlError as error:
                print(f"{program.name:46} {label:22} not available: {str(error)[:50]}")
                table.append({"program": program.name, "target": label, **dict.fromkeys(COLUMNS, ""),
                              "not available": str(error)[:50]})
                continue
            rows = layer_report(net)
            layers = len({r["layer"] for r in rows})
            params = sum(p.numel() for p in net.parameters())
            widest, nonzeros = max(r["hidden"] for r in rows), sum(r["nonzeros"] for r in rows)
            largest = max(float(p.detach().abs().max()) for p in net.parameters() if p.numel())
            tolerance = stated_tolerance(net, xs)
            seconds = cpu_seconds(net, xs.to(options.get("dtype", torch.float64)))
            told = f"{tolerance:9.2g}" if tolerance is not None else f"{'':9}"
            print(f"{program.name:46} {label:22} {layers:6d} {widest:6d} {params:9d} {nonzeros:9d} {largest:9.2g} "
                  f"{seconds:7.3f} {told}", flush=True)
            values = (layers, widest, params, nonzeros, f"{largest:.3g}", round(seconds, 3),
                      "" if tolerance is None else f"{tolerance:.3g}")
            table.append({"program": program.name, "target": label, **dict(zip(COLUMNS, values)), "not available": ""})
    table += hf_rows(generator, args.batch, args.length)
    write_csv(args.csv, "targets", table)


def _forward(net, kwargs, _):
    return net(**kwargs)


def hf_rows(generator, batch, length):
    """The stock transformers targets on the robust approximators (bounded inputs), float32."""
    from lsrl.hf import ARCHITECTURES as HF_ARCHITECTURES

    table = []
    for program in (discrete_approximator(3, robust=True, vocabulary=10),
                    continuous_approximator(2, 2, robust=True, value_bound=2)):
        model = lsrl.compile(program, progress=False)
        xs = inputs(program, generator, batch, length)
        for arch in HF_ARCHITECTURES:
            label = f"hf-{arch}"
            try:
                net = model.to_hf(arch, max_len=length)
            except (lsrl.LsrlError, ImportError) as error:
                print(f"{program.name:46} {label:22} not available: {str(error)[:50]}")
                table.append({"program": program.name, "target": label, **dict.fromkeys(COLUMNS, ""),
                              "not available": str(error)[:50]})
                continue
            kwargs = lsrl.hf.inputs(net, xs)
            params = sum(p.numel() for p in net.parameters())
            nonzeros = sum(int(torch.count_nonzero(p)) for p in net.parameters())
            widest = max(net.config.hidden_size, getattr(net.config, "intermediate_size", 0))
            seconds = cpu_seconds(functools.partial(_forward, net, kwargs), None)
            largest, tolerance = net.config.lsrl_io["largest_weight"], net.config.lsrl_io["tolerance"]
            layers = net.config.num_hidden_layers
            print(f"{program.name:46} {label:22} {layers:6d} {widest:6d} {params:9d} {nonzeros:9d} {largest:9.2g} "
                  f"{seconds:7.3f} {tolerance:9.2g}", flush=True)
            values = (layers, widest, params, nonzeros, f"{largest:.3g}", round(seconds, 3), f"{tolerance:.3g}")
            table.append({"program": program.name, "target": label, **dict(zip(COLUMNS, values)), "not available": ""})
    return table


if __name__ == "__main__":
    main()
