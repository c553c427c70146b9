"""Write cluster-autoscaler's status ConfigMap from a poll's view (STATUS_CONFIGMAP).

Both polls call `publish_status` with what they decided: the pending poll the scale-up
conditions, the utilization poll the scale-down ones. Each writes the whole document and
keeps the other's conditions as last written, so neither reads what it does not decide. Writing is best effort: a status
that cannot be written is logged and the poll goes on, since a scale decision
must never wait on a dashboard. With DRY_RUN nothing is written, so a trial run
beside cluster-autoscaler leaves CA's own status alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from shared import telemetry
from shared.domain import ClusterSnapshot, GroupState
from shared.engine.status import (
    DisruptionReport,
    StatusInputs,
    build_status,
    go_time,
    last_activity,
    parse_previous,
    render_status,
    replacement_savings,
    rfc3339,
)
from shared.engine.virtual_nodes import VirtualNodeStatus
from shared.ports import ClusterError, Ports
from shared.services.standby_pools import pooled_group_ids
from shared.services.standby import record_standby, standby_report
from shared.settings import Settings

log = logging.getLogger(__name__)

STATUS_KEY = "status"  # CA's key in the ConfigMap
LAST_UPDATED = "cluster-autoscaler.kubernetes.io/last-updated"  # CA's annotation
# Ours: when the last scale-up, scale-down and failed scale-up happened, across groups.
LAST_ACTIVITY_PREFIX = "vmss-autoscaler.io/last-"

# Our last write per ConfigMap (namespace, name): the text and the document it renders. Parsing our own YAML
# back every poll was a fifth of a replay's CPU time (PyYAML's constructor is Python, libyaml or not). While
# the ConfigMap still holds that text, the document is what parsing it gives (SafeDumper writes plain data
# only, which reads back equal: tests/shared/services/test_status_render.py compares), so it is used as
# `previous`; any other text (CA's, another replica's, an edit) is parsed. Keyed by text, not by who wrote it,
# it cannot go stale (two polls racing at worst leave one's text against the other's write: a parse), and one
# entry per ConfigMap bounds it. It lives here because shared/engine is pure (no state between calls).
# Shared between polls and never mutated: build_status only reads `previous` and copies what it keeps.
_LAST_WRITTEN: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}


def publish_status(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, inputs: StatusInputs, *,
                   now: datetime) -> str | None:
    """Write the status; returns the YAML written, or None when nothing was (disabled, dry run, failed)."""
    if inputs.standby is None:  # warm standby: gauges every poll, shown in the status
        inputs = replace(inputs, standby=_standby(ports, settings, snapshot, inputs, now=now))
    if inputs.disruption is not None:  # the utilisation poll's replacement round: gauges every poll
        telemetry.record_replacements(savings_per_hour=replacement_savings(inputs.group_states),
                                      drifted=len(inputs.disruption.drifted))
    if settings.status_configmap is None or settings.dry_run:
        return None
    namespace, name = settings.status_configmap
    try:
        current = ports.cluster.get_config_map(namespace, name)
        previous = _previous((namespace, name), (current or {}).get(STATUS_KEY))
        doc = build_status(snapshot, inputs, now=now, previous=previous)
        text = render_status(doc)
        annotations = {LAST_UPDATED: go_time(now)}
        annotations.update({f"{LAST_ACTIVITY_PREFIX}{kind}": rfc3339(at)
                            for kind, at in last_activity(inputs.group_states).items()})
        ports.cluster.write_config_map(namespace, name, data={STATUS_KEY: text}, annotations=annotations)
    except ClusterError as exc:
        log.warning("status ConfigMap %s/%s not written: %s", namespace, name, exc)
        return None
    _LAST_WRITTEN[(namespace, name)] = (text, doc)  # only once written: until then the ConfigMap holds other text
    return text


def _standby(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, inputs: StatusInputs, *,
             now: datetime) -> dict[str, dict[str, Any]]:
    """The groups' standby (services.standby), recorded as App Insights gauges; only groups that keep some."""
    reports = {}
    pooled = pooled_group_ids(ports, snapshot.groups)  # one pool list for every group
    for group in snapshot.groups:
        state = inputs.group_states.get(group.id) or GroupState(group.id)
        report = standby_report(ports, settings, group, state, now=now, pooled=pooled)
        if report is not None:
            reports[group.id] = report
    record_standby(reports)
    return {gid: report.as_dict() for gid, report in reports.items()}


def _previous(key: tuple[str, str], text: str | None) -> dict[str, Any] | None:
    """parse_previous(text), without parsing when it is the text we last wrote to this ConfigMap."""
    last = _LAST_WRITTEN.get(key)
    if last is not None and text == last[0]:
        return last[1]
    return parse_previous(text)


class _Proposal(Protocol):
    @property
    def nodes(self) -> tuple[tuple[str, str], ...]: ...


class ReplacementRoundView(Protocol):
    """What is read of a replacement round (services.replacement.ReplacementRound) to report it."""

    @property
    def drifted(self) -> Mapping[str, str]: ...
    @property
    def admitted(self) -> tuple[_Proposal, ...]: ...
    @property
    def refused(self) -> Mapping[str, str]: ...
    @property
    def waiting(self) -> Mapping[str, str]: ...
    @property
    def candidates(self) -> Mapping[str, str]: ...
    @property
    def forced(self) -> Mapping[str, Any]: ...
    @property
    def retry_at(self) -> Mapping[str, datetime]: ...


def disruption_report(round_: ReplacementRoundView | None) -> DisruptionReport:
    """The status's and `plan`'s view of a replacement round: each drifted node with why it waits ("" when its
    replacement was admitted now or is Ready to drain), and the consolidation candidates' verdicts. The budgets'
    allowances are computed by the status from the states, which already hold the round's new entries."""
    if round_ is None:
        return DisruptionReport()
    going = {node for proposal in round_.admitted for node, _ in proposal.nodes} | set(round_.forced)
    drifted = {}
    for node in round_.drifted:
        if node in going:
            drifted[node] = ""
        else:
            drifted[node] = (round_.waiting.get(node) or round_.refused.get(node)
                             or "not proposed this poll (being replaced or removed already)")
    return DisruptionReport(drifted=drifted, candidates=dict(round_.candidates), retry_at=dict(round_.retry_at))


def status_inputs(settings: Settings, *, group_states: Mapping[str, GroupState],
                  unneeded: Mapping[str, datetime] | None,
                  backoff: Mapping[str, str] | None = None, scale_up_needed: frozenset[str] = frozenset(),
                  unschedulable_pods: int = 0, waiting_for_slots: Mapping[str, int] | None = None,
                  virtual_nodes: VirtualNodeStatus | None = None,
                  unavailable_offerings: tuple[str, ...] | None = None,
                  spot_evictions: Mapping[str, str] | None = None,
                  capacity_buffers: Mapping[str, Mapping[str, Any]] | None = None,
                  provisioning_requests: Mapping[str, Mapping[str, Any]] | None = None,
                  disruption: DisruptionReport | None = None) -> StatusInputs:
    return StatusInputs(
        group_states=group_states, unneeded=unneeded, backoff=dict(backoff or {}),
        scale_up_needed=scale_up_needed, unschedulable_pods=unschedulable_pods,
        max_node_provision_time=settings.max_node_provision_time, waiting_for_slots=waiting_for_slots,
        virtual_nodes=virtual_nodes, unavailable_offerings=unavailable_offerings, spot_evictions=spot_evictions,
        scheduled_windows=settings.scheduled_capacity, capacity_buffers=capacity_buffers,
        provisioning_requests=provisioning_requests, disruption=disruption,
        disruption_budgets=settings.disruption_budgets,
    )
