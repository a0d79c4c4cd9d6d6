"""Instance names have one grammar (agents/specs.py Instance): what the results call an
instance is parsed and written back by it alone, and the helpers the modules use answer from
it."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from fwbench.collector.agents import specs
from fwbench.collector.agents.specs import (
    Instance,
    aa_base,
    base_name,
    expand_instances,
    with_worlds,
)
from fwbench.collector.analysis.efficiency import agent_family
from fwbench.collector.cli.worlds import parse_world_sizes
from fwbench.collector.launchers import AgentHandle, LauncherKind
from fwbench.collector.launchers.base import Placement
from fwbench.collector.run.launch import launch_all
from fwbench.spec import startup

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
    world = Instance.parse("torch-cpu~w2#2")
    assert (world.ranks, world.devices) == (2, 1)
    assert str(world.of_rank(1)) == "torch-cpu~w2#2-rank1"
    assert world.of_rank(1).world == world and world.of_rank(1).rank == 1
    assert agent_family("torch-cpu~w2#2") == "torch-cpu#2"
    fakes = expand_instances(["fake", "fake"])
    assert [str(w) for w in with_worlds(fakes, [(1, 1), (1, 2)])] == [
        "fake~w1",
        "fake~w1x2",
        "fake~w1#2",
        "fake~w1x2#2",
    ]


def test_a_spec_from_the_command_line_keeps_its_address_out_of_the_name() -> None:
    world = Instance.from_spec("torch-cpu@a:1+b:2")  # a world someone else started
    assert (world.agent, world.ranks, world.devices) == ("torch-cpu", 2, 1)
    assert world.addresses == ["a:1", "b:2"] and world.attached
    assert str(world) == "torch-cpu~w2" and world.spec == "torch-cpu~w2@a:1+b:2"
    assert Instance.from_spec(world.spec) == world  # a run folder's record reads back
    alone = Instance.from_spec("tf-eigen#2")
    assert not alone.attached and alone.spec == "tf-eigen#2" and alone.addresses == []
    assert Instance.from_spec("x@h:1").first_copy == Instance("x")


def test_a_name_outside_the_grammar_is_an_agent_alone() -> None:
    """Such a name never reaches a launcher (the manifest check refuses it), but parsing it
    invents no world."""
    for odd in ("a~wx", "a~w2xz", "a-rankx"):
        assert Instance.parse(odd) == Instance(odd)


class _Channel:
    def close(self) -> None:
        pass


class _Recording:
    """A launcher that starts nothing and records what it was asked: a world's shape arrives
    as the Instance's fields."""

    kind = LauncherKind.LOCAL
    holds_allocation = False

    def __init__(self) -> None:
        self.placed: list[Instance] = []
        self.started: list[tuple[Instance, dict[str, str]]] = []
        self.lock = threading.Lock()

    def place_world(self, manifest: object, world: Instance, threads: int) -> Placement:
        with self.lock:
            self.placed.append(world)
        peers = [f"127.0.0.1:{2000 + rank}" for rank in range(world.ranks)]
        return Placement("127.0.0.1", 1999, peers, "local", pins_cpus=False)

    def start(
        self,
        manifest: object,
        instance: Instance,
        threads: int,
        extra_environment: dict[str, str] | None = None,
        abandon: object = None,
    ) -> AgentHandle:
        with self.lock:
            self.started.append((instance, dict(extra_environment or {})))
        address = f"127.0.0.1:{3000 + (instance.rank or 0)}"
        return AgentHandle(instance, address, cast(Any, _Channel()))

    def close(self) -> None:
        pass


def test_world_sizes_reach_the_launcher_as_instances_never_parsed_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#37: `--world-sizes` is read once, at the command line (parse_world_sizes, with_worlds),
    and reaches the launcher as Instance fields; nothing between parses a name."""
    sizes = parse_world_sizes("2,1x2", None)  # the command line's side
    instances = with_worlds(expand_instances(["fake", "fake"]), sizes)

    def refuse(*_: object) -> Instance:
        raise AssertionError("a name was parsed on its way to the launcher")

    monkeypatch.setattr(Instance, "parse", classmethod(refuse))
    monkeypatch.setattr(Instance, "from_spec", classmethod(refuse))
    monkeypatch.setattr(specs, "parse_attached", refuse)
    launcher = _Recording()
    handles = launch_all(instances, {"fake": cast(Any, None)}, cast(Any, launcher), 5.0)
    try:
        names = [handle.name for handle in handles]
        assert names == ["fake~w2", "fake~w1x2", "fake~w2#2", "fake~w1x2#2"]
        assert sorted(map(str, launcher.placed)) == sorted(names)
        got = sorted(
            (str(one), one.rank, env["RANK"], env["WORLD_SIZE"], env.get(startup.LOCAL_DEVICES))
            for one, env in launcher.started
        )
        assert got == sorted(
            [
                ("fake~w2-rank0", 0, "0", "2", None),
                ("fake~w2-rank1", 1, "1", "2", None),
                ("fake~w2#2-rank0", 0, "0", "2", None),
                ("fake~w2#2-rank1", 1, "1", "2", None),
                ("fake~w1x2-rank0", 0, "0", "1", "2"),
                ("fake~w1x2#2-rank0", 0, "0", "1", "2"),
            ]
        )
        assert all(one.world in instances for one, _ in launcher.started)
    finally:
        for handle in handles:
            handle.stop()
