"""Every LSRL program in the stock ``transformers`` models of the field: Mamba, Mamba-2 and
RecurrentGemma (Hawk, Griffin); only a config and weights are written.

Interface:

- ``lsrl.hf.to_hf(model, arch, max_len, dtype=torch.float32)`` (also ``model.to_hf(arch, max_len,
  dtype)``): ``model`` a ``CompiledProgram``, ``arch`` one of ``ARCHITECTURES`` (``"hf-mamba"``,
  ``"hf-mamba2"``, ``"hf-hawk"``, ``"hf-griffin"``: the ``hf-`` tells them from ``lsrl.targets``' own Hawk
  and Griffin; the older spellings of ``ALIASES``, without it, still work); returns a stock
  ``MambaForCausalLM`` / ``Mamba2ForCausalLM`` / ``RecurrentGemmaForCausalLM`` that runs the program on
  sequences of up to ``max_len`` steps within the ``Input``'s declared bounds, to the tolerance its
  record states. Builders are ``(model, max_len, dtype) -> PreTrainedModel``, named by
  ``"module:function"`` in an ``HfArchitecture`` record of the model's one registry of builders
  (``lsrl.model.extensions.BUILDERS``, beside ``lsrl.targets``' targets) and imported when used
  (``import lsrl`` imports neither torch nor transformers).
- The I/O record ``config.lsrl_io`` (a JSON dict; ``lsrl.hf.io`` documents its fields): which input
  the forward takes (``input_ids = token - token_low`` for a token program, else ``inputs_embeds``
  with the input in ``embed_channels`` times ``embed_scale`` and the constant anchor channels
  ``embed_constants``), and how outputs are read (``logits[..., output_logits] * output_scale``).
- ``lsrl.hf.inputs(hf_model, xs) -> dict`` (the forward's keyword arguments) and
  ``lsrl.hf.outputs(hf_model, result) -> (B, T, d_out)``: read only ``config.lsrl_io``.
- ``to_hf(..., generate=True)``: a next-token head for a token program (``lsrl.hf.generation``), so that
  ``generate`` answers; ``lsrl.hf.save(hf_model, path, words=...)`` writes a word-level tokenizer of the
  program's tokens beside it (``lsrl.hf.tokenizer``).
- ``lsrl.hf.model_card(hf_model) -> str`` (README.md: the same in words) and ``lsrl.hf.save(hf_model,
  path)`` (``save_pretrained`` plus the card and ``manifest.json``, written as a unit); the folder loads
  with ``AutoModelForCausalLM.from_pretrained`` without lsrl, and with ``lsrl.hf.load(path)``, which
  refuses it where a file differs from the manifest.
- ``lsrl.hf.stream``: the residual-stream layout the constructions share (anchor channels that make
  every RMSNorm an exact constant scaling, the payload scale from ``relational_bounds`` at ``max_len``).
- ``lsrl.hf.rounding``: the rounding analysis they share; each builder's module doc proves the
  ``tolerance`` it records from it (0 where every output is provably exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lsrl.errors import LsrlError, shown, whole_number
from lsrl.sugar import flag
from lsrl.hf.io import inputs, load, model_card, outputs, save
from lsrl.hf.record import DTYPES
from lsrl.model import extensions
from lsrl.targets.registry import resolve_reference

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from lsrl.model.compiled import CompiledProgram

@dataclass(frozen=True)
class HfArchitecture:
    """One stock ``transformers`` architecture in the model's registry of builders
    (``lsrl.model.extensions.BUILDERS``): ``model.to_hf(name, ...)`` builds it with ``builder``."""

    name: str
    builder: str  # "module:function": (model, max_len, dtype) -> PreTrainedModel
    aliases: tuple[str, ...] = ()  # older spellings to_hf still takes
    door: ClassVar[str] = "to_hf"  # the model method that builds it

    def build(self, model: CompiledProgram, max_len: int, dtype: torch.dtype | str | None = None,
              generate: bool = False) -> PreTrainedModel:
        """What ``model.to_hf(self.name, max_len, dtype, generate)`` returns (see ``to_hf``)."""
        import torch

        from lsrl.hf.generation import generation_head, require_token_program

        if whole_number(max_len) is None or max_len < 1:
            raise LsrlError(f"to_hf: max_len must be a positive integer (the longest sequence), got {shown(max_len)}")
        if dtype is not None and not isinstance(dtype, (str, torch.dtype)):
            raise LsrlError(f"to_hf: dtype must be torch.float32 or torch.float64, got {shown(dtype)}")
        name = str(dtype or "float32").removeprefix("torch.")
        if name not in DTYPES:
            raise LsrlError(f"to_hf: dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if flag(generate, "to_hf: generate"):
            require_token_program(model, "to_hf(generate=True)")
        hf_model = resolve_reference(self.builder)(model, int(max_len), getattr(torch, name))
        return generation_head(hf_model) if generate else hf_model


def _register(name: str, builder: str) -> str:
    """Register the stock architecture ``name`` (``hf-`` and its model family, the older spelling)."""
    extensions.register_builder(HfArchitecture(name, builder, aliases=(name.removeprefix("hf-"),)))
    return name


# "hf-" names: lsrl.targets' "hawk" and "griffin" are the papers' App. E torch modules, these the stock models
ARCHITECTURES = (
    _register("hf-mamba", "lsrl.hf.mamba:build_mamba"),
    _register("hf-mamba2", "lsrl.hf.mamba2:build_mamba2"),
    _register("hf-hawk", "lsrl.hf.recurrentgemma:build_hawk"),
    _register("hf-griffin", "lsrl.hf.recurrentgemma:build_griffin"),
)
# the older spellings to_hf still takes (config.lsrl_io's "arch" keeps them: the model family)
ALIASES = {alias: arch for arch in ARCHITECTURES for alias in extensions.BUILDERS[arch].aliases}


def to_hf(model: CompiledProgram, arch: str, max_len: int, dtype: torch.dtype | str | None = None,
          generate: bool = False) -> PreTrainedModel:
    """``model`` (a CompiledProgram) as a stock ``transformers`` model of ``arch``, exact for sequences
    of up to ``max_len`` steps in ``dtype`` (torch.float32 by default, or torch.float64); see the
    package docstring. ``generate=True`` (a token program with one output) gives it a next-token head
    (``lsrl.hf.generation``): the argmax of the logits is the program's output token."""
    return extensions.find_builder(arch, "to_hf").build(model, max_len, dtype, generate)


__all__ = ["ALIASES", "ARCHITECTURES", "HfArchitecture", "inputs", "load", "model_card", "outputs", "save", "to_hf"]
