"""A selection's shape parameters: `--param NAME=V` or a sweep `NAME=A,B,...`, and the
combinations of its values each workload's cells take (plan.py)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from fwbench.spec import Catalogue

__all__ = ["SelectionError", "param_combinations", "parse_params"]


class SelectionError(ValueError):
    """Bad user input; the message is one line naming the problem and the valid choices."""


def parse_params(items: list[str]) -> dict[str, tuple[int, ...]]:
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SelectionError(f"invalid --param {item!r}: expected NAME=INTEGER[,INTEGER...]")
        try:
            values = tuple(dict.fromkeys(int(v) for v in value.split(",")))
        except ValueError:
            raise SelectionError(
                f"invalid --param {item!r}: values must be integers (NAME=A or NAME=A,B,...)"
            ) from None
        parsed[key.strip()] = values
    return parsed


def param_combinations(
    catalogue: Catalogue, workload: str, params: Mapping[str, tuple[int, ...]]
) -> list[dict[str, int]]:
    """Every combination of the swept values of `workload`'s own parameters, resolved
    (defaults filled in); raises CatalogueError for one out of its limits or rules."""
    own = catalogue.get(workload)
    names = [name for name in params if name in own.params]
    return [
        own.resolve_params(dict(zip(names, values, strict=True)))
        for values in itertools.product(*(params[name] for name in names))
    ]
