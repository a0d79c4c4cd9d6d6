"""Protocol enum values <-> the names the catalogue, CLI and results table use; one mapping
for both sides."""

from fwbench.agent.v1 import agent_pb2

PHASE_VALUES = {"train": agent_pb2.PHASE_TRAIN, "infer": agent_pb2.PHASE_INFER}
DTYPE_VALUES = {
    "float32": agent_pb2.DTYPE_FLOAT32,
    "float16": agent_pb2.DTYPE_FLOAT16,
    "bfloat16": agent_pb2.DTYPE_BFLOAT16,
    "float64": agent_pb2.DTYPE_FLOAT64,
}
PHASE_NAMES = {value: name for name, value in PHASE_VALUES.items()}
# DTYPE_UNSPECIFIED in a RunRequest means float32.
DTYPE_NAMES = {agent_pb2.DTYPE_UNSPECIFIED: "float32"} | {
    value: name for name, value in DTYPE_VALUES.items()
}
