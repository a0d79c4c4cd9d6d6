"""Framework families: a framework that runs on another (Keras 3 on its backend) or reproduces
another's models (ONNX Runtime's graphs, from PyTorch's definitions and layouts) says so in
its Describe (AgentIdentity.family); its results stand beside that native framework's.

`--baseline family` (collector run --until-decided, compare, report) compares each such agent
with its family's *native* agent in the same run: the first agent listed whose own framework
is the family (torch-cpu for keras-torch and onnxruntime-cpu; tf-eigen, or tf-mkl, whichever
comes first, for keras-tf). Native agents are not compared with one another then, and an
agent whose family has no native agent in the run is named as left out, never compared with
another family's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fwbench.agent.v1 import agent_pb2

if TYPE_CHECKING:
    import pandas as pd

FAMILY = "family"  # the --baseline value that asks for the family view


def family_of(framework: str, family: str | None) -> str:
    """The family an agent belongs to: the one it declares, else its own framework."""
    return family or framework


def family_baselines(agents: Iterable[tuple[str, str, str | None]]) -> dict[str, str | None]:
    """{agent: the native agent it is compared with, or None} for (agent, framework, family)
    triples in the run's order; natives and agents whose family has no native map to None."""
    listed = list(agents)
    natives: dict[str, str] = {}
    for name, framework, family in listed:
        if family_of(framework, family) == framework:
            natives.setdefault(framework, name)
    return {
        name: None if family_of(framework, family) == framework else natives.get(family or "")
        for name, framework, family in listed
    }


def left_out(agents: Iterable[tuple[str, str, str | None]]) -> list[str]:
    """Lines naming the agents whose family has no native agent in the run."""
    listed = list(agents)
    against = family_baselines(listed)
    return [
        f"{name}: no {family} agent in the run to stand beside (its family, AgentIdentity.family)"
        for name, framework, family in listed
        if family and family != framework and against[name] is None
    ]


def describe_triples(
    describes: Mapping[str, agent_pb2.DescribeResponse],
) -> list[tuple[str, str, str | None]]:
    """(agent, framework, family) from each agent's DescribeResponse, in the mapping's order."""
    return [(n, d.identity.framework, d.identity.family or None) for n, d in describes.items()]


def result_triples(results: pd.DataFrame) -> list[tuple[str, str, str | None]]:
    """(agent, framework, family) from a run's result rows, agents in the order they first
    measured; rows before schema 11 have no family (their framework is their family)."""
    import pandas as pd  # a results table's: `collector run` checks --baseline without one

    triples: dict[str, tuple[str, str, str | None]] = {}
    for row in results.sort_values("cell", kind="stable").itertuples(index=False):
        framework, family = getattr(row, "framework", None), getattr(row, "family", None)
        if pd.isna(framework):
            continue
        named = None if family is None or pd.isna(family) else str(family)
        triples.setdefault(str(row.agent), (str(row.agent), str(framework), named))
    return list(triples.values())
