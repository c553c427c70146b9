"""cluster-autoscaler's status document: counts, conditions, transitions and CA's YAML layout."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import yaml

from shared.domain import ClusterSnapshot, GroupState, Taint, TO_BE_DELETED_TAINT
from shared.engine.status import StatusInputs, build_status, go_time, last_activity, parse_previous, render_status
from tests.builders import T0, group, node

A, B = group("pool-a", target=4, min_size=1, max_size=10), group("pool-b", target=1, max_size=3)


def _snapshot(*nodes: Any, groups: tuple = (A, B)) -> ClusterSnapshot:
    return ClusterSnapshot(taken_at=T0, nodes=tuple(nodes), pods=(), groups=groups)


def _inputs(**overrides: Any) -> StatusInputs:
    base = StatusInputs(group_states={A.id: GroupState(A.id), B.id: GroupState(B.id)}, unneeded={})
    return replace(base, **overrides)


def _young(name: str, **kw: Any) -> Any:
    return replace(node(name, ready=False, **kw), created_at=T0 - timedelta(minutes=2))


def _old_unready(name: str, **kw: Any) -> Any:
    return replace(node(name, ready=False, **kw), created_at=T0 - timedelta(hours=2))


def _group(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in doc["nodeGroups"] if g["name"] == name)


def test_counts_per_group_and_cluster_wide() -> None:
    snapshot = _snapshot(
        node("a0", group_name="pool-a", instance=0),
        node("a1", group_name="pool-a", instance=1, taints=(Taint(TO_BE_DELETED_TAINT, "1", "NoSchedule"),)),
        _young("a2", group_name="pool-a", instance=2),
        _old_unready("b0", group_name="pool-b", instance=0),
    )
    doc = build_status(snapshot, _inputs(), now=T0)
    a = _group(doc, "pool-a")["health"]
    assert a["nodeCounts"] == {
        "registered": {"total": 3, "ready": 2, "notStarted": 1, "unready": {"total": 0, "resourceUnready": 0},
                       "beingDeleted": 1},
        "longUnregistered": 1,  # the fourth instance: no scale-up recorded, so it is overdue
        "unregistered": 1,
    }
    assert (a["cloudProviderTarget"], a["minSize"], a["maxSize"]) == (4, 1, 10)
    b = _group(doc, "pool-b")["health"]["nodeCounts"]["registered"]
    assert (b["total"], b["ready"], b["unready"]["total"]) == (1, 0, 1)
    wide = doc["clusterWide"]["health"]["nodeCounts"]
    assert wide["registered"]["total"] == 4 and wide["registered"]["ready"] == 2 and wide["unregistered"] == 1


def test_recent_scale_up_is_unregistered_but_not_long_unregistered() -> None:
    states = {A.id: GroupState(A.id, last_scale_up=T0 - timedelta(minutes=3)), B.id: GroupState(B.id)}
    doc = build_status(_snapshot(node("a0", group_name="pool-a")), _inputs(group_states=states), now=T0)
    counts = _group(doc, "pool-a")["health"]["nodeCounts"]
    assert (counts["unregistered"], counts["longUnregistered"]) == (3, 0)
    assert _group(doc, "pool-a")["scaleUp"]["status"] == "InProgress"
    assert doc["clusterWide"]["scaleUp"]["status"] == "InProgress"


@pytest.mark.parametrize(
    "inputs,expected_a,expected_wide",
    [
        ({}, "NoActivity", "NoActivity"),
        ({"scale_up_needed": frozenset({A.id})}, "Needed", "Needed"),
        ({"backoff": {A.id: "in backoff after QuotaExceeded"}, "unschedulable_pods": 2}, "Backoff", "Backoff"),
    ],
)
def test_scale_up_condition(inputs: dict[str, Any], expected_a: str, expected_wide: str) -> None:
    full = _snapshot(*(node(f"a{i}", group_name="pool-a", instance=i) for i in range(4)),
                     node("b0", group_name="pool-b"))
    states = {A.id: GroupState(A.id, backoff_reason="QuotaExceeded"), B.id: GroupState(B.id)}
    doc = build_status(full, _inputs(group_states=states, **inputs), now=T0)
    assert _group(doc, "pool-a")["scaleUp"]["status"] == expected_a
    assert doc["clusterWide"]["scaleUp"]["status"] == expected_wide
    if expected_a == "Backoff":
        assert _group(doc, "pool-a")["scaleUp"]["backoffInfo"] == {
            "errorCode": "QuotaExceeded", "errorMessage": "in backoff after QuotaExceeded"}


def test_scale_down_candidates_are_the_unneeded_nodes() -> None:
    snapshot = _snapshot(node("a0", group_name="pool-a"), node("a1", group_name="pool-a", instance=1),
                         node("b0", group_name="pool-b"))
    doc = build_status(snapshot, _inputs(unneeded={"a0": T0, "a1": T0, "ghost": T0}), now=T0)
    assert _group(doc, "pool-a")["scaleDown"] | {"lastProbeTime": None, "lastTransitionTime": None} == {
        "status": "CandidatesPresent", "candidates": 2, "lastProbeTime": None, "lastTransitionTime": None}
    assert _group(doc, "pool-b")["scaleDown"]["status"] == "NoCandidates"
    assert doc["clusterWide"]["scaleDown"]["candidates"] == 2


def test_unhealthy_only_past_both_of_cas_limits() -> None:
    four_sick = [_old_unready(f"a{i}", group_name="pool-a", instance=i) for i in range(4)]
    assert build_status(_snapshot(*four_sick), _inputs(), now=T0)["clusterWide"]["health"]["status"] == "Unhealthy"
    three_sick = four_sick[:3]
    assert build_status(_snapshot(*three_sick), _inputs(), now=T0)["clusterWide"]["health"]["status"] == "Healthy"
    healthy = [node(f"b{i}", group_name="pool-b", instance=i) for i in range(6)]
    # 4 of 10 unready is 40%, under CA's 45%.
    assert build_status(_snapshot(*four_sick, *healthy), _inputs(), now=T0)["clusterWide"]["health"]["status"] == "Healthy"


def test_transition_time_moves_only_when_a_status_changes() -> None:
    snapshot = _snapshot(node("a0", group_name="pool-a"), node("b0", group_name="pool-b"))
    first = build_status(snapshot, _inputs(unneeded={"a0": T0}), now=T0)
    later = T0 + timedelta(minutes=1)
    same = build_status(snapshot, _inputs(unneeded={"a0": T0}), now=later,
                        previous=parse_previous(render_status(first)))
    down = _group(same, "pool-a")["scaleDown"]
    assert down["lastTransitionTime"] == "2026-11-21T12:00:00Z" and down["lastProbeTime"] == "2026-11-21T12:01:00Z"
    changed = build_status(snapshot, _inputs(), now=later, previous=parse_previous(render_status(first)))
    assert _group(changed, "pool-a")["scaleDown"]["lastTransitionTime"] == "2026-11-21T12:01:00Z"


def test_rendered_in_cluster_autoscalers_layout() -> None:
    text = render_status(build_status(_snapshot(node("a0", group_name="pool-a")), _inputs(), now=T0))
    assert text.startswith('time: 2026-11-21 12:00:00.000000000 +0000 UTC\nautoscalerStatus: Running\nclusterWide:\n')
    doc = yaml.safe_load(text)
    assert list(doc) == ["time", "autoscalerStatus", "clusterWide", "nodeGroups"]
    assert list(doc["clusterWide"]) == ["health", "scaleUp", "scaleDown"]
    assert list(doc["nodeGroups"][0]) == ["name", "health", "scaleUp", "scaleDown"]
    assert list(doc["nodeGroups"][0]["health"])[:2] == ["status", "nodeCounts"]


@pytest.mark.parametrize("text", [None, "", "Cluster-autoscaler status at 2020-11-25 ...:\nCluster-wide:\n\tHealth: x",
                                  "[unclosed", "- a list"])
def test_unreadable_previous_status_is_ignored(text: str | None) -> None:
    assert parse_previous(text) is None


def test_go_time_and_last_activity() -> None:
    assert go_time(T0 + timedelta(microseconds=5)) == "2026-11-21 12:00:00.000005000 +0000 UTC"
    states = {"x": GroupState("x", last_scale_up=T0), "y": GroupState("y", last_scale_up=T0 + timedelta(1),
                                                                     last_failure=T0)}
    assert last_activity(states) == {"scale-up": T0 + timedelta(1), "failure": T0}


def test_a_poll_that_plans_no_scale_up_keeps_the_needed_the_pending_poll_wrote() -> None:
    full = _snapshot(*(node(f"a{i}", group_name="pool-a", instance=i) for i in range(4)), node("b0", group_name="pool-b"))
    needed = build_status(full, _inputs(scale_up_needed=frozenset({A.id})), now=T0)
    kept = build_status(full, _inputs(scale_up_needed=None), now=T0 + timedelta(minutes=1),
                        previous=parse_previous(render_status(needed)))
    assert _group(kept, "pool-a")["scaleUp"]["status"] == "Needed"
    assert _group(kept, "pool-a")["scaleUp"]["lastTransitionTime"] == "2026-11-21T12:00:00Z"
    assert _group(kept, "pool-b")["scaleUp"]["status"] == "NoActivity"
    settled = build_status(full, _inputs(), now=T0 + timedelta(minutes=2), previous=parse_previous(render_status(kept)))
    assert _group(settled, "pool-a")["scaleUp"]["status"] == "NoActivity"


def test_a_poll_that_plans_no_scale_down_keeps_the_conditions_the_utilization_poll_wrote() -> None:
    snapshot = _snapshot(node("a0", group_name="pool-a"), node("b0", group_name="pool-b"))
    written = build_status(snapshot, _inputs(unneeded={"a0": T0}), now=T0)
    kept = build_status(snapshot, _inputs(unneeded=None), now=T0 + timedelta(minutes=1),
                        previous=parse_previous(render_status(written)))
    assert _group(kept, "pool-a")["scaleDown"] == _group(written, "pool-a")["scaleDown"]
    assert kept["clusterWide"]["scaleDown"] == written["clusterWide"]["scaleDown"]
    first = build_status(snapshot, _inputs(unneeded=None), now=T0)
    assert first["clusterWide"]["scaleDown"]["status"] == "NoCandidates"


def test_candidates_waiting_for_a_parallelism_slot_are_visible() -> None:
    snapshot = _snapshot(node("a0", group_name="pool-a"), node("a1", group_name="pool-a", instance=1),
                         node("b0", group_name="pool-b"))
    doc = build_status(snapshot, _inputs(unneeded={"a0": T0, "a1": T0, "b0": T0}, waiting_for_slots={A.id: 2}),
                       now=T0)
    assert _group(doc, "pool-a")["scaleDown"]["maxParallelismReached"] == 2
    assert "maxParallelismReached" not in _group(doc, "pool-b")["scaleDown"]  # only where some wait
    assert doc["clusterWide"]["scaleDown"]["maxParallelismReached"] == 2
    assert "maxParallelismReached: 2" in render_status(doc)



@pytest.mark.parametrize("stopped_filled_in", [False, True])
def test_deallocated_instances_are_capacity_but_not_expected_nodes_whether_or_not_the_snapshot_counts_them(
        stopped_filled_in: bool) -> None:
    # pool-a: capacity 4, one instance deallocated by us, two nodes registered and Ready: one still to come.
    a = replace(A, stopped=1) if stopped_filled_in else A  # the polls pass a snapshot with `stopped` filled in
    snapshot = _snapshot(*(node(f"a{i}", group_name="pool-a", instance=i) for i in range(2)), groups=(a, B))
    states = {A.id: GroupState(A.id, stopped=frozenset({"3"}), last_scale_up=T0), B.id: GroupState(B.id)}
    health = _group(build_status(snapshot, _inputs(group_states=states), now=T0), "pool-a")["health"]
    assert health["cloudProviderTarget"] == 4  # the scale set's capacity, as CA reports its target
    # The deallocated instance is not a node on its way, the fourth is (counted once, not twice, as it was).
    assert health["nodeCounts"]["unregistered"] == 1


def test_node_mapping_and_refused_groups_are_shown_cluster_wide() -> None:
    reasons = {f"stray-{i}": "no providerID; no instance has computer name; no instance has IP" for i in range(25)}
    reasons["twin"] = "ambiguous: instances rg/a/1 and rg/b/1 both have computer name twin"
    snapshot = replace(_snapshot(node("a0", group_name="pool-a")), mapped_by={"a0": "hostname", "a1": "ip"},
                       unmapped=reasons, ambiguous=frozenset({"twin"}),
                       refused={"rg-aks/web": "the AKS cluster autoscaler is on for pool web"})
    wide = build_status(snapshot, _inputs(), now=T0)["clusterWide"]
    mapping = wide["nodeMapping"]
    assert mapping["mapped"] == {"hostname": 1, "ip": 1}
    assert (mapping["unmanaged"], mapping["ambiguous"]) == (25, 1)
    # At most 20 named, ambiguous ones (errors to fix) first.
    assert len(mapping["notManaged"]) == 20 and mapping["notManaged"][0] == {"node": "twin", "reason": reasons["twin"]}
    assert wide["refusedNodeGroups"] == [{"name": "rg-aks/web", "reason": "the AKS cluster autoscaler is on for pool web"}]
    assert yaml.safe_load(render_status(build_status(snapshot, _inputs(), now=T0)))["clusterWide"]["nodeMapping"]


def test_a_cluster_of_provider_id_nodes_says_so_and_lists_nobody() -> None:
    snapshot = replace(_snapshot(node("a0", group_name="pool-a")), mapped_by={"a0": "provider-id"})
    mapping = build_status(snapshot, _inputs(), now=T0)["clusterWide"]["nodeMapping"]
    assert mapping == {"mapped": {"provider-id": 1}, "unmanaged": 0, "ambiguous": 0}


def test_unavailable_offerings_and_spot_evictions_are_shown_and_kept_by_the_other_poll() -> None:
    full = _snapshot(*(node(f"a{i}", group_name="pool-a", instance=i) for i in range(4)), node("b0", group_name="pool-b"))
    marks = ("offering standard_d4s_v5 (Spot) in westeurope zone 1 unavailable until 2026-11-21T13:00:00+00:00 "
             "after SkuNotAvailable (spot-capacity)",)
    pending = build_status(full, _inputs(unavailable_offerings=marks, spot_evictions={"a3": "deleted"}), now=T0)
    wide = pending["clusterWide"]
    assert wide["unavailableOfferings"] == list(marks)
    assert wide["spotEvictions"] == [{"node": "a3", "how": "deleted"}]
    # The utilisation poll (None) keeps what the pending poll wrote; a pending poll with none clears them.
    kept = build_status(full, _inputs(), now=T0 + timedelta(minutes=1), previous=parse_previous(render_status(pending)))
    assert kept["clusterWide"]["unavailableOfferings"] == list(marks)
    cleared = build_status(full, _inputs(unavailable_offerings=(), spot_evictions={}), now=T0 + timedelta(minutes=2),
                           previous=parse_previous(render_status(kept)))
    assert "unavailableOfferings" not in cleared["clusterWide"] and "spotEvictions" not in cleared["clusterWide"]


def test_capacity_buffers_are_shown_cluster_wide_and_kept_by_the_other_poll() -> None:
    full = _snapshot(*(node(f"a{i}", group_name="pool-a", instance=i) for i in range(4)), node("b0", group_name="pool-b"))
    lines = {"web/room": {"replicas": 4, "ready": 3, "conditions": {"ReadyForProvisioning": "True (AttributesSet)",
                                                                   "Provisioning": "True (ScaleUpTriggered)"}},
             "batch/idle": {"replicas": 0, "ready": 0, "conditions": {}}}
    pending = build_status(full, _inputs(capacity_buffers=lines), now=T0)
    shown = pending["clusterWide"]["capacityBuffers"]
    assert shown == lines and list(shown) == sorted(lines)
    assert parse_previous(render_status(pending))["clusterWide"]["capacityBuffers"] == lines  # survives the YAML
    # The utilisation poll (None) keeps what the pending poll wrote; a pending poll that read none clears them.
    kept = build_status(full, _inputs(), now=T0 + timedelta(minutes=1), previous=parse_previous(render_status(pending)))
    assert kept["clusterWide"]["capacityBuffers"] == lines
    cleared = build_status(full, _inputs(capacity_buffers={}), now=T0 + timedelta(minutes=2),
                           previous=parse_previous(render_status(kept)))
    assert "capacityBuffers" not in cleared["clusterWide"]
