"""A compiled program: ``CompiledProgram`` (a path of layers), its runners and its file format.

``lsrl.model.exact`` runs the layers over exact rationals, ``lsrl.model.runner`` in float64 (numba);
``lsrl.model.saving`` writes and ``lsrl.model.fileformat`` reads ``model.json`` + ``weights.safetensors``, as a
folder bound by ``manifest.json`` (``lsrl.model.folders``);
``lsrl.model.extensions`` is where the packages built on the model (the targets, the diagonalising
pass) register what ``model.to_torch`` and ``model.diagonal()`` run.
"""

from lsrl.model.compiled import CompiledProgram
from lsrl.model.fileformat import load

__all__ = ["CompiledProgram", "load"]
