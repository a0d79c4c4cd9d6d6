"""Which agent an agent is compared with in the family view (verdicts/families.py), and how an
agent's own reason for not running a cell is made a bounded line (run/cell_choices.py)."""

from __future__ import annotations

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.cell_choices import MAX_REASON, unsupported
from fwbench.collector.verdicts.families import family_baselines, left_out

RUN = [
    ("tf-eigen", "tensorflow", None),
    ("keras-torch", "keras", "torch"),
    ("torch-cpu", "torch", None),
    ("tf-mkl", "tensorflow", None),
    ("keras-tf", "keras", "tensorflow"),
    ("onnxruntime-cpu", "onnxruntime", "torch"),
    ("keras-jax", "keras", "jax"),
    ("openvino-cpu", "openvino", "torch"),
]


def test_each_agent_stands_beside_the_first_native_agent_of_its_family() -> None:
    assert family_baselines(RUN) == {
        "tf-eigen": None,
        "keras-torch": "torch-cpu",  # listed after it: order of the run, not of the pair
        "torch-cpu": None,
        "tf-mkl": None,
        "keras-tf": "tf-eigen",  # the first tensorflow agent
        "onnxruntime-cpu": "torch-cpu",
        "keras-jax": None,  # no jax agent in this run
        "openvino-cpu": "torch-cpu",  # a second agent of the torch family, beside the same
    }
    assert left_out(RUN) == [
        "keras-jax: no jax agent in the run to stand beside (its family, AgentIdentity.family)"
    ]


def test_an_agent_naming_itself_as_its_family_is_native() -> None:
    assert family_baselines([("torch-cpu", "torch", "torch")]) == {"torch-cpu": None}


def test_the_agents_reason_follows_the_collectors_as_one_bounded_line() -> None:
    support = agent_pb2.WorkloadSupport(name="lenet", phases=[agent_pb2.PHASE_INFER])
    reasons = {"*/train": "inference\nonly   here", "bert": "x" * 1000}
    said = unsupported(support, "lenet", "train", "float32", reasons)
    assert said == "agent does not support phase train for lenet: inference only here"
    said = unsupported(None, "bert", "infer", "float32", reasons)
    assert said.startswith("agent does not implement bert: xxx") and said.endswith("…")
    assert len(said) == len("agent does not implement bert: ") + MAX_REASON
    assert unsupported(None, "gpt", "infer", "float32", reasons) == "agent does not implement gpt"
