"""Agent specs as users give them: NAME (a declared agent), NAME@HOST:PORT (an agent someone
else runs, attached), an image reference (an agent its image's labels declare, run by the
Docker launcher: agents/image_labels.py), and instance names. One declared agent may run as
several processes in one run, for an A/A comparison (the same agent twice, to measure the
machine's noise floor): the first instance keeps the agent's name, the next are NAME#2,
NAME#3, ... in the results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fwbench.collector.agents import host
from fwbench.collector.agents.manifest import NAME_PATTERN, AgentManifest

SEPARATOR = "#"
IMAGE_PREFIX = "image:"
IMAGE_SPEC_HELP = (
    "an image reference: image:REF, or any other spec holding a ':' or a '/' "
    "(REPOSITORY:TAG, REPOSITORY@sha256:..., sha256:ID), for an agent its image's labels "
    "declare (docs/image-labels.md), run as it is with --launcher docker"
)


def image_reference(spec: str, declared: Mapping[str, AgentManifest]) -> str | None:
    """The image a spec names, or None for a declared agent or NAME@HOST:PORT: `image:REF`
    always; else a spec that is not a declared name and holds a ':' or a '/' (agent names
    hold neither), unless it is NAME@HOST:PORT."""
    if spec.startswith(IMAGE_PREFIX):
        return spec.removeprefix(IMAGE_PREFIX)
    if spec in declared:
        return None
    name, at, address = spec.partition("@")
    if at and NAME_PATTERN.match(base_name(name)) and not address.startswith("sha256:"):
        return None
    return spec if ":" in spec or "/" in spec else None


# A distributed world of N ranks of an agent is the instance NAME~wN (launchers/world.py); of N
# ranks with D devices each (FWBENCH_LOCAL_DEVICES: replicas in one process), NAME~wNxD.
WORLD_SEPARATOR = "~w"
DEVICES_SEPARATOR = "x"
RANK_SUFFIX = "-rank"  # one rank of a world: NAME~wN-rankR
MAX_WORLD_SIZE = 64
MAX_LOCAL_DEVICES = 64


@dataclass(frozen=True)
class Instance:
    """One process (or world of processes) of an agent in a run, as the results name it:
    `AGENT[~wN[xD]][#COPY][-rankR]` (`torch-cpu`, `tf-eigen#2`, `torch-cpu~w2`,
    `tf-eigen~w1x2#2`, `torch-cpu~w2-rank1`). The one grammar of instance names: every other
    module asks an Instance (or the helpers below), never splits a name itself."""

    agent: str
    ranks: int = 0  # N of a world; 0: the agent alone
    devices: int = 0  # D of each rank's process in a world (1 unless NAMExD); 0: alone
    copy: int = 1  # K of an A/A group: NAME#K, 1 for the first
    rank: int | None = None  # R of one rank of a world
    # HOST:PORT of an agent someone else runs (NAME@HOST:PORT; a world's ranks' in rank order,
    # joined by RANK_SEPARATOR); "" for one the collector starts. Not part of the name.
    address: str = ""

    @classmethod
    def from_spec(cls, spec: str) -> Instance:
        """An agent spec as a user gives it (NAME, NAME#K, NAME@HOST:PORT, a world someone
        else started: NAME@HOST:PORT+HOST:PORT), its address checked (parse_attached). The
        command line's and a run folder's specs become Instances here, once."""
        attached = parse_attached(spec)
        if attached is None:
            return cls.parse(spec)
        return replace(cls.parse(attached[0]), address=attached[1])

    @classmethod
    def parse(cls, name: str) -> Instance:
        """The instance a name says (an attached spec's @ADDRESS is left out): for names read
        back from the results table or a spec; a name that breaks the grammar is an agent of
        that name alone (a manifest check refuses it)."""
        text = name.partition("@")[0]
        head, sep, rank = text.rpartition(RANK_SUFFIX)
        index = int(rank) if sep and rank.isdigit() else None
        text = head if index is not None else text
        text, hashed, copy = text.partition(SEPARATOR)
        agent, world, suffix = text.partition(WORLD_SEPARATOR)
        size, times, devices = suffix.partition(DEVICES_SEPARATOR)
        shaped = bool(world) and size.isdigit() and (not times or devices.isdigit())
        return cls(
            agent if shaped or not world else text,
            int(size) if shaped else 0,
            (int(devices) if times else 1) if shaped else 0,
            int(copy) if hashed and copy.isdigit() else 1,
            index,
        )

    def __str__(self) -> str:
        text = self.agent
        if self.ranks:
            text += f"{WORLD_SEPARATOR}{self.ranks}"
            text += f"{DEVICES_SEPARATOR}{self.devices}" if self.devices > 1 else ""
        text += f"{SEPARATOR}{self.copy}" if self.copy > 1 else ""
        return text + (f"{RANK_SUFFIX}{self.rank}" if self.rank is not None else "")

    @property
    def spec(self) -> str:
        """The name, with @ADDRESS for an agent someone else runs (as --agents takes it)."""
        return f"{self}@{self.address}" if self.address else str(self)

    @property
    def attached(self) -> bool:
        return bool(self.address)

    @property
    def addresses(self) -> list[str]:
        """Each rank's HOST:PORT of an agent someone else runs (one for a lone agent)."""
        return self.address.split(RANK_SEPARATOR) if self.address else []

    def as_world(self, ranks: int, devices: int = 1) -> Instance:
        """This instance as a world of `ranks` processes of `devices` devices each."""
        return replace(self, ranks=ranks, devices=devices)

    @property
    def world(self) -> Instance:
        """The world this rank belongs to (itself when it is no rank)."""
        return replace(self, rank=None)

    def of_rank(self, rank: int) -> Instance:
        """One rank of this world (its address, for one someone else runs, is the handle's)."""
        return replace(self, rank=rank, address="")

    @property
    def first_copy(self) -> Instance:
        """The first instance of its A/A group (the same agent in the same world shape)."""
        return replace(self, copy=1, rank=None, address="")


def base_name(instance: str) -> str:
    """The declared agent an instance runs: `tf-eigen#2` -> `tf-eigen`, `torch-cpu~w2` ->
    `torch-cpu`."""
    return Instance.parse(instance).agent


def aa_base(instance: str) -> str:
    """The first instance of an A/A group: `tf-eigen#2` -> `tf-eigen`, `torch-cpu~w2#2` ->
    `torch-cpu~w2` (the same agent in the same world size)."""
    return str(Instance.parse(instance).first_copy)


def with_worlds(
    instances: Sequence[Instance], sizes: Sequence[tuple[int, int]]
) -> tuple[Instance, ...]:
    """Each instance as a world of each (ranks, devices) size (`--world-sizes 1,2,1x2`:
    NAME~w1, NAME~w2, NAME~w1x2; an A/A instance NAME#2 becomes NAME~w1#2, ...); no sizes: the
    instances as they are. Raises AgentSpecError for an attached agent (its ranks would have
    to be started elsewhere)."""
    if not sizes:
        return tuple(instances)
    worlds = []
    for instance in instances:
        if instance.attached:
            raise AgentSpecError(
                f"{instance.spec}: --world-sizes starts every rank itself; an attached agent is "
                "one process someone else runs (docs/distributed.md)"
            )
        worlds += [instance.as_world(ranks, devices) for ranks, devices in sizes]
    return tuple(worlds)


def expand_instances(specs: Sequence[str], aa: Sequence[str] = ()) -> tuple[Instance, ...]:
    """Agent specs as given (Instance.from_spec), a repeated plain name becoming NAME#2,
    NAME#3; each name in `aa` adds a second instance of that agent (and the first, when it was
    not listed). An attached agent (NAME@HOST:PORT) is one process someone else runs: its
    address given twice, under any names, raises AgentSpecError (two instances of it would be
    one process measured twice, not an A/A pair)."""
    wanted = list(specs)
    for name in aa:
        wanted += [name, name] if name not in wanted else [name]
    seen: Counter[str] = Counter()
    addresses: dict[str, str] = {}
    instances: list[Instance] = []
    for spec in wanted:
        instance = Instance.from_spec(spec)
        if instance.attached:
            ranks = instance.addresses  # a world's name says its size: NAME~wN@
            for index, address in enumerate(ranks):
                earlier = addresses.setdefault(address, instance.spec)
                if earlier != instance.spec or instance in instances or address in ranks[:index]:
                    raise AgentSpecError(
                        f"{instance.spec}: the address {address} is given twice ({earlier}); an "
                        "agent someone else runs can be measured once per run (for an A/A pair, "
                        "start a second one on another port)"
                    )
            instances.append(instance)
            continue
        seen[spec] += 1
        instances.append(instance if seen[spec] == 1 else replace(instance, copy=seen[spec]))
    return tuple(instances)


def aa_pairs(agents: Iterable[str]) -> list[tuple[str, str]]:
    """(first instance, other instance) for every agent that ran more than once."""
    by_base: dict[str, list[str]] = {}
    for agent in dict.fromkeys(agents):
        # An A/A pair is one agent twice in the same world size: NAME~w2 and NAME~w2#2.
        by_base.setdefault(aa_base(agent), []).append(agent)
    pairs = []
    for base, group in by_base.items():
        group.sort(key=lambda agent: (agent != base, agent))  # base: NAME or NAME~wN
        pairs += [(group[0], other) for other in group[1:]]
    return pairs


class AgentSpecError(ValueError):
    """An agent spec that names no declared agent, is malformed, or cannot run on this host."""


RANK_SEPARATOR = "+"


def parse_attached(spec: str) -> tuple[str, str] | None:
    """`name@host:port` -> (name, "host:port"); None when spec is a plain agent name. A world
    someone else started, its ranks' addresses in rank order, `name@h1:p1+h2:p2` (or
    `name~w2@...`) -> ("name~w2", "h1:p1+h2:p2"). Raises AgentSpecError for a malformed
    address or a world size that is not the number of addresses."""
    name, sep, address = spec.partition("@")
    if not sep:
        return None
    ranks = address.split(RANK_SEPARATOR)
    for rank in ranks:
        host, colon, port = rank.rpartition(":")
        if not name or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise AgentSpecError(
                f"invalid agent address {spec!r}: expected NAME@HOST:PORT (a world someone "
                "else started: NAME@HOST:PORT+HOST:PORT, its ranks in rank order)"
            )
    size = Instance.parse(name).ranks
    if (size and size != len(ranks)) or len(ranks) > MAX_WORLD_SIZE:
        raise AgentSpecError(
            f"{spec}: a world of {size or len(ranks)} ranks needs that many addresses, one per "
            f"rank (at most {MAX_WORLD_SIZE}); {len(ranks)} given"
        )
    if len(ranks) > 1 and not size:
        name = f"{name}{WORLD_SEPARATOR}{len(ranks)}"
    return name, address


def one_agent(spec: str) -> None:
    """Raises AgentSpecError for an attached world (commands that talk to one agent)."""
    attached = parse_attached(spec)
    if attached and Instance.parse(attached[0]).ranks:
        raise AgentSpecError(
            f"{spec} is a world of ranks; this command talks to one agent: give one rank as "
            "NAME@HOST:PORT (collector run measures a world)"
        )


def resolve_agents(instances: Sequence[Instance], manifests: Mapping[str, AgentManifest]) -> None:
    """Raises AgentSpecError for an unknown agent or a GPU agent on a host without an NVIDIA
    driver (before its multi-gigabyte environment is installed)."""
    if not instances:
        raise AgentSpecError(f"no agents given; declared agents: {', '.join(manifests)}")
    for instance in instances:
        if instance.attached:
            continue
        spec = instance.agent  # A/A: NAME#2 is a second instance of NAME
        if spec not in manifests:
            raise AgentSpecError(
                f"unknown agent {spec!r}; declared agents: "
                f"{', '.join(manifests) or 'none'} (or use NAME@HOST:PORT, or an image "
                "reference: image:REF)"
            )
        if manifests[spec].requires_gpu and not host.nvidia_gpu_present():
            raise AgentSpecError(
                f"agent {spec} needs an NVIDIA GPU and driver; this host has none "
                f"(no {' or '.join(host.NVIDIA_DRIVER_MARKERS)}). CPU agents: "
                + ", ".join(n for n, m in manifests.items() if not m.requires_gpu)
            )
