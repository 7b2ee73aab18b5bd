"""The settings of an LLRNN training run and of the command line's grids, without torch: ``TrainConfig`` and its
checks, the presets, the limits, and the names of the tasks and models (``lsrl llrnn --help`` reads them without
loading a model). The modules that run them take their names from here (``tests/test_habits.py`` keeps the
names equal to the registries of ``lsrl.llrnn.tasks`` and ``lsrl.llrnn.train``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lsrl.errors import LsrlError
from lsrl.llrnn.checks import LlrnnArgumentError, count, integers, real

CURRICULA = ("error", "tf")
SCHEDULES = ("constant", "cosine")
MAX_SLOTS = 100_000  # ring sizes; the head moves are K x N indices, checked too (lsrl.llrnn.explicit)
MAX_POWER = 64  # HigherOrderRNN: V(x)^0 .. V(x)^max_power, one product each per step
MAX_WIDTH = 4_096  # controller, hidden, memory, symbol and aux sizes
MAX_LENGTH = 10_000  # the longest string a task draws (a batch is one tensor of that many steps)
MAX_BATCH = 65_536  # the most samples in one batch
ERASES = ("location", "matrix")
CONTROLLER_NAMES = ("relu", "tanh")  # the NTMs' controller activations (lsrl.llrnn.explicit.CONTROLLERS)
TASK_NAMES = ("copy", "repeat_copy", "pattern", "multiple_pattern", "variable_pattern", "associative_recall",
              "priority_sort", "tf_copy", "tf_repeat_copy", "tf_pattern1", "tf_pattern2", "tf_pattern3", "tf_pattern4",
              "tf_pattern5", "tf_multiple_pattern1", "tf_multiple_pattern2", "tf_multiple_pattern3",
              "tf_multiple_pattern4", "tf_variable_pattern1", "tf_variable_pattern2", "tf_variable_pattern3",
              "tf_variable_pattern4")  # lsrl.llrnn.tasks.TASKS
MODEL_NAMES = ("ntm", "graves_ntm", "dihedral_ntm", "pattern_ntm", "multiple_pattern_ntm", "polynomial_step_ntm",
               "dihedral_polynomial_step_ntm", "second_order", "multiplicative", "higher_order", "lstm", "gru")


class TrainingError(LsrlError):
    """A training request that cannot be honoured (unknown model, missing checkpoint, no CUDA)."""


@dataclass
class TrainConfig:
    model: str = "ntm"
    task: str = "copy"
    min_length: int = 1
    max_length: int = 10  # longest training length once the curriculum is done
    start_length: int = 0  # the curriculum's first longest length; 0: max_length (no curriculum)
    curriculum: str = "error"  # "error": grow on low running error; "tf": the TF notebook's epoch schedule
    error_threshold: float = 0.05  # running symbol error below which the curriculum moves on
    window: int = 20  # batches in the running error
    steps: int = 3000
    steps_per_epoch: int = 40  # the "tf" curriculum's epoch: TF's 10,000 sequences in batches of 250
    batch_size: int = 16
    optimizer: str = "rmsprop"
    learning_rate: float = 3e-4
    schedule: str = "constant"  # the learning rate over the steps: "constant", or "cosine" (down to 0 at the end)
    rmsprop_decay: float = 0.99  # RMSProp's smoothing constant (TF: 0.9)
    clip: float = 10.0  # gradient norm; 0: no clipping (TF)
    controller_dim: int = 32
    readout_dim: int = 32  # 0: the linear read-out of TF, logits = W h0 + B
    slots: int = 0  # ring size; 0: the prompt length at the generalisation length (nothing wraps)
    memory_width: int = 0  # the NTMs' memory width; 0: the controller's (V = H0)
    symbol_dim: int = 4  # coefficient size of ring 1 of the pattern models
    pattern_slots: int = 0  # size of the pattern rings; 0: as ring 1 (multiple pattern NTM: 2)
    pattern_powers: tuple[int, ...] = (0, 1, 2)  # the steps a pattern ring's coefficients choose from
    erase: str = "location"  # "location": Eq. (2.13); "matrix": the paper's Sec. 3.2 erase matrix
    content_softmax: bool = True  # pattern rings read through a softmax over their contents (TF)
    gate: bool = False  # pattern models: interpolate ring 1's pattern move with a direct read head (TF)
    sharpen: bool = False  # sharpen every address by gamma = 1 + ReLU(.) (TF)
    content_addressing: bool = False  # Graves et al.'s content-based addressing with key strength
    controller: str = "relu"  # the NTMs' controller activation: "relu" (paper) or "tanh" (TF)
    erase_init: float = 0.0  # "matrix" erase: scale of the initial erase weights; 0: no erasing (see quiet_memory)
    pattern_write_init: float = 0.01  # linear pattern contents: scale of the initial write weights
    shifts: tuple[int, ...] | None = (0, 1)  # the moves a head chooses from (R^shift); None: any rotation
    max_power: int = 2  # higher-order RNN: powers V(x)^0..max_power
    aux_dim: int = 0  # multiplicative RNN: size of the factor space; 0: the controller's
    baseline_match: str = "ntm"  # LSTM / GRU: the model whose parameter count they match
    generalisation_factor: int = 2
    test_lengths: tuple[int, ...] = ()  # lengths tested beyond training; (): generalisation_factor × max_length
    test_batch_size: int = 64
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    compile: bool = False  # torch.compile each step (one-off ~20-30 s; ~2-2.6x faster steps on CPU)
    # batches whose loss or gradient is not finite that may be skipped (weights untouched) in a run before
    # training stops with a TrainingError; 0: stop at the first
    max_skipped_steps: int = 0

    def __post_init__(self) -> None:
        check_config(self)


# Limits of the settings (``check_config``). Each bounds what a run may allocate or loop over before it
# starts: the history keeps one row per step; a batch holds batch × length × vocabulary inputs and the
# memory rings batch × width × slots per step; a controller of width d has d² weights.
MAX_STEPS = 10**7
# MAX_WIDTH (controller, read-out, memory, symbol and factor sizes), MAX_SLOTS (ring sizes) and MAX_POWER
# (the higher-order RNN's powers V(x)^0..max_power) are the models' own caps (lsrl.llrnn.explicit)
DTYPES = ("float32", "float64", "float16", "bfloat16")
OPTIMIZERS = ("rmsprop", "adam")
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts


def check_config(config: TrainConfig) -> None:
    """Refuse settings outside their ranges (``TrainingError`` naming the field); called by ``TrainConfig``.

    Numbers are finite; sizes, lengths and counts are integers within the limits above; the learning
    rate is positive, the gradient clip and the initial scales non-negative, RMSProp's decay in [0, 1).
    """
    c = config
    try:
        for name, low, high in (("steps", 0, MAX_STEPS), ("min_length", 1, MAX_LENGTH), ("max_length", 1, MAX_LENGTH),
                                ("start_length", 0, MAX_LENGTH), ("window", 1, MAX_STEPS),
                                ("steps_per_epoch", 1, MAX_STEPS), ("batch_size", 1, MAX_BATCH),
                                ("controller_dim", 1, MAX_WIDTH), ("readout_dim", 0, MAX_WIDTH),
                                ("slots", 0, MAX_SLOTS), ("memory_width", 0, MAX_WIDTH), ("symbol_dim", 1, MAX_WIDTH),
                                ("pattern_slots", 0, MAX_SLOTS), ("max_power", 0, MAX_POWER),
                                ("aux_dim", 0, MAX_WIDTH), ("generalisation_factor", 1, MAX_LENGTH),
                                ("test_batch_size", 1, MAX_BATCH), ("seed", *SEED_RANGE),
                                ("max_skipped_steps", 0, MAX_STEPS)):
            count("TrainConfig", name, getattr(c, name), low, high)
        real("TrainConfig", "learning_rate", c.learning_rate, low=0, low_open=True)
        real("TrainConfig", "clip", c.clip, low=0)
        real("TrainConfig", "rmsprop_decay", c.rmsprop_decay, low=0)
        if c.rmsprop_decay >= 1:
            raise TrainingError(f"TrainConfig: rmsprop_decay must be in [0, 1), got {c.rmsprop_decay!r}")
        real("TrainConfig", "error_threshold", c.error_threshold)  # < 0: never grows; > 1: every full window
        real("TrainConfig", "erase_init", c.erase_init, low=0)
        real("TrainConfig", "pattern_write_init", c.pattern_write_init, low=0)
        integers("TrainConfig", "pattern_powers", c.pattern_powers)
        if c.shifts is not None:
            integers("TrainConfig", "shifts", c.shifts)
        for length in integers("TrainConfig", "test_lengths", c.test_lengths, nonempty=False):
            count("TrainConfig", "each of test_lengths", length, 1, MAX_LENGTH)
    except LlrnnArgumentError as error:
        raise TrainingError(str(error)) from None
    if not c.test_lengths and c.generalisation_factor * c.max_length > MAX_LENGTH:
        raise TrainingError(f"TrainConfig: the test length generalisation_factor × max_length = "
                            f"{c.generalisation_factor * c.max_length} exceeds {MAX_LENGTH}")
    if not 1 <= c.min_length <= (c.start_length or c.max_length) <= c.max_length:
        raise TrainingError(f"lengths must satisfy 1 <= min_length <= start_length <= max_length, got "
                            f"{c.min_length}, {c.start_length}, {c.max_length}")
    choices = {"optimizer": ("optimizer", OPTIMIZERS), "curriculum": ("curriculum", CURRICULA),
               "schedule": ("learning rate schedule", SCHEDULES), "erase": ("erase", ERASES),
               "controller": ("controller", CONTROLLER_NAMES), "dtype": ("dtype", DTYPES)}
    for name, (what, known) in choices.items():
        if getattr(c, name) not in known:
            raise TrainingError(f"unknown {what} {getattr(c, name)!r}; known: {', '.join(known)}")
    for name in ("content_softmax", "gate", "sharpen", "content_addressing", "compile"):
        if not isinstance(getattr(c, name), bool):
            raise TrainingError(f"TrainConfig: {name} must be True or False, got {getattr(c, name)!r}")
    if not isinstance(c.device, str) or not re.fullmatch(r"(cpu|cuda)(:\d+)?", c.device):
        raise TrainingError(f"TrainConfig: device must be cpu, cuda or cuda:N, got {c.device!r}")


# The TF notebook's settings: controller 100, memory 128×20, pattern rings 20×3, heads [0, -1, 1],
# RMSProp 1e-4 (decay 0.9, momentum 0.9, no clipping), batch 250, 200 epochs of 40 updates with its
# curriculum, linear read-out, training contents up to 28 (N = 30), tests at 33, 58 and 98, and the
# TF stabilisers (Eq. (2.13) erase, softmax contents, gate, sharpening, tanh controller).
TF_PRESET = dict(controller_dim=100, slots=128, memory_width=20, symbol_dim=20, pattern_slots=20,
                 pattern_powers=(0, 1, 2), shifts=(0, -1, 1), batch_size=250, steps=8000, steps_per_epoch=40,
                 optimizer="rmsprop", learning_rate=1e-4, rmsprop_decay=0.9, clip=0.0, readout_dim=0,
                 curriculum="tf", max_length=28, test_lengths=(33, 58, 98), test_batch_size=250,
                 erase="location", content_softmax=True, gate=True, sharpen=True, controller="tanh", compile=True)
PRESETS = {
    "tf": TF_PRESET,
    # the same models and curriculum, sized to finish a run in minutes on one CPU core (6,000 steps: at
    # 1,500 the NTM was at 57 % on multiple pattern 4 at length 15, at 6,000 at 12-15 %). RMSProp at
    # 1e-3 without clipping undid learned runs late (NTM, pattern 4: 3.7 % running error at step 5,000,
    # 31 % at the end); a cosine decay of the rate reached 9 of the grid's 16 targets, against 7.
    "tf-cpu": {**TF_PRESET, "controller_dim": 64, "slots": 64, "batch_size": 32, "steps": 6000,
               "steps_per_epoch": 15, "max_length": 12, "test_lengths": (15, 25, 40), "test_batch_size": 100,
               "learning_rate": 1e-3, "schedule": "cosine"},
    # a few steps on tiny sizes: checks that a model and task run end to end
    "smoke": dict(controller_dim=8, readout_dim=8, slots=0, batch_size=4, steps=5, max_length=4,
                  test_lengths=(6,), test_batch_size=4, symbol_dim=3, pattern_slots=4),
}


EXPERIMENT_MODELS = ("ntm", "pattern_ntm", "multiple_pattern_ntm")
EXPERIMENT_TASKS = ("copy", "repeat_copy", "pattern", "multiple_pattern")
MAX_RUNS = 10_000  # runs in one grid: each trains for seconds to hours, and each config is held in memory

# the grids of the command line (lsrl.llrnn.experiment, lsrl.llrnn.reproduce)
EXPERIMENT_DEFAULTS = TrainConfig(max_length=5)  # ~30 min for the full grid on two CPU cores
REPRODUCTION_TASKS = ("tf_copy", "tf_repeat_copy", "tf_pattern1", "tf_pattern2", "tf_pattern3", "tf_pattern4",
                      "tf_pattern5", "tf_multiple_pattern3", "tf_multiple_pattern4", "tf_variable_pattern1")
REPRODUCTION_MODELS = ("ntm", "pattern_ntm", "multiple_pattern_ntm", "lstm", "gru")
