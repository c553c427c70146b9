"""The status service with a replacement round: `clusterWide.disruption` written, and the gauges and the
disruptions counter recorded (savings per hour, drifted nodes, disruptions by reason)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared import telemetry as metrics
from shared.domain import DRIFTED, EMPTY, REPLACE, ClusterSnapshot, GroupState, Replacement
from shared.engine.status import DisruptionReport
from shared.services.status import publish_status, status_inputs
from shared.settings import load_settings
from tests.builders import T0, group, node
from tests.shared.services.telemetry_capture import Telemetry, telemetry  # noqa: F401  (the fixture)

BASE = {"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/k"}
SAVINGS = "vmss_autoscaler_replacement_savings_per_hour"
DRIFTED_NODES = "vmss_autoscaler_drifted_nodes"
DISRUPTIONS = "vmss_autoscaler_disruptions_total"


def test_status_inputs_carry_the_report_and_the_cluster_budgets() -> None:
    settings = load_settings({**BASE, "DISRUPTION_BUDGETS": "nodes=2&reasons=Drifted"})
    report = DisruptionReport(drifted={"n1": "batch pods running"})
    inputs = status_inputs(settings, group_states={}, unneeded={}, disruption=report)
    assert inputs.disruption is report and inputs.disruption_budgets == settings.disruption_budgets
    assert status_inputs(settings, group_states={}, unneeded={}).disruption is None


def test_replacements_and_disruptions_are_recorded(telemetry: Telemetry) -> None:  # noqa: F811
    pool = group("pool", target=3)
    together = ("pool-0", "pool-1")
    entries = {n: Replacement(n, REPLACE, pool.id, T0 - timedelta(minutes=1), "a1", 1, together, 0.3) for n in together}
    states = {pool.id: GroupState(pool.id, replacing=entries)}
    snapshot = ClusterSnapshot(T0, tuple(node(f"pool-{i}", instance=i) for i in range(3)), (), (pool,))
    settings = replace(load_settings(BASE), status_configmap=None)  # no ConfigMap: only the gauges
    report = DisruptionReport(drifted={"pool-2": "batch pods running"})
    inputs = replace(status_inputs(settings, group_states=states, unneeded={}, disruption=report), standby={})
    assert publish_status(None, settings, snapshot, inputs, now=T0) is None  # type: ignore[arg-type]
    assert telemetry.last(SAVINGS) == sum({e.saving_per_hour for e in entries.values()})
    assert telemetry.last(DRIFTED_NODES) == len(report.drifted)
    metrics.record_disruptions({EMPTY: 2, DRIFTED: 1, REPLACE: 0})
    assert telemetry.total(DISRUPTIONS, reason=EMPTY) == 2 and telemetry.total(DISRUPTIONS, reason=DRIFTED) == 1
    assert telemetry.points(DISRUPTIONS, reason=REPLACE) == []


def test_a_round_becomes_a_report_each_drifted_node_with_why_it_waits() -> None:
    from types import SimpleNamespace

    from shared.engine.replacement import ReplacementProposal
    from shared.services.status import disruption_report

    admitted = ReplacementProposal((("d-admitted", "rg/pool"),), DRIFTED, "rg/pool", 1, detail="model")
    round_ = SimpleNamespace(
        drifted={"d-admitted": "model", "d-ready": "image", "d-batch": "age", "d-refused": "model", "d-other": "model"},
        admitted=(admitted,), forced={"d-ready": object()}, waiting={"d-batch": "batch pods running"},
        refused={"d-refused": "disruption budget 'nodes=1' ..."}, candidates={"c1": "pods don't fit"},
        retry_at={"d-gave-up": T0})
    report = disruption_report(round_)  # type: ignore[arg-type]
    assert set(report.drifted) == set(round_.drifted)
    assert report.drifted["d-admitted"] == report.drifted["d-ready"] == ""
    assert report.drifted["d-batch"] == round_.waiting["d-batch"]
    assert report.drifted["d-refused"] == round_.refused["d-refused"]
    assert report.drifted["d-other"]  # never shown as replacing when nothing says it is
    assert report.candidates == round_.candidates
    assert report.retry_at == round_.retry_at
    assert disruption_report(None) == DisruptionReport()
