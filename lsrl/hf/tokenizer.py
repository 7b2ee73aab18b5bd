"""A word-level ``transformers`` tokenizer for a token program's model: one word per token.

``tokenizer(hf_model, words)`` is a ``PreTrainedTokenizerFast`` (the ``tokenizers`` library's
``WordLevel`` model, words split at whitespace) whose id of a word is the model's ``input_ids`` of its
token: ``token - token_low``. Every word decodes with a space in front (``" OTT"``), so that the text
of generated tokens continues a prompt as words (the ``text-generation`` pipeline appends it to the
prompt). ``words`` maps each word to its token
(``{"CAN": 3, "OTT": 7, ...}``); by default the words are the token numbers (``"0"``, ``"1"``, ...).
Every token of the vocabulary ``token_low .. token_low + vocab_size - 1`` needs exactly one word. A
word not in the vocabulary cannot be encoded (the tokenizer has no unknown token: nothing is read
as a token it is not).

``lsrl.hf.save(hf_model, folder, words=...)`` writes it beside the model, so that
``AutoTokenizer.from_pretrained(folder)`` and ``pipeline("text-generation", model=folder)`` load it
without lsrl.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lsrl.errors import LsrlError, shown, whole_number
from lsrl.hf.record import checked_record

MARK = "\u2581"  # the word mark (SentencePiece's): a word's entry in the vocabulary is MARK + word

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast


def has_tokens(hf_model: PreTrainedModel) -> bool:
    """Whether ``hf_model`` (built by ``lsrl.hf.to_hf``) reads tokens (``input_ids``)."""
    return checked_record(hf_model)["input"] == "input_ids"


def tokenizer(hf_model: PreTrainedModel, words: Mapping[str, int] | None = None) -> PreTrainedTokenizerFast:
    """The word-level tokenizer of ``hf_model``'s tokens (module doc); ``LsrlError`` for a model that
    reads no tokens (naming its ``Input``) and for ``words`` that leave a token without a word, give
    one two, or name a token outside the vocabulary (naming the word)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    record = checked_record(hf_model)
    if not has_tokens(hf_model):
        raise LsrlError(f"lsrl.hf tokenizer: Input {record.get('input_name', '?')!r} of {record['program']!r} reads "
                        "no tokens (it is fed inputs_embeds: not one integer component with finite bounds), so "
                        "there is no vocabulary to name")
    low, size = int(record["token_low"]), int(hf_model.config.vocab_size)
    ids = _word_ids(words if words is not None else {str(low + i): low + i for i in range(size)}, low, size)
    model = Tokenizer(models.WordLevel(vocab=ids, unk_token="[UNK]"))  # not in ids: unknown words are refused
    model.pre_tokenizer = pre_tokenizers.Sequence([  # each word, marked as the SentencePiece tokenizers do
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=MARK, prepend_scheme="always",
                                                                   split=False)])
    model.decoder = decoders.Replace(MARK, " ")
    return PreTrainedTokenizerFast(tokenizer_object=model, model_max_length=int(record["max_len"]))


def _word_ids(words: Any, low: int, size: int) -> dict[str, int]:
    """``{word: token - low}`` after checking ``words`` (module doc)."""
    if not isinstance(words, Mapping):
        raise LsrlError(f"lsrl.hf.save: words must be a dict of word -> token, got {type(words).__name__}")
    ids: dict[str, int] = {}
    owner: dict[int, str] = {}
    for word, token in words.items():
        if not isinstance(word, str) or not word or word.split() != [word] or MARK in word:
            raise LsrlError(f"lsrl.hf.save: the word {shown(word)} must be a non-empty string without whitespace "
                            f"(and without {MARK!r})")
        number = whole_number(token)
        if number is None or not low <= number < low + size:
            raise LsrlError(f"lsrl.hf.save: the word {word!r} names token {shown(token)}, not one of the model's "
                            f"tokens {low} .. {low + size - 1}")
        if number in owner:
            raise LsrlError(f"lsrl.hf.save: the words {owner[number]!r} and {word!r} both name token {number}; "
                            "each token needs one word")
        owner[number] = word
        ids[MARK + word] = number - low
    missing = [low + i for i in range(size) if low + i not in owner]
    if missing:
        raise LsrlError(f"lsrl.hf.save: no word for token {missing[0]} (tokens {low} .. {low + size - 1} each need "
                        f"one; {len(missing)} have none)")
    return ids
