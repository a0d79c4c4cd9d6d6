"""The model file of one cell, as a plugin's `build` gets it (WorkloadSpec.model): its own
module, below plugin.py, so that the plugin contract can name it (model_files.py checks the
request and makes it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fwbench.spec import model_files, sample_inputs
from fwbench.spec.model_files import TensorInfo

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class ModelRequest:
    """The model file of a cell (WorkloadSpec.model): checked to exist with the named digest;
    `inputs` are the full shapes of the cell; `inputs_path` the user's sample inputs, where
    given (checked like the file)."""

    path: str
    format: str
    sha256: str
    inputs: tuple[TensorInfo, ...]
    inputs_path: str = ""
    count_flops: bool = False  # RunRequest.count_flops: BuiltStep.flops is asked after the loop

    def arrays(self, seed: int) -> dict[str, np.ndarray]:
        """The cell's inputs, the same numbers on every agent: the first rows of the user's
        sample inputs (sample_inputs.feed), else made from the seed (make_inputs)."""
        if self.inputs_path:
            return sample_inputs.feed(Path(self.inputs_path), self.inputs)
        return model_files.make_inputs(self.inputs, seed)
