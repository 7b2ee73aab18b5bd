"""Finite automata in, exact recurrent networks out.

``DFA(...)``, ``from_regex(pattern, alphabet)``, ``Mealy(...)``, ``tomita(n)``, ``random_dfa(...)``;
``to_torch(machine, "rnn" | "second_order" | "lstm" | "gru")`` (``network_size`` first: its size, known
before anything is built); ``export_onnx(network, path)``;
``learn_back(network, alphabet[, outputs=])`` (AALpy's L* with the network as membership oracle);
``check(machines, architectures)`` (the full random-string check, ``lsrl.automata.checking``).
The names that need PyTorch load on first use, so that ``import lsrl`` stays quick.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from lsrl.automata.machines import DFA, Mealy, from_regex, random_dfa
from lsrl.automata.tomita import tomita

_LAZY = {
    "ARCHITECTURES": "lsrl.automata.compile", "AutomatonNetwork": "lsrl.automata.networks",
    "to_torch": "lsrl.automata.compile", "network_size": "lsrl.automata.compile",
    "NetworkSize": "lsrl.automata.compile", "DEFAULT_MAX_PARAMETERS": "lsrl.automata.compile",
    "gain_bound": "lsrl.automata.gated",
    "certified_deviation": "lsrl.automata.gated", "export_onnx": "lsrl.automata.export",
    "learn_back": "lsrl.automata.learning", "check": "lsrl.automata.checking",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lsrl.automata' has no attribute {name!r}")


__all__ = ["DFA", "Mealy", "from_regex", "random_dfa", "tomita", *_LAZY]
