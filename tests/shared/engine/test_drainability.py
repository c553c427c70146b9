"""Drainability: one row per rule of shared/engine/drainability.py, with its verdict and reason code.

test_drain_rules_ca.py holds the cases taken from cluster-autoscaler's own tests; this file walks the
module's documented rules in order, their precedence, a node's drain, and PodDisruptionBudget counting.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DAEMONSET_POD_ANNOTATION, DisruptionBudget, OwnerRef, Pod
from shared.engine import reasons
from shared.engine.drainability import (
    DO_NOT_DISRUPT,
    SAFE_TO_EVICT,
    SAFE_TO_EVICT_LOCAL_VOLUMES,
    Budgets,
    Disposition,
    DrainRules,
    classify,
    drain_of,
)
from shared.engine.reasons import KeptReason
from tests.builders import T0, daemon_pod, pod, sel

RS = pod("web", node_name="n1")  # a ReplicaSet's running pod: movable unless a rule says otherwise
NOW = T0


def with_(base: Pod, **changes: object) -> Pod:
    return replace(base, **changes)  # type: ignore[arg-type]


def terminating(seconds_ago: float, grace: int | None = None, **changes: object) -> Pod:
    return with_(RS, terminating=True, deleted_at=NOW - timedelta(seconds=seconds_ago),
                 termination_grace_seconds=grace, **changes)


KUBE_SYSTEM_PDB = DisruptionBudget("kube-system", "dns", sel(app="dns"), 1)
DEFAULT_PDB_SAME_LABELS = DisruptionBudget("default", "dns", sel(app="dns"), 1)

# (id, pod, rules, budgets, disposition, reason code for PIN, None otherwise)
RULES = [
    # Ignored: they go with the node.
    ("mirror pod", with_(RS, is_mirror=True, owner=None), DrainRules(), (), Disposition.IGNORE, None),
    ("DaemonSet pod", daemon_pod("n1"), DrainRules(), (), Disposition.IGNORE, None),
    ("daemonset-pod annotation", with_(RS, owner=OwnerRef("AgentSet", "a"),
                                       annotations={DAEMONSET_POD_ANNOTATION: "true"}),
     DrainRules(), (), Disposition.IGNORE, None),
    ("Succeeded pod", with_(RS, phase="Succeeded", owner=None), DrainRules(), (), Disposition.IGNORE, None),
    ("Failed pod", with_(RS, phase="Failed", owner=None), DrainRules(), (), Disposition.IGNORE, None),
    ("terminating, no deletion time known", with_(RS, terminating=True, owner=None), DrainRules(), (),
     Disposition.IGNORE, None),
    ("long-terminating: past grace (30 s default) and 30 s more", terminating(61, owner=None), DrainRules(), (),
     Disposition.IGNORE, None),
    ("long-terminating with its own grace period", terminating(131, grace=100, owner=None), DrainRules(), (),
     Disposition.IGNORE, None),
    # Within its grace period a terminating pod goes through the rules like any other.
    ("terminating within grace, no controller", terminating(59, owner=None), DrainRules(), (),
     Disposition.PIN, reasons.NOT_REPLICATED),
    ("terminating within grace, replicated", terminating(10), DrainRules(), (), Disposition.MOVE, None),
    # Expendable: movable whatever it is.
    ("expendable pod without controller", with_(RS, priority=-11, owner=None), DrainRules(), (),
     Disposition.MOVE, None),
    ("priority at the cutoff is not expendable", with_(RS, priority=-10, owner=None), DrainRules(), (),
     Disposition.PIN, reasons.NOT_REPLICATED),
    ("expendable beats safe-to-evict false", with_(RS, priority=-100, annotations={SAFE_TO_EVICT: "false"}),
     DrainRules(), (), Disposition.MOVE, None),
    # safe-to-evict and do-not-disrupt.
    ("safe-to-evict true makes an unreplicated pod movable", with_(RS, owner=None, annotations={SAFE_TO_EVICT: "true"}),
     DrainRules(), (), Disposition.MOVE, None),
    ("safe-to-evict true beats local storage", with_(RS, local_volumes=("cache",), annotations={SAFE_TO_EVICT: "true"}),
     DrainRules(), (), Disposition.MOVE, None),
    ("safe-to-evict false pins", with_(RS, annotations={SAFE_TO_EVICT: "false"}), DrainRules(), (),
     Disposition.PIN, reasons.NOT_SAFE_TO_EVICT),
    ("safe-to-evict false beats batch waiting", with_(RS, owner=OwnerRef("Job", "j"),
                                                      annotations={SAFE_TO_EVICT: "false"}),
     DrainRules(), (), Disposition.PIN, reasons.NOT_SAFE_TO_EVICT),
    ("safe-to-evict on-completion waits", with_(RS, annotations={SAFE_TO_EVICT: "on-completion"}), DrainRules(), (),
     Disposition.WAIT, None),
    ("do-not-disrupt true pins", with_(RS, annotations={DO_NOT_DISRUPT: "true"}), DrainRules(), (),
     Disposition.PIN, reasons.DO_NOT_DISRUPT),
    ("do-not-disrupt false changes nothing", with_(RS, annotations={DO_NOT_DISRUPT: "false"}), DrainRules(), (),
     Disposition.MOVE, None),
    # Batch work.
    ("Job pod waits", with_(RS, owner=OwnerRef("Job", "j")), DrainRules(), (), Disposition.WAIT, None),
    ("Job pod without batch protection moves", with_(RS, owner=OwnerRef("Job", "j")), DrainRules(protect_batch=False),
     (), Disposition.MOVE, None),
    ("pod matching BATCH_POD_SELECTOR waits", with_(RS, labels={"workload": "batch"}),
     DrainRules(batch_selector=sel(workload="batch")), (), Disposition.WAIT, None),
    ("pod not matching BATCH_POD_SELECTOR moves", with_(RS, labels={"workload": "web"}),
     DrainRules(batch_selector=sel(workload="batch")), (), Disposition.MOVE, None),
    # Local storage.
    ("local storage pins", with_(RS, local_volumes=("scratch",)), DrainRules(), (),
     Disposition.PIN, reasons.LOCAL_STORAGE),
    ("every local volume listed as safe", with_(RS, local_volumes=("a", "b"),
                                                annotations={SAFE_TO_EVICT_LOCAL_VOLUMES: "a, b"}),
     DrainRules(), (), Disposition.MOVE, None),
    ("one local volume not listed", with_(RS, local_volumes=("a", "b"), annotations={SAFE_TO_EVICT_LOCAL_VOLUMES: "a"}),
     DrainRules(), (), Disposition.PIN, reasons.LOCAL_STORAGE),
    ("local storage with the rule off", with_(RS, local_volumes=("scratch",)), DrainRules(skip_local_storage=False),
     (), Disposition.MOVE, None),
    # Controllers.
    ("no controller pins", with_(RS, owner=None), DrainRules(), (), Disposition.PIN, reasons.NOT_REPLICATED),
    ("custom controller pins", with_(RS, owner=OwnerRef("Workflow", "w")), DrainRules(), (),
     Disposition.PIN, reasons.NOT_REPLICATED),
    ("custom controller with the rule off", with_(RS, owner=OwnerRef("Workflow", "w")),
     DrainRules(skip_custom_controllers=False), (), Disposition.MOVE, None),
    ("no controller pins even with the custom-controller rule off", with_(RS, owner=None),
     DrainRules(skip_custom_controllers=False), (), Disposition.PIN, reasons.NOT_REPLICATED),
    ("StatefulSet pod moves", with_(RS, owner=OwnerRef("StatefulSet", "s")), DrainRules(), (), Disposition.MOVE, None),
    ("ReplicationController pod moves", with_(RS, owner=OwnerRef("ReplicationController", "r")), DrainRules(), (),
     Disposition.MOVE, None),
    # kube-system.
    ("kube-system pod without a budget pins", with_(RS, namespace="kube-system", labels={"app": "dns"}),
     DrainRules(), (), Disposition.PIN, reasons.UNMOVABLE_KUBE_SYSTEM_POD),
    ("kube-system pod with a budget moves", with_(RS, namespace="kube-system", labels={"app": "dns"}),
     DrainRules(), (KUBE_SYSTEM_PDB,), Disposition.MOVE, None),
    ("a budget of another namespace does not cover it", with_(RS, namespace="kube-system", labels={"app": "dns"}),
     DrainRules(), (DEFAULT_PDB_SAME_LABELS,), Disposition.PIN, reasons.UNMOVABLE_KUBE_SYSTEM_POD),
    ("kube-system with the rule off", with_(RS, namespace="kube-system"), DrainRules(skip_system_pods=False), (),
     Disposition.MOVE, None),
    # Nothing applies.
    ("ReplicaSet pod moves", RS, DrainRules(), (), Disposition.MOVE, None),
]


@pytest.mark.parametrize("case_id,the_pod,rules,budgets,disposition,code", RULES, ids=[r[0] for r in RULES])
def test_each_rule_gives_its_verdict_and_reason(case_id: str, the_pod: Pod, rules: DrainRules,
                                                 budgets: tuple[DisruptionBudget, ...], disposition: Disposition,
                                                 code: str | None) -> None:
    verdict = classify(the_pod, rules, budgets, now=NOW)
    assert verdict.pod is the_pod
    assert verdict.disposition is disposition
    if disposition is Disposition.PIN:
        # Every pin carries its code for counting and a message naming the pod for people.
        assert isinstance(verdict.reason, KeptReason) and verdict.reason.code == code
        assert the_pod.key in verdict.reason
    elif disposition is Disposition.WAIT:
        assert verdict.reason and the_pod.key in verdict.reason and not isinstance(verdict.reason, KeptReason)
    else:
        assert verdict.reason == ""


def test_local_storage_reason_names_only_the_unlisted_volumes() -> None:
    the_pod = with_(RS, local_volumes=("logs", "cache", "tmp"), annotations={SAFE_TO_EVICT_LOCAL_VOLUMES: "logs,tmp"})
    reason = classify(the_pod, DrainRules()).reason
    assert "cache" in reason and "logs" not in reason and "tmp" not in reason


def test_without_now_a_terminating_pod_is_ignored_even_within_its_grace_period() -> None:
    the_pod = terminating(1, owner=None)
    assert classify(the_pod, DrainRules()).disposition is Disposition.IGNORE
    assert classify(the_pod, DrainRules(), now=NOW).disposition is Disposition.PIN


# --- A node's drain ----------------------------------------------------------------------


def test_drain_of_sorts_pods_into_move_and_wait_and_leaves_node_bound_ones() -> None:
    pods = [
        pod("web-b", node_name="n1"),
        pod("job", node_name="n1", owner="Job"),
        pod("web-a", node_name="n1"),
        daemon_pod("n1"),
        with_(pod("done", node_name="n1"), phase="Succeeded", owner=None),
    ]
    drain = drain_of(pods, DrainRules(), now=NOW)
    assert [p.name for p in drain.move] == ["web-a", "web-b"]  # by key, whatever the input order
    assert [p.name for p in drain.wait] == ["job"]
    assert drain.pinned_by is None and not drain.empty


def test_one_pinning_pod_pins_the_node_and_names_the_first_pin_by_key() -> None:
    pods = [pod("web", node_name="n1"), with_(pod("z-solo", node_name="n1"), owner=None),
            with_(pod("a-keep", node_name="n1"), annotations={SAFE_TO_EVICT: "false"})]
    drain = drain_of(pods, DrainRules(), now=NOW)
    assert drain.move == () and drain.wait == () and not drain.empty
    assert drain.pinned_by is not None and drain.pinned_by.code == reasons.NOT_SAFE_TO_EVICT
    assert "default/a-keep" in drain.pinned_by


@pytest.mark.parametrize("seed", range(4))
def test_drain_of_does_not_depend_on_the_order_of_the_pods(seed: int) -> None:
    pods = [pod(f"web-{i}", node_name="n1") for i in range(5)] + [pod("job", node_name="n1", owner="Job"),
                                                                   daemon_pod("n1")]
    shuffled = list(pods)
    random.Random(seed).shuffle(shuffled)
    assert drain_of(shuffled, DrainRules(), now=NOW) == drain_of(pods, DrainRules(), now=NOW)


@pytest.mark.parametrize("case_id,pods,empty", [
    ("no pods", [], True),
    ("only node-bound and finished pods", [daemon_pod("n1"), with_(pod("m", node_name="n1"), is_mirror=True),
                                          with_(pod("done", node_name="n1"), phase="Failed")], True),
    ("a pod to move", [pod("web", node_name="n1")], False),
    ("a pod to wait for", [pod("job", node_name="n1", owner="Job")], False),
    ("a pinning pod", [with_(pod("solo", node_name="n1"), owner=None)], False),
])
def test_a_node_is_empty_only_with_nothing_to_move_wait_for_or_keep_it(case_id: str, pods: list[Pod],
                                                                        empty: bool) -> None:
    assert drain_of(pods, DrainRules(), now=NOW).empty is empty


# --- PodDisruptionBudgets across a plan --------------------------------------------------


def web(name: str, namespace: str = "default") -> Pod:
    return pod(name, node_name="n1", labels={"app": "web"}, namespace=namespace)


WEB_PDB = DisruptionBudget("default", "web", sel(app="web"), 2)


def test_budgets_allow_up_to_their_disruptions_and_name_the_one_exhausted() -> None:
    budgets = Budgets([WEB_PDB])
    assert budgets.short([web("a"), web("b")]) is None
    short = budgets.short([web("a"), web("b"), web("c")])
    assert short is not None and short.code == reasons.NOT_ENOUGH_PDB and "default/web" in short


def test_budgets_are_counted_across_the_nodes_of_one_plan() -> None:
    budgets = Budgets([WEB_PDB])
    budgets.take([web("a")])  # the first node's pod
    assert budgets.short([web("b")]) is None
    budgets.take([web("b")])
    short = budgets.short([web("c")])
    assert short is not None and short.code == reasons.NOT_ENOUGH_PDB and "allows 0 more" in short


@pytest.mark.parametrize("case_id,the_pod", [
    ("another namespace", web("a", namespace="other")),
    ("labels not selected", pod("db", node_name="n1", labels={"app": "db"})),
])
def test_pods_no_budget_covers_never_fall_short(case_id: str, the_pod: Pod) -> None:
    budgets = Budgets([DisruptionBudget("default", "web", sel(app="web"), 0)])
    assert budgets.short([the_pod] * 3) is None


def test_a_budget_without_selector_covers_no_pod_and_an_empty_one_every_pod_of_its_namespace() -> None:
    none = Budgets([DisruptionBudget("default", "nothing", None, 0)])
    every = Budgets([DisruptionBudget("default", "all", sel(), 0)])
    assert none.short([web("a")]) is None
    assert every.short([pod("anything", node_name="n1")]) is not None


def test_a_pod_under_two_budgets_needs_both() -> None:
    budgets = Budgets([DisruptionBudget("default", "b-roomy", sel(app="web"), 5),
                       DisruptionBudget("default", "a-tight", sel(app="web"), 0)])
    short = budgets.short([web("a")])
    assert short is not None and "default/a-tight" in short and "b-roomy" not in short


def test_take_consumes_nothing_when_a_budget_would_go_below_zero() -> None:
    budgets = Budgets([DisruptionBudget("default", "roomy", sel(app="web"), 5),
                       DisruptionBudget("default", "tight", sel(app="web"), 1)])
    budgets.take([web("a"), web("b")])  # the second would take "tight" to -1: the Eviction API refuses it
    assert all(left >= 0 for left in budgets.left.values()), budgets.left
    assert budgets.left[("default", "roomy")] >= 4  # what was refused consumed nothing of the other budget
