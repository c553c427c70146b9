"""The Cluster contract for ProvisioningRequests: KubernetesCluster over the sandbox's API and WorldCluster in
process read the same requests the same, and a status write lands the same on both (conditions replaced, details
kept unless given, a missing request a no-op)."""

from __future__ import annotations

from datetime import timedelta

from sandbox.world.provisioning_requests import create_provisioning_request
from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, Condition, PodSet
from shared.ports import Cluster
from tests.contract import worlds
from tests.contract.sides import Opened, WorldSide

ACCEPTED = Condition("Accepted", "True", "Accepted", "", worlds.START, 1)
PROVISIONED = Condition("Provisioned", "False", "CapacityIsNotFound", "2 of 4 pods fit",
                        worlds.START + timedelta(minutes=1), 1)


def _arrange(side: WorldSide[Cluster]) -> None:
    """Requests are a user's to create: arranged in the world, read through the port."""
    for name, class_name, count in (("gang", ATOMIC_SCALE_UP_CLASS, 4), ("check", CHECK_CAPACITY_CLASS, 2)):
        create_provisioning_request(side.world, "default", {"metadata": {"name": name}, "spec": {
            "provisioningClassName": class_name, "parameters": {"noRetry": "true"},
            "podSets": [{"count": count, "podTemplateRef": {"name": "worker"}}]}})


def test_twins_read_the_same_requests(twins: tuple[Opened, Opened]) -> None:
    found = []
    for opened in twins:
        for name, class_name in (("gang", ATOMIC_SCALE_UP_CLASS), ("check", CHECK_CAPACITY_CLASS)):
            create_provisioning_request(opened.world, "default", {"metadata": {"name": name}, "spec": {
                "provisioningClassName": class_name, "podSets": [{"count": 2, "podTemplateRef": {"name": "w"}}]}})
        found.append(sorted(opened.cluster.list_provisioning_requests() or [], key=lambda r: r.key))
    real, memory = found
    assert real == memory and [r.key for r in real] == ["default/check", "default/gang"]


def test_list_and_write_the_status(cluster: WorldSide[Cluster]) -> None:
    _arrange(cluster)
    listed = {r.name: r for r in cluster.port.list_provisioning_requests() or []}
    assert sorted(listed) == ["check", "gang"]
    assert listed["gang"].pod_sets == (PodSet("worker", 4),) and dict(listed["gang"].parameters) == {"noRetry": "true"}
    assert listed["gang"].created_at == worlds.START and listed["gang"].generation == 1 and listed["gang"].uid

    cluster.port.update_provisioning_request_status("default", "gang", conditions=[ACCEPTED, PROVISIONED],
                                                    details={"group": "pool-a"})
    cluster.port.update_provisioning_request_status("default", "gang", conditions=[PROVISIONED])
    cluster.port.update_provisioning_request_status("default", "missing", conditions=[ACCEPTED])
    after = {r.name: r for r in cluster.port.list_provisioning_requests() or []}
    assert after["gang"].conditions == (PROVISIONED,) and dict(after["gang"].details) == {"group": "pool-a"}
    assert after["check"] == listed["check"] and "missing" not in after
    assert after["gang"].uid == listed["gang"].uid and after["gang"].generation == 1
