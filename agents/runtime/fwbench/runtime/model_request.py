"""The model file of one cell, as a plugin's `build` gets it (WorkloadSpec.model): its own
module, below plugin.py, so that the plugin contract can name it (model_files.py checks the
request and makes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fwbench.spec import model_files
from fwbench.spec.model_files import TensorInfo

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class ModelRequest:
    """The model file of a cell (WorkloadSpec.model): checked to exist with the named digest;
    `inputs` are the full shapes of the cell."""

    path: str
    format: str
    sha256: str
    inputs: tuple[TensorInfo, ...]

    def arrays(self, seed: int) -> dict[str, np.ndarray]:
        """The cell's inputs, the same numbers on every agent (model_files.make_inputs)."""
        return model_files.make_inputs(self.inputs, seed)
