"""One rank of a TensorFlow world for test_tf_distributed.py, started as its own process with
torchrun's variables and FWBENCH_PEERS: builds the plugin (which joins the world), trains
`workload` for `steps` steps, and prints what the test compares between ranks as one JSON line.

usage: python tf_rank.py WORKLOAD DTYPE STEPS"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import numpy as np

from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.runtime.world import world_from_environment
from fwbench.spec import load_catalogue
from fwbench.tf_plugin import distributed
from fwbench.tf_plugin.plugin import TensorFlowPlugin


def main(workload: str, dtype: str, steps: int) -> dict[str, Any]:
    built_models: list[Any] = []
    build_model = distributed.models.build_model

    def keep(*args: Any, **kwargs: Any) -> Any:
        built_models.append(build_model(*args, **kwargs))
        return built_models[-1]

    distributed.models.build_model = keep  # type: ignore[assignment]
    context = PluginContext(device="cpu", threads=1, world=world_from_environment())
    plugin = TensorFlowPlugin(context)
    definition = load_catalogue().get(workload)
    params = {name: p.default for name, p in definition.params.items()}
    if "image_size" in params:
        params["image_size"] = 32
    strategy = "collective" if workload == "allreduce" else distributed.MWMS
    spec = WorkloadSpec(definition, "train", 4, dtype, params, 0, 0, "function", strategy)
    built = plugin.build(spec)
    outputs = [np.asarray(built.step()) for _ in range(steps)]
    assert built.rank is not None
    result: dict[str, Any] = {
        "rank": plugin.rank.world.rank if plugin.rank else -1,
        "outputs": [o.reshape(-1)[:4].astype(float).tolist() for o in outputs],
        "first_step_loss": built.rank.first_step_loss(),
        "backend": built.rank.backend,
        "collective_bytes": built.rank.collective_bytes,
        "settings": dict(built.settings.extra),
        "capabilities": {
            name: list(c.dtypes) for name, c in plugin.describe().capabilities.items()
        },
    }
    if built_models:
        slots = built_models[0].store.slots.values()
        digest = hashlib.sha256()
        for slot in slots:
            if slot.trainable:
                digest.update(np.asarray(slot.variable.numpy()).tobytes())
        result["weights"] = digest.hexdigest()
        statistics = [slot.variable for slot in slots if not slot.trainable]
        if statistics:  # BatchNorm's running mean: this rank's own, and as read
            local = getattr(statistics[0], "values", statistics[:1])[0]
            result["statistic_local"] = np.asarray(local.numpy()).tolist()
            result["statistic_read"] = np.asarray(statistics[0].numpy()).tolist()
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
