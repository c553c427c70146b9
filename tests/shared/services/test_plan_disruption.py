"""`plan` shows the disruption budgets with what each allows now, and the nodes being replaced."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shared.domain import DRIFTED, REPLACE, Replacement
from shared.engine.disruption_budgets import BUDGETS_TAG, parse_budgets
from shared.services.plan import plan_now, render_text
from tests.memory_app import memory_app

TAG = "nodes=1&reasons=Drifted"
CLUSTER = "nodes=2&reasons=Replace,Drifted"
SCENARIO: dict[str, Any] = {
    "name": "plan-disruption", "cluster_name": "sandbox", "duration": "30m",
    "node_groups": [{
        "resource_group": "rg-sandbox-nodes", "name": "pool-d4", "vm_size": "Standard_D4s_v5",
        "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}, "min": 0, "max": 10, "initial": 3,
        "tags": {BUDGETS_TAG: TAG},
    }],
    "workloads": [{"name": "web", "kind": "ReplicaSet", "count": 6, "requests": {"cpu": "1", "memory": "1Gi"}}],
}


def test_plan_lists_budgets_allowances_and_replacements() -> None:
    app = memory_app(SCENARIO, settings={"DISRUPTION_BUDGETS": CLUSTER})
    app.tick(120)
    now = app.clock.now()
    first = plan_now(app.ports, app.settings, now=now, state=app.ports.state)
    gid = next(g["group"] for g in first.as_dict()["groups"] if "capacity" in g)
    node = sorted(first.as_dict()["nodes"])[0]
    row = app.ports.state.get_group(gid)
    entry = Replacement(node, DRIFTED, gid, now, detail="model")
    assert app.ports.state.update_group(replace(row, replacing={node: entry}))

    report = plan_now(app.ports, app.settings, now=now, state=app.ports.state)
    doc = report.as_dict()["disruption"]
    nodes = len(report.as_dict()["nodes"])
    cluster = next(b for b in doc["budgets"] if b["scope"] == "cluster")
    tag = next(b for b in doc["budgets"] if b["scope"] == gid)
    # The drift in flight counts against both budgets that cover it.
    assert cluster["allowed"] == {r: parse_budgets(CLUSTER)[0].limit(nodes) - 1 for r in (REPLACE, DRIFTED)}
    assert tag["allowed"] == {DRIFTED: parse_budgets(TAG)[0].limit(nodes) - 1}
    assert [r["node"] for r in doc["replacing"]] == [node]
    text = render_text(report)
    assert "disruption budgets" in text and f"{CLUSTER} (DISRUPTION_BUDGETS" in text and f"tag of {gid}" in text
    assert f"  {node} ({gid}): {DRIFTED}, new capacity asked of {gid}" in text and "(model)" in text
