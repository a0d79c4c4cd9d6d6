"""The checked-in bindings must import and work under the oldest protobuf runtime an agent
environment may carry: TensorFlow 2.21 pins protobuf>=6.31.1 (the newest runtime is exercised
by the torch agent environment, which resolves the latest protobuf)."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OLDEST = ("protobuf==6.31.1", "grpcio==1.74.0")
PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
request = agent_pb2.RunRequest(workload="gemm", batch_size=8, params={"m": 64},
                               warmup_iterations=0)
again = agent_pb2.RunRequest.FromString(request.SerializeToString())
assert again == request and again.HasField("warmup_iterations"), again
import google.protobuf
print(google.protobuf.__version__)
"""


def test_generated_code_works_with_oldest_supported_protobuf(tmp_path):
    venv.create(tmp_path / "env", with_pip=True)
    python = tmp_path / "env" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *OLDEST], check=True, capture_output=True
    )
    probe = subprocess.run(
        [str(python), "-W", "error", "-c", PROBE, str(REPO / "proto")],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "6.31.1"
