"""The checked-in protocol bindings must be what proto/generate.py produces from agent.proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor

from fwbench.agent.v1 import agent_pb2

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py")
PACKAGE_DIR = Path("fwbench", "agent", "v1")


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fwbench_proto_generate", PROTO_ROOT / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(generator: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    generator.generate(out)
    return out


@pytest.mark.parametrize("name", GENERATED)
def test_generated_code_matches_checked_in_bindings(regenerated: Path, name: str) -> None:
    checked_in = PROTO_ROOT / PACKAGE_DIR / name
    fresh = regenerated / PACKAGE_DIR / name
    assert fresh.is_file(), f"proto/generate.py did not produce {PACKAGE_DIR / name}"
    assert fresh.read_bytes() == checked_in.read_bytes(), (
        f"proto/{PACKAGE_DIR / name} is stale: it differs from what agent.proto generates; "
        "regenerate the bindings with `python proto/generate.py` and commit the result"
    )


def _all_enums() -> list[EnumDescriptor]:
    enums = list(agent_pb2.DESCRIPTOR.enum_types_by_name.values())

    def nested(message: Descriptor) -> None:
        enums.extend(message.enum_types)
        for inner in message.nested_types:
            nested(inner)

    for message in agent_pb2.DESCRIPTOR.message_types_by_name.values():
        nested(message)
    return enums


def test_generated_code_has_the_protocol_enums() -> None:
    names = {enum.name for enum in _all_enums()}
    assert {"Phase", "DType", "DeviceKind", "Stage"} <= names


@pytest.mark.parametrize("enum", _all_enums(), ids=lambda enum: enum.full_name)
def test_generated_code_enum_zero_value_is_unspecified(enum: EnumDescriptor) -> None:
    zero = enum.values_by_number.get(0)
    assert zero is not None, f"{enum.full_name} has no zero value"
    assert zero.name.endswith("_UNSPECIFIED"), (
        f"{enum.full_name}'s zero value is {zero.name}; proto3 enums must start with "
        "a *_UNSPECIFIED = 0 value"
    )
