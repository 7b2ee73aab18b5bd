"""(Named so as not to shadow the ``automata`` package of automata-lib.)

Automata networks against their automata, at the issue's scale: errors and CPU time per architecture.

    python benchmarks/finite_automata.py                        # the issue's full size (hours on 2 CPU cores)
    python benchmarks/finite_automata.py --dfas 100 --strings 1000 --long-dfas 2 --long-length 1000000

1. Throughput: symbols per CPU second on a random 20-state, 3-symbol DFA, batch 256 x 1,000 (median of 3).
2. Long strings: ``--long-dfas`` DFAs (Tomita 3, then random 10-state ones), 2 strings of
   ``--long-length`` symbols, run in chunks of 100,000 steps that carry the state.
3. Sweep (``lsrl.automata.checking``): the seven Tomita grammars and ``--dfas`` random minimal DFAs (2..50
   states, 2..5 symbols, uniform), ``--strings`` random strings each of random lengths 1..``--length``,
   every prefix and the empty word checked; one line of running totals per DFA. Float32, one torch thread.
4. Round trip: AALpy's L* learns each network of the Tomita grammars and ``--round-trip-dfas`` random
   minimal DFAs (2..50 states) back; the learned DFA must be equivalent to the original (decided exactly).

``--parts`` picks the parts to run (default all: 1234); ``--csv DIR`` also writes each part's table
as DIR/finite_automata_{throughput,long_strings,sweep,round_trip}.csv. ``--machines START:STOP`` sweeps only DFAs
START+1..STOP of part 3, on the strings the whole sweep gives them, so the sweep can run in pieces.

Errors count (string, prefix) pairs whose output differs from the automaton's.
"""

import argparse
import statistics
import time

import numpy as np
import torch

from lsrl.automata import ARCHITECTURES, learn_back, random_dfa, to_torch, tomita
from lsrl.automata.checking import check, count_errors
from results import add_csv_option, write_csv


def one_hot(indices, k):
    return torch.nn.functional.one_hot(torch.as_tensor(indices), k).float()


def sweep(dfas, strings, length, seed, first) -> list[dict]:
    states = [len(d.states) for d in dfas]
    print(f"\n3. DFAs {first + 1}..{first + len(dfas)}: {len(dfas)} DFAs (states {min(states)}..{max(states)}), "
          f"{strings:,} strings each of random lengths 1..{length:,} (bucketed by length), every prefix checked")
    print(f"{'after DFA':>9} {'states':>6} {'symbols':>7}  " + "  ".join(f"{a + ' errors':>19} {'CPU s':>8}"
                                                                    for a in ARCHITECTURES), flush=True)

    def progress(i, results):
        print(f"{i + 1:9} {len(dfas[i - first].states):6} {len(dfas[i - first].alphabet):7}  "
              + "  ".join(f"{r.errors:19,} {r.cpu_seconds:8.1f}" for r in results), flush=True)

    results = check(dfas, ARCHITECTURES, strings=strings, max_length=length, seed=seed, first=first,
                    progress=progress)
    print(f"\n{'architecture':14} {'DFAs':>5} {'strings':>10} {'outputs checked':>16} {'errors':>7} {'CPU s':>9}")
    for r in results:
        print(f"{r.architecture:14} {r.machines:5} {r.strings:10,} {r.checked:16,} {r.errors:7} {r.cpu_seconds:9.1f}")
    return [{"architecture": r.architecture, "DFAs": r.machines, "strings": r.strings, "outputs checked": r.checked,
             "errors": r.errors, "CPU s": round(r.cpu_seconds, 1)} for r in results]


def long_strings(dfas, length, rng) -> list[dict]:
    print(f"\n2. long strings: 2 strings x {length:,} symbols, every prefix checked")
    print(f"{'DFA':22} {'architecture':14} {'errors':>7} {'CPU s':>9}")
    rows = []
    for name, dfa in dfas:
        indices = rng.integers(0, len(dfa.alphabet), size=(2, length))
        for arch in ARCHITECTURES:
            start = time.process_time()
            errors, _ = count_errors(to_torch(dfa, arch), dfa, indices, batch=2)
            seconds = time.process_time() - start
            print(f"{name:22} {arch:14} {errors:7} {seconds:9.1f}", flush=True)
            rows.append({"DFA": name, "architecture": arch, "symbols": length, "errors": errors,
                         "CPU s": round(seconds, 1)})
    return rows


def throughput(rng) -> list[dict]:
    dfa = random_dfa(20, 3, rng)
    x = one_hot(rng.integers(0, 3, size=(256, 1000)), 3)
    print("\n1. throughput: random 20-state, 3-symbol DFA, batch 256 x 1,000 (median of 3 CPU times)")
    print(f"{'architecture':14} {'hidden':>6} {'symbols / CPU s':>16}")
    rows = []
    for arch in ARCHITECTURES:
        net = to_torch(dfa, arch)
        times = []
        for _ in range(3):
            start = time.process_time()
            with torch.no_grad():
                net(x)
            times.append(time.process_time() - start)
        speed = x.shape[0] * x.shape[1] / statistics.median(times)
        print(f"{arch:14} {net.h0.shape[-1]:6} {speed:16,.0f}", flush=True)
        rows.append({"architecture": arch, "hidden": net.h0.shape[-1], "symbols / CPU s": round(speed)})
    return rows


def round_trip(dfas) -> list[dict]:
    print(f"\n4. round trip: L* with each network as membership oracle, {len(dfas)} DFAs "
          f"(states {min(len(d.states) for d in dfas)}..{max(len(d.states) for d in dfas)})")
    print(f"{'architecture':14} {'DFAs':>5} {'equivalent':>10} {'CPU s':>9}")
    rows = []
    for arch in ARCHITECTURES:
        start = time.process_time()
        equivalent = sum(learn_back(to_torch(dfa, arch), dfa.alphabet).equivalent(dfa) for dfa in dfas)
        seconds = time.process_time() - start
        print(f"{arch:14} {len(dfas):5} {equivalent:10} {seconds:9.1f}", flush=True)
        rows.append({"architecture": arch, "DFAs": len(dfas), "equivalent": equivalent, "CPU s": round(seconds, 1)})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dfas", type=int, default=100)
    parser.add_argument("--strings", type=int, default=10_000)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--long-dfas", type=int, default=3)
    parser.add_argument("--long-length", type=int, default=1_000_000)
    parser.add_argument("--round-trip-dfas", type=int, default=20)
    parser.add_argument("--parts", default="1234")
    parser.add_argument("--machines", default=":", help="START:STOP, a slice of part 3's DFAs")
    parser.add_argument("--seed", type=int, default=0)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    if "1" in args.parts:
        write_csv(args.csv, "finite_automata_throughput", throughput(rng))
    if "2" in args.parts:
        long_dfas = [("tomita 3", tomita(3))] + [(f"random 10 states #{i}", random_dfa(10, 3, rng))
                                                 for i in range(1, args.long_dfas)]
        rows = long_strings(long_dfas[:args.long_dfas], args.long_length, rng)
        write_csv(args.csv, "finite_automata_long_strings", rows)
    tomitas = [tomita(i) for i in range(1, 8)]
    if "3" in args.parts:
        dfas = tomitas + [random_dfa(int(rng.integers(2, 51)), int(rng.integers(2, 6)), rng) for _ in range(args.dfas)]
        bounds = (int(bound) if bound else None for bound in args.machines.split(":"))
        start, stop, _ = slice(*bounds).indices(len(dfas))
        rows = sweep(dfas[start:stop], args.strings, args.length, args.seed, start)
        write_csv(args.csv, "finite_automata_sweep", rows)
    if "4" in args.parts:
        dfas = tomitas + [random_dfa(int(rng.integers(2, 51)), int(rng.integers(2, 6)), rng)
                          for _ in range(args.round_trip_dfas)]
        write_csv(args.csv, "finite_automata_round_trip", round_trip(dfas))

if __name__ == "__main__":
    main()
