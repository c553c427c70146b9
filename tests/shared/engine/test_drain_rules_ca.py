"""cluster-autoscaler's drainability rules where we once differed from it, table-driven.

Rows follow upstream's rules and their tests (simulator/drainability/rules/{system,daemonset,...},
utils/pod.IsDaemonSetPod, the `safe-to-evict: "on-completion"` rule of kubernetes/autoscaler#9355).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain import DisruptionBudget, LabelSelector, OwnerRef, Pod
from shared.engine.drainability import SAFE_TO_EVICT, Budgets, Disposition, DrainRules, classify, drain_of
from tests.builders import T0, pod

REPLICATED = pod("web", node_name="n")
# Younger than the default disruption timeout (1 h): the system rule still holds it.
SYSTEM = replace(pod("metrics-server", node_name="n", namespace="kube-system"), created_at=T0 - timedelta(minutes=10))
OLD_SYSTEM = replace(SYSTEM, created_at=T0 - timedelta(hours=2))
SYSTEM_PDB = DisruptionBudget("kube-system", "ms", LabelSelector((("app", "ms"),)), 1)


@pytest.mark.parametrize("case_id,the_pod,rules,budgets,disposition", [
    # A custom controller's per-node pod marked as a DaemonSet pod goes with the node (CA's IsDaemonSetPod).
    ("daemonset-pod annotation", replace(REPLICATED, owner=OwnerRef("NodeAgentSet", "agents"),
                                         annotations={"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"}),
     DrainRules(), (), Disposition.IGNORE),
    ("daemonset-pod annotation false", replace(REPLICATED, annotations={
        "cluster-autoscaler.kubernetes.io/daemonset-pod": "false"}), DrainRules(), (), Disposition.MOVE),
    # safe-to-evict: on-completion: never evicted, the node waits, even with batch protection off.
    ("on-completion", replace(REPLICATED, annotations={SAFE_TO_EVICT: "on-completion"}), DrainRules(), (),
     Disposition.WAIT),
    ("on-completion without batch protection", replace(REPLICATED, annotations={SAFE_TO_EVICT: "on-completion"}),
     DrainRules(protect_batch=False), (), Disposition.WAIT),
    ("on-completion wins over no controller", replace(REPLICATED, owner=None,
                                                      annotations={SAFE_TO_EVICT: "on-completion"}),
     DrainRules(), (), Disposition.WAIT),
    # kube-system without a PodDisruptionBudget pins its node only until it is older than
    # --blocking-system-pod-distruption-timeout (1 h by default; rules/system/rule.go, isBspPassedDisruptionTimeout).
    ("kube-system, no budget, ten minutes old", SYSTEM, DrainRules(), (), Disposition.PIN),
    ("kube-system, no budget, two hours old", OLD_SYSTEM, DrainRules(), (), Disposition.MOVE),
    ("kube-system, no budget, two hours old, timeout 3h", OLD_SYSTEM,
     DrainRules(system_pod_disruption_timeout=timedelta(hours=3)), (), Disposition.PIN),
    ("kube-system with a budget", replace(SYSTEM, labels={"app": "ms"}), DrainRules(), (SYSTEM_PDB,),
     Disposition.MOVE),
    ("kube-system, safe-to-evict", replace(SYSTEM, annotations={SAFE_TO_EVICT: "true"}), DrainRules(), (),
     Disposition.MOVE),
    ("kube-system, skip off", SYSTEM, DrainRules(skip_system_pods=False), (), Disposition.MOVE),
])
def test_drain_rules_as_cluster_autoscaler(case_id: str, the_pod: Pod, rules: DrainRules,
                                           budgets: tuple[DisruptionBudget, ...], disposition: Disposition) -> None:
    assert classify(the_pod, rules, budgets, now=T0).disposition is disposition


# rules/system with --blocking-system-pod-distruption-timeout: the clock runs from the pod's creation, and the
# pod stops pinning only strictly after creation + timeout (`drainTime.After(creation.Add(timeout))`); a pod
# without a creation time (read as the epoch) never ages; a budget takes the rule's place whatever the age.
NO_PDB_BUDGET = DisruptionBudget("kube-system", "ms", LabelSelector((("app", "ms"),)), 0)


@pytest.mark.parametrize("case_id,age,timeout,budgets,disposition", [
    ("one second short of the timeout", timedelta(minutes=59, seconds=59), timedelta(hours=1), (), Disposition.PIN),
    ("exactly the timeout", timedelta(hours=1), timedelta(hours=1), (), Disposition.PIN),
    ("one second past it", timedelta(hours=1, seconds=1), timedelta(hours=1), (), Disposition.MOVE),
    ("a timeout of 0: any pod created before now", timedelta(seconds=1), timedelta(0), (), Disposition.MOVE),
    ("a timeout of 0: a pod created this instant", timedelta(0), timedelta(0), (), Disposition.PIN),
    ("a custom timeout, not reached", timedelta(minutes=20), timedelta(minutes=30), (), Disposition.PIN),
    ("a custom timeout, passed", timedelta(minutes=31), timedelta(minutes=30), (), Disposition.MOVE),
    # A budget allowing no disruption is the budget's refusal (rules/pdb), not the system rule's: age does not
    # lift it. classify leaves budgets' counts to Budgets, so the pod is movable here and blocked there.
    ("old, covered by a budget allowing none", timedelta(days=30), timedelta(hours=1), (NO_PDB_BUDGET,),
     Disposition.MOVE),
])
def test_system_pod_disruption_timeout(case_id: str, age: timedelta, timeout: timedelta,
                                       budgets: tuple[DisruptionBudget, ...], disposition: Disposition) -> None:
    the_pod = replace(SYSTEM, labels={"app": "ms"}, created_at=T0 - age)
    verdict = classify(the_pod, DrainRules(system_pod_disruption_timeout=timeout), budgets, now=T0)
    assert verdict.disposition is disposition
    if disposition is Disposition.PIN:
        assert verdict.reason.code == "UnmovableKubeSystemPod" and the_pod.key in verdict.reason


def test_an_old_system_pod_whose_budget_allows_no_disruption_still_keeps_its_node() -> None:
    the_pod = replace(SYSTEM, labels={"app": "ms"}, created_at=T0 - timedelta(days=30))
    drain = drain_of([the_pod], DrainRules(), (NO_PDB_BUDGET,), now=T0)
    assert [p.key for p in drain.move] == [the_pod.key]  # the system rule lets it go...
    short = Budgets((NO_PDB_BUDGET,)).short(drain.move)  # ...and the budget keeps it, as CA's pdb rule does
    assert short is not None and short.code == "NotEnoughPdb"


@pytest.mark.parametrize("case_id,created_at,now", [
    ("creation time unknown (the epoch)", datetime(1970, 1, 1, tzinfo=UTC), T0),
    ("no clock given", T0 - timedelta(days=30), None),
])
def test_a_system_pod_whose_age_cannot_be_told_keeps_its_node(case_id: str, created_at: datetime,
                                                              now: datetime | None) -> None:
    the_pod = replace(SYSTEM, created_at=created_at)
    assert classify(the_pod, DrainRules(), now=now).disposition is Disposition.PIN


# rules/replicated with --skip-nodes-with-custom-controller-pods (CA's default true): only these owners replicate.
@pytest.mark.parametrize("kind,skip,disposition", [
    ("ReplicaSet", True, Disposition.MOVE),
    ("StatefulSet", True, Disposition.MOVE),
    ("ReplicationController", True, Disposition.MOVE),
    ("Workflow", True, Disposition.PIN),  # an Argo Workflow's pod: nothing recreates it elsewhere
    ("SparkApplication", True, Disposition.PIN),
    ("Workflow", False, Disposition.MOVE),  # the flag off: any controller counts, as CA then does
])
def test_pods_of_controllers_cluster_autoscaler_does_not_know_pin_their_node(
    kind: str, skip: bool, disposition: Disposition
) -> None:
    the_pod = replace(REPLICATED, owner=OwnerRef(kind, "owner"))
    verdict = classify(the_pod, DrainRules(skip_custom_controllers=skip))
    assert verdict.disposition is disposition
    if disposition is Disposition.PIN:
        assert verdict.reason.code == "NotReplicated" and kind in str(verdict.reason)


# rules/longterminating and drain.IsPodLongTerminating: ignored once past its grace period plus 30 s; before that
# a terminating pod goes through the rules like any other (it still has to leave, or it pins the node).
def _terminating(seconds_ago: float, grace: int | None = None, **changes: object) -> Pod:
    return replace(REPLICATED, terminating=True, deleted_at=T0 - timedelta(seconds=seconds_ago),
                   termination_grace_seconds=grace, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("case_id,the_pod,disposition", [
    ("just asked to terminate", _terminating(10), Disposition.MOVE),
    ("59 s ago, default grace 30 s", _terminating(59), Disposition.MOVE),
    ("61 s ago, default grace 30 s: long terminating", _terminating(61), Disposition.IGNORE),
    ("300 s ago, grace 600 s", _terminating(300, grace=600), Disposition.MOVE),
    ("700 s ago, grace 600 s", _terminating(700, grace=600), Disposition.IGNORE),
    ("terminating, no controller", _terminating(10, owner=None), Disposition.PIN),
    ("long terminating, no controller", _terminating(120, owner=None), Disposition.IGNORE),
    ("terminating, deletion time unknown", replace(REPLICATED, terminating=True), Disposition.IGNORE),
])
def test_terminating_and_long_terminating_pods(case_id: str, the_pod: Pod, disposition: Disposition) -> None:
    assert classify(the_pod, DrainRules(), now=T0).disposition is disposition
