"""The NodeGroupProvider of VM Scale Sets in Flexible orchestration, with azure-mgmt-compute.

Adapter module: every method calls Azure Resource Manager. Flexible members are ordinary VMs
(`Microsoft.Compute/virtualMachines`) named `<scale set>_<8 characters>`, and the VM name is their
instance id everywhere: in `deleteInstances`, in the providerID cloud-provider-azure writes
(`azure:///.../virtualMachines/<vm name>`) and here. What differs from Uniform, and why:

* discovery: `VmssCompute` lists every scale set once and stamps Flexible ones with this kind, so
  this provider's own `list_node_groups` finds nothing new (no second listing of the scale sets);
* instances: the VM list filtered by the scale set's id (the VMSS VM list of a Flexible set returns
  only ids, one GET each after it);
* deallocate and start: the single-VM calls, one long-running operation per VM, since batch power
  operations on Flexible sets are not documented (facts/cluster-shapes.md); the operation's token
  carries each VM's, and the operation is done when all of them are;
* private IPs: Flexible NICs are standalone `Microsoft.Network/networkInterfaces`, listed per
  resource group;
* instance mix (`sku.name` "Mix", several sizes): discovery lists one node group per size, a lane
  (shared.adapters.instance_mix); a lane's instances are the members of its size (`Instance.vm_size`),
  and its resize is one PATCH of the set's capacity that steers new VMs to its size.

Growing (`sku.capacity`) and deleting named members (`deleteInstances` with VM names, as
cluster-autoscaler does for Flexible sets) are the scale set's own calls, as for Uniform.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from azure.core.polling import LROPoller

from shared.adapters.compute import (
    VmssCompute,
    _private_ips,
    _text,
    found_or_none,
    power_state,
    provisioning_error,
    with_failures,
)
from shared.adapters.compute import arm_id_leaf, with_instance_ids
from shared.adapters.compute import if_unchanged
from shared.adapters.instance_mix import of_lane, read_profile, resize_update
from shared.domain import FLEXIBLE_SCALE_SET, Instance, NodeGroup
from shared.ports import CHANGED_SINCE_READ, ComputeError, Operation

_MULTI = "vms:"  # prefix of a token that carries one token per VM


class FlexCompute(VmssCompute):
    """`shared.ports.NodeGroupProvider` of kind `vmss-flexible` (see the module docstring)."""

    kind = FLEXIBLE_SCALE_SET

    def list_node_groups(self) -> list[NodeGroup]:
        """None of its own: VmssCompute's discovery lists Flexible sets too, stamped with this kind."""
        return []

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        group = super().get_node_group(group_id)
        return group if group is not None and group.provider == self.kind else None

    # -- instances ---------------------------------------------------------------------

    def _scale_set_id(self, group: NodeGroup) -> str:
        return _scale_set_id(self, group)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        """The scale set's member VMs, in one filtered VM list (with their instance views for `power_state`); of
        an instance-mix lane, those of its size."""
        return of_lane(list_members(self, group, power_state=power_state, reuse=bool(group.lane)), group)

    def _get_instance_view(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """One member VM with its instance view (its provisioning error, its power state): a GET of its own."""
        return _get_member_view(self, group, instance_id)

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """The member VM, or None when it does not exist or belongs to no such scale set."""
        vm = found_or_none(f"get VM {instance_id} of scale set {group.resource_group}/{group.name}",
                           lambda: self._client.virtual_machines.get(group.resource_group, instance_id))
        return _of(group, vm) if vm is not None and self._is_member(group, vm) else None

    def _is_member(self, group: NodeGroup, vm: Any) -> bool:
        return _is_member(self, group, vm)

    # -- growing one size of an instance mix -----------------------------------------------

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        """For an instance-mix lane: ONE PATCH of the set (If-Match the lane's etag) moving its capacity by the
        lane's change, steering an increase to the lane's size (shared.adapters.instance_mix). The set's capacity,
        profile and tags come from a GET, refused as CHANGED_SINCE_READ when its etag is not the lane's. Any other
        group: the scale set's own capacity write."""
        if not group.lane:
            return super().begin_resize(group, capacity)
        what = f"resize {group.lane} of instance-mix scale set {group.resource_group}/{group.name} to {capacity}"
        vmss = self._arm(what, lambda: self._client.virtual_machine_scale_sets.get(group.resource_group, group.name))
        profile = read_profile(vmss)
        if profile is None:
            raise ComputeError(f"{what}: the scale set no longer has an instance mix", code=CHANGED_SINCE_READ)
        if group.etag and _text(vmss.etag) != group.etag:
            raise ComputeError(f"{what}: the scale set changed since it was read (etag {_text(vmss.etag)}, "
                               f"read {group.etag})", code=CHANGED_SINCE_READ)
        update = resize_update(group, capacity, set_sku_name=_text(vmss.sku.name),
                               set_capacity=int(vmss.sku.capacity or 0), profile=profile, tags=dict(vmss.tags or {}))
        polling = self._polling(poll_first=False)
        poller = self._arm(what, lambda: self._client.virtual_machine_scale_sets.begin_update(
            group.resource_group, group.name, update, polling=polling, **if_unchanged(group.etag)))
        return self._outcome(what, poller, polling, resumed=False)

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        """Private IPs by VM name, from the resource group's NICs (one list call)."""
        network = self._network_client(f"list network interfaces of {group.id}")
        nics = self._arm(
            f"list network interfaces in resource group {group.resource_group}",
            lambda: list(network.network_interfaces.list(group.resource_group)),
        )
        return _private_ips(nics)

    # -- scale-in protection -------------------------------------------------------------------

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        """No, here: members are plain VMs, whose model (VirtualMachine) has no protection policy, and Microsoft's
        API comparison gives Flexible sets resource locks instead. Its instance-protection page says Flexible sets
        have it from API 2023-09-01 without naming the call: unverified, so not attempted."""
        return False

    # -- power: one operation per VM ------------------------------------------------------

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        """POST deallocate on each member VM; they stay in the scale set, stopped and not billed. `hibernate`
        sends `hibernate=true` (VirtualMachines_Deallocate): on a set created hibernation-enabled the VMs
        hibernate; otherwise ARM refuses the first VM's call (400) before that VM changes."""
        # hibernate=None leaves the query parameter out: a plain deallocate's request stays what it was.
        return self._each("hibernate" if hibernate else "deallocate", group, instance_ids,
                          self._client.virtual_machines.begin_deallocate,
                          **({"hibernate": True} if hibernate else {}))

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        """POST start on each member VM."""
        return self._each("start", group, instance_ids, self._client.virtual_machines.begin_start)

    def _each(self, verb: str, group: NodeGroup, instance_ids: list[str],
              begin: Callable[..., LROPoller[Any]], **options: Any) -> Operation:
        what = f"{verb} VMs {','.join(instance_ids)} of scale set {group.resource_group}/{group.name}"
        if not instance_ids:
            raise ValueError(f"{what}: no instance ids given")
        operations = []
        for vm in instance_ids:
            polling = self._polling(poll_first=False)
            poller = self._arm(f"{verb} VM {vm}",
                               lambda vm=vm, p=polling: begin(group.resource_group, vm, polling=p, **options))
            operations.append(self._outcome(f"{verb} VM {vm}", poller, polling, resumed=False))
        return _combined(operations)

    def get_deallocate_operation(self, token: str) -> Operation:
        return self._resume_each("check deallocate operation", token,
                                 lambda **kw: self._client.virtual_machines.begin_deallocate("", "", **kw))

    def get_start_operation(self, token: str) -> Operation:
        return self._resume_each("check start operation", token,
                                 lambda **kw: self._client.virtual_machines.begin_start("", "", **kw))

    def _resume_each(self, what: str, token: str, begin: Callable[..., LROPoller[Any]]) -> Operation:
        tokens = _split(token)
        # An operation already finished keeps its outcome in the token (status "Succeeded:"), so a
        # finished VM is not asked again.
        return _combined([
            Operation(token=t, status="Succeeded") if t.startswith(_DONE) else self._resume(what, t, begin)
            for t in tokens
        ])


_DONE = "done:"


def _scale_set_id(provider: VmssCompute, group: NodeGroup) -> str:
    subscription = provider._client._config.subscription_id  # noqa: SLF001 - the client's own subscription
    return (f"/subscriptions/{subscription}/resourceGroups/{group.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}")


def _is_member(provider: VmssCompute, group: NodeGroup, vm: Any) -> bool:
    scale_set = _text(getattr(getattr(vm, "virtual_machine_scale_set", None), "id", None))
    return scale_set.lower() == _scale_set_id(provider, group).lower()


def _get_member_view(provider: VmssCompute, group: NodeGroup, instance_id: str) -> Instance | None:
    vm = found_or_none(f"get VM {instance_id} of scale set {group.resource_group}/{group.name} with its instance view",
                       lambda: provider._client.virtual_machines.get(  # noqa: SLF001
                           group.resource_group, instance_id, expand="instanceView"))
    return _of(group, vm) if vm is not None and _is_member(provider, group, vm) else None


def _of(group: NodeGroup, vm: Any) -> Instance | None:
    """The member as an instance of `group`: None when it is of another lane's size."""
    return next(iter(of_lane([_member(vm)], group)), None)


# An instance-mix set is listed once for its lanes in discovery, then once per lane by node mapping: the same
# filtered VM list (ARM's HighCostGet budget, 10 a minute per set). A listing of the set at the same etag made
# within this many seconds (monotonic) serves a lane's instances, in this process. One-size sets always list.
MEMBERS_REUSE_SECONDS: Final = 1.0
_members_lock = threading.Lock()
_recent_members: dict[tuple[str, str], tuple[str, bool, float, tuple[Instance, ...]]] = {}


def list_members(provider: VmssCompute, group: NodeGroup, *, power_state: bool = False,
                 reuse: bool = False) -> list[Instance]:
    """Every member VM of a Flexible scale set, in one filtered VM list (with their instance views for
    `power_state`). Also what discovery reads an instance mix's lanes from (VmssCompute lists the sets).
    `reuse`: an instance mix's listing of the same etag moments ago may answer (MEMBERS_REUSE_SECONDS)."""
    key = (provider._client._config.base_url or "", _scale_set_id(provider, group).lower())  # noqa: SLF001
    now = provider._monotonic()  # noqa: SLF001
    if reuse and group.etag:
        with _members_lock:
            recent = _recent_members.get(key)
        if recent is not None and recent[0] == group.etag and (recent[1] or not power_state) \
                and 0 <= now - recent[2] <= MEMBERS_REUSE_SECONDS:
            return list(recent[3])
    members = _list_members(provider, group, power_state=power_state)
    if reuse and group.etag:
        with _members_lock:
            _recent_members[key] = (group.etag, power_state, now, tuple(members))
    return members


def _list_members(provider: VmssCompute, group: NodeGroup, *, power_state: bool) -> list[Instance]:
    member_filter = f"'virtualMachineScaleSet/id' eq '{_scale_set_id(provider, group)}'"
    extra = {"expand": "instanceView"} if power_state else {}
    client = provider._client  # noqa: SLF001 - VmssCompute's own client, shared by both modes
    vms = provider._arm(  # noqa: SLF001
        f"list member VMs of scale set {group.resource_group}/{group.name}",
        lambda: list(client.virtual_machines.list(group.resource_group, filter=member_filter, **extra)),
    )
    vms = with_instance_ids(vms, member_name, f"list member VMs of scale set {group.id}")
    members = [_member(vm) for vm in vms if _is_member(provider, group, vm)]
    # A failed member's error is read as a member of the set (`set_wide`), whichever lane or provider asked:
    # discovery's listing (VmssCompute's) is reused by the lanes, so it must carry the errors too.
    set_wide = replace(group, lane="")
    return with_failures(members, lambda name: _get_member_view(provider, set_wide, name))


def member_name(vm: Any) -> str:
    """A member VM's name (its instance id everywhere), else the last segment of its ARM id."""
    return _text(vm.name) or arm_id_leaf(_text(vm.id), "virtualMachines")


def _member(vm: Any) -> Instance:
    view = getattr(vm, "instance_view", None)
    code, message = provisioning_error(view)
    return Instance(
        instance_id=member_name(vm),
        provisioning_state=_text(vm.provisioning_state),
        computer_name=_text(getattr(getattr(vm, "os_profile", None), "computer_name", None)),
        resource_id=_text(vm.id),
        power_state=power_state(view),
        error_code=code,
        error_message=message,
        vm_size=_vm_size(vm),
    )


def _vm_size(vm: Any) -> str:
    """The member's own size (`hardwareProfile.vmSize`): an instance-mix set's members differ."""
    return _text(getattr(getattr(vm, "hardware_profile", None), "vm_size", None))


def _combined(operations: list[Operation]) -> Operation:
    """One Operation for several: failed if any failed, in progress while any is, else succeeded."""
    failed = next((o for o in operations if o.status in ("Failed", "Canceled")), None)
    if failed is not None:
        status, code, message = failed.status, failed.error_code, failed.error_message
    elif any(o.status == "InProgress" for o in operations):
        status, code, message = "InProgress", "", ""
    else:
        status, code, message = "Succeeded", "", ""
    tokens = [f"{_DONE}{o.token}" if o.status == "Succeeded" and not o.token.startswith(_DONE) else o.token
              for o in operations]
    token = _MULTI + base64.urlsafe_b64encode(json.dumps(tokens).encode()).decode()
    return Operation(token=token, status=status, error_code=code, error_message=message)


def _split(token: str) -> list[str]:
    if not token.startswith(_MULTI):
        return [token]  # a single VM's token
    try:
        tokens = json.loads(base64.urlsafe_b64decode(token[len(_MULTI):]))
    except (binascii.Error, ValueError) as exc:
        raise ComputeError(f"not a Flexible power-operation token: {exc}", code="InvalidContinuationToken") from exc
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ComputeError("not a Flexible power-operation token", code="InvalidContinuationToken")
    return tokens
