"""The workload catalogue: one TOML file (workloads.toml) read by collector and agents alike.

It names every standard workload with its kind, phases, shape parameters and their limits
(each on its own, and rules between them: `constraints`), and the forward FLOPs of one item as
an arithmetic expression over those parameters. FLOPs
count multiply-accumulates of convolutions, dense layers and matmuls as 2 each; a training
step counts `train_flops_factor` times the forward pass (backward is about twice forward).
Bytes follow a minimum-traffic model (inputs and parameters read once, outputs written once:
`elements_forward` per item, `parameters` per step, times the dtype's size; a training step
`train_bytes_factor` times that), so arithmetic intensity = FLOPs / bytes is an upper bound.
A workload of kind "generation" (autoregressive decoding) adds a decode model: the steps one
generation decodes, the weights each decode step reads and the KV-cache traffic of one
sequence, from which the collector derives each row's memory bandwidth (`GenerationModel`).
"""

from __future__ import annotations

import ast
import operator
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

PHASES = ("train", "infer")
DTYPES = ("float32", "float16", "bfloat16", "float64")
# collective: needs a world (distributed); generation: a prompt, then one token at a time
KINDS = ("op", "model", "accuracy", "collective", "generation")
# Kinds that name the catalogue model they run (`model`): accuracy trains it, generation decodes.
KINDS_WITH_MODEL = ("accuracy", "generation")
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
_CATALOGUE_FILE = "workloads.toml"
SUPPORTED_SCHEMA_VERSION = 1


class CatalogueError(ValueError):
    """A bad catalogue entry or a request outside the catalogue's limits.

    `field` names the offending field ("batch_size", "params.m", ...) or is empty."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class UnknownWorkload(CatalogueError):
    """The workload name is not in the catalogue."""


@dataclass(frozen=True)
class ParamSpec:
    """An integer parameter: min <= value <= max and value % multiple_of == 0."""

    name: str
    default: int
    min: int
    max: int
    multiple_of: int = 1

    def describe_range(self) -> str:
        step = f", multiple of {self.multiple_of}" if self.multiple_of > 1 else ""
        return f"{self.min}..{self.max}{step}"

    def check(self, value: int, field_name: str | None = None) -> None:
        """Raises CatalogueError naming the field and the allowed range."""
        if not (self.min <= value <= self.max) or value % self.multiple_of:
            name = field_name or self.name
            raise CatalogueError(
                f"{name}={value} is out of range: allowed {self.describe_range()}", name
            )


_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARISONS: dict[type[ast.cmpop], Any] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _walk(expression: str, node: ast.AST, names: Mapping[str, int]) -> float:
    if isinstance(node, ast.Expression):
        return _walk(expression, node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(expression, node.operand, names)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _walk(expression, node.left, names), _walk(expression, node.right, names)
        return float(_BINOPS[type(node.op)](left, right))
    raise CatalogueError(f"unsupported element {ast.dump(node)} in {expression!r}")


def evaluate_expression(expression: str, names: Mapping[str, int]) -> float:
    """Evaluates +, -, *, /, //, %, ** over numbers and `names`; anything else is an error."""
    return float(_walk(expression, ast.parse(expression, mode="eval"), names))


def evaluate_rule(rule: str, names: Mapping[str, int]) -> bool:
    """Whether `rule` holds: one comparison (==, !=, <, <=, >, >=) between two expressions,
    e.g. "hidden % heads == 0" or "prompt_len + new_tokens <= context"."""
    tree = ast.parse(rule, mode="eval").body
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1):
        raise CatalogueError(f"rule {rule!r} must be one comparison of two expressions")
    compare = _COMPARISONS.get(type(tree.ops[0]))
    if compare is None:
        raise CatalogueError(f"unsupported comparison in rule {rule!r}")
    left = _walk(rule, tree.left, names)
    return bool(compare(left, _walk(rule, tree.comparators[0], names)))


def rule_names(rule: str) -> list[str]:
    """The parameter names `rule` reads, in order of first appearance."""
    found = [
        node.id for node in ast.walk(ast.parse(rule, mode="eval")) if isinstance(node, ast.Name)
    ]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Constraint:
    """A rule between parameters (`rule`, as evaluate_rule reads it), checked after each is in
    its own range; a request that breaks it is refused naming `param` and saying `says`."""

    rule: str
    param: str
    says: str

    def check(self, resolved: Mapping[str, int]) -> None:
        if evaluate_rule(self.rule, resolved):
            return
        others = ", ".join(f"{n}={resolved[n]}" for n in rule_names(self.rule) if n != self.param)
        field = f"params.{self.param}"
        raise CatalogueError(
            f"{field}={resolved[self.param]} is out of range: {self.says} ({others})", field
        )


@dataclass(frozen=True)
class GenerationModel:
    """What a generation workload's decode steps move (elements; bytes are elements x the
    dtype's size), for the memory bandwidth a decode row achieves. The minimum-traffic model
    of decoding: each step reads every weight it uses once (`weights`, shared by the batch)
    and each sequence reads its KV cache so far and writes the new entry (`cache`, one
    sequence's elements over all its decode steps); activations stay in cache. `kv_cache`:
    the elements one sequence's cache holds at the end of the generation."""

    steps: str  # decode steps of one generation
    weights: str  # elements one decode step reads whatever the batch
    cache: str  # KV-cache elements one sequence's decode steps read and write, all together
    kv_cache: str  # elements of one sequence's KV cache at the end of the generation
    prompt: str  # tokens of one sequence's prompt (prefill)

    def check(self, names: Mapping[str, int]) -> None:
        for expression in (self.steps, self.weights, self.cache, self.kv_cache, self.prompt):
            evaluate_expression(expression, names)


@dataclass(frozen=True)
class WorkloadDef:
    name: str
    kind: str  # "op", "model" or "accuracy"
    description: str
    item: str  # what one item of a batch is
    phases: tuple[str, ...]
    max_batch_size: int
    flops_forward: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    model: str = ""  # kinds "accuracy" and "generation": the catalogue model trained or run
    elements_forward: str = ""  # input and output elements of one item ("" = unknown)
    parameters: str = ""  # elements one step reads once whatever the batch ("" = unknown)
    constraints: tuple[Constraint, ...] = ()  # rules between parameters
    generation: GenerationModel | None = None  # kind "generation" only

    def resolve_params(self, given: Mapping[str, int]) -> dict[str, int]:
        """All parameters with defaults filled in; raises CatalogueError on unknown names or
        values out of range."""
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            valid = ", ".join(self.params) or "none"
            raise CatalogueError(
                f"unknown parameter {unknown[0]!r} for {self.name}; valid: {valid}",
                f"params.{unknown[0]}",
            )
        resolved = {name: given.get(name, spec.default) for name, spec in self.params.items()}
        for name, spec in self.params.items():
            spec.check(resolved[name], f"params.{name}")
        for constraint in self.constraints:
            constraint.check(resolved)
        return resolved

    def forward_flops_per_item(self, params: Mapping[str, int]) -> float:
        return evaluate_expression(self.flops_forward, self.resolve_params(params))

    def forward_elements(self, params: Mapping[str, int], batch_size: int) -> float | None:
        """Elements a forward step of `batch_size` items moves in the minimum-traffic model;
        None when the catalogue does not say."""
        if not self.elements_forward or not self.parameters:
            return None
        resolved = self.resolve_params(params)
        per_item = evaluate_expression(self.elements_forward, resolved)
        return batch_size * per_item + evaluate_expression(self.parameters, resolved)

    def _decode(self, part: str, params: Mapping[str, int]) -> float:
        """One expression of the decode model (GenerationModel's field `part`), evaluated."""
        if self.generation is None:
            raise CatalogueError(f"{self.name} is not a generation workload")
        expression = getattr(self.generation, part)
        return evaluate_expression(expression, self.resolve_params(params))

    def decode_steps(self, params: Mapping[str, int]) -> int:
        """Decode steps of one generation (the first new token comes from the prefill)."""
        return int(self._decode("steps", params))

    def prompt_tokens(self, params: Mapping[str, int]) -> int:
        return int(self._decode("prompt", params))

    def decode_bytes(
        self,
        params: Mapping[str, int],
        batch_size: int,
        dtype: str,
        weight_bytes: float | None = None,
    ) -> float | None:
        """Bytes all decode steps of one generation of `batch_size` sequences move in the
        minimum-traffic model; None for a dtype of unknown size. The weights count
        `weight_bytes` each where the agent holds them in another format (quantised), else the
        dtype's size; the cache is the dtype's."""
        if dtype not in DTYPE_BYTES:
            return None
        size = DTYPE_BYTES[dtype]
        weights = self._decode("weights", params) * self.decode_steps(params)
        cache = self._decode("cache", params) * batch_size * size
        return weights * (size if weight_bytes is None else weight_bytes) + cache

    def kv_cache_bytes(
        self, params: Mapping[str, int], batch_size: int, dtype: str
    ) -> float | None:
        """Bytes of the KV cache of `batch_size` sequences at the end of a generation."""
        if dtype not in DTYPE_BYTES:
            return None
        return self._decode("kv_cache", params) * batch_size * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Catalogue:
    schema_version: int
    train_flops_factor: float
    train_bytes_factor: float
    run_limits: Mapping[str, ParamSpec]  # warmup_iterations, min_iterations, ...
    min_seconds_default: float
    min_seconds_max: float
    workloads: Mapping[str, WorkloadDef]

    def get(self, name: str) -> WorkloadDef:
        try:
            return self.workloads[name]
        except KeyError:
            valid = ", ".join(self.workloads)
            raise UnknownWorkload(
                f"unknown workload {name!r}; valid: {valid}", "workload"
            ) from None

    def flops_per_item(self, name: str, phase: str, params: Mapping[str, int]) -> float:
        forward = self.get(name).forward_flops_per_item(params)
        return forward * (self.train_flops_factor if phase == "train" else 1.0)

    def bytes_per_step(
        self, name: str, phase: str, params: Mapping[str, int], batch_size: int, dtype: str
    ) -> float | None:
        """Bytes of one step in the minimum-traffic model; None when the catalogue has no
        byte model for the workload or the dtype's size is unknown."""
        elements = self.get(name).forward_elements(params, batch_size)
        if elements is None or dtype not in DTYPE_BYTES:
            return None
        factor = self.train_bytes_factor if phase == "train" else 1.0
        return elements * DTYPE_BYTES[dtype] * factor

    def arithmetic_intensity(
        self, name: str, phase: str, params: Mapping[str, int], batch_size: int, dtype: str
    ) -> float | None:
        """FLOPs per byte of one step (catalogue FLOPs over bytes_per_step); None when
        either is unknown or zero."""
        moved = self.bytes_per_step(name, phase, params, batch_size, dtype)
        flops = self.flops_per_item(name, phase, params) * batch_size
        return flops / moved if moved and flops > 0 else None

    def check_batch_size(self, name: str, batch_size: int) -> None:
        ParamSpec("batch_size", 1, 1, self.get(name).max_batch_size).check(batch_size)


def _param(name: str, raw: Mapping[str, Any]) -> ParamSpec:
    spec = ParamSpec(
        name, int(raw["default"]), int(raw["min"]), int(raw["max"]), int(raw.get("multiple_of", 1))
    )
    spec.check(spec.default)
    return spec


def _workload(name: str, raw: Mapping[str, Any]) -> WorkloadDef:
    phases = tuple(raw["phases"])
    if not phases or set(phases) - set(PHASES):
        raise CatalogueError(f"workload {name}: phases must be a subset of {PHASES}")
    params = {key: _param(key, value) for key, value in raw.get("params", {}).items()}
    constraints = tuple(
        Constraint(str(c["rule"]), str(c["param"]), str(c["says"]))
        for c in raw.get("constraints", [])
    )
    decode = raw.get("decode")
    generation = None
    if decode is not None:
        generation = GenerationModel(
            steps=decode["steps"],
            weights=decode["weights"],
            cache=decode["cache"],
            kv_cache=decode["kv_cache"],
            prompt=decode["prompt"],
        )
    workload = WorkloadDef(
        name=name,
        kind=raw["kind"],
        description=raw["description"],
        item=raw["item"],
        phases=phases,
        max_batch_size=int(raw["max_batch_size"]),
        flops_forward=raw["flops_forward"],
        params=params,
        model=raw.get("model", ""),
        elements_forward=raw.get("elements_forward", ""),
        parameters=raw.get("parameters", ""),
        constraints=constraints,
        generation=generation,
    )
    if workload.kind not in KINDS:
        raise CatalogueError(f"workload {name}: kind must be one of {KINDS}")
    if (workload.kind in KINDS_WITH_MODEL) != bool(workload.model):
        raise CatalogueError(
            f"workload {name}: 'model' is required for, and only for, kinds "
            + " and ".join(KINDS_WITH_MODEL)
        )
    if (workload.kind == "generation") != (generation is not None):
        raise CatalogueError(f"workload {name}: 'decode' is required for, and only for, generation")
    for constraint in constraints:
        if constraint.param not in params or set(rule_names(constraint.rule)) - set(params):
            raise CatalogueError(
                f"workload {name}: constraint {constraint.rule!r} names unknown parameters"
            )
    defaults = workload.resolve_params({})  # the defaults must keep every rule
    if generation is not None:
        generation.check(defaults)
    workload.forward_flops_per_item({})  # fails now, not mid-run, on a bad expression
    if bool(workload.elements_forward) != bool(workload.parameters):
        raise CatalogueError(f"workload {name}: give both elements_forward and parameters")
    workload.forward_elements({}, 1)
    return workload


def parse_catalogue(text: str) -> Catalogue:
    """Parses and validates catalogue TOML; raises CatalogueError or KeyError on bad input."""
    raw = tomllib.loads(text)
    if raw.get("schema_version") != SUPPORTED_SCHEMA_VERSION:
        raise CatalogueError(f"catalogue schema_version must be {SUPPORTED_SCHEMA_VERSION}")
    run = raw["run"]
    return Catalogue(
        schema_version=raw["schema_version"],
        train_flops_factor=float(raw["train_flops_factor"]),
        train_bytes_factor=float(raw.get("train_bytes_factor", raw["train_flops_factor"])),
        run_limits={
            key: _param(key, run[key])
            for key in ("warmup_iterations", "min_iterations", "max_iterations")
        },
        min_seconds_default=float(run["min_seconds"]["default"]),
        min_seconds_max=float(run["min_seconds"]["max"]),
        workloads={name: _workload(name, value) for name, value in raw["workloads"].items()},
    )


def load_catalogue() -> Catalogue:
    """The catalogue shipped with this package."""
    text = resources.files("fwbench.spec").joinpath(_CATALOGUE_FILE).read_text("utf-8")
    return parse_catalogue(text)
