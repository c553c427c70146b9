"""Scale-in protection decisions (shared/engine/protection.py): who is protected, who is lifted, the write budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import Instance, Pod
from shared.engine.drainability import ON_COMPLETION, SAFE_TO_EVICT, DrainRules
from shared.engine.protection import ProtectionChange, busy_nodes, plan_protection
from tests.builders import T0, daemon_pod, node, pod, sel

GROUP = "rg/pool"
N1 = node("n1", instance=1)
JOB = pod("render-1", node_name="n1", owner="Job")
WEB = pod("web-1", node_name="n1")


def inst(instance_id: str = "1", *, protected: bool | None = False, **changes: object) -> Instance:
    return replace(Instance(instance_id, protected_from_scale_in=protected), **changes)  # type: ignore[arg-type]


def plan(pods: list[Pod], instance: Instance, rules: DrainRules = DrainRules()) -> tuple[ProtectionChange, ...]:
    return plan_protection([N1], pods, {GROUP: [instance]}, rules, now=T0).changes


PROTECT = (ProtectionChange(GROUP, "1", "n1", True),)
LIFT = (ProtectionChange(GROUP, "1", "n1", False),)

# (id, pods on n1, its instance, rules, the changes wanted)
CASES = [
    ("a Job's running pod: protect", [JOB], inst(), DrainRules(), PROTECT),
    ("already protected: nothing written", [JOB], inst(protected=True), DrainRules(), ()),
    ("protection not read yet and busy: protect", [JOB], inst(protected=None), DrainRules(), PROTECT),
    ("BATCH_POD_SELECTOR's pod: protect", [pod("train", node_name="n1", labels={"workload": "train"})], inst(),
     DrainRules(batch_selector=sel(workload="train")), PROTECT),
    ("safe-to-evict on-completion: protect", [replace(WEB, annotations={SAFE_TO_EVICT: ON_COMPLETION})], inst(),
     DrainRules(), PROTECT),
    ("BATCH_PROTECTION=false: a Job's pod is movable, not batch", [JOB], inst(), DrainRules(protect_batch=False), ()),
    ("a Job's pod that finished: idle, lift", [replace(JOB, phase="Succeeded")], inst(protected=True), DrainRules(),
     LIFT),
    ("a web pod only: lift", [WEB, daemon_pod("n1")], inst(protected=True), DrainRules(), LIFT),
    ("idle and unprotected: nothing", [WEB], inst(), DrainRules(), ()),
    ("idle, protection not read: nothing to lift", [], inst(protected=None), DrainRules(), ()),
    ("protected from scale-set actions (the operator's): never lifted", [],
     inst(protected=True, protected_from_scale_set_actions=True), DrainRules(), ()),
    ("being deleted: nothing", [JOB], inst(provisioning_state="Deleting"), DrainRules(), ()),
]


@pytest.mark.parametrize(("pods", "instance", "rules", "wanted"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_protection_follows_batch_work(pods: list[Pod], instance: Instance, rules: DrainRules,
                                       wanted: tuple[ProtectionChange, ...]) -> None:
    assert plan(pods, instance, rules) == wanted


def test_an_instance_without_a_node_keeps_its_protection() -> None:
    """Still booting, or its node gone: nothing says the protection is ours to lift."""
    listed = {GROUP: [inst("1", protected=True), inst("7", protected=True)]}
    assert plan_protection([N1], [JOB], listed, DrainRules(), now=T0).changes == ()


def test_a_group_not_listed_is_not_touched() -> None:
    """A group whose backend has no protection, or that was not read, gets nothing, busy or not."""
    assert plan_protection([N1], [JOB], {}, DrainRules(), now=T0).changes == ()


def test_busy_nodes_are_the_nodes_running_batch_work() -> None:
    pods = [JOB, pod("web-2", node_name="n2"), pod("queued", owner="Job"), daemon_pod("n3")]
    assert busy_nodes(pods, DrainRules(), now=T0) == {"n1"}


def test_the_write_budget_protects_first_and_defers_the_rest() -> None:
    nodes = [node(f"n{i}", instance=i) for i in range(6)]
    busy = [pod(f"job-{i}", node_name=f"n{i}", owner="Job") for i in (3, 4, 5)]
    listed = {GROUP: [inst(str(i), protected=i < 3) for i in range(6)],  # 0-2 idle and protected, 3-5 busy
              "rg/other": [inst("0", protected=True)]}  # another group, with no node: untouched
    result = plan_protection(nodes, busy, listed, DrainRules(), now=T0, max_writes_per_group=2)

    assert result.changes == (ProtectionChange(GROUP, "3", "n3", True), ProtectionChange(GROUP, "4", "n4", True))
    assert result.deferred == {GROUP: 4}  # n5 to protect, n0-n2 to lift, on later polls
    # The next poll, with those two written, takes the next two: every change is made in the end.
    written = {"3", "4"}
    listed[GROUP] = [inst(str(i), protected=i < 3 or str(i) in written) for i in range(6)]
    after = plan_protection(nodes, busy, listed, DrainRules(), now=T0, max_writes_per_group=2)
    assert after.changes == (ProtectionChange(GROUP, "5", "n5", True), ProtectionChange(GROUP, "0", "n0", False))


def test_the_budget_is_per_group() -> None:
    nodes = [node("a0", instance=0), node("b0", group_name="other", instance=0)]
    pods = [pod("ja", node_name="a0", owner="Job"), pod("jb", node_name="b0", owner="Job")]
    listed = {GROUP: [inst("0")], "rg/other": [inst("0")]}
    changes = plan_protection(nodes, pods, listed, DrainRules(), now=T0, max_writes_per_group=1).changes
    assert {(c.group_id, c.node) for c in changes} == {(GROUP, "a0"), ("rg/other", "b0")}


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_writes_per_group"):
        plan_protection([N1], [JOB], {GROUP: [inst()]}, DrainRules(), now=T0, max_writes_per_group=-1)
