"""The first NodeGroupProvider: Azure VM Scale Sets in Uniform orchestration, with azure-mgmt-compute.

Adapter module: every `VmssCompute` method calls Azure Resource Manager. Its discovery lists every
scale set once and stamps each group with the kind of its orchestration mode; the calls for a
Flexible set go to `FlexCompute` (flex_compute.py), which differs where Flexible members differ.

Two things differ from the SDK's defaults, both so that one call can never
outlive a function invocation:

* Throttling is not waited out in-process. azure-core's RetryPolicy sleeps
  the whole Retry-After of a 429 (minutes, under a throttling storm) up to ten
  times; here a 429 is never retried and surfaces at once as
  `ComputeError(code="TooManyRequests", retry_after=...)`, so the caller can
  re-enqueue itself with that delay. Other transient failures get two quick retries.
* Long-running operations are polled for at most `operation_wait` seconds, by
  a polling method that stops itself (rather than `LROPoller.wait(timeout)`,
  which would leave the SDK's polling thread calling ARM after we return). The
  caller gets an `Operation` with a continuation token to check again later.

An ARM call rejected outright (4xx/5xx on the initial request) raises
`ComputeError` with ARM's error code; an operation ARM accepted and that then
failed (e.g. QuotaExceeded while allocating) is `Operation(status="Failed")`.

The one exception is `list_vm_sizes` (the resource SKUs API, for scale-from-zero
templates): it is cached per location for hours and never raises, because the
engine has a shipped table to fall back on and a poll must not fail for want of it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal, TypeVar

from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.core.pipeline import PipelineResponse
from azure.core.pipeline.policies import RetryPolicy
from azure.core.polling import LROPoller
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import (
    ResourceSku,
    Sku,
    VirtualMachineScaleSet,
    VirtualMachineScaleSetUpdate,
    VirtualMachineScaleSetVM,
    VirtualMachineScaleSetVMInstanceIDs,
    VirtualMachineScaleSetVMInstanceRequiredIDs,
    VirtualMachineScaleSetVMProtectionPolicy,
)
from azure.mgmt.core.polling.arm_polling import ARMPolling

from shared.adapters.arm_telemetry import ArmTelemetryPolicy
from shared.adapters.retail_prices import RetailPrices
from shared import discovery_tags
from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, Instance, NodeGroup, VmSizeCapacity
from shared.domain import group_id as make_group_id
from shared.domain import lane_of, parent_group_id
from shared.adapters.instance_mix import as_lanes, lane_order, read_profile, user_profile
from shared.ports import SCALE_IN_PROTECTION_UNSUPPORTED, ComputeError, Operation
from shared.settings import Settings

__all__ = ["VmssCompute", "ENABLED_TAG", "NAME_TAG", "MIN_TAG", "MAX_TAG"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# cluster-autoscaler's auto-discovery tags (--node-group-auto-discovery=label:...): shared.discovery_tags.
ENABLED_TAG, NAME_TAG, MIN_TAG, MAX_TAG = (discovery_tags.ENABLED_TAG, discovery_tags.NAME_TAG,
                                           discovery_tags.MIN_TAG, discovery_tags.MAX_TAG)

DEFAULT_RETRY_AFTER: Final = 10.0  # seconds, when ARM throttles without saying for how long
_MAX_RETRY_AFTER_HONOURED: Final = 2.0  # longer server-requested waits are the caller's business
_SAFETY_MARGIN: Final = 60.0  # beyond the polling budget: one in-flight request's timeouts
# A size's capacity never changes and its restrictions rarely do: one SKU listing per location lasts hours.
VM_SIZES_TTL: Final = 6 * 3600.0
# After a failed listing ARM is left alone this long (or its Retry-After, if longer), not asked every poll.
VM_SIZES_RETRY: Final = 300.0
_GIB: Final = 1024**3


# --- Reading ARM's answers ---------------------------------------------------------


def _text(value: Any) -> str:
    """A model field as text: the SDK's enums are `str` subclasses whose str() is 'Enum.MEMBER' on 3.11."""
    if value is None:
        return ""
    return str(getattr(value, "value", value))


def arm_id_leaf(resource_id: str, collection: str) -> str:
    """The name an ARM id gives a resource of `collection` (`.../virtualMachines/3` -> "3"); "" when the id
    is empty or names no resource of that collection."""
    parts = resource_id.strip().split("/")
    if len(parts) >= 3 and parts[-2].lower() == collection.lower() and parts[-1].strip():
        return parts[-1].strip()
    return ""


def with_instance_ids(entries: Iterable[T], instance_id: Callable[[T], str], where: str) -> list[T]:
    """The listed entries that name their instance. An entry with no id of its own nor an ARM id to read one from
    is left out with a warning: as an instance with id '' it would look booting, take part in mapping and limits,
    and no call could name it."""
    kept = []
    for entry in entries:
        if instance_id(entry):
            kept.append(entry)
        else:
            log.warning("%s: a listed VM has no instance id and no ARM id to read one from (name %r, computer name "
                        "%r); left out", where, _text(getattr(entry, "name", None)),
                        _text(getattr(getattr(entry, "os_profile", None), "computer_name", None)))
    return kept


def _retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_details(exc: HttpResponseError) -> tuple[str, str]:
    """ARM's (code, message) from an error response or a failed operation's status body."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None) or ""
    message = getattr(error, "message", None) or ""
    if not code and exc.response is not None:
        try:
            body = json.loads(exc.response.text())
        except (ValueError, TypeError, AttributeError):
            body = None
        if isinstance(body, dict):
            inner = body.get("error") if isinstance(body.get("error"), dict) else body
            code = str(inner.get("code") or "")
            message = message or str(inner.get("message") or "")
    return code, message or (exc.reason or "") or str(exc)


def found_or_none(what: str, call: Callable[[], T]) -> T | None:
    """`call()`, or None when ARM answers 404 (the resource is gone); any other failure as ComputeError."""
    try:
        return call()
    except HttpResponseError as exc:
        if exc.status_code == 404:
            return None
        raise compute_error(what, exc) from exc
    except AzureError as exc:
        raise compute_error(what, exc) from exc


def if_unchanged(etag: str) -> dict[str, Any]:
    """An SDK write's keyword options for If-Match on `etag` (none without one): ARM answers 412 PreconditionFailed
    (CHANGED_SINCE_READ) when the resource changed since the read that gave the etag."""
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag else {}


def compute_error(what: str, exc: AzureError) -> ComputeError:
    """One ComputeError per ARM failure: throttling keeps its Retry-After, the rest their ARM code."""
    if isinstance(exc, HttpResponseError) and exc.response is not None:
        status = exc.status_code or 0
        code, message = _error_details(exc)
        retry_after = _retry_after_seconds(exc.response.headers)
        if status == 429:
            delay = retry_after if retry_after else DEFAULT_RETRY_AFTER
            return ComputeError(f"{what}: throttled by ARM, retry after {delay:g}s", code="TooManyRequests", retry_after=delay)
        return ComputeError(f"{what}: HTTP {status} {code}: {message}", code=code, retry_after=retry_after,
                            transient=status >= 500 or status == 408)
    # No response at all: the request or the response was lost (connection reset, read timeout).
    return ComputeError(f"{what}: {type(exc).__name__}: {exc}",
                        transient=isinstance(exc, (ServiceRequestError, ServiceResponseError)))


# --- Pipeline policies -----------------------------------------------------------


class ThrottleAwareRetryPolicy(RetryPolicy):
    """azure-core's RetryPolicy, minus waiting out throttling.

    429s are never retried, and neither is any response whose Retry-After is
    longer than `max_retry_after`: both reach the caller at once. Everything
    else (connection errors, 500/502/503/504 with short or no Retry-After)
    keeps the normal retry behaviour, within `retry_total`.
    """

    def __init__(self, *, max_retry_after: float = _MAX_RETRY_AFTER_HONOURED, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_retry_after = max_retry_after

    def is_retry(self, settings: dict[str, Any], response: PipelineResponse[Any, Any]) -> bool:
        if response.http_response.status_code == 429:
            return False
        retry_after = self.get_retry_after(response)
        if retry_after is not None and retry_after > self._max_retry_after:
            return False
        return super().is_retry(settings, response)


# --- Bounded polling ---------------------------------------------------------------


class _StopPolling(Exception):
    """Raised inside the polling loop to stop it early; `response` is set when ARM throttled or failed us."""

    def __init__(self, response: PipelineResponse[Any, Any] | None = None) -> None:
        super().__init__("polling stopped")
        self.response = response


class _BoundedArmPolling(ARMPolling):
    """ARMPolling that polls for at most `budget` seconds, then leaves the operation InProgress.

    With `poll_first` it checks the status once even when the budget is spent
    (a resumed operation must be looked at). A poll answered 429 or 5xx stops
    polling instead of failing the operation: the operation itself is fine,
    only our view of it is delayed. `interrupted_by` keeps that response.
    """

    def __init__(self, budget: float, *, poll_first: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = budget
        self._poll_first = poll_first
        self._deadline = 0.0
        self._polls = 0
        self.interrupted_by: PipelineResponse[Any, Any] | None = None
        self.transport_error: AzureError | None = None

    def initialize(self, client: Any, initial_response: Any, deserialization_callback: Any) -> None:
        super().initialize(client, initial_response, deserialization_callback)
        self._deadline = time.monotonic() + self._budget

    def run(self) -> None:
        try:
            super().run()
        except _StopPolling as stop:
            self.interrupted_by = stop.response
        except (ServiceRequestError, ServiceResponseError) as exc:
            self.transport_error = exc

    def _delay(self) -> None:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise _StopPolling()
        self._sleep(min(self._extract_delay(), remaining))

    def update_status(self) -> None:
        if time.monotonic() >= self._deadline and not (self._poll_first and self._polls == 0):
            raise _StopPolling()
        self._polls += 1
        super().update_status()

    def request_status(self, status_link: str) -> PipelineResponse[Any, Any]:
        response = super().request_status(status_link)
        status = response.http_response.status_code
        if status == 429 or status >= 500:
            raise _StopPolling(response)
        return response

    def get_continuation_token(self) -> str:
        return _compact_token(super().get_continuation_token())


def _compact_token(token: str) -> str:
    """Drop the initial response body from an azure-core (v1) continuation token when polling does not need it.

    The token embeds the whole initial response, twice for JSON (raw and parsed):
    for a PATCH that is the full scale set model, which can approach the 64 KiB
    limit of a queue message or table property. With an Azure-AsyncOperation or
    Location header the poller resumes from the headers alone. Any token that
    does not look as expected is returned unchanged.
    """
    try:
        wrapper = json.loads(base64.b64decode(token, validate=True))
        data = wrapper["data"]
        headers = {k.lower() for k in data["response"]["headers"]}
    except (binascii.Error, ValueError, KeyError, TypeError):
        return token
    if wrapper.get("version") != 1 or not headers & {"azure-asyncoperation", "location"}:
        return token
    data["response"]["content"] = ""
    data.setdefault("context", {})["deserialized_data"] = None
    return base64.b64encode(json.dumps(wrapper, separators=(",", ":")).encode()).decode("ascii")


OperationStatus = Literal["InProgress", "Succeeded", "Failed", "Canceled"]
_STATUS: dict[str, OperationStatus] = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "canceled": "Canceled",
    "cancelled": "Canceled",
}


def _port_status(status: object) -> OperationStatus:
    # ARM reports many in-flight states (Accepted, Updating, Deleting, Running...): all are InProgress to us.
    return _STATUS.get(_text(status).lower(), "InProgress")


# --- Scale set conversion -----------------------------------------------------------


def uniform_instance_id(vm: VirtualMachineScaleSetVM) -> str:
    """A VMSS VM's `instanceId`, else the last segment of its ARM id (`.../virtualMachines/<instanceId>`)."""
    return _text(vm.instance_id) or arm_id_leaf(_text(vm.id), "virtualMachines")


def _instance(vm: VirtualMachineScaleSetVM) -> Instance:
    os_profile = vm.os_profile
    view = getattr(vm, "instance_view", None)
    code, message = provisioning_error(view)
    return Instance(
        instance_id=uniform_instance_id(vm),
        provisioning_state=_text(vm.provisioning_state),
        computer_name=_text(getattr(os_profile, "computer_name", None)),
        resource_id=_text(vm.id),
        power_state=power_state(view),
        error_code=code,
        error_message=message,
        **_protection(getattr(vm, "protection_policy", None)),
        # A stale instance (false) drifted from the scale set's model (engine.drift); None when ARM omits it.
        latest_model_applied=getattr(vm, "latest_model_applied", None),
    )


def _protection(policy: Any) -> dict[str, Any]:
    """A VMSS VM's `protectionPolicy` as Instance fields: no policy is no protection (the list reports it)."""
    scale_set_actions = bool(getattr(policy, "protect_from_scale_set_actions", None))
    return {"protected_from_scale_in": bool(getattr(policy, "protect_from_scale_in", None)) or scale_set_actions,
            "protected_from_scale_set_actions": scale_set_actions}


_FAILED_PREFIX = "provisioningstate/failed/"


def provisioning_error(instance_view: Any) -> tuple[str, str]:
    """`ProvisioningState/failed/ZonalAllocationFailed` among the instance view's statuses -> (the code, its
    message); ("", "") without a view or a failure. The VM's own statuses only: an extension's failure is in
    `extensions[].statuses` and is not an allocation."""
    for status in getattr(instance_view, "statuses", None) or ():
        code = _text(getattr(status, "code", None))
        if code.lower().startswith(_FAILED_PREFIX):
            return code[len(_FAILED_PREFIX):], _text(getattr(status, "message", None))
    return "", ""


def with_failures(instances: list[Instance], read: Callable[[str], Instance | None]) -> list[Instance]:
    """The listed instances, each Failed one whose error the list did not carry read again with its instance view
    (`read`: one GET with `$expand=instanceView`). Nothing more is read while no instance is Failed."""
    out = []
    for instance in instances:
        if instance.failed and not instance.error_code:
            viewed = read(instance.instance_id)
            if viewed is not None:
                instance = replace(instance, error_code=viewed.error_code, error_message=viewed.error_message,
                                   power_state=viewed.power_state or instance.power_state)
        out.append(instance)
    return out


def power_state(instance_view: Any) -> str:
    """`PowerState/deallocated` among the instance view's statuses -> "deallocated"; "" without a view."""
    for status in getattr(instance_view, "statuses", None) or ():
        code = _text(getattr(status, "code", None))
        if code.lower().startswith("powerstate/"):
            return code.split("/", 1)[1].lower()
    return ""


def _priority(vmss: VirtualMachineScaleSet) -> tuple[str, str]:
    """The scale set's VM priority (Regular or Spot; Low is spot's old name) and spot eviction policy."""
    profile = vmss.virtual_machine_profile
    priority = _text(getattr(profile, "priority", None)) or "Regular"
    if priority.lower() in ("spot", "low"):
        return "Spot", _text(getattr(profile, "eviction_policy", None)) or "Deallocate"
    return "Regular", ""


def _hibernation_enabled(vmss: VirtualMachineScaleSet, kind: str, priority: str) -> bool:
    """Whether the set's VMs may hibernate: `additionalCapabilities.hibernationEnabled` on a Flexible set of regular
    VMs. Azure supports hibernation on neither Uniform sets nor spot VMs (hibernate-resume.md, "Azure feature
    limitations"), so the flag alone is not enough."""
    capabilities = getattr(vmss, "additional_capabilities", None)
    flagged = bool(getattr(capabilities, "hibernation_enabled", None))
    return flagged and kind == FLEXIBLE_SCALE_SET and priority == "Regular"


def _private_ips(nics: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """Instance id -> the private IPs of its NICs (primary NIC and primary IP configuration first)."""
    found: dict[str, list[str]] = {}
    ordered = sorted(nics, key=lambda nic: not getattr(nic, "primary", False))
    for nic in ordered:
        vm_id = _text(getattr(getattr(nic, "virtual_machine", None), "id", None))
        if not vm_id:
            continue
        ips = found.setdefault(vm_id.rstrip("/").rsplit("/", 1)[-1], [])
        configs = sorted(getattr(nic, "ip_configurations", None) or (), key=lambda c: not getattr(c, "primary", False))
        ips.extend(ip for c in configs if (ip := _text(getattr(c, "private_ip_address", None))) and ip not in ips)
    return {instance: tuple(ips) for instance, ips in found.items()}


# --- Resource SKUs ----------------------------------------------------------------------


def _sku_number(capabilities: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(capabilities[name.lower()])
    except (KeyError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _location_restriction(sku: ResourceSku, location: str) -> str:
    """ARM's reason code when the SKU cannot be deployed anywhere in `location` for us; "" when it can.

    Zone restrictions (some zones only) are not reported: the scale set may still grow in the others.
    """
    for restriction in sku.restrictions or ():
        if _text(restriction.type).lower() != "location":
            continue
        info = restriction.restriction_info
        where = [*(restriction.values_property or ()), *((info.locations or ()) if info is not None else ())]
        if not where or any(w.lower() == location for w in where):
            return _text(restriction.reason_code) or "Restricted"
    return ""


def _vm_size(sku: ResourceSku, location: str) -> VmSizeCapacity | None:
    """A `virtualMachines` SKU listed for `location`; None for other resource types and locations, or without vCPUs and memory."""
    if _text(sku.resource_type).lower() != "virtualmachines" or not sku.name:
        return None
    if location not in {loc.lower() for loc in sku.locations or ()}:
        return None
    capabilities = {_text(c.name).lower(): _text(c.value) for c in sku.capabilities or () if c.name}
    # Constrained-core sizes (Standard_E4-2s_v3) keep the parent's vCPUs but show the guest only vCPUsAvailable.
    vcpus = _sku_number(capabilities, "vCPUsAvailable") or _sku_number(capabilities, "vCPUs")
    memory_gib = _sku_number(capabilities, "MemoryGB")  # ARM's "GB" here are GiB (a D4s_v5 says 16)
    if not vcpus or memory_gib is None:
        return None
    gpus = _sku_number(capabilities, "GPUs") or 0.0  # a fractional GPU (a vGPU share) is no whole nvidia.com/gpu
    return VmSizeCapacity(
        name=_text(sku.name),
        vcpus=int(vcpus),
        memory_bytes=int(memory_gib * _GIB),
        gpus=int(gpus),
        restriction=_location_restriction(sku, location),
        family=_text(getattr(sku, "family", None)),
    )


@dataclass(frozen=True, slots=True)
class _SizesEntry:
    """One location's listed sizes, and until when (monotonic seconds) they stand without asking ARM again."""

    sizes: tuple[VmSizeCapacity, ...]
    fresh_until: float


# --- The adapter ------------------------------------------------------------------------


def arm_client_options(settings: Settings, *, retry_total: int, retry_backoff_max: float, timeout: float) -> dict[str, Any]:
    """Keyword arguments of an ARM management client for `settings.arm_endpoint`: bounded timeouts, few retries."""
    endpoint = settings.arm_endpoint.rstrip("/")
    return {
        "base_url": endpoint,
        # Tokens are for the ARM endpoint in use (public cloud, sovereign cloud or the sandbox).
        "credential_scopes": [f"{endpoint}/.default"],
        "connection_verify": settings.arm_ca_bundle or True,
        "connection_timeout": 5,
        "read_timeout": 30,
        "retry_policy": ThrottleAwareRetryPolicy(
            retry_total=retry_total, retry_backoff_factor=0.5, retry_backoff_max=retry_backoff_max, timeout=timeout
        ),
        # After the retry policy: every HTTP attempt (429s included) counts in vmss_autoscaler_arm_requests_total.
        "per_retry_policies": [ArmTelemetryPolicy()],
    }


class ArmOperations:
    """Long-running ARM operations polled for at most `operation_wait` seconds (see the module docstring).

    Shared by every ARM-backed provider: begin an operation with `polling()`, describe it with
    `outcome()`, and pick it up again from its token with `resume()`.
    """

    def __init__(self, operation_wait: float, base_url: str) -> None:
        self._operation_wait = max(0.0, operation_wait)
        # The generated operations hand this to their polling method to format relative status links; we do the same.
        self._base_url = base_url

    def polling(self, *, poll_first: bool) -> _BoundedArmPolling:
        return _BoundedArmPolling(
            self._operation_wait,
            poll_first=poll_first,
            timeout=1.0,  # between polls when ARM sends no Retry-After; the budget bounds the total
            path_format_arguments={"endpoint": self._base_url},
        )

    def outcome(self, what: str, poller: LROPoller[Any], polling: _BoundedArmPolling, *, resumed: bool) -> Operation:
        """Wait for the bounded polling to end and describe the operation for the port."""
        token = poller.continuation_token()
        try:
            poller.wait(timeout=self._operation_wait + _SAFETY_MARGIN)
        except HttpResponseError as exc:
            status = _port_status(polling.status())
            if status not in ("Failed", "Canceled"):
                raise compute_error(what, exc) from exc
            code, message = _error_details(exc)
            log.warning("%s: operation %s: %s %s", what, status.lower(), code, message)
            return Operation(token=token, status=status, error_code=code, error_message=message)
        except AzureError as exc:
            raise compute_error(what, exc) from exc
        if resumed and polling.interrupted_by is not None:
            # Checking an operation is all a resumed call does: tell the caller when to look
            # again (a 429 keeps its Retry-After), as if the status GET had raised.
            raise compute_error(f"{what}: status check", HttpResponseError(response=polling.interrupted_by.http_response))
        if resumed and polling.transport_error is not None:
            raise compute_error(what, polling.transport_error) from polling.transport_error
        # A fresh operation that ARM accepted is reported InProgress whatever stopped
        # our polling: the token lets the next invocation pick it up.
        return Operation(token=token, status=_port_status(polling.status()))

    def resume(self, what: str, token: str, begin: Callable[..., LROPoller[Any]]) -> Operation:
        polling = self.polling(poll_first=True)
        try:
            poller = begin(continuation_token=token, polling=polling)
        except ValueError as exc:
            raise ComputeError(f"{what}: not a continuation token: {exc}", code="InvalidContinuationToken") from exc
        except AzureError as exc:
            raise compute_error(what, exc) from exc
        return self.outcome(what, poller, polling, resumed=True)


def _network_client(settings: Settings, credential: TokenCredential) -> Any:
    from azure.mgmt.network import NetworkManagementClient

    return NetworkManagementClient(
        credential, settings.subscription_id, **arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=60)
    )


class VmssCompute:
    """`shared.ports.NodeGroupProvider` of kind `vmss-uniform` over the scale sets of some resource groups. Every method calls ARM
    (`list_vm_sizes` only when its cache for the location is stale).

    Discovery follows cluster-autoscaler: a scale set is a node group when tagged
    `cluster-autoscaler-enabled=true` and `cluster-autoscaler-name=<cluster>`,
    with integer `min` and `max` tags. Flexible sets are discovered here too, stamped `vmss-flexible`.
    """

    kind = UNIFORM_SCALE_SET

    def __init__(
        self,
        client: ComputeManagementClient,
        *,
        cluster_name: str,
        resource_groups: Iterable[str],
        operation_wait: float,
        vm_sizes_ttl: float = VM_SIZES_TTL,
        vm_sizes_retry: float = VM_SIZES_RETRY,
        monotonic: Callable[[], float] = time.monotonic,
        prices: RetailPrices | None = None,
        network: Callable[[], Any] | None = None,
    ) -> None:
        self._client = client
        # Only NODE_MAPPING by IP reads network interfaces: the Network client (and its 0.2 s import,
        # measured) is made on first use.
        self._network_factory = network
        self._network: Any = None
        self._prices = prices  # None: no prices known (the `price` expander then ranks these groups last)
        self._cluster_name = cluster_name
        self._resource_groups = tuple(resource_groups)
        self._operation_wait = max(0.0, operation_wait)
        self._vm_sizes_ttl = vm_sizes_ttl
        self._vm_sizes_retry = vm_sizes_retry
        self._monotonic = monotonic
        # Per process, by lower-cased location. The lock keeps concurrent polls from listing twice.
        self._vm_sizes: dict[str, _SizesEntry] = {}
        self._vm_sizes_lock = threading.Lock()
        self._operations = ArmOperations(self._operation_wait, client._config.base_url)  # noqa: SLF001

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential | None = None) -> VmssCompute:
        """A client for `settings.arm_endpoint` with few, short retries and bounded timeouts."""
        if credential is None:
            from shared.adapters.credentials import make_azure_credential

            credential = make_azure_credential(settings)
        client = ComputeManagementClient(
            credential, settings.subscription_id, **arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=90)
        )
        return cls(
            client,
            cluster_name=settings.cluster_name,
            resource_groups=settings.node_resource_groups,
            operation_wait=settings.arm_operation_wait.total_seconds(),
            prices=RetailPrices.from_settings(settings),
            network=lambda: _network_client(settings, credential),
        )

    def close(self) -> None:
        """Release the HTTP sessions."""
        self._client.close()
        if self._network is not None:
            self._network.close()

    # -- plumbing -------------------------------------------------------------------

    def _arm(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except AzureError as exc:
            raise compute_error(what, exc) from exc

    def _polling(self, *, poll_first: bool) -> _BoundedArmPolling:
        return self._operations.polling(poll_first=poll_first)

    def _outcome(self, what: str, poller: LROPoller[Any], polling: _BoundedArmPolling, *, resumed: bool) -> Operation:
        return self._operations.outcome(what, poller, polling, resumed=resumed)

    def _resume(self, what: str, token: str, begin: Callable[..., LROPoller[Any]]) -> Operation:
        return self._operations.resume(what, token, begin)

    # -- discovery --------------------------------------------------------------------

    def _as_group(self, resource_group: str, vmss: VirtualMachineScaleSet) -> NodeGroup | None:
        """The node group of a scale set tagged for this cluster, without instances; None otherwise."""
        tags = dict(vmss.tags or {})
        if not discovery_tags.is_ours(tags, self._cluster_name):
            return None
        label = f"{resource_group}/{vmss.name}"
        # One listing finds both modes; a Flexible set's calls go to FlexCompute (shared/adapters/flex_compute.py).
        kind = FLEXIBLE_SCALE_SET if _text(vmss.orchestration_mode).lower() == "flexible" else UNIFORM_SCALE_SET
        limits = discovery_tags.usable_limits(label, tags, warn=log.warning)
        if limits is None:
            return None
        sku = vmss.sku
        if sku is None or not sku.name:
            log.warning("scale set %s skipped: it reports no sku", label)
            return None
        priority, eviction_policy = _priority(vmss)
        return NodeGroup(
            priority=priority,
            eviction_policy=eviction_policy,
            resource_group=resource_group,
            name=_text(vmss.name),
            min_size=limits[0],
            max_size=limits[1],
            capacity=int(sku.capacity or 0),
            vm_size=_text(sku.name),
            tags=tags,
            zones=tuple(vmss.zones or ()),
            location=_text(vmss.location),
            provider=kind,
            etag=_text(vmss.etag),
            hibernation_enabled=_hibernation_enabled(vmss, kind, priority),
        )

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        """Every instance of the scale set: a high-cost call (10 a minute per scale set); `power_state` expands
        the instance view (spot eviction detection)."""
        extra = {"expand": "instanceView"} if power_state else {}
        vms = self._arm(
            f"list instances of scale set {group.resource_group}/{group.name}",
            lambda: list(self._client.virtual_machine_scale_set_vms.list(group.resource_group, group.name, **extra)),
        )
        vms = with_instance_ids(vms, uniform_instance_id, f"list instances of scale set {group.id}")
        return with_failures([_instance(vm) for vm in vms], lambda i: self._get_instance_view(group, i))

    def _get_instance_view(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """One instance with its instance view (its provisioning error, its power state): a GET of its own."""
        vm = found_or_none(
            f"get instance {instance_id} of scale set {group.resource_group}/{group.name} with its instance view",
            lambda: self._client.virtual_machine_scale_set_vms.get(group.resource_group, group.name, instance_id,
                                                                   expand="instanceView"))
        return None if vm is None else _instance(vm)

    def _network_client(self, what: str) -> Any:
        """The Network client, made on first use (only IP mapping needs it)."""
        if self._network is None:
            if self._network_factory is None:
                raise ComputeError(f"{what}: no Network client configured", code="NotConfigured")
            self._network = self._network_factory()
        return self._network

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        """The scale set's NICs in one Network RP call (a Uniform scale set's NICs are no standalone resources)."""
        network = self._network_client(f"list network interfaces of scale set {group.id}")
        nics = self._arm(
            f"list network interfaces of scale set {group.resource_group}/{group.name}",
            lambda: list(network.network_interfaces.list_virtual_machine_scale_set_network_interfaces(
                group.resource_group, group.name)),
        )
        return _private_ips(nics)

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """One instance, or None when it does not exist: a GET with its own per-VM throttling budget."""
        vm = found_or_none(f"get instance {instance_id} of scale set {group.resource_group}/{group.name}",
                           lambda: self._client.virtual_machine_scale_set_vms.get(group.resource_group, group.name,
                                                                                  instance_id))
        return None if vm is None else _instance(vm)

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        """The location's `virtualMachines` SKUs, from cache while fresh; never raises (see the module docstring)."""
        key = location.strip().lower()
        with self._vm_sizes_lock:
            entry = self._vm_sizes.get(key)
            now = self._monotonic()
            if entry is not None and now < entry.fresh_until:
                return list(entry.sizes)
            what = f"list VM sizes (resource SKUs) in {key}"
            try:
                skus = self._arm(what, lambda: list(self._client.resource_skus.list(filter=f"location eq '{key}'")))
                sizes = tuple(size for sku in skus if (size := _vm_size(sku, key)) is not None)
            except (ComputeError, ValueError) as exc:  # ValueError: a body the SDK could not deserialize
                stale = entry.sizes if entry is not None else ()
                wait = max(self._vm_sizes_retry, getattr(exc, "retry_after", None) or 0.0)
                problem = str(exc) if isinstance(exc, ComputeError) else f"{what}: {exc}"
                fallback = f"keeping the {len(stale)} sizes listed before" if stale else "templates use the shipped table"
                log.warning("%s; %s, next try in %gs", problem, fallback, wait)
                self._vm_sizes[key] = _SizesEntry(stale, now + wait)
                return list(stale)
            log.info("listed %d VM sizes in %s; cached for %gs", len(sizes), key, self._vm_sizes_ttl)
            self._vm_sizes[key] = _SizesEntry(sizes, now + self._vm_sizes_ttl)
            return list(sizes)

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        """One node's hourly price per group, by its VM size and location (Retail Prices API, cached a day)."""
        return {} if self._prices is None else self._prices.get_group_prices(groups)

    def list_node_groups(self) -> list[NodeGroup]:
        groups: list[NodeGroup] = []
        for resource_group in self._resource_groups:
            scale_sets = self._arm(
                f"list scale sets in resource group {resource_group}",
                lambda rg=resource_group: list(self._client.virtual_machine_scale_sets.list(rg)),
            )
            for vmss in scale_sets:
                groups.extend(self._node_groups(resource_group, vmss))
        return groups

    def _node_groups(self, resource_group: str, vmss: VirtualMachineScaleSet) -> list[NodeGroup]:
        """The scale set's node group; for a Flexible set with an instance mix, one per VM size (its lanes, read
        from its member VMs: shared.adapters.instance_mix)."""
        group = self._as_group(resource_group, vmss)
        if group is None:
            return []
        profile = read_profile(vmss)
        if profile is None or group.provider != FLEXIBLE_SCALE_SET:
            return [group]
        from shared.adapters.flex_compute import list_members  # flex_compute builds on this module

        prices = {} if self._prices is None else self._prices.get_vm_prices(
            group.location, profile.sizes, spot=group.is_spot)
        sizes = {s.name.lower(): s for s in self.list_vm_sizes(group.location)} if group.location else {}
        mine = user_profile(profile, group.tags)  # the user's strategy and ranks, not our steering's
        order = lane_order(mine, mine.strategy, sizes=sizes, prices=prices)
        return as_lanes(group, profile, list_members(self, group, reuse=True), order=order)

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        wanted_rg, _, name = parent_group_id(group_id).partition("/")
        # Only the configured resource groups are ours; ARM compares their names case-insensitively.
        resource_group = next((rg for rg in self._resource_groups if rg.lower() == wanted_rg.lower()), None)
        if resource_group is None or not name:
            return None
        vmss = found_or_none(f"get scale set {resource_group}/{name}",
                             lambda: self._client.virtual_machine_scale_sets.get(resource_group, name))
        if vmss is None:
            return None
        wanted = make_group_id(resource_group, name, lane_of(group_id))  # a lane of an instance-mix set has its own
        return next((g for g in self._node_groups(resource_group, vmss) if g.id == wanted), None)

    # -- changes ----------------------------------------------------------------------

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        """PATCH sku.capacity; ARM adds or removes instances of its choosing to match.

        With the group's etag, If-Match: a capacity computed from a read that another writer has since
        overtaken is refused (412 PreconditionFailed) instead of undoing that writer's change, which for a
        lower capacity means instances Azure picks, running pods and all."""
        what = f"resize scale set {group.resource_group}/{group.name} to {capacity}"
        # Only the SKU's name and capacity are sent: a PATCH leaves everything else (tier included) as it is.
        update = VirtualMachineScaleSetUpdate(sku=Sku(name=group.vm_size, capacity=capacity))
        polling = self._polling(poll_first=False)
        poller = self._arm(
            what,
            lambda: self._client.virtual_machine_scale_sets.begin_update(
                group.resource_group, group.name, update, polling=polling, **if_unchanged(group.etag)
            ),
        )
        return self._outcome(what, poller, polling, resumed=False)

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        """POST deleteInstances for exactly these instances; capacity drops with them."""
        what = f"delete instances {','.join(instance_ids)} of scale set {group.resource_group}/{group.name}"
        if not instance_ids:
            raise ValueError(f"{what}: no instance ids given")
        request = VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=list(instance_ids))
        polling = self._polling(poll_first=False)
        poller = self._arm(
            what,
            lambda: self._client.virtual_machine_scale_sets.begin_delete_instances(
                group.resource_group, group.name, request, polling=polling
            ),
        )
        return self._outcome(what, poller, polling, resumed=False)

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        """POST deallocate for exactly these instances; they stay in the scale set, stopped and not billed.
        `hibernate` sends `hibernate=true`, which ARM takes on Flexible sets only (a Uniform set refuses it)."""
        # hibernate=None leaves the query parameter out: a plain deallocate's request stays what it was.
        return self._power("hibernate" if hibernate else "deallocate", group, instance_ids,
                           self._client.virtual_machine_scale_sets.begin_deallocate,
                           **({"hibernate": True} if hibernate else {}))

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        """POST start for exactly these instances."""
        return self._power("start", group, instance_ids, self._client.virtual_machine_scale_sets.begin_start)

    def _power(self, verb: str, group: NodeGroup, instance_ids: list[str], begin: Callable[..., LROPoller[Any]],
               **options: Any) -> Operation:
        what = f"{verb} instances {','.join(instance_ids)} of scale set {group.resource_group}/{group.name}"
        if not instance_ids:
            raise ValueError(f"{what}: no instance ids given")
        ids = VirtualMachineScaleSetVMInstanceIDs(instance_ids=list(instance_ids))
        polling = self._polling(poll_first=False)
        poller = self._arm(what, lambda: begin(group.resource_group, group.name, ids, polling=polling, **options))
        return self._outcome(what, poller, polling, resumed=False)

    # -- scale-in protection ----------------------------------------------------------------

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        """Uniform instances carry a protection policy (the VMSS VM model, API 2019-03-01 on)."""
        return group.provider == UNIFORM_SCALE_SET

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        """PUT the instance's `protectionPolicy.protectFromScaleIn` (VirtualMachineScaleSetVMs_Update), started
        and not waited for: the instance list shows the outcome. The body holds the policy alone, as Microsoft's
        instance-protection example sends it: the rest of an instance's model is the scale set's."""
        verb = "protect" if protect else "lift the protection of"
        what = f"{verb} instance {instance_id} of scale set {group.resource_group}/{group.name} (scale-in)"
        if not self.supports_scale_in_protection(group):
            raise ComputeError(f"{what}: {group.provider} groups have no instance protection",
                               code=SCALE_IN_PROTECTION_UNSUPPORTED)
        body = VirtualMachineScaleSetVM(
            location=group.location or None,
            protection_policy=VirtualMachineScaleSetVMProtectionPolicy(protect_from_scale_in=protect),
        )
        # No polling budget: the write is one of several per poll, and nothing waits on it.
        started = ArmOperations(0.0, self._client._config.base_url)  # noqa: SLF001
        polling = started.polling(poll_first=False)
        poller = self._arm(what, lambda: self._client.virtual_machine_scale_set_vms.begin_update(
            group.resource_group, group.name, instance_id, body, polling=polling))
        outcome = started.outcome(what, poller, polling, resumed=False)
        if outcome.status in ("Failed", "Canceled"):
            raise ComputeError(f"{what}: {outcome.error_code} {outcome.error_message}".strip(),
                               code=outcome.error_code)

    def get_resize_operation(self, token: str) -> Operation:
        # With a continuation token the SDK ignores the scale set arguments: the token names the operation.
        return self._resume(
            "check resize operation",
            token,
            lambda **kw: self._client.virtual_machine_scale_sets.begin_update("", "", VirtualMachineScaleSetUpdate(), **kw),
        )

    def get_delete_operation(self, token: str) -> Operation:
        return self._resume(
            "check delete-instances operation",
            token,
            lambda **kw: self._client.virtual_machine_scale_sets.begin_delete_instances(
                "", "", VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=[]), **kw
            ),
        )

    def get_deallocate_operation(self, token: str) -> Operation:
        return self._resume(
            "check deallocate operation",
            token,
            lambda **kw: self._client.virtual_machine_scale_sets.begin_deallocate("", "", None, **kw),
        )

    def get_start_operation(self, token: str) -> Operation:
        return self._resume(
            "check start operation",
            token,
            lambda **kw: self._client.virtual_machine_scale_sets.begin_start("", "", None, **kw),
        )
