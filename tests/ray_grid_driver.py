"""The two programs of tests/test_grid_ray.py that run inside the cluster's network namespace.

``python tests/ray_grid_driver.py head RAY [ARGUMENT ...]``: bring the namespace's loopback interface up (what
``ip link set lo up`` does, without needing iproute2), then become ``RAY ARGUMENT ...`` (``ray start --head``).

``python tests/ray_grid_driver.py ADDRESS OUT``: run each smoke grid of SMOKE_GRIDS through ``--ray-address
ADDRESS`` into OUT/NAME (in one process, so that the cluster's workers are started once), then a grid with a
failing run through ``lsrl.grid.run_grid``, and write what that returned to OUT/outcome.json."""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import struct
import sys
from pathlib import Path

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h

TINY_TRAINING = ["--steps", "1", "--batch-size", "1", "--controller-dim", "2", "--readout-dim", "2",
                 "--max-length", "2"]
REPRODUCE = ["llrnn", "reproduce", "--preset", "smoke", "--models", "ntm", "--tasks", "tf_copy"]

# name -> the arguments of the grid command, its output folder OUT/NAME appended (the resumed reproduction's
# folder holds, before the cluster runs it, a local run of seed 0 cut at step 2: tests/test_grid_ray.py)
SMOKE_GRIDS = {
    "noise": ["experiment", "noise", "--quick", "-o"],
    "experiment": ["llrnn", "experiment", *TINY_TRAINING, "--models", "ntm", "--tasks", "copy", "--seeds", "2", "-o"],
    "reproduce": [*REPRODUCE, "--seeds", "2", "--steps", "4", "-o"],
    "train-tier": ["bench", "train-tier", "--task", "count_ones", "--steps", "1", "--arch", "lstm", "--arch", "gru",
                   "-o"],
    "eval-all": ["bench", "eval-all", "--task", "parity", "--tier", "compiled", "--tier", "distractors",
                 "--method", "random", "--method", "mean", "--pairs", "2", "-o"],
    "build": ["bench", "build", "--task", "parity", "--tier", "all", "--steps", "1", "--arch", "lstm"],
}


def main(address: str, out: Path) -> None:
    import lsrl.cli
    from lsrl.grid import Run, run_grid

    for name, arguments in SMOKE_GRIDS.items():
        lsrl.cli.main([*arguments, str(out / name), "--ray-address", address], standalone_mode=False)
    runs = [Run("root of 4", math.sqrt, (4.0,)), Run("root of -1", math.sqrt, (-1.0,)), Run("root of 9", math.sqrt,
                                                                                              (9.0,))]
    outcome = run_grid("roots", runs, ray_address=address, progress=False)
    (out / "outcome.json").write_text(json.dumps({"results": outcome.results, "failures": outcome.failures}))


def loopback_up() -> None:
    """Set the IFF_UP flag of the interface ``lo`` (a ``struct ifreq``: the name, then the flags)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(handle, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


if __name__ == "__main__":
    if sys.argv[1] == "head":
        loopback_up()
        os.execv(sys.argv[2], sys.argv[2:])
    main(sys.argv[1], Path(sys.argv[2]))
