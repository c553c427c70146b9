"""`plan` shows, for a scale-up onto a lane of a multi-size set, the lane's id (it names the size) and where its
template came from."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared.domain import NodeGroup
from shared.engine.scale_down import ScaleDownPlan
from shared.engine.scale_up import ScaleUpOptions, simulate_scale_up
from shared.engine.templates import build_templates
from shared.services.pending import PendingPollResult
from shared.services.plan import PlanReport, render_text
from shared.services.utilization import UtilizationPollResult
from tests.builders import T0, pod, snapshot

SIZES = ("Standard_D2s_v5", "Standard_D16s_v5")


def test_a_scale_up_onto_a_lane_names_the_lane_and_its_template_source() -> None:
    lanes = [NodeGroup("rg", "mix", 0, 10, 0, size, location="westeurope", lane=size, lanes=SIZES,
                       allocation_strategy="LowestPrice") for size in SIZES]
    snap = snapshot(groups=lanes, pods=[pod("small", pending=True, cpu=1, mem=2), pod("big", pending=True, cpu=15, mem=50)])
    snap = replace(snap, templates=build_templates(lanes, []), prices={lanes[0].id: 0.096, lanes[1].id: 0.768})
    plan = simulate_scale_up(snap, options=ScaleUpOptions()).plan
    assert {i.group_id for i in plan.increases} == {g.id for g in lanes}
    report = PlanReport(T0, False, PendingPollResult(pending=2, plan=plan, enqueued=(), observed=snap),
                        UtilizationPollResult(ScaleDownPlan(), ()), (), {}, timedelta(minutes=10))
    text = render_text(report)
    for lane in lanes:
        source = snap.templates[lane.id].source
        assert source.startswith("vm-size:")
        [up] = [line for line in text.splitlines() if line.startswith(f"  {lane.id}: 0 -> 1 for")]
        assert up.endswith(f"(template: {source})")
        [listed] = [line for line in text.splitlines() if line.startswith(f"  {lane.id} (")]
        assert f"; template: {source}" in listed
    groups = {g["group"]: g for g in report.as_dict()["groups"]}
    assert all(groups[lane.id]["template"] == snap.templates[lane.id].source for lane in lanes)
