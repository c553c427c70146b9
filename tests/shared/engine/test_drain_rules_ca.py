"""cluster-autoscaler's drainability rules that issue 14 (item 6) found us differing on, table-driven.

Rows follow upstream's rules and their tests (simulator/drainability/rules/{system,daemonset,...},
utils/pod.IsDaemonSetPod, the `safe-to-evict: "on-completion"` rule of kubernetes/autoscaler#9355).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DisruptionBudget, LabelSelector, OwnerRef, Pod
from shared.engine.drainability import SAFE_TO_EVICT, Disposition, DrainRules, classify
from tests.builders import T0, pod

REPLICATED = pod("web", node_name="n")
SYSTEM = replace(pod("metrics-server", node_name="n", namespace="kube-system"), created_at=T0 - timedelta(hours=2))
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
    # kube-system without a PodDisruptionBudget pins its node however old it is: upstream's system rule has no
    # age limit (rules/system/rule.go); only long-terminating, DaemonSet, safe-to-evict and terminal pods pass.
    ("kube-system, no budget, two hours old", SYSTEM, DrainRules(), (), Disposition.PIN),
    ("kube-system with a budget", replace(SYSTEM, labels={"app": "ms"}), DrainRules(), (SYSTEM_PDB,),
     Disposition.MOVE),
    ("kube-system, safe-to-evict", replace(SYSTEM, annotations={SAFE_TO_EVICT: "true"}), DrainRules(), (),
     Disposition.MOVE),
    ("kube-system, skip off", SYSTEM, DrainRules(skip_system_pods=False), (), Disposition.MOVE),
])
def test_drain_rules_as_cluster_autoscaler(case_id: str, the_pod: Pod, rules: DrainRules,
                                           budgets: tuple[DisruptionBudget, ...], disposition: Disposition) -> None:
    assert classify(the_pod, rules, budgets).disposition is disposition


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
