"""The extraction round trip: AALpy's L* learns a DFA or a Mealy machine back from a compiled network.

The network is the membership (output) oracle: a query's answers are the network's outputs after each
prefix (its hidden state is carried from symbol to symbol, one step per symbol) — acceptance for a DFA's
network, the output symbol for a Mealy machine's; the equivalence oracle samples random words, runs them
through the network as one batch, and returns the shortest prefix on which the hypothesis disagrees
(AALpy's ``RandomWordEqOracle`` does the same word by word, a hundred times slower with one network call
per symbol). This is the workflow researchers run to extract automata from trained RNNs, here on networks
whose answer is known: the learned machine must be equivalent to the compiled one (``DFA.equivalent`` and
``Mealy.equivalent`` decide it exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import torch

from lsrl.automata.arguments import items, whole_number
from lsrl.automata.machines import DFA, Mealy
from lsrl.errors import LsrlError, checked_call

if TYPE_CHECKING:
    from aalpy.base import SUL, Oracle

    from lsrl.automata.networks import AutomatonNetwork, State

Answer: TypeAlias = "Callable[[np.ndarray], Hashable]"  # one step's readout (C,) -> L*'s answer

MAX_WORDS = 10**6  # learn_back: random words per equivalence query (each one run through the network)
MAX_WORD_LENGTH = 10**4  # ... and their length: a batch of words is one (words, length) array


def _decoder(outputs: Sequence[Hashable] | None) -> Answer:
    """How one step's readout ``(C,)`` reads as L*'s answer: acceptance (``outputs`` None: a DFA), or the
    output symbol of the one channel that is on (a Mealy machine). Any other pattern reads as the tuple of
    the symbols on, an answer the machine never gives, so that L* sees a wrong network instead of hiding it."""
    if outputs is None:
        return lambda channels: bool(channels[0] > 0.5)

    def output_symbol(channels: np.ndarray) -> Hashable:
        on = np.flatnonzero(channels > 0.5)
        return outputs[int(on[0])] if len(on) == 1 else tuple(outputs[int(i)] for i in on)

    return output_symbol


def _network_sul(network: AutomatonNetwork, alphabet: Sequence[Hashable], answer: Answer) -> SUL:
    from aalpy.base import SUL

    index = {symbol: i for i, symbol in enumerate(alphabet)}

    class NetworkSUL(SUL):
        """Membership (output) queries answered by ``network``, one symbol at a time."""

        state: State | None

        def pre(self) -> None:
            self.state = network.initial_state(1)

        def post(self) -> None:
            self.state = None

        def step(self, letter: Hashable | None) -> Hashable:
            if letter is None:  # the empty word (DFA learning only)
                return answer(network.initial_output().numpy())
            x = torch.zeros(1, 1, len(alphabet), dtype=network.h0.dtype)
            x[0, 0, index[letter]] = 1
            with torch.no_grad():
                hidden, self.state = network.hidden(x, self.state)
                return answer(network.read(hidden)[0, -1].numpy())

    return NetworkSUL()


def _sampling_oracle(network: AutomatonNetwork, alphabet: Sequence[Hashable], answer: Answer, words: int, length: int,
                     rng: np.random.Generator, sul: SUL) -> Oracle:
    from aalpy.base import Oracle

    class SamplingOracle(Oracle):
        """Random words of ``length`` symbols; every prefix is compared with the hypothesis."""

        def find_cex(self, hypothesis: Any) -> tuple[Hashable, ...] | None:  # an AALpy automaton
            indices = rng.integers(0, len(alphabet), size=(words, length))
            with torch.no_grad():
                readouts = network(torch.nn.functional.one_hot(torch.as_tensor(indices), len(alphabet))).numpy()
            self.num_queries += words
            for word, expected in zip(indices, readouts):
                hypothesis.reset_to_initial()
                for t, symbol in enumerate(word):
                    if hypothesis.step(alphabet[symbol]) != answer(expected[t]):
                        return tuple(alphabet[i] for i in word[: t + 1])
            return None

    return SamplingOracle(alphabet, sul)


@checked_call
def learn_back(network: AutomatonNetwork, alphabet: Iterable[Hashable], *, outputs: Sequence[Hashable] | None = None,
               words: int = 1000, length: int = 50, seed: int = 0) -> DFA | Mealy:
    """The machine that AALpy's L* learns from ``network`` over ``alphabet``: a ``DFA`` from a DFA's network,
    or, given the output symbols ``outputs`` (in the order of the network's channels, ``Mealy.outputs``),
    a ``Mealy`` machine from a Mealy machine's network. Each equivalence query samples ``words`` random
    words of ``length`` symbols (every prefix counts)."""
    from aalpy.learning_algs import run_Lstar

    from lsrl.automata.networks import AutomatonNetwork

    if not isinstance(network, AutomatonNetwork):
        raise LsrlError(f"learn_back: network must be an automaton network (lsrl.automata.to_torch), got "
                        f"{type(network).__name__}")
    words = whole_number(words, "words", "learn_back", minimum=1, maximum=MAX_WORDS, error=LsrlError)
    length = whole_number(length, "length", "learn_back", minimum=1, maximum=MAX_WORD_LENGTH, error=LsrlError)
    seed = whole_number(seed, "seed", "learn_back", minimum=0, error=LsrlError)
    alphabet = list(items(alphabet, "the alphabet", "learn_back"))
    if len(alphabet) != network._input_size() or len(set(alphabet)) != len(alphabet):
        raise LsrlError(f"learn_back: the alphabet must name the network's {network._input_size()} input symbols "
                        f"once each, got {alphabet!r}")
    if outputs is not None:
        outputs = list(items(outputs, "outputs", "learn_back"))
    channels = network.readout.out_features
    if outputs is None and channels != 1:
        raise LsrlError(f"learn_back: a DFA's network has one acceptance channel, this one has {channels}; "
                        f"for a Mealy machine's network pass its output symbols as outputs=")
    if outputs is not None and len(outputs) != channels:
        raise LsrlError(f"learn_back: outputs names {len(outputs)} output symbols, the network has {channels} "
                        f"output channels")
    answer = _decoder(outputs)
    sul = _network_sul(network, alphabet, answer)
    oracle = _sampling_oracle(network, alphabet, answer, words, length, np.random.default_rng(seed), sul)
    learned = run_Lstar(alphabet, sul, oracle, automaton_type="dfa" if outputs is None else "mealy",
                        print_level=0)
    names = {state: i for i, state in enumerate(learned.states)}
    if outputs is not None:
        transitions = {names[state]: {a: (names[state.transitions[a]], state.output_fun[a]) for a in alphabet}
                       for state in learned.states}
        return Mealy(range(len(names)), alphabet, outputs, transitions, names[learned.initial_state])
    dfa_transitions = {names[state]: {a: names[state.transitions[a]] for a in alphabet} for state in learned.states}
    accepting = [names[state] for state in learned.states if state.is_accepting]
    return DFA(range(len(names)), alphabet, dfa_transitions, names[learned.initial_state], accepting,
               check_reachable=False)
