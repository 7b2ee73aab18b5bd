"""How a program's inputs enter a stock Hugging Face model and how its outputs are read back.

Every model ``lsrl.hf.to_hf`` builds carries its I/O record as ``config.lsrl_io``, a plain JSON dict
(``config.json`` keeps it through ``save_pretrained`` / ``from_pretrained``), so that a user without
lsrl can feed the model and read it. ``lsrl.hf.record`` checks every field before it is used. Format 2:

``format``          2 (format 1 lacked ``sha256``; such records are refused: build the model again)
``arch``            "mamba", "mamba2", "hawk" or "griffin"
``program``         the program's name
``input``           "input_ids" (a token program: its ``Input`` is one integer with finite bounds) or
                    "inputs_embeds" (every other program)
``input_dim``       the program's input width ``d_in``
``input_low``,      the declared bounds of each input component (lists; outside them the stated
``input_high``      tolerance does not hold)
``token_low``       (input_ids) ``input_ids = token - token_low``; the vocabulary is ``token_low`` ..
                    ``token_low + config.vocab_size - 1``
``embed_channels``  (inputs_embeds) ``inputs_embeds[..., embed_channels[i]] = embed_scale * x[..., i]``
``embed_scale``     (inputs_embeds) a power of two
``embed_constants`` (inputs_embeds) ``{channel: value}`` (keys are strings, as JSON has them): constant
                    "anchor" channels set at every step; every other channel is 0
``input_name``      the name of the program's ``Input``
``output_logits``   ``y[..., j] = logits[..., output_logits[j]] * output_scale`` (None with ``generation``)
``output_scale``    a power of two (the model's own scale is undone exactly)
``generation``      (a token program built with ``generate=True``) ``{"logit": ..., "margin": m}``: the
                    output is the token of the largest logit, ``argmax + token_low``, ahead of every
                    other by at least ``m`` (``lsrl.hf.generation``)
``hidden_constant`` ``{"channel": c, "value": v}``: the final hidden state (after the last norm) holds
                    ``v`` in channel ``c`` at every step
``max_len``         the longest sequence the construction is proved for
``dtype``           "float32" or "float64": the dtype the model was built and checked in
``tolerance``       every output is within ``tolerance`` (absolute) of the program's, a proved bound
                    (``lsrl.hf.rounding``; 0: every output exact); an output that is an integer (a
                    token) is read exactly by rounding when ``tolerance < 1/2``
``largest_weight``  the largest weight magnitude written (float16 cannot hold more than 65504)
``sha256``          the sha256 of the other fields as canonical JSON (``json.dumps(..., sort_keys=True)``):
                    a record edited by hand is refused
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lsrl.errors import LsrlError
from lsrl.hf.record import DTYPES, FORMAT, checked_record
from lsrl.lang.evaluate import finite_numbers
from lsrl.model.folders import read_bound, replaced_folder
from lsrl.model.writing import as_path

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

README = "README.md"


def io_record(hf_model: PreTrainedModel) -> dict:
    """The ``config.lsrl_io`` record of a model built by ``lsrl.hf.to_hf``, every field checked
    (``lsrl.hf.record``)."""
    return checked_record(hf_model)


def inputs(hf_model: PreTrainedModel, xs: Any) -> dict:
    """The forward's keyword arguments for the program inputs ``xs`` (``(T, d_in)`` or ``(B, T, d_in)``):
    ``{"input_ids": (B, T) long}`` for a token program, else ``{"inputs_embeds": (B, T, hidden)}`` in
    the model's dtype. Reads only ``config.lsrl_io``."""
    import torch

    from lsrl.targets.facts import watch

    record = io_record(hf_model)
    watch(hf_model, record["arch"])  # a loaded model: its floating-point facts where it runs (lsrl.targets.facts)
    array = _batch(xs, record)
    if record["input"] == "input_ids":
        tokens = np.rint(array[..., 0]).astype(np.int64) - int(record["token_low"])
        if np.any(tokens < 0) or np.any(tokens >= hf_model.config.vocab_size) or np.any(
                tokens + int(record["token_low"]) != array[..., 0]):
            raise LsrlError(f"lsrl.hf.inputs: tokens must be integers in [{record['token_low']}, "
                            f"{record['token_low'] + hf_model.config.vocab_size - 1}]")
        return {"input_ids": torch.from_numpy(tokens)}
    dtype = getattr(torch, record["dtype"])
    embeds = torch.zeros(*array.shape[:2], hf_model.config.hidden_size, dtype=torch.float64)
    embeds[..., record["embed_channels"]] = torch.from_numpy(array) * record["embed_scale"]
    for channel, value in record["embed_constants"].items():
        embeds[..., int(channel)] = value
    return {"inputs_embeds": embeds.to(dtype)}


def outputs(hf_model: PreTrainedModel, result: Any) -> torch.Tensor:
    """The program's outputs ``(B, T, d_out)`` from a forward's result (or its logits), as the
    record says: the chosen logits times ``output_scale``. Reads only ``config.lsrl_io``. Integer
    logits, and a model moved to another dtype than the record's (float16, say) are refused: the stated
    tolerance holds in the dtype the model was built and checked in."""
    import torch

    record = io_record(hf_model)
    logits = getattr(result, "logits", result)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[-1] != hf_model.config.vocab_size:
        shape = tuple(getattr(logits, "shape", ()))
        raise LsrlError(f"lsrl.hf.outputs: result must be the model's forward result or its logits (B, T, "
                        f"{hf_model.config.vocab_size}), got {type(logits).__name__} {shape}")
    _check_logits_dtype(hf_model, logits, record)
    if "generation" in record:  # a next-token head: the output is the argmax's token
        return (logits.argmax(-1, keepdim=True) + int(record["token_low"])).to(logits.dtype)
    return logits[..., record["output_logits"]] * record["output_scale"]


def model_card(hf_model: PreTrainedModel) -> str:
    """A README.md for the saved folder: what the model computes and how to feed and read it, in words
    and in code that needs only torch and transformers."""
    record = io_record(hf_model)
    if record["input"] == "input_ids":
        feeding = (f"Feed the tokens as `input_ids = token - {record['token_low']}` (tokens "
                   f"{record['token_low']} .. {record['token_low'] + hf_model.config.vocab_size - 1}). The folder's "
                   "tokenizer (`AutoTokenizer.from_pretrained(FOLDER)`, one word per token) does it for text.")
        code_in = f"out = model(input_ids=torch.tensor([tokens]) - {record['token_low']})"
    else:
        constants = ", ".join(f"{channel}: {value!r}" for channel, value in record["embed_constants"].items())
        feeding = (f"Feed `inputs_embeds` of width {hf_model.config.hidden_size}, zero except: input component i "
                   f"times {record['embed_scale']!r} in channel `embed_channels[i]` = {record['embed_channels']}, "
                   f"and the constant channels {{{constants}}} at every step.")
        code_in = (f"embeds = torch.zeros(1, T, {hf_model.config.hidden_size}, dtype=torch.{record['dtype']})\n"
                   f"embeds[0, :, {record['embed_channels']}] = torch.as_tensor(xs, dtype=embeds.dtype) * "
                   f"{record['embed_scale']!r}\n"
                   + "".join(f"embeds[..., {channel}] = {value!r}\n"
                             for channel, value in record["embed_constants"].items())
                   + "out = model(inputs_embeds=embeds)")
    return f"""---
library_name: transformers
tags: [lsrl, compiled]
---
# {record['program']} in a stock {type(hf_model).__name__}

These weights were written by [lsrl](https://github.com/) from the LSRL program `{record['program']}`:
nothing was trained. The model runs the program exactly for sequences of up to {record['max_len']} steps
whose inputs lie within the declared bounds (low {record['input_low']}, high {record['input_high']}), in
{record['dtype']}: every output is within {record['tolerance']:.3g} of the program's.

**Input.** {feeding}
{_card_float64(record)}
{_card_output(hf_model, record, code_in)}
The same record is `config.lsrl_io` in `config.json`.
"""


def _card_output(hf_model: PreTrainedModel, record: dict, code_in: str) -> str:
    """The model card's output section: a readout of logits, or (a generation head) next tokens."""
    loading = f"""```python
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.{record['dtype']})
"""
    if "generation" not in record:
        return f"""**Output.** Output j is `logits[..., {record['output_logits']}[j]] * {record['output_scale']!r}`
(the other logits are 0). Where the program's output is a token (an integer) and the tolerance is
below 1/2, rounding reads it exactly.{_card_stepwise(hf_model)}

{loading}{code_in}
ys = out.logits[..., {record['output_logits']}] * {record['output_scale']!r}
```
"""
    cache = _card_cache(hf_model)
    return f"""**Output: the next token.** The output is the token of the largest logit
(`argmax + {record['token_low']}`), ahead of every other logit by at least {record['generation']['margin']:.3g}:
greedy decoding feeds it back, so `generate` continues a prompt with the program's outputs
(the sequence, prompt and new tokens, at most {record['max_len']} steps). {cache}{_card_stepwise(hf_model)}

{loading}{code_in}
next_tokens = out.logits.argmax(-1) + {record['token_low']}
```

With the folder's tokenizer, in words:

```python
from transformers import pipeline

generator = pipeline("text-generation", model=FOLDER)
print(generator(PROMPT, max_new_tokens=N, do_sample=False)[0]["generated_text"])
```
"""


# What the stock modeling code computes in float32 whatever the model's dtype (it casts to float32 first): the
# parts a float64 model keeps float32-class (tests/test_hf_float64.py checks each cast on the running transformers)
NORMS = "its RMSNorms (each block's input and the final norm, so every value a block or the head reads)"
FLOAT32_PARTS = {
    "mamba": f"{NORMS}, its selective scan (the state) and its logits",
    "mamba2": f"{NORMS}, its chunked scan (the state), the gated group norm of every block's output and its logits",
    "hawk": f"{NORMS} and its RG-LRU scan (the state)",
    "griffin": f"{NORMS} and its RG-LRU scan (the state)",
}


def _card_float64(record: dict) -> str:
    """Where a float64 model keeps float32 precision (the stock code), and so its tolerance."""
    if record["dtype"] != "float64":
        return ""
    return (f"\n**float64 keeps float32-class error.** The stock code computes {FLOAT32_PARTS[record['arch']]} in "
            "float32 also in a float64 model (it casts to float32 first), so every value is rounded to float32's "
            "24 bits on its way through the model: the tolerance is proved with float32's unit roundoff `2**-24`, "
            "as for the float32 model, and the outputs' error is of the float32 model's size. Only values on a "
            "grid (integers, counters) are exact in both.\n")


def _card_cache(hf_model: PreTrainedModel) -> str:
    """How ``generate`` may use the stock cache of ``hf_model``."""
    kinds = getattr(hf_model.config, "layers_block_type", None)
    if kinds is None:  # Mamba, Mamba-2
        return "`generate` decodes through the stock cache."
    advice = ("The stock model cannot count a cache without attention blocks (`use_cache=True` raises its "
              "`ValueError`)." if not any("attention" in kind and "linear" not in kind
                                          for kind in kinds[:hf_model.config.num_hidden_layers]) else
              "`generate(..., use_cache=True)` decodes through the stock cache from a prompt of at least 2 tokens "
              "(a one-token start fails in the stock recurrent block).")
    return f"The folder sets `use_cache=False`: `generate` runs every step over the whole sequence. {advice}"


def _card_stepwise(hf_model: PreTrainedModel) -> str:
    """How to decode ``hf_model`` step by step through its stock cache, where that needs care (RecurrentGemma)."""
    if getattr(hf_model.config, "layers_block_type", None) is None:
        return ""
    return ("\n\nStep by step through the stock cache: pass `use_cache=True`, `position_ids` and a "
            "`DynamicCache(config=model.config)`, and start with a prefill of 2 or more tokens (a one-token start "
            "sizes the convolution state by `hidden_size`, not `lru_width`); where the model has no attention "
            "block, also pass `attention_mask={\"sliding_attention\": None}`.")


def save(hf_model: PreTrainedModel, path: str | Path, words: Mapping[str, int] | None = None) -> Path:
    """``hf_model.save_pretrained(path)`` plus the model card as ``path/README.md``, for a token program its
    word-level tokenizer (``lsrl.hf.tokenizer``: ``words`` maps each word to its token; by default the token
    numbers), and ``manifest.json`` (the sha256 of every file), written as a unit (``lsrl.model.folders``);
    returns the folder."""
    from lsrl.hf.tokenizer import has_tokens, tokenizer

    card = model_card(hf_model)  # refuses a model lsrl did not build before anything is written
    words_for = tokenizer(hf_model, words) if words is not None or has_tokens(hf_model) else None
    folder = as_path(path, "lsrl.hf.save")
    with replaced_folder(folder, "lsrl.hf.save") as staging:
        hf_model.save_pretrained(staging)
        if words_for is not None:
            words_for.save_pretrained(staging)
        (staging / README).write_text(card)
    return folder


def load(path: str | Path, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """The model of a folder written by ``lsrl.hf.save`` (``AutoModelForCausalLM.from_pretrained``, in the
    record's dtype unless ``dtype`` is given), after checking every file against ``manifest.json`` and the
    ``lsrl_io`` record; an edited or mixed folder is a ``ModelFileError`` naming the file."""
    import torch

    def read(folder: Path) -> PreTrainedModel:
        from transformers import AutoConfig, AutoModelForCausalLM

        built = getattr(AutoConfig.from_pretrained(folder), "lsrl_io", None)
        named = built.get("dtype") if isinstance(built, dict) else None  # checked with the rest below
        hf_model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=dtype or getattr(torch, named if named in DTYPES else "float32"))
        io_record(hf_model)
        return hf_model

    return read_bound(path, "lsrl.hf.load", ("config.json",), read)


def _batch(xs: Any, record: dict) -> np.ndarray:
    """``xs`` as a float64 ``(B, T, d_in)`` array within the declared bounds."""
    array = finite_numbers(xs, "lsrl.hf.inputs: xs").astype(np.float64)  # text, None, masks, NaN: refused
    array = array[None] if array.ndim == 2 else array
    if array.ndim != 3 or array.shape[-1] != record["input_dim"] or 0 in array.shape[:2]:
        raise LsrlError(f"lsrl.hf.inputs: xs must have shape (T, {record['input_dim']}) or "
                        f"(B, T, {record['input_dim']}) with B, T >= 1, got {np.shape(xs)}")
    if array.shape[1] > record["max_len"]:
        raise LsrlError(f"lsrl.hf.inputs: {array.shape[1]} steps, but the model is built for at most "
                        f"max_len={record['max_len']}")
    low = np.array([-np.inf if v is None else v for v in record["input_low"]])
    high = np.array([np.inf if v is None else v for v in record["input_high"]])
    if np.any(array < low) or np.any(array > high):
        raise LsrlError("lsrl.hf.inputs: xs must be within the declared Input bounds "
                        f"(low {record['input_low']}, high {record['input_high']})")
    return array


def make_record(model: Any, arch: str, max_len: int, dtype: str, tolerance: float, output_logits: list[int],
                output_scale: float, largest_weight: float, **feeding: Any) -> dict:
    """The ``config.lsrl_io`` record (format above) of ``model`` (a CompiledProgram) built as ``arch``;
    ``feeding``: ``token_low`` for a token program, else ``embed_channels``, ``embed_scale`` and
    ``embed_constants``."""
    low, high = model.input.bounds
    token = "token_low" in feeding
    return {
        "format": FORMAT, "arch": arch, "program": model.name, "input_name": str(model.input.name),
        "input": "input_ids" if token else "inputs_embeds",
        "input_dim": model.input.dim, "input_low": [_json_bound(v) for v in low],
        "input_high": [_json_bound(v) for v in high], **feeding, "output_logits": list(output_logits),
        "output_scale": float(output_scale), "max_len": int(max_len), "dtype": dtype,
        "tolerance": float(tolerance), "largest_weight": float(largest_weight),
    }


def _json_bound(value: Any) -> float | None:
    """A declared bound for JSON: a float, or None for an infinite one."""
    number = float(value)
    return None if np.isinf(number) else number


def _check_logits_dtype(hf_model: PreTrainedModel, logits: torch.Tensor, record: dict) -> None:
    """Refuse logits that are no floats (``lsrl.hf.outputs``), and a model whose weights were moved to another
    dtype than the record's (the logits of a stock model may be upcast to float32 whatever it ran in)."""
    if not logits.is_floating_point():
        raise LsrlError(f"lsrl.hf.outputs: the logits must be floats, got {logits.dtype}; pass the model's own logits")
    weights = {str(tensor.dtype).removeprefix("torch.") for tensor in hf_model.parameters()
               if tensor.is_floating_point()}
    if weights - {record["dtype"]}:
        raise LsrlError(f"lsrl.hf.outputs: the model's weights are {', '.join(sorted(weights))}, but it was built and "
                        f"checked in {record['dtype']} (its stated tolerance holds there); move it back with "
                        f"model.to(torch.{record['dtype']})")
