"""The check of a model's ``config.lsrl_io`` record (``lsrl.hf.io`` documents its fields) before it is used.

``config.json`` is a file a person can edit, and ``lsrl.hf.inputs`` / ``outputs`` / ``model_card`` read
only the record: each field is checked for its type and range and against the model's own config
(the architecture's ``model_type``, ``hidden_size``, ``vocab_size``) and the other fields, so that an
edited record is one ``LsrlError`` naming the field instead of a wrong answer or a raw exception. An
edit that keeps every field consistent (another power of two for ``output_scale``, swapped
``output_logits``) is caught by the record's own ``sha256`` (of its other fields, as canonical JSON):
lsrl writes it with the record, so a record edited by hand is refused unless its editor recomputes it.
``lsrl.hf.load`` also refuses a folder whose files (the weights too) differ from its manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from lsrl.errors import LsrlError, shown

FORMAT = 2  # 1: no sha256 of its own
MODEL_TYPES = {"mamba": "mamba", "mamba2": "mamba2", "hawk": "recurrent_gemma", "griffin": "recurrent_gemma"}
DTYPES = ("float32", "float64")
COMMON = ("arch", "program", "input_name", "input", "input_dim", "input_low", "input_high", "output_logits",
          "output_scale", "max_len", "dtype", "tolerance", "largest_weight")
FEEDING = {"input_ids": ("token_low",), "inputs_embeds": ("embed_channels", "embed_scale", "embed_constants")}


def checked_record(hf_model: Any) -> dict:
    """The ``config.lsrl_io`` record of ``hf_model``, every field checked (module doc)."""
    config = getattr(hf_model, "config", None)
    record = getattr(config, "lsrl_io", None)
    if isinstance(record, dict) and record.get("format") == 1:
        raise LsrlError(f"{type(hf_model).__name__}'s config.lsrl_io is of format 1, written by an earlier lsrl "
                        f"without its sha256: build the model again with lsrl.hf.to_hf")
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise LsrlError(f"{type(hf_model).__name__} has no lsrl I/O record (config.lsrl_io, format {FORMAT}): "
                        "it was not built by lsrl.hf.to_hf")
    where = f"{type(hf_model).__name__}'s config.lsrl_io"
    feeding = FEEDING.get(record["input"]) if isinstance(record.get("input"), str) else None
    if feeding is None:
        raise LsrlError(f"{where}: field 'input' must be one of {tuple(FEEDING)}, got {shown(record.get('input'))}")
    missing = [field for field in COMMON if field not in record]
    if missing:
        raise LsrlError(f"{where}: missing fields {missing}")
    missing = [field for field in feeding if field not in record]
    if missing:
        raise LsrlError(f"{where}: field 'input' is {record['input']!r}, which needs the missing fields {missing}")
    _check_common(record, config, where)
    if record["input"] == "input_ids":
        _check_tokens(record, config, where)
    else:
        _check_embedding(record, config, where)
    if record.get("sha256") != record_digest(record):
        raise LsrlError(f"{where} was edited after lsrl built it: its field 'sha256' does not match its other "
                        "fields")
    return record


def sealed(record: dict) -> dict:
    """``record`` with its field ``sha256`` (re)computed: the builders call it once the record is complete."""
    return {**record, "sha256": record_digest(record)}


def record_digest(record: dict) -> str:
    """The sha256 of ``record``'s fields but ``sha256`` itself, as canonical JSON (sorted keys)."""
    fields = {key: value for key, value in record.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _check_common(record: dict, config: Any, where: str) -> None:
    arch, model_type = record["arch"], getattr(config, "model_type", None)
    if not isinstance(arch, str) or arch not in MODEL_TYPES or MODEL_TYPES[arch] != model_type:
        raise LsrlError(f"{where}: field 'arch' is {shown(arch)}, but the model is a {shown(model_type)} model")
    for size in ("vocab_size", "hidden_size"):
        if not _is_whole(getattr(config, size, None)) or getattr(config, size) < 1:
            raise LsrlError(f"{where}: the model's config.{size} must be a positive integer, got "
                            f"{shown(getattr(config, size, None))}")
    for field in ("program", "input_name"):
        if not isinstance(record[field], str):
            raise LsrlError(f"{where}: field {field!r} must be a string, got {shown(record[field])}")
    dim = _whole(record, "input_dim", where, low=1)
    for side in ("input_low", "input_high"):
        bounds = record[side]
        if not isinstance(bounds, list) or len(bounds) != dim or not all(v is None or _finite(v) for v in bounds):
            raise LsrlError(f"{where}: field {side!r} must list 'input_dim' = {dim} finite numbers or null "
                            f"(unbounded), got {shown(bounds)}")
    if any(low is not None and high is not None and low > high
           for low, high in zip(record["input_low"], record["input_high"])):
        raise LsrlError(f"{where}: fields 'input_low' / 'input_high' hold a low bound above its high bound")
    logits = record["output_logits"]
    vocab = config.vocab_size
    if "generation" in record:
        _check_generation(record, where)
    elif (not isinstance(logits, list) or not logits or len(set(map(repr, logits))) != len(logits)
            or not all(_is_whole(v) and 0 <= v < vocab for v in logits)):
        raise LsrlError(f"{where}: field 'output_logits' must list distinct logit indices in 0..{vocab - 1}, "
                        f"got {shown(logits)}")
    _power_of_two(record, "output_scale", where)
    _whole(record, "max_len", where, low=1)
    if record["dtype"] not in DTYPES:
        raise LsrlError(f"{where}: field 'dtype' must be one of {DTYPES}, got {shown(record['dtype'])}")
    for field in ("tolerance", "largest_weight"):
        if not _finite(record[field]) or record[field] < 0:
            raise LsrlError(f"{where}: field {field!r} must be a finite number >= 0, got {shown(record[field])}")
    constant = record.get("hidden_constant", {"channel": 0, "value": 1.0})
    if (not isinstance(constant, dict) or set(constant) != {"channel", "value"} or not _is_whole(constant["channel"])
            or not 0 <= constant["channel"] < config.hidden_size or not _finite(constant["value"])
            or constant["value"] <= 0):
        raise LsrlError(f"{where}: field 'hidden_constant' must be {{'channel': a channel in "
                        f"0..{config.hidden_size - 1}, 'value': a positive number}}, got {shown(constant)}")


def _check_generation(record: dict, where: str) -> None:
    """A next-token head (``lsrl.hf.generation``): a token program whose output is the argmax's token."""
    head = record["generation"]
    if (record["input"] != "input_ids" or record["output_logits"] is not None or not isinstance(head, dict)
            or set(head) != {"logit", "margin"} or not isinstance(head["logit"], str) or not _finite(head["margin"])
            or not 0 < head["margin"] <= 0.5):
        raise LsrlError(f"{where}: field 'generation' must be {{'logit': str, 'margin': in (0, 1/2]}} on a token "
                        f"program whose 'output_logits' is null, got {shown(head)}")


def _check_tokens(record: dict, config: Any, where: str) -> None:
    """A token program: one input, its bounds finite and inside the vocabulary ``token_low ..``."""
    low = _whole(record, "token_low", where)
    bounds = (record["input_low"][0], record["input_high"][0])
    if record["input_dim"] != 1 or None in bounds or int(bounds[0]) != low or bounds[1] > low + config.vocab_size - 1:
        raise LsrlError(f"{where}: field 'token_low' ({low}) and the fields 'input_low' / 'input_high' "
                        f"{list(bounds)} must describe one token input whose vocabulary {low} .. "
                        f"{low + config.vocab_size - 1} starts at its low bound")


def _check_embedding(record: dict, config: Any, where: str) -> None:
    """``inputs_embeds``: distinct channels inside the hidden width, a power-of-two scale, constant anchors
    on channels of their own."""
    hidden, channels, constants = config.hidden_size, record["embed_channels"], record["embed_constants"]
    if (not isinstance(channels, list) or len(channels) != record["input_dim"]
            or not all(_is_whole(c) and 0 <= c < hidden for c in channels) or len(set(channels)) != len(channels)):
        raise LsrlError(f"{where}: field 'embed_channels' must list 'input_dim' = {record['input_dim']} distinct "
                        f"channels in 0..{hidden - 1}, got {shown(channels)}")
    _power_of_two(record, "embed_scale", where)
    if (not isinstance(constants, dict) or not constants
            or not all(isinstance(k, str) and k.isdigit() and int(k) < hidden and _finite(v)
                       for k, v in constants.items())
            or {int(k) for k in constants} & set(channels)):
        raise LsrlError(f"{where}: field 'embed_constants' must map channels in 0..{hidden - 1} other than "
                        f"'embed_channels' (as strings) to finite numbers, got {shown(constants)}")


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(record: dict, field: str, where: str, low: int | None = None) -> int:
    value = record[field]
    if not _is_whole(value) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        raise LsrlError(f"{where}: field {field!r} must be an integer{bound}, got {shown(value)}")
    return value


def _power_of_two(record: dict, field: str, where: str) -> None:
    value = record[field]
    if not _finite(value) or value <= 0 or math.frexp(value)[0] != 0.5:
        raise LsrlError(f"{where}: field {field!r} must be a positive power of two, got {shown(value)}")


__all__ = ["FORMAT", "checked_record", "record_digest", "sealed"]
