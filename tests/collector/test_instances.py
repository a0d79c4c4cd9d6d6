"""Instance names have one grammar (agents/specs.py Instance): what the results call an
instance is parsed and written back by it alone, and the helpers the modules use answer from
it."""

from __future__ import annotations

import pytest

from fwbench.collector.agents.specs import (
    Instance,
    aa_base,
    base_name,
    local_devices_of,
    rank_name,
    with_worlds,
    world_and_rank,
    world_size_of,
)
from fwbench.collector.analysis.efficiency import agent_family

CASES = [
    ("torch-cpu", Instance("torch-cpu")),
    ("tf-eigen#2", Instance("tf-eigen", copy=2)),
    ("torch-cpu~w2", Instance("torch-cpu", ranks=2, devices=1)),
    ("tf-eigen~w1x2#3", Instance("tf-eigen", ranks=1, devices=2, copy=3)),
    ("torch-cpu~w2-rank1", Instance("torch-cpu", ranks=2, devices=1, rank=1)),
    ("jax-cpu~w4x2#2-rank3", Instance("jax-cpu", ranks=4, devices=2, copy=2, rank=3)),
]


@pytest.mark.parametrize(("name", "instance"), CASES)
def test_a_name_parses_to_its_instance_and_back(name: str, instance: Instance) -> None:
    assert Instance.parse(name) == instance
    assert str(instance) == name
    assert Instance.parse(f"{name}@host:50051").agent == instance.agent  # an attached spec


def test_the_helpers_answer_from_the_instance() -> None:
    assert base_name("tf-eigen~w1x2#3") == "tf-eigen"
    assert aa_base("torch-cpu~w2#2") == "torch-cpu~w2" and aa_base("tf-eigen#2") == "tf-eigen"
    assert (world_size_of("torch-cpu~w2#2"), local_devices_of("torch-cpu~w2#2")) == (2, 1)
    assert (world_size_of("tf-eigen~w1x2"), local_devices_of("tf-eigen~w1x2")) == (1, 2)
    assert (world_size_of("torch-cpu"), local_devices_of("torch-cpu")) == (0, 0)
    assert world_size_of("torch-cpu~w2@a:1+b:2") == 2
    assert rank_name("torch-cpu~w2#2", 1) == "torch-cpu~w2#2-rank1"
    assert world_and_rank("torch-cpu~w2#2-rank1") == ("torch-cpu~w2#2", 1)
    assert world_and_rank("torch-cpu") == ("torch-cpu", None)
    assert agent_family("torch-cpu~w2#2") == "torch-cpu#2"
    assert with_worlds(["fake", "fake#2"], ["1", "1x2"]) == (
        "fake~w1", "fake~w1x2", "fake~w1#2", "fake~w1x2#2",
    )  # fmt: skip


def test_a_name_outside_the_grammar_is_an_agent_alone() -> None:
    """Such a name never reaches a launcher (the manifest check refuses it), but parsing it
    invents no world."""
    for odd in ("a~wx", "a~w2xz", "a-rankx"):
        assert Instance.parse(odd) == Instance(odd)
