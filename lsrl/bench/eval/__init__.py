"""The evaluation harness of the benchmark: interpretability methods scored against known circuits.

``evaluate(subject, method)`` scores one method (a key of ``METHODS``) on a ``Subject`` (a tier model
of a task, ``lsrl.bench.tiers``); ``evaluate_all`` gives the table of every method × tier × task,
``write_csv`` writes it. ``lsrl bench eval --method M --task T`` and ``lsrl bench eval-all`` are the
commands. A method written outside lsrl is scored from its scores per unit: ``lsrl.bench.score(scores, folder)``
and ``lsrl bench score SUBMISSION SUITE`` (``lsrl.bench.eval.submission``).
"""

from lsrl.bench.eval.harness import COLUMNS, evaluate, evaluate_all, score, write_csv
from lsrl.bench.eval.hooked import tier_subject
from lsrl.bench.eval.methods import METHODS
from lsrl.bench.eval.metrics import auroc, rates
from lsrl.bench.eval.pairs import Found, Pairs
from lsrl.bench.eval.subject import Intervention, Subject

__all__ = ["COLUMNS", "METHODS", "Found", "Intervention", "Pairs", "Subject", "auroc", "evaluate", "evaluate_all",
           "rates", "score", "tier_subject", "write_csv"]
