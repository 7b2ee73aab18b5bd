"""The ``"trained"`` tier in the stock ``transformers`` architectures: a small ``MambaForCausalLM`` or
``RecurrentGemmaForCausalLM`` (Hawk: recurrent blocks only; Griffin: a local-attention block after each recurrent
one), built from a config object, trained by interchange intervention training towards the program's causal graph,
as ``lsrl.bench.training.torch_rnn`` trains stock LSTMs and GRUs (InterpBench's SIIT; the loop and its losses:
``lsrl.bench.training.loop``).

The model runs one token at a time through its own cache (``lsrl.bench.hf_loader``, which is also the folder's
``load_model.py``), and the interventions set coordinates of the state it carries between steps: each circuit
variable gets its own block of ``UNITS_PER_COMPONENT[arch]`` units per component in the carried state of level
``level`` (Mamba's ``ssm_state``, two channels of ``STATE_SIZE`` each; the RG-LRU ``recurrent_state`` of Hawk and
Griffin), where ``level`` is the number of circuit variables chained before it within one step
(``variable_levels``): a linear recurrence holds a running value, and a function of it (``more_ones`` of
``ones_minus_zeros``) is held by the next level's state. The model has the blocks ``BLOCKS[arch]`` per level, one
level more than the highest. Every other unit of the ``ssm_state`` / ``recurrent_state`` hooks is free and trained
to be inert. The conv windows hold the layer's recent inputs, and Griffin's attention blocks read the residual
stream of the positions in their window: both are ``helper``s, hooked but not scored (an attention block's output
at a step is a function of the tokens and of the states of the levels below it, patched or not; training leaves it
free to carry what it will). The losses, one per step in turn: the task; the outputs under the interchange of each
variable's units (against ``prog(xs, patch=...)``), every variable on the same base / source pair, summed; no change
under the interchange of the free units.

``train_hf(task, arch)`` returns an ``HFTrained`` with its task accuracy and interchange-intervention accuracy
(``lsrl.bench.training.loop.measure``); ``lsrl.bench.build.write_hf_folder`` writes its suite folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lsrl.bench.circuit import Circuit, equivalent_components, program_graph
from lsrl.bench.hf_loader import SteppedModel
from lsrl.bench.records import Measured, measured
from lsrl.bench.tasks import TASKS, program_widths, task_program
from lsrl.bench.training.loop import STEPS, Recipe, Units, fit, variable_levels
from lsrl.errors import InternalError, LsrlError

HF_ARCHS = ("mamba", "mamba2", "hawk", "griffin")
HIDDEN = 16  # d_model; Mamba's intermediate width is twice it, Hawk's lru_width equals it
STATE_SIZE = 4  # Mamba's state entries per channel
CONV = 2  # the conv window (Mamba conv_kernel, Hawk conv1d_width): the current input and one before
HEAD_DIM = 2  # Mamba-2's channels per head: a component's units are one head's state (its own decay and dt)
UNITS_PER_COMPONENT = {"mamba": 2 * STATE_SIZE, "mamba2": HEAD_DIM * STATE_SIZE, "hawk": 4, "griffin": 4}
WINDOW = "conv_window"  # the pseudo-variable of the conv windows' units (helpers)
ATTENTION = "attention"  # the pseudo-variable of Griffin's attention blocks' output units (helpers)
# the kind of block each level is held in, then the blocks after it: Griffin has a local-attention block after each
# recurrent one, so that every level's state is read by an attention block as in the stock pattern
BLOCKS = {"mamba": ("mamba",), "mamba2": ("mamba2",), "hawk": ("recurrent",), "griffin": ("recurrent", "attention")}
KINDS = {"mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM",
         "hawk": "RecurrentGemmaForCausalLM (Hawk: recurrent blocks)",
         "griffin": "RecurrentGemmaForCausalLM (Griffin: recurrent and local-attention blocks)"}
FREE = "free"
LR = 1e-2
HF_BATCH = 32  # sequences per Adam step (run beside their 32 sources): the stepwise stock forward is the cost
MAMBA_BIAS = True  # in_proj / out_proj biases: a gate silu(z) constant across tokens is one bias away
# Mamba's initial -A per state entry, each channel alike, with dt = 1: decays exp(-0.01) to exp(-10), a near-lossless
# counter to a memoryless slot in every channel (the stock S4D init, A = -1..-4 with dt in [0.001, 0.1], leaks a count
# and takes in little of each input: paren_depth reached task accuracy 0.40, with this 0.94 at 300 steps)
MAMBA_DECAYS = (0.01, 0.1, 1.0, 10.0)


def stock_model(arch: str, vocab: int, levels: int, seed: int, decays: tuple[float, ...] = MAMBA_DECAYS) -> Any:
    """A small stock model from a config object (no hub), float64, its first logits the outputs; ``BLOCKS[arch]``
    per level; ``decays``: Mamba's and Mamba-2's (``mamba_init``)."""
    from transformers import (Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM, RecurrentGemmaConfig,
                              RecurrentGemmaForCausalLM)

    torch.manual_seed(seed)
    if arch == "mamba":
        mamba = MambaConfig(vocab_size=vocab, hidden_size=HIDDEN, state_size=STATE_SIZE, num_hidden_layers=levels,
                             expand=2, conv_kernel=CONV, use_bias=MAMBA_BIAS, tie_word_embeddings=False, use_cache=True)
        return mamba_init(MambaForCausalLM(mamba).double(), decays)
    if arch == "mamba2":
        mamba2 = Mamba2Config(vocab_size=vocab, hidden_size=HIDDEN, state_size=STATE_SIZE, num_hidden_layers=levels,
                              expand=2, num_heads=2 * HIDDEN // HEAD_DIM, head_dim=HEAD_DIM, n_groups=1,
                              conv_kernel=CONV, use_bias=MAMBA_BIAS, tie_word_embeddings=False, use_cache=True,
                              pad_token_id=None, bos_token_id=None, eos_token_id=None)
        return mamba_init(Mamba2ForCausalLM(mamba2).double(), decays)
    gemma = RecurrentGemmaConfig(vocab_size=vocab, hidden_size=HIDDEN, lru_width=HIDDEN,
                                  num_hidden_layers=levels * len(BLOCKS[arch]), num_attention_heads=2,
                                  intermediate_size=4 * HIDDEN, conv1d_width=CONV, block_types=BLOCKS[arch],
                                  logits_soft_cap=1e4, tie_word_embeddings=False,
                                  attention_window_size=16, pad_token_id=None, bos_token_id=None, eos_token_id=None,
                                  # a plain forward of a Hawk (no attention layer) with the default cache fails in
                                  # transformers 5 (DynamicCache.get_seq_length needs an attention layer): off
                                  use_cache=False)
    return RecurrentGemmaForCausalLM(gemma).double()


def mamba_init(hf: Any, decays: tuple[float, ...] = MAMBA_DECAYS) -> Any:
    """``hf`` (a ``MambaForCausalLM``; a ``Mamba2ForCausalLM``: per head, in turn) with every block's ``decays``
    (``-A``), ``dt`` 1 (``dt_bias`` its inverse softplus) and ``D`` 0: the skip ``D u`` passes the block's
    input around its state, which an interchange of the state must not leave unchanged."""
    with torch.no_grad():
        for layer in hf.backbone.layers:
            mixer = layer.mixer
            logs = torch.log(torch.tensor(decays, dtype=mixer.A_log.dtype))
            if mixer.A_log.dim() == 1:  # Mamba-2: one A per head
                mixer.A_log.copy_(logs.repeat(len(mixer.A_log) // len(logs) + 1)[:len(mixer.A_log)])
            else:
                mixer.A_log.copy_(logs.expand_as(mixer.A_log))
            bias = mixer.dt_bias if hasattr(mixer, "dt_bias") else mixer.dt_proj.bias
            bias.fill_(float(np.log(np.expm1(1.0))))
            mixer.D.zero_()
    return hf


def state_hook(arch: str, level: int) -> str:
    """The hook of the carried state that holds the variables of ``level``."""
    return f"layers.{level * len(BLOCKS[arch])}.{'ssm_state' if arch.startswith('mamba') else 'recurrent_state'}"


def state_hooks(arch: str, levels: int) -> list[dict[str, Any]]:
    """The hooks of a model (``lsrl.bench.hf_loader``): per recurrent layer its conv window and carried state, per
    attention layer its output (Griffin), then ``readout`` (width filled in by the caller)."""
    if arch.startswith("mamba"):  # intermediate width 2 HIDDEN; Mamba-2's x, B and C pass through the conv
        conv, state = (2 * HIDDEN + (2 * STATE_SIZE if arch == "mamba2" else 0)) * CONV, 2 * HIDDEN * STATE_SIZE
    else:
        conv, state = HIDDEN * (CONV - 1), HIDDEN
    hooks = []
    for level in range(levels):
        layer = level * len(BLOCKS[arch])
        hooks += [{"name": f"layers.{layer}.conv_state", "width": conv, "per_step": True},
                  {"name": state_hook(arch, level), "width": state, "per_step": True}]
        hooks += [{"name": f"layers.{layer + 1}.attention", "width": HIDDEN, "per_step": True}
                  for _ in BLOCKS[arch][1:]]
    return hooks


def carried(hooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hooks of carried states (the variables' and the free units'), without conv windows, attention and
    readout."""
    return [hook for hook in hooks if hook["name"].endswith(("ssm_state", "recurrent_state"))]


@dataclass
class HFTrained(Measured):
    """A trained stock model; ``alignment``: variable -> ``(hook, units)``; ``free``: hook -> free units."""

    task: str
    arch: str
    net: SteppedModel
    alignment: dict[str, tuple[str, list[int]]]
    free: dict[str, list[int]]
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def run(self, xs: torch.Tensor, units: tuple[str, list[int]] | dict[str, list[int]] | None = None,
            source: dict | None = None, grad: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(outputs, {hook: values})``; ``units`` (``(hook, units)`` of ``alignment`` or ``{hook: units}``) take
        their values in ``source`` (the hooks' values of another run) at every step inside the recurrence."""
        patch = None
        if units is not None:
            if source is None:
                raise InternalError("HFTrained.run: units to set need the source run's values")
            patch = {}
            for hook, chosen in (dict([units]) if isinstance(units, tuple) else units).items():
                values = torch.full_like(source[hook], float("nan"))
                values[..., chosen] = source[hook][..., chosen]
                patch[hook] = values
        return self.net.run_with_cache(xs, patch, grad=grad)

    def parameters(self) -> list[torch.nn.Parameter]:
        """The stock model's parameters: what training changes."""
        return list(self.net.hf.parameters())

    def set_training(self, on: bool) -> None:
        """The stock model in training mode (``on``) or in evaluation mode."""
        self.net.hf.train(on)

    def paired(self, base: np.ndarray, source: np.ndarray, units: Units) -> torch.Tensor:
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
        unit, "value")`` (never in the circuit), a conv window's ``("conv_window", unit, "helper")``, an attention
        block's ``("attention", unit, "helper")``, the readout the program's output."""
        per = UNITS_PER_COMPONENT[self.arch]
        labels = {}
        for spec in self.hooks[:-1]:
            name, width = spec["name"], spec["width"]
            node = WINDOW if name.endswith("conv_state") else ATTENTION if name.endswith(ATTENTION) else FREE
            labels[name] = [(node, unit, "value" if node == FREE else "helper") for unit in range(width)]
        for variable, (hook, units) in self.alignment.items():
            for position, unit in enumerate(units):
                labels[hook][unit] = (variable, position // per, "value")
        program = task_program(self.task)
        labels["readout"] = [(program.names[program.output], k, "value") for k in range(program_widths(program)[1])]
        return labels

    def card(self) -> str:
        """What the model card says of its training and its measured accuracies."""
        where = ", ".join(f"`{variable}` → `{hook}[{units[0]}:{units[-1] + 1}]`"
                          for variable, (hook, units) in self.alignment.items())
        attention = (" and the local-attention blocks' outputs (`attention`: every past position within the window "
                     "of the residual stream, which the states feed) are helpers") if self.arch == "griffin" else ""
        return (f" **Tier `trained`**: a stock `transformers` `{KINDS[self.arch]}` built from a config object and "
                f"trained by "
                f"interchange intervention training ({self.steps} Adam steps, seed {self.seed}; "
                f"`lsrl.bench.training.hf`), each circuit variable aligned with its own units of a carried state "
                f"({where}); `free` units are trained to be inert, the conv windows{attention} are helpers. Load it "
                f"with "
                f"`AutoModelForCausalLM.from_pretrained` (transformers), or `load_model.py`'s `load_folder`, which "
                f"runs it token by token through its own cache with the carried states hooked. "
                f"{measured(self.accuracy, self.interchange_accuracy, self.lengths)}")

    def circuit(self, data: dict[str, np.ndarray]) -> Circuit:
        """The ``Circuit``: a unit is live when it is not 0 at every real test step, in the circuit when it is
        live and aligned with a circuit variable (or is the readout); no unit edges (a trained model's weights
        are all non-zero)."""
        xs = data["test_inputs"]
        real = np.arange(xs.shape[1])[None] < data["test_lengths"][:, None]
        _, cache = self.net.run_with_cache(xs)
        program = task_program(self.task)
        nodes, edges = program_graph(program)
        wanted = {*self.alignment, program.names[program.output]}
        units: list[dict[str, Any]] = []
        holders: dict[tuple[str, int], list[list]] = {}
        for hook, labels in self.labels.items():
            active = np.abs(cache[hook].detach().double().numpy()[real]).max(axis=0) > 0
            for unit, (node, index, role) in enumerate(labels):
                live = bool(active[unit])
                in_circuit = live and role == "value" and node in wanted
                units.append({"hook": hook, "unit": unit, "node": node, "index": index, "role": role,
                              "holds": [node, index], "live": live, "in_circuit": in_circuit})
                if role == "value" and node != FREE:
                    holders.setdefault((node, index), []).append([hook, unit])
        touched = {unit["node"] for unit in units if unit["in_circuit"]}
        for graph_node in nodes:
            graph_node["in_circuit"] = graph_node["reaches_output"] and graph_node["name"] in touched
        trace = program.trace(xs, check_bounds=False)
        return Circuit(task=self.task, architecture=self.arch, output_hook="readout", hooks=self.hooks, units=units,
                       nodes=nodes, edges=edges, unit_edges=[], shut_edges=[],
                       variables=[{"node": node, "index": index, "units": holders[(node, index)],
                                   "in_circuit": node in touched} for node, index in sorted(holders)],
                       equivalent=equivalent_components(trace, real))


def hf_model(name: str, arch: str, seed: int = 0, decays: tuple[float, ...] = MAMBA_DECAYS) -> HFTrained:
    """The untrained model ``train_hf`` trains: the stock ``arch`` (``HF_ARCHS``) for task ``name``, one level per
    chained circuit variable, each variable aligned with its units of its level's carried state, the rest free;
    ``decays``: Mamba's and Mamba-2's initial ``-A`` (``mamba_init``)."""
    task = TASKS.get(name)
    variables = task.circuit_nodes() if task is not None else []
    largest = getattr(getattr(task, "sample", None), "largest", None)
    if task is None or not variables or largest is None or arch not in HF_ARCHS:
        raise LsrlError(f"train_hf: needs a token program task with named circuit variables and arch in {HF_ARCHS}, "
                        f"got {name!r}, {arch!r}")
    program = task_program(name)
    output = program_widths(program)[1]
    levels = variable_levels(program, variables)
    depth = max(levels.values()) + 1
    hf = stock_model(arch, max(largest + 1, output), depth, seed, decays)
    hooks = state_hooks(arch, depth) + [{"name": "readout", "width": output, "per_step": True}]
    hf.config.lsrl_bench = {"task": name, "architecture": arch, "tier": "trained", "token_low": 0,
                            "output_logits": list(range(output)), "hooks": hooks}
    alignment: dict[str, tuple[str, list[int]]] = {}
    taken: dict[str, int] = {}
    per = UNITS_PER_COMPONENT[arch]
    for variable, dim in variables:
        hook = state_hook(arch, levels[variable])
        first = taken.get(hook, 0)
        alignment[variable] = (hook, list(range(first, first + dim * per)))
        taken[hook] = first + dim * per
    free = {hook["name"]: [u for u in range(hook["width"]) if u >= taken.get(hook["name"], 0)]
            for hook in carried(hooks)}
    return HFTrained(name, arch, SteppedModel(hf), alignment, free, hooks=hooks)


def train_hf(name: str, arch: str, steps: int = STEPS, seed: int = 0, batch: int = HF_BATCH, lr: float = LR
             ) -> HFTrained:
    """Train the trained tier of task ``name`` as the stock ``arch`` (``HF_ARCHS``; ``hf_model``); see the module
    docstring. The learning rate falls to 0 along a cosine: the last steps fine-tune the outputs the accuracies
    round (Mamba's paren_depth at 600 steps: interchange accuracy 0.964 with it, 0.952 without). An interchange step
    trains every variable on the same pair, summed: one variable drawn per step left one variable of a chain below
    the aim in every arch (Hawk at 600 steps: at_least_3_ones' count 0.930, equal_counts' equal 0.914; summed: 0.997
    and 0.995), as did more steps or more interchange steps of one variable."""
    model = hf_model(name, arch, seed)
    fit(model, Recipe(batch, lr, cosine=True, every_variable=True), steps, seed)
    return model
