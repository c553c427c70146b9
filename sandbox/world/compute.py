"""The simulated Microsoft.Compute side: scale sets (Uniform or Flexible), their instances, long-running operations.

Plain records; the world mutates them under its lock. Times are sim seconds
since the world started.
"""

from __future__ import annotations

import random
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Literal

from sandbox.model.nic_spec import NicSpec, address, group_nics
from sandbox.model.scenario import NodeGroupSpec
from sandbox.world.faults import ScaleUpFailure

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(number: int) -> str:
    if number == 0:
        return "0"
    digits = []
    while number:
        number, rest = divmod(number, 36)
        digits.append(_BASE36[rest])
    return "".join(reversed(digits))


def computer_name(prefix: str, instance_id: int) -> str:
    """Uniform VMSS hostnames: the prefix plus the instance id in base 36, zero-padded to 6 (pool-d4000003)."""
    return f"{prefix}{base36(instance_id).zfill(6)}"


def flexible_names(
    rng: random.Random, vmss_name: str, prefix: str, taken_vm_names: Container[str], taken_computer_names: Container[str]
) -> tuple[str, str]:
    """A Flexible member's (VM name, computer name): `{scale set name}_{8 hex}` and `{computerNamePrefix}{6 hex}`
    (shared/facts/cluster-shapes.md, "Hostnames, node names, IPs"), drawn from `rng` until neither is taken
    (the `taken_*` containers hold lower-cased names). The hex case Azure uses is unverified: VM names are
    drawn lower-case, computer names upper-case, so a client that compares a computer name with its node name
    (Kubernetes lower-cases it) must do it case-insensitively, as it must on Azure."""
    while True:
        vm_name = f"{vmss_name}_{rng.getrandbits(32):08x}"
        hostname = f"{prefix}{rng.getrandbits(24):06X}"
        if vm_name.lower() not in taken_vm_names and hostname.lower() not in taken_computer_names:
            return vm_name, hostname


def private_ip(ip_index: int) -> str:
    """The private IP of the VM with this index in the default node subnet (10.224.0.0/16, AKS's default): with
    the default NIC, its NIC's primary ipConfiguration in ARM and its Node's InternalIP (and the hostIP of its
    pods) are this one address."""
    return f"10.224.{ip_index // 250}.{ip_index % 250 + 4}"


def nic_addresses(spec: NodeGroupSpec, ip_index: int) -> tuple[tuple[NicSpec, str], ...]:
    """Each NIC of the group's VMs with the address the VM with this index has on it, in the model's order."""
    return tuple((nic, address(nic.subnet, ip_index)) for nic in group_nics(spec.nics, spec.name))


# Failed: a capacity increase whose operation succeeded could not place the instance (`allocation_failures`).
InstanceState = Literal["Creating", "Succeeded", "Updating", "Deleting", "Failed"]
# The instance view's PowerState/<code>. A new instance is starting until provisioned; a deallocation goes
# deallocating -> deallocated (provisioning Updating -> Succeeded); a start goes starting -> running.
PowerState = Literal["starting", "running", "deallocating", "deallocated"]


@dataclass(slots=True)
class InstanceSim:
    group_key: str
    instance_id: int
    computer_name: str
    vm_id: str
    zone: str
    created_at: float
    boot_delay: float
    provision_at: float  # Creating -> Succeeded
    ready_at: float  # the Node registers Ready
    state: InstanceState = "Creating"
    power: PowerState = "running"
    power_seq: int = 0  # bumped by every deallocate, start or delete: stale timer events and operations see it
    starts: int = 0  # starts of this instance after a deallocation (each samples its own boot delay)
    unbilled_seconds: float = 0.0  # closed deallocated spells: not billed
    unbilled_since: float | None = None  # deallocated since then (not billed, not counted alive)
    # When it was first asked to stop, when each start began and when each start's node was due Ready: which
    # scale-ups a stopped instance served and what a pod waited for (devtools.replay.standby).
    first_stopped_at: float | None = None
    start_times: list[float] = field(default_factory=list)
    start_ready_times: list[float] = field(default_factory=list)
    # Hibernated (a deallocate with hibernate=true): its memory is kept on disk while stopped and billed as a disk
    # (sandbox.model.os_disks.memory_disk_for); the closed hibernated spells' seconds.
    hibernated: bool = False
    hibernated_seconds: float = 0.0
    # Started from hibernation (until it next stops): its kubelet resumes rather than starts, so it registers no
    # Node deleted meanwhile (sandbox.world.scale_sets._on_rebooted); `lost_node`: that happened.
    resumed: bool = False
    lost_node: bool = False
    delete_started_at: float | None = None
    vanished_at: float | None = None
    node_registered: bool = False
    registered_at: float | None = None  # when its Node first registered, for an instance a capacity increase created
    gpus_ready_at: float | None = None  # when its fresh Node's GPUs became allocatable (sandbox.model.gpu_spec)
    node_deleted_by_api: bool = False
    ip_index: int = 0
    node_name: str = ""  # the name its kubelet registers the Node under (the flavour decides; see world.nodes)
    # Its NICs' addresses, one per NIC of its scale set in the model's order (`nic_addresses`), the primary's
    # position among them and the one whose address its kubelet registers (the Node's InternalIP).
    nic_ips: tuple[str, ...] = ()
    primary_nic: int = 0
    node_nic: int = 0
    vm_size: str = ""  # an instance-mix member's own size (sandbox.world.instance_mix); "": its scale set's
    vm_name: str = ""  # a Flexible member's VM name (`{vmss}_{8 hex}`), its instance id in ARM; "" in a Uniform set
    # Set when the instance is to end Failed (the scenario's `allocation_failures`): its instance view's code, message.
    error_code: str = ""
    failure_batch: int = 0  # which armed allocation failure failed it (one per capacity increase); 0: none
    error_message: str = ""

    @property
    def alive(self) -> bool:
        return self.vanished_at is None

    @property
    def arm_id(self) -> str:
        """The instance id ARM callers name it by (`instanceIds`, report counters): a Flexible member's VM name,
        a Uniform instance's decimal id. The world keys instances by the int `instance_id` either way."""
        return self.vm_name or str(self.instance_id)

    @property
    def report_id(self) -> int | str:
        """`arm_id` as reports show it: the int for Uniform instances (as ever), the VM name for Flexible members."""
        return self.vm_name or self.instance_id

    @property
    def private_ip(self) -> str:
        """Its primary NIC's address."""
        return self.nic_ips[self.primary_nic] if self.nic_ips else private_ip(self.ip_index)

    @property
    def node_ip(self) -> str:
        """The address its Node registers as InternalIP: the primary's unless the group says another NIC's."""
        return self.nic_ips[self.node_nic] if self.nic_ips else private_ip(self.ip_index)


def failed_statuses(inst: InstanceSim) -> list[dict[str, str]]:
    """A Failed instance's instance view statuses, as ARM lists them for a VM it could not place:
    `ProvisioningState/failed/<code>` at level Error with the error's message, and no power state (no host)."""
    return [{"code": f"ProvisioningState/failed/{inst.error_code}", "level": "Error",
             "displayStatus": "Provisioning failed", "message": inst.error_message}]


@dataclass(slots=True)
class ScaleSetSim:
    spec: NodeGroupSpec
    key: str  # shared.domain.group_id
    capacity: int
    tags: dict[str, str]
    unique_id: str
    created_at: float
    next_instance_id: int = 0
    instances: dict[int, InstanceSim] = field(default_factory=dict)  # alive ones (including Deleting)
    scale_up_failures: list[ScaleUpFailure] = field(default_factory=list)
    generation: int = 1  # etag

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def resource_group(self) -> str:
        return self.spec.resource_group

    @property
    def flexible(self) -> bool:
        """Flexible orchestration: members are plain VMs named `{vmss}_{8 hex}` (see sandbox.api.flexible)."""
        return self.spec.orchestration == "Flexible"

    def active(self) -> list[InstanceSim]:
        """Instances that count towards capacity (not being deleted; deallocated ones count), by id."""
        return sorted((i for i in self.instances.values() if i.state != "Deleting"), key=lambda i: i.instance_id)


OperationStatus = Literal["InProgress", "Succeeded", "Failed"]


@dataclass(slots=True)
class Operation:
    """An ARM async operation: a capacity change, an instance deletion, deallocation or start."""

    op_id: str
    kind: Literal["scale", "delete", "deallocate", "start"]
    group_key: str
    started_at: float
    instance_ids: frozenset[int] = frozenset()
    # deallocate/start: each instance's power_seq when asked; a later change preempts the operation
    power_seqs: tuple[tuple[int, int], ...] = ()
    status: OperationStatus = "InProgress"
    ended_at: float | None = None
    error_code: str | None = None
    error_message: str | None = None
    revert_capacity_from: int | None = None  # a failing scale-up puts capacity back
    revert_capacity_to: int | None = None
