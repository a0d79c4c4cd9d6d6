"""The Kubernetes launcher's own options (`collector run --launcher kubernetes --k8s
KEY=VALUE`): the namespace, the registry of the agents' images, each pod's CPUs and memory,
and the pods' scheduling and network options (kubernetes_policy.py); checked before the
cluster is reached. `collector k8s render` takes the same pod options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from fwbench.collector.launchers.kubernetes_policy import PodOptions, parse_pod_option
from fwbench.collector.launchers.options import (
    Flag,
    LauncherOptions,
    LaunchOptionError,
    OptionContext,
)


@dataclass(frozen=True)
class K8sSettings:
    """`--k8s KEY=VALUE` settings."""

    namespace: str = "default"
    registry: str = ""  # prefix of the agents' image names: registry.example.org/
    cpus: int = 1  # whole CPUs per pod, requests = limits
    memory: str = "4Gi"  # per pod, requests = limits
    pods: PodOptions = field(default_factory=PodOptions)  # scheduling, network policy


def parse_k8s_options(given: tuple[str, ...] | list[str]) -> K8sSettings:
    """Raises ValueError (one line) for an unknown key, a missing value or a bad number."""
    values: dict[str, Any] = {}
    pods: dict[str, Any] = {}
    known = [k for k in K8sSettings.__dataclass_fields__ if k != "pods"]
    known += list(PodOptions.__dataclass_fields__)
    for option in given:
        key, equals, value = option.partition("=")
        if key not in known:
            raise ValueError(f"unknown --k8s key {key!r}; known: {', '.join(known)}")
        if not equals or not value:
            raise ValueError(f"--k8s {key} needs a value: {key}=VALUE")
        if key in PodOptions.__dataclass_fields__:
            pods.update(parse_pod_option(key, value))
        elif key == "cpus":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"--k8s cpus={value}: expected whole CPUs (1, 2, ...)")
            values[key] = int(value)
        else:
            values[key] = value
    return K8sSettings(**values, pods=PodOptions(**pods))


@dataclass(frozen=True)
class KubernetesOptions(LauncherOptions):
    """--k8s KEY=VALUE settings, as given (K8sSettings parsed)."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {
        "k8s": Flag("--k8s", refusal="{flag} settings go with --launcher {kinds}")
    }

    k8s_options: tuple[str, ...] = ()

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        options = cls(k8s_options=tuple(given.get("k8s") or ()))
        try:
            options.settings()
        except ValueError as error:
            raise LaunchOptionError("--k8s", str(error)) from None
        return options

    def settings(self) -> K8sSettings:
        """Raises ValueError (one line) for an unknown key, a missing value or a bad number."""
        return parse_k8s_options(self.k8s_options)

    def threads_per_rank(self) -> int:
        return self.settings().cpus  # a pod's CPUs (1 unless said)
