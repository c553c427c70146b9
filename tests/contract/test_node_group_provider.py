"""The NodeGroupProvider contract: VmssCompute over the sandbox's ARM double and WorldCompute in process.

The world (tests/contract/worlds.py): pool-a (rg-contract, min 1, max 5, 2 instances) and pool-b (RG-Two,
min 0, max 3, empty, zones 1 and 2) are ours; pool-manual (untagged) and pool-other (another cluster's) are not.
Instances boot in 60 s and are deleted in 20 s. Long-running operations finish at their own pace on each
side (the real adapter is told not to wait at all), so a test checks that they end, never when.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import UNIFORM_SCALE_SET, NodeGroup
from shared.ports import CHANGED_SINCE_READ, ComputeError, NodeGroupProvider, Operation
from tests.contract import worlds
from tests.contract.sides import Opened, WorldSide

GIB = 2**30


def group(side: WorldSide[NodeGroupProvider], group_id: str = worlds.POOL_A) -> NodeGroup:
    found = side.port.get_node_group(group_id)
    assert found is not None, group_id
    return found


def finished(side: WorldSide[NodeGroupProvider], started: Operation, check: str, *, seconds: float = 300) -> Operation:
    """The operation once `seconds` of world time have passed, read back through its token."""
    assert started.token
    side.advance(seconds)
    done = getattr(side.port, check)(started.token)
    assert done.token == started.token and done.done, done
    return done


def instances(side: WorldSide[NodeGroupProvider], of: NodeGroup) -> list[tuple[str, str, str]]:
    return [(i.instance_id, i.provisioning_state, i.computer_name) for i in side.port.list_instances(of)]


def test_both_implementations_read_the_same_world_the_same(twins: tuple[Opened, Opened]) -> None:
    real, memory = twins
    groups = real.provider.list_node_groups()
    assert groups == memory.provider.list_node_groups()
    for each in groups:
        assert real.provider.list_instances(each) == memory.provider.list_instances(each)
        assert real.provider.get_node_group(each.id) == memory.provider.get_node_group(each.id)


def test_list_node_groups_finds_the_scale_sets_tagged_for_this_cluster(
        provider_view: WorldSide[NodeGroupProvider]) -> None:
    groups = {g.id: g for g in provider_view.port.list_node_groups()}

    assert sorted(groups) == [worlds.POOL_A, worlds.POOL_B]
    pool_a, pool_b = groups[worlds.POOL_A], groups[worlds.POOL_B]
    assert (pool_a.resource_group, pool_a.name, pool_a.min_size, pool_a.max_size, pool_a.capacity, pool_a.vm_size) \
        == (worlds.RG, "pool-a", 1, 5, 2, worlds.D4)
    assert (pool_b.resource_group, pool_b.name, pool_b.min_size, pool_b.max_size, pool_b.capacity, pool_b.vm_size) \
        == (worlds.RG_TWO, "pool-b", 0, 3, 0, worlds.D2)
    assert pool_b.zones == ("1", "2") and pool_a.zones == ()
    assert {g.location for g in groups.values()} == {"westeurope"}
    assert {g.provider for g in groups.values()} == {provider_view.port.kind} == {UNIFORM_SCALE_SET}
    assert all(g.instances == () for g in groups.values())  # discovery lists no instances
    assert pool_a.tags["cluster-autoscaler-name"] == worlds.CLUSTER


def test_get_node_group(provider_view: WorldSide[NodeGroupProvider]) -> None:
    for listed in provider_view.port.list_node_groups():
        assert provider_view.port.get_node_group(listed.id) == listed
    assert provider_view.port.get_node_group(f"{worlds.RG}/pool-gone") is None  # no such scale set
    assert provider_view.port.get_node_group(f"{worlds.RG}/pool-manual") is None  # not tagged
    assert provider_view.port.get_node_group(f"{worlds.RG}/pool-other") is None  # another cluster's
    assert provider_view.port.get_node_group("rg-elsewhere/pool-a") is None  # not a configured resource group


def test_list_and_get_instances(provider_view: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider_view)

    assert instances(provider_view, pool_a) == [("0", "Succeeded", "pool-a000000"), ("1", "Succeeded", "pool-a000001")]
    listed = {i.instance_id: i for i in provider_view.port.list_instances(pool_a)}
    assert provider_view.port.get_instance(pool_a, "1") == listed["1"]
    assert provider_view.port.get_instance(pool_a, "7") is None
    assert provider_view.port.list_instances(group(provider_view, worlds.POOL_B)) == []


def test_resize_grows_the_group_once_the_operation_is_done(provider: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider)

    started = provider.port.begin_resize(pool_a, 4)

    assert started.token and started.status in ("InProgress", "Succeeded")
    done = finished(provider, started, "get_resize_operation")
    assert done.status == "Succeeded" and not done.error_code
    grown = group(provider)
    assert grown.capacity == 4
    assert [(i, state) for i, state, _ in instances(provider, grown)] == [(str(n), "Succeeded") for n in range(4)]


def test_resize_of_an_empty_group_in_another_resource_group(provider: WorldSide[NodeGroupProvider]) -> None:
    pool_b = group(provider, worlds.POOL_B)

    done = finished(provider, provider.port.begin_resize(pool_b, 2), "get_resize_operation")

    assert done.status == "Succeeded"
    assert group(provider, worlds.POOL_B).capacity == 2
    assert len(provider.port.list_instances(pool_b)) == 2


def test_an_allocation_failure_is_a_failed_operation(provider: WorldSide[NodeGroupProvider]) -> None:
    provider.world.fail_next_scale_up("pool-a", code="QuotaExceeded", resource_group=worlds.RG)

    done = finished(provider, provider.port.begin_resize(group(provider), 5), "get_resize_operation")

    assert (done.status, done.error_code) == ("Failed", "QuotaExceeded")
    assert done.error_message


def test_delete_one_instance(provider: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider)

    started = provider.port.begin_delete_instances(pool_a, ["1"])

    assert started.status in ("InProgress", "Succeeded")
    assert finished(provider, started, "get_delete_operation").status == "Succeeded"
    shrunk = group(provider)
    assert shrunk.capacity == 1
    assert [i for i, _, _ in instances(provider, shrunk)] == ["0"]
    assert provider.port.get_instance(shrunk, "1") is None


def test_deallocate_then_start_keeps_the_capacity(provider: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider)

    stopped = finished(provider, provider.port.begin_deallocate_instances(pool_a, ["1"]), "get_deallocate_operation")

    assert stopped.status == "Succeeded"
    assert group(provider).capacity == 2
    assert provider.port.get_instance(pool_a, "1") is not None
    started = finished(provider, provider.port.begin_start_instances(pool_a, ["1"]), "get_start_operation")
    assert started.status == "Succeeded"
    assert [i for i, _, _ in instances(provider, pool_a)] == ["0", "1"]


@pytest.mark.parametrize("begin", ["begin_delete_instances", "begin_deallocate_instances", "begin_start_instances"])
def test_no_instance_ids_is_a_value_error(provider: WorldSide[NodeGroupProvider], begin: str) -> None:
    pool_a = group(provider)
    with pytest.raises(ValueError, match="no instance ids"):
        getattr(provider.port, begin)(pool_a, [])
    assert group(provider).capacity == 2


@pytest.mark.parametrize("call", [
    pytest.param(lambda port, gone: port.begin_resize(gone, 3), id="resize"),
    pytest.param(lambda port, gone: port.begin_delete_instances(gone, ["0"]), id="delete"),
    pytest.param(lambda port, gone: port.begin_deallocate_instances(gone, ["0"]), id="deallocate"),
    pytest.param(lambda port, gone: port.begin_start_instances(gone, ["0"]), id="start"),
    pytest.param(lambda port, gone: port.list_instances(gone), id="list-instances"),
])
def test_a_scale_set_that_no_longer_exists_is_a_compute_error(
        provider: WorldSide[NodeGroupProvider], call: object) -> None:
    gone = replace(group(provider), name="pool-deleted")  # discovered, then deleted behind our back
    with pytest.raises(ComputeError) as caught:
        call(provider.port, gone)  # type: ignore[operator]
    assert caught.value.code == "ResourceNotFound" and not caught.value.transient


def test_a_capacity_arm_refuses_is_a_compute_error_with_its_code(provider: WorldSide[NodeGroupProvider]) -> None:
    with pytest.raises(ComputeError) as caught:
        provider.port.begin_resize(group(provider), 1001)
    assert caught.value.code == "InvalidParameter"
    assert group(provider).capacity == 2


def test_a_resize_from_a_read_another_write_overtook_is_refused(provider: WorldSide[NodeGroupProvider]) -> None:
    read = group(provider)
    assert read.etag
    provider.port.begin_resize(read, 3)  # another writer, from the same read
    with pytest.raises(ComputeError) as caught:
        provider.port.begin_resize(read, 1)  # would remove an instance the other writer's count includes
    assert caught.value.code == CHANGED_SINCE_READ and not caught.value.transient
    fresh = group(provider)
    assert fresh.capacity == 3 and fresh.etag != read.etag


@pytest.mark.parametrize("check", ["get_resize_operation", "get_delete_operation", "get_deallocate_operation",
                                   "get_start_operation"])
def test_a_token_of_no_operation_is_a_compute_error(provider_view: WorldSide[NodeGroupProvider], check: str) -> None:
    # The code differs (a token is the implementation's own: InvalidContinuationToken, NotFound): the type does not.
    with pytest.raises(ComputeError):
        getattr(provider_view.port, check)("not-a-token")


def test_list_vm_sizes_describes_the_sizes_of_the_location(provider_view: WorldSide[NodeGroupProvider]) -> None:
    sizes = {s.name: s for s in provider_view.port.list_vm_sizes("westeurope")}

    assert {worlds.D4, worlds.D2} <= set(sizes)
    assert (sizes[worlds.D4].vcpus, sizes[worlds.D4].gpus) == (4, 0)
    assert (sizes[worlds.D2].vcpus, sizes[worlds.D2].gpus) == (2, 0)
    # ARM gives memory in GiB with two decimals: equal within that.
    assert abs(sizes[worlds.D4].memory_bytes - 13.8 * GIB) < 0.01 * GIB
    assert sizes[worlds.D2].memory_bytes == 6 * GIB
    assert all(not s.restriction for s in sizes.values())


# --- what ARM and VmssCompute make of awkward answers and input --------------------------------------------


def test_an_instance_of_a_scale_set_that_no_longer_exists_is_none(provider: WorldSide[NodeGroupProvider]) -> None:
    gone = replace(group(provider), name="pool-deleted")
    assert provider.port.get_instance(gone, "0") is None


def test_a_group_id_names_its_resource_group_in_any_case(provider: WorldSide[NodeGroupProvider]) -> None:
    assert provider.port.get_node_group("RG-CONTRACT/pool-a") == group(provider)
    assert provider.port.get_node_group("RG-CONTRACT/POOL-A") is None  # scale set names compare exactly


_BAD_TAGS = {"resource_group": worlds.RG, "name": "pool-bad", "vm_size": worlds.D2,
             "allocatable": {"cpu": "1900m", "memory": "6Gi"}, "autoscaled": False, "initial": 0,
             "tags": {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": worlds.CLUSTER,
                      "min": "one", "max": "3"}}
_CASED_TAGS = {**_BAD_TAGS, "name": "pool-cased",
               "tags": {"Cluster-Autoscaler-Enabled": "True", "CLUSTER-AUTOSCALER-NAME": worlds.CLUSTER,
                        "Min": "0", "MAX": "2"}}


@pytest.mark.parametrize("limits", [
    pytest.param({"min": "one", "max": "3"}, id="not-an-integer"),
    pytest.param({"min": "3", "max": "1"}, id="min-over-max"),
    pytest.param({"min": "-1", "max": "1"}, id="negative"),
    pytest.param({"min": "0"}, id="no-max"),
])
def test_a_scale_set_with_malformed_limits_is_skipped(provider: WorldSide[NodeGroupProvider],
                                                      limits: dict[str, str]) -> None:
    tags = {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": worlds.CLUSTER, **limits}
    side = provider.variant(worlds.with_group({**_BAD_TAGS, "tags": tags}))
    assert sorted(g.id for g in side.port.list_node_groups()) == [worlds.POOL_A, worlds.POOL_B]
    assert side.port.get_node_group(f"{worlds.RG}/pool-bad") is None


def test_discovery_tags_compare_as_arm_and_cluster_autoscaler_do(provider: WorldSide[NodeGroupProvider]) -> None:
    side = provider.variant(worlds.with_group(_CASED_TAGS))
    cased = side.port.get_node_group(f"{worlds.RG}/pool-cased")
    assert cased is not None and (cased.min_size, cased.max_size) == (0, 2)


_RESTRICTED = worlds.scenario(restricted_vm_sizes=[worlds.D2])


def test_growing_a_scale_set_of_a_restricted_size_is_refused(provider: WorldSide[NodeGroupProvider]) -> None:
    side = provider.variant(_RESTRICTED)
    pool_b = side.port.get_node_group(worlds.POOL_B)
    assert pool_b is not None
    with pytest.raises(ComputeError) as caught:
        side.port.begin_resize(pool_b, 1)
    assert caught.value.code == "SkuNotAvailable" and not caught.value.transient
    assert group(side, worlds.POOL_B).capacity == 0
    # Only growing is refused: a scale set of that size already there may still shrink.
    manual = replace(group(side), resource_group=worlds.RG, name="pool-manual", vm_size=worlds.D2, capacity=1)
    done = finished(side, side.port.begin_resize(manual, 0), "get_resize_operation")
    assert done.status == "Succeeded"


def test_a_restricted_vm_size_says_so(provider: WorldSide[NodeGroupProvider]) -> None:
    side = provider.variant(_RESTRICTED)
    sizes = {s.name: s for s in side.port.list_vm_sizes("westeurope")}
    assert sizes[worlds.D2].restriction and not sizes[worlds.D4].restriction


# --- scale-in protection --------------------------------------------------------------------------------------


def protection(side: WorldSide[NodeGroupProvider], of: NodeGroup) -> dict[str, bool | None]:
    return {i.instance_id: i.protected_from_scale_in for i in side.port.list_instances(of)}


def test_a_capacity_decrease_skips_the_protected_instance_and_a_named_delete_does_not(
        provider: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider)
    assert provider.port.supports_scale_in_protection(pool_a)
    assert protection(provider, pool_a) == {"0": False, "1": False}

    provider.port.set_scale_in_protection(pool_a, "1", protect=True)

    assert protection(provider, pool_a) == {"0": False, "1": True}
    assert provider.port.get_instance(pool_a, "1").protected_from_scale_in is True  # type: ignore[union-attr]
    # Someone else shrinks the set by one (the portal, Azure autoscale): Azure's pick would be the newest, "1".
    shrunk = finished(provider, provider.port.begin_resize(group(provider), 1), "get_resize_operation")
    assert shrunk.status == "Succeeded"
    assert protection(provider, group(provider)) == {"1": True}
    # Our own removal names the instance: protection does not stand in its way.
    deleted = finished(provider, provider.port.begin_delete_instances(group(provider), ["1"]), "get_delete_operation")
    assert deleted.status == "Succeeded" and provider.port.list_instances(group(provider)) == []


def test_a_lifted_protection_no_longer_holds_the_instance(provider: WorldSide[NodeGroupProvider]) -> None:
    pool_a = group(provider)
    provider.port.set_scale_in_protection(pool_a, "1", protect=True)

    provider.port.set_scale_in_protection(pool_a, "1", protect=False)

    assert protection(provider, pool_a) == {"0": False, "1": False}
    finished(provider, provider.port.begin_resize(group(provider), 1), "get_resize_operation")
    assert protection(provider, group(provider)) == {"0": False}


def test_protecting_an_instance_that_does_not_exist_is_a_compute_error(provider: WorldSide[NodeGroupProvider]) -> None:
    with pytest.raises(ComputeError) as caught:
        provider.port.set_scale_in_protection(group(provider), "7", protect=True)
    assert caught.value.code == "ResourceNotFound"
    assert protection(provider, group(provider)) == {"0": False, "1": False}
