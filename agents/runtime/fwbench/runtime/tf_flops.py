"""The forward FLOPs of a TensorFlow function (protocol 1.9's FlopCount), for the agents that
run one (TensorFlow's SavedModels, Keras on the TensorFlow backend): TensorFlow's own profiler
(`tf.compat.v1.profiler`, float_operation) over the function's graph at the cell's shapes,
its variables frozen into constants so that the calls of the functions it holds are inlined
(the profiler does not enter a call: an unfrozen SavedModel's signature counts 0). The
profiler counts a multiply-add as 2 FLOPs, as the catalogue does, and elementwise arithmetic
(a bias, an addition) at one per element. A graph with a loop (a recurrent layer's while
loop) is not counted: the profiler counts a loop's body once, not once per iteration."""

from __future__ import annotations

from typing import Any

from fwbench.runtime.plugin import FlopCount

LOOPS = {"While", "StatelessWhile", "NextIteration"}
LOOP = "the graph has a loop, whose body TensorFlow's profiler counts once, not per iteration"


def count(concrete: Any) -> FlopCount:
    """`concrete`: a tf.function's concrete function at the cell's input shapes."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    counter = f"TensorFlow profiler, float_operation (tensorflow {tf.__version__})"
    graph = convert_variables_to_constants_v2(concrete).graph
    if any(op.type in LOOPS for op in graph.get_operations()):
        return FlopCount(0.0, counter, LOOP)
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    found = tf.compat.v1.profiler.profile(graph=graph, options=options)
    flops = float(found.total_float_ops)
    if not flops > 0:
        return FlopCount(0.0, counter, "TensorFlow's profiler counted no FLOPs in it")
    return FlopCount(flops, counter)
