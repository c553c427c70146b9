"""Error code -> unavailable offering: what a refusal marks, and for how long (table-driven)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import SPOT, GroupState, Instance
from shared.engine.offerings import (
    ANY,
    DEFAULT_LIFETIMES,
    Lifetimes,
    OfferingError,
    OfferingKey,
    PROVISIONING_FAILED,
    blocked,
    classify,
    failed_allocations,
    growing,
    marks_for,
    merge,
    parse_lifetimes,
    unavailable_groups,
    without_failed,
)
from shared.quantities import parse_duration
from tests.builders import T0, group

H, M = timedelta(hours=1), timedelta(minutes=1)
REGULAR_GROUP = group("od", zones=("1",))
SPOT_GROUP = replace(group("spot", zones=("1", "2")), priority=SPOT)

FAMILY_MSG = ("Operation could not be completed as it results in exceeding approved standardDSv5Family Cores quota. "
              "Additional details - Deployment Model: Resource Manager, Location: westeurope, Current Limit: 12, "
              "Current Usage: 8, Additional Required: 16, (Minimum) New Limit Required: 24.")
ZERO_MSG = FAMILY_MSG.replace("Current Limit: 12", "Current Limit: 0")
LOW_MSG = FAMILY_MSG.replace("standardDSv5Family Cores", "LowPriorityCores")
REGIONAL_MSG = FAMILY_MSG.replace("standardDSv5Family Cores", "Total Regional Cores")


@pytest.mark.parametrize("case_id,code,message,grp,kind,lifetime,keys", [
    ("spot capacity", "SkuNotAvailable", "no spot", SPOT_GROUP, "spot-capacity", H,
     {("size", "standard_d4s_v5", "1", SPOT), ("size", "standard_d4s_v5", "2", SPOT)}),
    ("size not offered on demand", "SkuNotAvailable", "n/a", REGULAR_GROUP, "sku-not-available", 23 * H,
     {("size", "standard_d4s_v5", "1", "Regular")}),
    ("zonal allocation: both priorities", "ZonalAllocationFailed", "", REGULAR_GROUP, "zonal-allocation", H,
     {("size", "standard_d4s_v5", "1", ANY)}),
    ("allocation: both priorities", "AllocationFailed", "", SPOT_GROUP, "allocation", H,
     {("size", "standard_d4s_v5", "1", ANY), ("size", "standard_d4s_v5", "2", ANY)}),
    ("overconstrained", "OverconstrainedAllocationRequest", "", REGULAR_GROUP, "overconstrained", H,
     {("size", "standard_d4s_v5", "1", ANY)}),
    ("family quota: the whole family", "OperationNotAllowed", FAMILY_MSG, REGULAR_GROUP, "family-quota", 10 * M,
     {("family", "standarddsv5family", "", "Regular")}),
    ("family quota at limit 0: an hour", "OperationNotAllowed", ZERO_MSG, REGULAR_GROUP, "family-quota-zero", H,
     {("family", "standarddsv5family", "", "Regular")}),
    ("QuotaExceeded reads the same", "QuotaExceeded", FAMILY_MSG, REGULAR_GROUP, "family-quota", 10 * M,
     {("family", "standarddsv5family", "", "Regular")}),
    ("low-priority quota: all spot", "OperationNotAllowed", LOW_MSG, SPOT_GROUP, "low-priority-quota", H,
     {("priority", ANY, "", SPOT)}),
    ("regional quota: no offering", "OperationNotAllowed", REGIONAL_MSG, REGULAR_GROUP, "", None, set()),
    ("authorization: no offering", "AuthorizationFailed", "", REGULAR_GROUP, "", None, set()),
])
def test_refusal_marks(case_id, code, message, grp, kind, lifetime, keys) -> None:  # type: ignore[no-untyped-def]
    classified = classify(code, message, group=grp, family="standardDSv5Family")
    assert classified.kind == kind
    marks = marks_for(classified, group=grp, code=code, message=message, now=T0)
    assert {(m.key.scope, m.key.name, m.key.zone, m.key.priority) for m in marks} == keys
    assert all(m.until == T0 + lifetime and m.key.location == "westeurope" for m in marks)
    assert classified.quota == ("quota" in message.lower())
    if marks:  # the failed group itself is blocked while the mark lives, and free once it expires
        assert blocked(grp, marks, now=T0 + lifetime - M, family="standardDSv5Family") is not None
        assert blocked(grp, marks, now=T0 + lifetime, family="standardDSv5Family") is None


@pytest.mark.parametrize("case_id,mark_group,code,message,other,is_blocked", [
    ("spot refusal leaves on-demand of the size free", SPOT_GROUP, "SkuNotAvailable", "", REGULAR_GROUP, False),
    ("zonal failure blocks on-demand in that zone", SPOT_GROUP, "ZonalAllocationFailed", "",
     group("od2", zones=("2",)), True),
    ("zonal failure leaves another zone free", REGULAR_GROUP, "ZonalAllocationFailed", "",
     group("od3", zones=("3",)), False),
    ("zonal failure leaves a regional group free", REGULAR_GROUP, "ZonalAllocationFailed", "", group("reg"), False),
    ("family quota blocks another size of the family", REGULAR_GROUP, "OperationNotAllowed", FAMILY_MSG,
     group("d8", vm_size="Standard_D8s_v5"), True),
    ("family quota leaves spot of the family free", REGULAR_GROUP, "OperationNotAllowed", FAMILY_MSG,
     SPOT_GROUP, False),
    ("family quota leaves another family free", REGULAR_GROUP, "OperationNotAllowed", FAMILY_MSG,
     group("f8", vm_size="Standard_F8s_v2"), False),
    ("low-priority quota blocks every spot size", SPOT_GROUP, "OperationNotAllowed", LOW_MSG,
     replace(group("f8spot", vm_size="Standard_F8s_v2"), priority=SPOT), True),
    ("another location is not blocked", REGULAR_GROUP, "AllocationFailed", "",
     group("east", zones=("1",), location="eastus"), False),
])
def test_what_a_mark_covers(case_id, mark_group, code, message, other, is_blocked) -> None:  # type: ignore[no-untyped-def]
    families = {"standard_d4s_v5": "standarddsv5family", "standard_d8s_v5": "standarddsv5family",
                "standard_f8s_v2": "standardfsv2family"}
    marks = marks_for(classify(code, message, group=mark_group, family="standardDSv5Family"), group=mark_group,
                      code=code, message=message, now=T0)
    assert marks
    assert (other.id in unavailable_groups([other], marks, now=T0 + M, families=families)) == is_blocked


def test_lifetimes_are_overridable_and_validated() -> None:
    lifetimes = parse_lifetimes("spot-capacity=30m, family-quota=5m", parse_duration=parse_duration)
    assert lifetimes.of("spot-capacity") == 30 * M and lifetimes.of("family-quota") == 5 * M
    assert lifetimes.of("allocation") == DEFAULT_LIFETIMES["allocation"]
    classified = classify("SkuNotAvailable", "", group=SPOT_GROUP)
    assert {m.until for m in marks_for(classified, group=SPOT_GROUP, code="SkuNotAvailable", message="", now=T0,
                                       lifetimes=lifetimes)} == {T0 + 30 * M}
    for bad in ("spot=1h", "spot-capacity", "spot-capacity=soon", "allocation=0s"):
        with pytest.raises(OfferingError, match="spot|allocation"):
            parse_lifetimes(bad, parse_duration=parse_duration)


def test_a_short_mark_never_cuts_a_long_one() -> None:
    key = OfferingKey("westeurope", "size", "standard_d4s_v5", "1", SPOT)
    long_ = marks_for(classify("SkuNotAvailable", "", group=SPOT_GROUP), group=SPOT_GROUP, code="SkuNotAvailable",
                      message="", now=T0)[0]
    short = replace(long_, until=T0 + M, key=key)
    assert merge(long_, short) is long_ and merge(short, long_) is long_
    assert OfferingKey.parse(key.text) == key


# --- instances a successful capacity increase left Failed (engine.offerings.failed_allocations) -------------------


@pytest.mark.parametrize(("instance", "has_node", "counted"), [
    (Instance("3", "Failed", error_code="ZonalAllocationFailed"), False, "ZonalAllocationFailed"),
    (Instance("3", "Failed", power_state="deallocated", error_code="AllocationFailed"), False, "AllocationFailed"),
    (Instance("3", "Failed"), False, PROVISIONING_FAILED),  # a backend that does not read the view
    # A VM that runs, whose later operation failed (an extension, a model update): not an allocation.
    (Instance("3", "Failed", power_state="running", error_code="VMExtensionProvisioningError"), False, None),
    (Instance("3", "Failed", power_state="starting", error_code="OSProvisioningTimedOut"), False, None),
    # It became a node: never touched.
    (Instance("3", "Failed", error_code="ZonalAllocationFailed"), True, None),
    (Instance("3", "Creating"), False, None),
    (Instance("3", "Succeeded"), False, None),
    (Instance("3", "Deleting"), False, None),
])
def test_a_failed_allocation_is_a_failed_instance_that_never_got_a_host_or_a_node(
        instance: Instance, has_node: bool, counted: str | None) -> None:
    pool = group("pool")
    found = failed_allocations(pool, [instance], with_node={"3"} if has_node else set())
    assert [f.code for f in found] == ([counted] if counted else [])
    if counted:
        assert found[0].instance_ids == ("3",) and found[0].reason == f"OutOfResource.{counted}"


def test_failed_allocations_come_by_code_and_are_written_off_for_planning() -> None:
    pool = replace(group("pool"), capacity=5)
    found = failed_allocations(pool, [
        Instance("1", "Failed", error_code="ZonalAllocationFailed", error_message="no room"),
        Instance("2", "Succeeded"),
        Instance("3", "Failed", error_code="ZonalAllocationFailed"),
        Instance("4", "Failed", error_code="AllocationFailed"),
    ], with_node=set())
    assert [(f.code, f.instance_ids, f.message) for f in found] == [
        ("AllocationFailed", ("4",), ""), ("ZonalAllocationFailed", ("1", "3"), "no room")]
    planned = without_failed(pool, found)
    assert planned.written_off == 3 and planned.running_target == 2
    assert without_failed(group("other"), found) == group("other")


@pytest.mark.parametrize(("since_scale_up", "present", "expected"), [
    (timedelta(minutes=1), 2, True),  # nodes on their way
    (timedelta(minutes=1), 4, False),  # all there
    (timedelta(minutes=16), 2, False),  # past MAX_NODE_PROVISION_TIME: the provision timeout's business
    (None, 2, False),  # never grown by us
])
def test_only_groups_we_grew_with_nodes_on_their_way_are_looked_at(
        since_scale_up: timedelta | None, present: int, expected: bool) -> None:
    pool = replace(group("pool"), capacity=4)
    state = GroupState(pool.id, last_scale_up=None if since_scale_up is None else T0 - since_scale_up)
    assert growing(pool, state, present=present, now=T0, provision_time=timedelta(minutes=15)) is expected
