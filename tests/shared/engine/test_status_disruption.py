"""The status document's `clusterWide.disruption`: budgets and their allowance now, nodes being replaced with
their saving, drifted nodes and why they wait, consolidation candidates' verdicts."""

from __future__ import annotations

from datetime import timedelta

import yaml

from shared.domain import DRIFTED, REPLACE, ClusterSnapshot, GroupState, Replacement
from shared.engine.disruption_budgets import BUDGETS_TAG, parse_budgets
from shared.engine.status import (
    MAX_LISTED_DISRUPTION,
    DisruptionReport,
    StatusInputs,
    build_status,
    parse_previous,
    render_status,
    replacement_savings,
    rfc3339,
)
from tests.builders import T0, group, node

POOL = group("pool", target=10, tags={BUDGETS_TAG: "nodes=1&reasons=Drifted"})
OTHER = group("other", target=2, tags={BUDGETS_TAG: "nodes=lots"})
NODES = tuple(node(f"pool-{i}", instance=i) for i in range(10)) + tuple(
    node(f"other-{i}", group_name="other", instance=i) for i in range(2))
SNAPSHOT = ClusterSnapshot(taken_at=T0, nodes=NODES, pods=(), groups=(POOL, OTHER))


def _replacing(*entries: Replacement) -> dict[str, GroupState]:
    return {POOL.id: GroupState(POOL.id, replacing={e.node: e for e in entries}), OTHER.id: GroupState(OTHER.id)}


def _doc(states: dict[str, GroupState], report: DisruptionReport | None, budgets: str = "nodes=20%&reasons=Replace,Drifted",
         previous: dict | None = None) -> dict:
    inputs = StatusInputs(group_states=states, unneeded={}, disruption=report,
                          disruption_budgets=parse_budgets(budgets))
    return build_status(SNAPSHOT, inputs, now=T0, previous=previous)


def test_budgets_show_their_allowance_per_reason_with_in_flight_replacements_counted() -> None:
    drift = Replacement("pool-1", DRIFTED, POOL.id, T0 - timedelta(minutes=3), detail="model")
    doc = _doc(_replacing(drift), DisruptionReport())["clusterWide"]["disruption"]
    cluster = next(b for b in doc["budgets"] if b["scope"] == "cluster")
    assert cluster["nodes"] == len(NODES) and set(cluster["allowed"]) == {REPLACE, DRIFTED}
    limit = parse_budgets("nodes=20%")[0].limit(len(NODES))
    assert cluster["allowed"] == {REPLACE: limit - 1, DRIFTED: limit - 1}  # the drift counts for both it covers
    own = next(b for b in doc["budgets"] if b["scope"] == POOL.id)
    assert own["allowed"] == {DRIFTED: 0} and own["nodes"] == 10
    # Cluster-wide allowance: only what the cluster budgets limit; the bad tag is reported, not raised.
    assert doc["allowance"] == {REPLACE: limit - 1, DRIFTED: limit - 1}
    assert [p["group"] for p in doc["budgetProblems"]] == [OTHER.id] and "nodes=" in doc["budgetProblems"][0]["reason"]


def test_nodes_replacing_are_listed_and_a_shared_saving_counted_once() -> None:
    together = ("pool-2", "pool-3", "pool-4")
    since = T0 - timedelta(minutes=5)
    entries = [Replacement(n, REPLACE, "rg/other", since, "act-1", 1, together, 0.42, "3 x D8 -> 1 x D16")
               for n in together]
    states = _replacing(*entries)
    doc = _doc(states, DisruptionReport())["clusterWide"]["disruption"]
    assert [r["node"] for r in doc["replacing"]] == list(together)
    assert all(r["toGroup"] == "rg/other" and r["reason"] == REPLACE and r["savingPerHour"] == 0.42
               for r in doc["replacing"])
    assert doc["savingPerHour"] == replacement_savings(states) == 0.42


def test_a_given_up_replacement_is_listed_with_when_it_may_be_tried_again_and_saves_nothing() -> None:
    under_way = Replacement("pool-2", REPLACE, "rg/other", T0 - timedelta(minutes=5), "act-1", 1, ("pool-2",), 0.3)
    gave_up = Replacement("pool-1", DRIFTED, POOL.id, T0 - timedelta(minutes=50), "act-0", 1, ("pool-1",), 0.5,
                          "model", given_up_at=T0 - timedelta(minutes=10))
    retry = T0 + timedelta(hours=1, minutes=50)
    states = _replacing(under_way, gave_up)
    doc = _doc(states, DisruptionReport(retry_at={"pool-1": retry}))["clusterWide"]["disruption"]
    assert [r["node"] for r in doc["replacing"]] == ["pool-2"]
    assert doc["givenUp"] == [{"node": "pool-1", "group": POOL.id, "reason": DRIFTED, "toGroup": POOL.id,
                               "givenUpAt": rfc3339(T0 - timedelta(minutes=10)), "retryAfter": rfc3339(retry)}]
    assert doc["savingPerHour"] == replacement_savings(states) == 0.3
    # The pool's own drift budget of one is not taken by the tombstone.
    assert next(b for b in doc["budgets"] if b["scope"] == POOL.id)["allowed"] == {DRIFTED: 1}
    # Without the poll's report (the pending poll's view), the tombstone is still shown, without retryAfter.
    assert "retryAfter" not in _doc(states, DisruptionReport())["clusterWide"]["disruption"]["givenUp"][0]


def test_drifted_nodes_and_candidates_are_listed_with_why_capped_but_counted() -> None:
    drifted = {f"pool-{i}": "batch pods running" for i in range(3)} | {"pool-9": ""}
    candidates = {f"n{i:02d}": "pods don't fit one cheaper node" for i in range(MAX_LISTED_DISRUPTION + 5)}
    doc = _doc(_replacing(), DisruptionReport(drifted=drifted, candidates=candidates))["clusterWide"]["disruption"]
    assert doc["drifted"]["count"] == len(drifted)
    assert {d["node"]: d.get("waiting") for d in doc["drifted"]["nodes"]} == {
        n: (why or None) for n, why in drifted.items()}
    assert doc["consolidation"]["count"] == len(candidates)
    assert len(doc["consolidation"]["candidates"]) == MAX_LISTED_DISRUPTION


def test_the_pending_poll_keeps_what_the_utilisation_poll_wrote_and_the_yaml_reads_back() -> None:
    first = _doc(_replacing(), DisruptionReport(drifted={"pool-0": "batch pods running"}))
    previous = parse_previous(render_status(first))
    assert previous is not None and previous["clusterWide"]["disruption"] == first["clusterWide"]["disruption"]
    kept = _doc(_replacing(), None, previous=previous)
    assert kept["clusterWide"]["disruption"] == first["clusterWide"]["disruption"]
    # Without a report and nothing written before, the section is absent: CA's layout unchanged.
    assert "disruption" not in _doc(_replacing(), None)["clusterWide"]
    assert yaml.safe_load(render_status(first))["clusterWide"]["disruption"]["drifted"]["count"] == 1
