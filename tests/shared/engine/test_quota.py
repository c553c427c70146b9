"""Quota before asking: caps per group, shared across groups of one quota, partial scale-ups in one plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import SPOT, QuotaUsage, VmSizeCapacity
from shared.engine.quota import capped_target, quota_view
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from tests.builders import group, pod, res, snapshot, template

GIB = 1 << 30
SIZES = [VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB, family="standardDSv5Family"),
         VmSizeCapacity("Standard_F8s_v2", 8, 16 * GIB, family="standardFSv2Family")]


def view(**limits: tuple[int, int]):  # type: ignore[no-untyped-def]
    return quota_view({"westeurope": [QuotaUsage(name, used, limit) for name, (used, limit) in limits.items()]}, SIZES)


@pytest.mark.parametrize("case_id,quota,grp,allowed,names", [
    ("family caps", view(standardDSv5Family=(8, 20), cores=(8, 100)), group("d4"), 3, "standardDSv5Family"),
    ("regional caps", view(standardDSv5Family=(0, 100), cores=(90, 100)), group("d4"), 2, "regional cores"),
    ("spot counts against low-priority only", view(standardDSv5Family=(20, 20), cores=(100, 100),
                                                   lowPriorityCores=(0, 13)),
     replace(group("d4"), priority=SPOT), 3, "low-priority"),
    ("an unlisted quota caps nothing", view(lowPriorityCores=(0, 0)), group("d4"), None, None),
    ("an unknown size caps nothing", view(cores=(0, 4)), group("x", vm_size="Standard_Z9"), None, None),
    ("over the limit already: nothing", view(standardDSv5Family=(24, 20)), group("d4"), 0, "standardDSv5Family"),
])
def test_nodes_allowed(case_id, quota, grp, allowed, names) -> None:  # type: ignore[no-untyped-def]
    count, why = quota.allowed(grp)
    assert count == allowed
    assert (why is None) == (names is None) and (names is None or names in why)


def test_consuming_one_group_lowers_the_others_of_its_quota() -> None:
    quota = view(standardDSv5Family=(0, 40), cores=(0, 44))
    d4, f8 = group("d4"), group("f8", vm_size="Standard_F8s_v2")
    after = quota.consume(d4, 9)  # 36 vCPUs
    assert after.allowed(d4)[0] == 1  # the family has 4 left
    assert after.allowed(f8)[0] == 1  # the region has 8 left, shared with another family
    assert quota.allowed(d4)[0] == 10  # the view itself is unchanged


def test_executor_cap() -> None:
    quota = view(standardDSv5Family=(8, 20))
    assert capped_target(group("d4", target=2), 10, quota) == (5, capped_target(group("d4", target=2), 10, quota)[1])
    assert capped_target(group("d4", target=2), 4, quota) == (4, None)
    assert capped_target(group("d4", target=2), 10, None) == (10, None)


def test_partial_scale_up_takes_what_fits_and_plans_the_rest_elsewhere() -> None:
    """Ten pods a node each: the best group's family allows 3 nodes; the other 7 go to the next group, same plan."""
    d4 = group("d4", target=0)
    f8 = group("f8", target=0, vm_size="Standard_F8s_v2")
    pods = [pod(f"p{i}", cpu=3, mem=12, pending=True) for i in range(10)]
    snap = replace(snapshot(pods=pods, groups=[d4, f8]),
                   templates={d4.id: template(res(3.8, 14, 110)), f8.id: template(res(7.8, 14, 110))})
    quota = view(standardDSv5Family=(4, 16), standardFSv2Family=(0, 100), cores=(4, 200))
    plan = plan_scale_up(snap, options=ScaleUpOptions(quota=quota))
    by_group = {i.group_id: i.delta for i in plan.increases}
    assert by_group[d4.id] == 3  # 12 vCPUs left in the family: three D4s (least-waste prefers D4 for 3-CPU, 12-GiB pods)
    assert sum(len(i.pods) for i in plan.increases) == 10 and not plan.unplaceable
    assert plan.quota_capped == (d4.id,)
    # The invariant: no group's increase exceeds what its quotas allow.
    for increase in plan.increases:
        grp = next(g for g in (d4, f8) if g.id == increase.group_id)
        assert increase.delta <= (quota.allowed(grp)[0] or 0)
    # Without a quota view the whole scale-up goes to D4s.
    unlimited = plan_scale_up(snap, options=ScaleUpOptions())
    assert {i.group_id: i.delta for i in unlimited.increases} == {d4.id: 10}


def test_quota_spent_everywhere_says_so() -> None:
    d4 = group("d4", target=0)
    snap = replace(snapshot(pods=[pod("p", cpu=3, pending=True)], groups=[d4]), templates={d4.id: template(res(3.8, 14, 110))})
    plan = plan_scale_up(snap, options=ScaleUpOptions(quota=view(standardDSv5Family=(16, 16))))
    assert not plan.increases
    assert "quota" in plan.unplaceable["default/p"] and "standardDSv5Family" in plan.unplaceable["default/p"]
