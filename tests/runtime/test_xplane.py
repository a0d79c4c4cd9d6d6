"""The framework-neutral reading of XSpace profiles (runtime/xplane.py): self time from
nested events on each line, the warm-up step before the marker left out, and XLA's thunk
names, on hand-made events."""

from __future__ import annotations

from fwbench.runtime import xplane
from fwbench.runtime.xplane import Event


def _times(events: list[Event], begin: float = 0.0) -> dict[str, tuple[int, int]]:
    return {o.name: (o.self_nanoseconds, o.calls) for o in xplane.self_times(events, begin)}


def test_nested_events_give_their_parents_only_the_rest() -> None:
    events = [
        Event("a", "outer", 0, 100),
        Event("a", "inner", 10, 30),
        Event("a", "leaf", 15, 5),
        Event("a", "inner", 50, 20),
        Event("a", "", 80, 10),  # only nests: its time leaves the parent, counts nowhere
    ]
    assert _times(events) == {"outer": (40, 1), "inner": (45, 2), "leaf": (5, 1)}


def test_lines_do_not_nest_into_each_other_and_overlaps_are_clipped() -> None:
    events = [
        Event("one", "kernel", 0, 100),
        Event("two", "kernel", 20, 50),  # another thread at the same time: its own
        Event("one", "late", 90, 30),  # starts inside, ends after: 10 of it inside
        Event("one", "after", 110, 5),  # inside late, after kernel ended
    ]
    assert _times(events) == {"kernel": (140, 2), "late": (25, 1), "after": (5, 1)}


def test_events_before_the_marker_are_the_warm_up_step() -> None:
    marks = [("other", 1.0), (xplane.MARKER, 500.0), (xplane.MARKER, 900.0)]
    begin = xplane.begin_of(marks)
    assert begin == 500.0 and xplane.begin_of([]) == 0.0
    events = [Event("a", "dot", 100, 50), Event("a", "dot", 600, 40), Event("a", "dot", 950, 40)]
    assert _times(events, begin) == {"dot": (80, 2)}


def test_a_plugins_class_travels_with_the_name() -> None:
    found = xplane.self_times([Event("a", "ThunkExecutor::end", 0, 7, "framework")], 0)
    assert [(o.name, o.op_class) for o in found] == [("ThunkExecutor::end", "framework")]


HLO = """HloModule jit_step, is_scheduled=true

%fused_computation (param_0.2: f32[64,64], param_1.4: f32[64,64]) -> f32[] {
  %param_0.2 = f32[64,64]{1,0} parameter(0)
  %dot_general.0 = f32[64,64]{1,0} dot(%param_0.2, %param_1.4), lhs_contracting_dims={1}
  %max.4 = f32[64,64]{1,0} maximum(%dot_general.0, %max.5)
  ROOT %reduce_sum.0 = f32[] reduce(%max.4, %constant.1), dimensions={0,1}, to_apply=%region
}

%fused_computation.1 (param_0: f32[2,28,28,6]) -> f32[2,14,14,6] {
  ROOT %rw = f32[2,14,14,6]{3,2,1,0} reduce-window(%param_0, %c), window={size=1x2x2x1}
}

ENTRY %main.3 (a.1: f32[64,64], b.1: f32[64,64]) -> f32[] {
  %ynn_fusion = f32[] fusion(%a.1, %b.1), kind=kCustom, calls=%fused_computation
  ROOT %ynn_fusion.7 = (f32[2,14,14,6]{3,2,1,0}, s32[]) fusion(%x), calls=%fused_computation.1
}
"""


def test_xla_names_drop_numbers_and_open_opaque_fusions() -> None:
    contents = xplane.fusion_contents(HLO)
    assert contents == {"ynn_fusion": "dot", "ynn_fusion.7": "reduce-window"}
    assert xplane.xla_name("ynn_fusion.7", contents) == "ynn_fusion[reduce-window]"
    assert xplane.xla_name("ynn_fusion", contents) == "ynn_fusion[dot]"
    assert xplane.xla_name("ynn_fusion.3", contents) == "ynn_fusion"  # not known: as named
    assert xplane.xla_name("multiply_add_fusion.13", contents) == "multiply_add_fusion"
    assert xplane.xla_name("end: dot.3") == xplane.XLA_THUNK_END_NAME
