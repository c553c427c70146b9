"""Every app setting the autoscaler reads, parsed and validated in one place.

Pure module: `load_settings` takes a mapping (normally os.environ) and returns a
frozen `Settings` or raises `SettingsError` listing every problem by name. Whether a
file setting names an existing file is asked of the caller's `file_exists` (the
composition root passes os.path.isfile), so nothing here touches the disk.
`misspelt_settings` names app settings that look like ours but are not.
The settings table of docs/settings.md is checked against `SPECS` by a test.
"""

from __future__ import annotations

import difflib
import math
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from shared import json_text
from shared.engine.disruption_budgets import NodeBudget, parse_budgets
from shared.engine.expanders import EXPANDERS, parse_expander_chain, parse_priorities
from shared.engine.node_mapping import parse_mapping_method
from shared.engine.limits import ClusterLimits, parse_min_max
from shared.engine.offerings import Lifetimes, OfferingError, parse_lifetimes
from shared.engine.scheduled_capacity import CapacityWindow, parse_windows
from shared.engine.standby import parse_standby
from shared.engine.spot import EvictionSignal
from shared.engine.spot_work import parse_max_runtime, parse_rate
from shared.domain import LabelSelector
from shared.engine.selectors import parse_label_selector
from shared.quantities import parse_duration
from shared.schedules import parse_ncrontab


class SettingsError(ValueError):
    """One or more app settings are missing or malformed; `problems` names each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid app settings:\n  " + "\n  ".join(problems))
        self.problems = problems


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r} (use true or false)")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


# Azure Storage keeps a queue message invisible for at most 7 days: a longer delay or action life is refused
# at once rather than failing at the first send.
QUEUE_MAX_DELAY = timedelta(days=7)
# host.json's functionTimeout (5 minutes on Flex Consumption's default): what one invocation may wait in-process.
FUNCTION_TIMEOUT = timedelta(minutes=5)
# No setting means more than a year; past it, a duration is a typo (and past ~10^9 days, an OverflowError).
LONGEST_DURATION = timedelta(days=365)


def _duration(text: str) -> timedelta:
    try:
        value = parse_duration(text)
    except OverflowError:
        raise ValueError(f"is far too long: {text!r}") from None
    if value > LONGEST_DURATION:
        raise ValueError(f"must be at most {_say(LONGEST_DURATION)}, got {text!r}")
    return value


def _say(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _nonnegative_duration(text: str) -> timedelta:
    value = _duration(text)
    if value < timedelta(0):
        raise ValueError("must not be negative")
    return value


def _positive_duration(text: str) -> timedelta:
    value = _duration(text)
    if value <= timedelta(0):
        raise ValueError(f"must be longer than zero, got {text!r}")
    return value


def _at_most(parse: Callable[[str], timedelta], limit: timedelta, why: str) -> Callable[[str], timedelta]:
    def bounded(text: str) -> timedelta:
        value = parse(text)
        if value > limit:
            raise ValueError(f"must be at most {_say(limit)} ({why}), got {text!r}")
        return value

    return bounded


_QUEUE_BOUND = "a queue message stays invisible for at most 7 days"


def _csv(text: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    if not items:
        raise ValueError("must name at least one value")
    return items


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _namespaces(text: str) -> tuple[str, ...]:
    """Namespace names, comma-separated; may be empty."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [n for n in names if not _DNS_LABEL.match(n)]
    if bad:
        raise ValueError(f"not a namespace name: {bad[0]!r} (lower-case letters, digits and '-', at most 63)")
    return names


def _labels(text: str) -> tuple[str, ...]:
    """Label keys, comma-separated; may be empty."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _offering_lifetimes(text: str) -> Lifetimes:
    try:
        return parse_lifetimes(text, parse_duration=_positive_duration)
    except OfferingError as exc:
        raise ValueError(str(exc)) from None


def _eviction_signal(text: str) -> EvictionSignal | None:
    return EvictionSignal.parse(text)


def _label_selector(text: str) -> LabelSelector | None:
    """None for empty text: no pods beyond Job pods are batch work."""
    if not text.strip():
        return None
    return parse_label_selector(text)


def _ncrontab(text: str) -> str:
    return parse_ncrontab(text).expression


def _standby(text: str) -> str:
    """A whole number or `auto` (engine.standby.parse_standby), kept as text: the group's tag may override it."""
    return str(parse_standby(text))


def _budgets(text: str) -> tuple[NodeBudget, ...]:
    return parse_budgets(text)


def _ratio_at_least_zero(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a number of 0 or more, got {text!r}")
    return value


def _spot_max_runtime(text: str) -> str:
    parse_max_runtime(text)
    return text.strip().lower()


def _positive_number(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a number above 0, got {text!r}")
    return value


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {text!r}")
        return value

    return parse


def _text(text: str) -> str:
    return text.strip()


def _table_name(text: str) -> str:
    value = text.strip()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{2,62}", value):
        raise ValueError(f"table names are 3-63 letters and digits starting with a letter, got {text!r}")
    return value


def _queue_name(text: str) -> str:
    value = text.strip()
    if not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", value):
        raise ValueError(f"queue names are 3-63 lowercase letters, digits and single hyphens, got {text!r}")
    return value


def _optional(parse: Callable[[str], str]) -> Callable[[str], str]:
    """`parse`, except that empty text is an empty value (the setting is off)."""
    def parse_optional(text: str) -> str:
        return parse(text) if text.strip() else ""

    return parse_optional


def _group_ids(text: str) -> tuple[str, ...]:
    """Node group ids, `<resource group>/<name>`, comma-separated; may be empty. Resource groups compare
    case-insensitively (as ARM's), so they are lower-cased as group ids are."""
    ids = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        rg, sep, name = item.partition("/")
        if not sep or not rg or not name or "/" in name:
            raise ValueError(f"{item!r} is not a node group id, `<resource group>/<scale set or pool>`")
        ids.append(f"{rg.lower()}/{name}")
    return tuple(ids)


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None


def _fraction(text: str, *, zero_ok: bool = False) -> float:
    """A share of a node's CPU: 0.5 is half. A percentage is refused rather than guessed at."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"not a number: {text!r} (use a fraction such as 0.5 for 50%)") from None
    if zero_ok and not 0 <= value <= 1:
        raise ValueError(f"must be a fraction from 0 to 1 (0.5 for 50%), got {text!r}")
    if not zero_ok and not 0 < value <= 1:
        raise ValueError(f"must be a fraction above 0 and at most 1 (0.5 for 50%), got {text!r}")
    return value


def _threshold(text: str) -> float:
    """A utilisation threshold, 0 to 1 as cluster-autoscaler's: 0 makes no node a scale-down candidate."""
    return _fraction(text, zero_ok=True)


def _price(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"not a number: {text!r} (USD, e.g. 0.0000135)") from None
    if not 0 <= value < 1e6 or value != value:
        raise ValueError(f"must be a price in USD, 0 or more, got {text!r}")
    return value


def _usage_window(text: str) -> timedelta:
    # Both sources sample once a minute: a shorter window would often hold no sample at all.
    value = _duration(text)
    if value < timedelta(minutes=1):
        raise ValueError(f"must be at least 1m (usage is sampled once a minute), got {text!r}")
    return value


_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _workspace_id(text: str) -> str:
    value = text.strip()
    if value and not _GUID.fullmatch(value):
        raise ValueError(f"must be the workspace's GUID (Workspace ID on its Overview page), got {text!r}")
    return value


def _https_url(text: str) -> str:
    value = text.strip().rstrip("/")
    if not value:
        return ""  # optional settings: empty means unset; required ones are checked in load_settings
    if not re.fullmatch(r"https://[^\s/]+(/\S*)?", value):
        raise ValueError(f"must be an https:// URL, got {text!r}")
    return value


_AKS_ID = re.compile(
    r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
    r"/providers/Microsoft\.ContainerService/managedClusters/(?P<name>[^/]+)/?",
    re.IGNORECASE,
)


def parse_aks_cluster_id(cluster_id: str) -> tuple[str, str, str]:
    """(subscription, resource group, cluster name) of an AKS resource id."""
    match = _AKS_ID.fullmatch(cluster_id.strip())
    if match is None:
        raise ValueError("must be an AKS resource id, /subscriptions/<id>/resourceGroups/<rg>/providers/"
                         f"Microsoft.ContainerService/managedClusters/<name>, got {cluster_id!r}")
    return match["sub"], match["rg"], match["name"]


def _aks_cluster_id(text: str) -> str:
    value = text.strip().rstrip("/")
    if value:
        parse_aks_cluster_id(value)
    return value


def _aks_node_pools(text: str) -> Mapping[str, tuple[int, int]]:
    """`pool:min:max,...` -> {pool: (min, max)}; pool names as AKS allows them (lower-case letters and digits)."""
    pools: dict[str, tuple[int, int]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition(":")
        if not re.fullmatch(r"[a-z][a-z0-9]{0,11}", name) or not sep:
            raise ValueError(f"{item!r} is not `pool:min:max` with an AKS pool name (lower-case letters and digits, "
                             "at most 12, starting with a letter)")
        try:
            low, high = parse_min_max(rest)
        except ValueError as exc:
            raise ValueError(f"{item!r}: {exc}") from None
        if name in pools:
            raise ValueError(f"pool {name} is named twice")
        pools[name] = (low, high)
    return MappingProxyType(pools)


def _server_app_id(text: str) -> str:
    value = text.strip()
    if not _GUID.fullmatch(value):
        raise ValueError(f"must be the application (client) id of the AKS server application, a GUID, got {text!r}")
    return value.lower()


_SECRET_PATH = re.compile(r"/secrets/(?P<name>[0-9A-Za-z-]{1,127})(?:/(?P<version>[0-9A-Za-z]+))?/?")


def parse_secret_uri(uri: str) -> tuple[str, str, str | None]:
    """(vault URL, secret name, version or None) of `https://<vault>/secrets/<name>[/<version>]`."""
    parts = urlsplit(uri.strip())
    match = _SECRET_PATH.fullmatch(parts.path)
    if parts.scheme != "https" or not parts.netloc or match is None or parts.query or parts.fragment:
        raise ValueError("must be a Key Vault secret URI, https://<vault>.vault.azure.net/secrets/<name> (optionally "
                         f"/<version>), got {uri!r}")
    return f"https://{parts.netloc}", match["name"], match["version"]


def _secret_uri(text: str) -> str:
    value = _https_url(text)
    if value:
        parse_secret_uri(value)
    return value


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _configmap_ref(text: str) -> tuple[str, str] | None:
    """`namespace/name`, or None (write no status) for empty text."""
    value = text.strip()
    if not value:
        return None
    namespace, slash, name = value.partition("/")
    if not slash or not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(f"must be namespace/name of a ConfigMap, e.g. kube-system/cluster-autoscaler-status, got {text!r}")
    return namespace, name


# Scale-up settings are parsed by the engine's own parsers (pure), so settings and planner
# can never disagree on what an expander chain, a priority rule or a min:max limit means.
EXPANDER_NAMES = tuple(EXPANDERS)


def _priority_config(text: str) -> Mapping[int, tuple[str, ...]]:
    """JSON `{"<priority>": ["<regex>", ...]}`, the shape of CA's priority expander ConfigMap."""
    rules = parse_priorities(text)
    return MappingProxyType({priority: tuple(p.pattern for p in patterns) for priority, patterns in rules.rules})


def _vm_prices(text: str) -> Mapping[str, float]:
    """JSON `{"<VM size>": <USD per hour>, ...}`; sizes compare case-insensitively, as ARM's do."""
    if not text.strip():
        return MappingProxyType({})
    raw = _json_value(text, what="a price list")
    if not isinstance(raw, dict):
        raise ValueError(f'must be a JSON object of VM size to USD per hour, e.g. {{"Standard_D4s_v5": 0.192}}, '
                         f"got {type(raw).__name__}")
    prices: dict[str, float] = {}
    for size, price in raw.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", size):
            raise ValueError(f"{size!r} is not a VM size name (like Standard_D4s_v5)")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < 10_000:
            raise ValueError(f"{size}: price must be a number of USD per hour from 0 to 10000, got {price!r}")
        if size.lower() in prices:
            raise ValueError(f"{size} is listed twice (sizes compare case-insensitively)")
        prices[size.lower()] = float(price)
    return MappingProxyType(prices)


def _scheduled_capacity(text: str) -> tuple[CapacityWindow, ...]:
    """JSON list of windows (engine.scheduled_capacity.parse_windows); empty: none."""
    if not text.strip():
        return ()
    return parse_windows(_json_value(text, what="a list of windows"))


def _json_value(text: str, *, what: str) -> Any:
    """A JSON setting's value, with the depth limit every JSON setting has; ValueError naming what it should be."""
    try:
        return json_text.loads(text)
    except json_text.TooDeep as exc:
        raise ValueError(f"not {what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None


def _min_max(text: str) -> tuple[int, int]:
    """CA's `min:max` flags: whole numbers, 0 <= min <= max; a max of 0 means no limit."""
    return parse_min_max(text)


def _gib_min_max(text: str) -> tuple[int, int]:
    """`min:max` in GiB, as CA's --memory-total takes it, returned in bytes."""
    low, high = _min_max(text)
    return low * 1024**3, high * 1024**3


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # the app setting
    attr: str  # the Settings field
    default: str | None  # None: required
    parse: Callable[[str], Any]
    help: str
    blank_is_a_value: bool = False  # an empty value is parsed (it means something), not taken as unset


SPECS: tuple[Spec, ...] = (
    Spec("CLUSTER_NAME", "cluster_name", None, _text,
         "Cluster name; scale sets tagged `cluster-autoscaler-name=<this>` and `cluster-autoscaler-enabled=true` are managed."),
    Spec("AZURE_SUBSCRIPTION_ID", "subscription_id", None, _text, "Subscription holding the scale sets."),
    Spec("NODE_MAPPING", "node_mapping", "auto", parse_mapping_method,
         "How a node is matched to its scale-set instance: `auto` tries `provider-id` (cloud-provider-azure's "
         "`azure://` providerID), then `hostname` (node name = the VM's computer name, case-insensitive: k3s, "
         "kubeadm), then `ip` (an InternalIP = the VM's private IP); naming one method uses only it. A node that "
         "matches no instance, or more than one, is reported and never touched."),
    Spec("NODE_RESOURCE_GROUPS", "node_resource_groups", "", _labels,
         "Comma-separated resource groups searched for tagged scale sets; required unless `MANAGE_AKS_POOLS=true`."),
    Spec("KUBE_AUTH", "kube_auth", "kubeconfig", _choice("kubeconfig", "aks", "key-vault"),
         "How the cluster is reached: `kubeconfig` (the file `KUBECONFIG_PATH`), `aks` (an Entra ID-enabled AKS "
         "cluster, `AKS_CLUSTER_ID`, with the app's own identity) or `key-vault` (a kubeconfig kept in Key Vault, "
         "`KUBECONFIG_SECRET_URI`)."),
    Spec("MANAGE_AKS_POOLS", "manage_aks_pools", "false", _bool,
         "Manage AKS node pools of `AKS_CLUSTER_ID` through the agentPools API (`count`, `deleteMachines`): the pools "
         "named in `AKS_NODE_POOLS` and those tagged like scale sets. Off, the agentPools API is never called."),
    Spec("AKS_NODE_POOLS", "aks_node_pools", "", _aks_node_pools,
         "AKS node pools of `AKS_CLUSTER_ID` to manage (with `MANAGE_AKS_POOLS=true`) through the agentPools API, as `pool:min:max` separated by "
         "commas (e.g. `render:0:20,batch:1:5`); pools tagged like scale sets (`cluster-autoscaler-enabled`, "
         "`cluster-autoscaler-name`, `min`, `max`) are managed too. A pool whose AKS cluster autoscaler is on is "
         "refused and reported."),
    Spec("KUBECONFIG_PATH", "kubeconfig_path", "", _text,
         "Path to the kubeconfig used to reach the cluster; required with `KUBE_AUTH=kubeconfig`."),
    Spec("AKS_CLUSTER_ID", "aks_cluster_id", "", _aks_cluster_id,
         "Resource id of the AKS cluster (`/subscriptions/…/resourceGroups/…/providers/Microsoft.ContainerService/"
         "managedClusters/…`); required with `KUBE_AUTH=aks`. Its API server address and CA are read with "
         "`listClusterUserCredential` (role Azure Kubernetes Service Cluster User Role)."),
    Spec("AKS_SERVER_APP_ID", "aks_server_app_id", "6dae42f8-4368-4678-94ff-3960e28e3630", _server_app_id,
         "Application id of the AKS Entra ID server application; tokens for the cluster are asked for "
         "`<this>/.default`."),
    Spec("KUBECONFIG_SECRET_URI", "kubeconfig_secret_uri", "", _secret_uri,
         "Key Vault secret holding the kubeconfig (`https://<vault>.vault.azure.net/secrets/<name>`, the latest "
         "version, or `.../<name>/<version>`); required with `KUBE_AUTH=key-vault`. The app's identity needs the "
         "role Key Vault Secrets User on it."),
    Spec("KUBECONFIG_ALLOW_EXEC", "kubeconfig_allow_exec", "false", _bool,
         "With `KUBE_AUTH=key-vault`: accept a kubeconfig whose users run a command (`exec`, `auth-provider`) on the "
         "function host. Off, such a kubeconfig is refused: whoever can write the secret could run code in the app."),
    Spec("KUBECONFIG_ALLOW_INSECURE_TLS", "kubeconfig_allow_insecure_tls", "false", _bool,
         "With `KUBE_AUTH=key-vault`: accept a kubeconfig with `insecure-skip-tls-verify: true`. Off, it is refused: "
         "the API server's certificate would not be checked."),
    Spec("KUBECONFIG_ALLOW_HOST_FILES", "kubeconfig_allow_host_files", "false", _bool,
         "With `KUBE_AUTH=key-vault`: accept a kubeconfig that names files on the function host (`tokenFile`, "
         "`certificate-authority`, `client-certificate`, `client-key`) instead of giving them inline (`token`, the "
         "`-data` forms). Off, it is refused: whoever can write the secret could have any host file sent as the token."),
    Spec("KUBECONFIG_ALLOW_HTTP", "kubeconfig_allow_http", "false", _bool,
         "With `KUBE_AUTH=key-vault`: accept a kubeconfig whose server is `http://`. Off, only `https://` servers "
         "are accepted: over http the bearer token travels in clear."),
    Spec("SANDBOX_IDENTITY_ENDPOINT", "sandbox_identity_endpoint", "", _https_url,
         "With `AZURE_CREDENTIAL=sandbox` (required then): the sandbox's token endpoint, which issues expiring "
         "tokens as a managed identity endpoint does. Never set in Azure."),
    Spec("STATUS_CONFIGMAP", "status_configmap", "kube-system/cluster-autoscaler-status", _configmap_ref,
         "`namespace/name` of the ConfigMap each poll writes cluster-autoscaler's status to (key `status`); empty "
         "writes none. Not written with `DRY_RUN=true`, so a trial run beside cluster-autoscaler leaves its status "
         "alone.", blank_is_a_value=True),
    Spec("ARM_ENDPOINT", "arm_endpoint", "https://management.azure.com", _https_url,
         "Azure Resource Manager endpoint (the sandbox serves its own); must be `https://`."),
    Spec("ARM_CA_BUNDLE", "arm_ca_bundle", "", _text,
         "Optional CA bundle file trusted for ARM, Azure Monitor and Key Vault calls and the sandbox's token endpoint "
         "(the sandbox's generated CA); empty uses the system store."),
    Spec("AZURE_CREDENTIAL", "azure_credential", "default", _choice("default", "managed-identity", "sandbox"),
         "`managed-identity` in Azure, `default` (DefaultAzureCredential) for a developer, `sandbox` for the sandbox."),
    Spec("AZURE_CLIENT_ID", "azure_client_id", "", _text,
         "Client id of the user-assigned managed identity (with `managed-identity`)."),
    Spec("SCALE_ACTIONS_QUEUE", "queue_name", "scale-actions", _queue_name,
         "Queue of scale actions; rejected messages go to `<name>-poison`."),
    Spec("STATE_TABLE", "state_table", "autoscalerstate", _table_name,
         "Table holding cooldowns, unneeded-since times and the action ledger."),
    # Every 10 s since issue 19: the replays measured the p95 wait 14-16 s shorter than at 30 s, for about $0.30 a
    # day more of executions and 600 more ARM reads an hour (docs/measurements.md, "Reaction time").
    Spec("PENDING_POLL_SCHEDULE", "pending_poll_schedule", "*/10 * * * * *", _ncrontab,
         "NCRONTAB schedule of `poll_pending_pods`."),
    Spec("UTILIZATION_POLL_SCHEDULE", "utilization_poll_schedule", "0 * * * * *", _ncrontab,
         "NCRONTAB schedule of `poll_utilization`."),
    Spec("STATE_SWEEP_SCHEDULE", "state_sweep_schedule", "0 7 * * * *", _ncrontab,
         "NCRONTAB schedule of `sweep_state`, which removes state older than `STATE_RETENTION`."),
    Spec("STATE_RETENTION", "state_retention", "336h", _positive_duration,
         "Ledger rows of finished actions, and unneeded-since rows of nodes no longer in the cluster, are removed "
         "this long after their last change (14 days); rows of actions still in flight and group rows never are."),
    Spec("SCALE_DOWN_ENABLED", "scale_down_enabled", "true", _bool, "Whether idle nodes are removed at all."),
    Spec("SCALE_DOWN_MODE", "scale_down_mode", "delete", _choice("delete", "deallocate"),
         "`delete` removes a drained node's instance; `deallocate` stops it (no compute billed, disk kept) "
         "and the next scale-up of its group starts it again before adding new instances."),
    Spec("SCALE_DOWN_DEALLOCATED_MAX", "scale_down_deallocated_max", "10", _int_at_least(0),
         "With `SCALE_DOWN_MODE=deallocate`: at most this many instances per group stay deallocated (their disks "
         "are still billed); after each deallocation the ones deallocated longest ago beyond it are deleted. `0` "
         "makes the group's scale-down delete. The scale-set tag "
         "`k8s.io_cluster-autoscaler_node-template_autoscaling-options_scaledowndeallocatedmax` overrides it per group."),
    Spec("STANDBY_INSTANCES", "standby_instances", "0", _standby,
         "Deallocated instances each node group keeps ready (warm standby): a scale-up starts them before it creates "
         "any, so pods wait for a VM start rather than a boot; they bill their disks and hold their cores against "
         "quota. A whole number, or `auto`: the next hour's forecast peak scale-up of the group, at most "
         "`STANDBY_MAX`, and no more than the disks' price is worth in saved time. Idle nodes are deallocated into "
         "the standby while it is short, whatever `SCALE_DOWN_MODE`. The scale-set tag `autoscaler-standby` "
         "overrides it per group. See docs/standby.md."),
    Spec("STANDBY_MAX", "standby_max", "10", _int_at_least(0),
         "Most standby instances `auto` keeps per group (`STANDBY_INSTANCES` or the tag `autoscaler-standby`)."),
    Spec("STANDBY_REFILL_WAITS_FOR_IDLE", "standby_refill_waits_for_idle", "false", _bool,
         "After a group's scale-up, a warm standby refill creates instances only once scale-down could have taken the scale-up's own nodes into the standby (the group's delay after a scale-up plus its unneeded time): fewer instances created and booted for the standby while a burst's nodes may still free up, at the risk of a short standby for a wave that follows soon. `false`: a refill creates as soon as no pod waits for the group (idle nodes are counted towards it either way). See docs/standby.md."),
    Spec("STANDBY_POOLS", "standby_pools", "false", _bool,
         "Keep each Flexible group's VMSS Standby Pool at the group's standby target (maxReadyCapacity and "
         "minReadyCapacity set to it, once per utilisation poll); groups without a pool are not affected. Needs "
         "Microsoft.StandbyPool/standbyVirtualMachinePools/read and /write. See docs/standby-pools.md."),
    Spec("PROVISIONING_REQUESTS", "provisioning_requests", "true", _bool,
         "Act on ProvisioningRequests (autoscaling.x-k8s.io/v1, classes `check-capacity.autoscaling.x-k8s.io` and "
         "`best-effort-atomic-scale-up.autoscaling.x-k8s.io`) where the cluster serves the CRD: book existing room, "
         "or scale up for the whole request or not at all (a partial grant is given back). `false`: leave them to "
         "another controller. See docs/provisioning-requests.md."),
    Spec("PROVISIONING_REQUEST_BOOKING", "provisioning_request_booking", "10m", _nonnegative_duration,
         "How long a Provisioned ProvisioningRequest's room stays booked for its pods (kept from scale-down and from "
         "other requests) before it expires unused (`BookingExpired`): cluster-autoscaler's 10 minutes."),
    Spec("GANG_SCALE_UP", "gang_scale_up", "all-or-nothing", _choice("all-or-nothing", "off"),
         "Pending pods of one gang (label `scheduling.x-k8s.io/pod-group`, a JobSet, or a Kueue workload) are "
         "planned together: `all-or-nothing` asks for no node unless the whole gang fits; `off` plans each pod on "
         "its own, as cluster-autoscaler. See docs/gangs.md."),
    Spec("GPU_READINESS", "gpu_readiness", "true", _bool,
         "A node of a GPU size counts as capacity only once its GPUs are allocatable (the driver and device plugin "
         "report them after the node turns Ready); a GPU node that never reports them within "
         "`MAX_NODE_PROVISION_TIME` is reported and replaced. `false`: a Ready node is capacity, GPUs or not. "
         "See docs/gpu-readiness.md."),
    Spec("DISRUPTION_BUDGETS", "disruption_budgets", "nodes=10%&reasons=Replace,Drifted", _budgets,
         "How many nodes may be disrupted at once, cluster-wide, by reason (`Empty`, `Underutilized`, `Replace`, "
         "`Drifted`): budgets separated by `;`, each `nodes=<count or %>[&reasons=<R>,...][&schedule=<NCRONTAB>&"
         "duration=<d>]` (a schedule opens a window that lasts the duration; outside it the budget does not apply). "
         "The smallest budget that applies to a reason wins; `nodes=0` in a window stops that reason there. A group's "
         "tag `autoscaler-disruption-budgets` (same form) adds budgets for its own nodes. Removals of empty and "
         "under-used nodes are also bounded by `MAX_SCALE_DOWN_PARALLELISM`. See docs/disruption-budgets.md."),
    Spec("CONSOLIDATION", "consolidation", "balanced", _choice("balanced", "always", "off"),
         "Replace under-used nodes with one cheaper node where their pods fit it (beside removing empty and "
         "under-used nodes, which scale-down does as before): `balanced` acts only when the saving outweighs the "
         "disruption (`CONSOLIDATION_THRESHOLD`), `always` whenever it saves, `off` never. The new node is Ready "
         "before the old ones are drained; batch pods are never moved. See docs/consolidation.md."),
    Spec("CONSOLIDATION_THRESHOLD", "consolidation_threshold", "0.5", _ratio_at_least_zero,
         "With `CONSOLIDATION=balanced`: the least share of the saving over the share of the disruption (Karpenter's "
         "`Balanced` policy) for which a replacement is made. See docs/consolidation.md."),
    Spec("DRIFT_REPLACEMENT", "drift_replacement", "true", _bool,
         "Replace nodes that drifted (an instance not on its scale set's latest model, an AKS node on an older node "
         "image than its pool's, or older than `NODE_MAX_AGE`): a new instance first, then a drain of the old one, "
         "within the disruption budgets; nodes running batch pods wait for them to end. See docs/drift.md."),
    Spec("NODE_MAX_AGE", "node_max_age", "0", _nonnegative_duration,
         "Nodes older than this are replaced as drifted (Karpenter's `expireAfter`); `0` never."),
    Spec("REPLACEMENT_TIMEOUT", "replacement_timeout", "30m", _nonnegative_duration,
         "How long a replacement (consolidation or drift) may wait for its new node to be Ready and the old node's "
         "pods to fit elsewhere before it is given up (the old node stays; the new one is removed as any idle node)."),
    Spec("STANDBY_HIBERNATE", "standby_hibernate", "false", _bool,
         "Hibernate the instances stopped into a group's standby (and by `SCALE_DOWN_MODE=deallocate`) where the scale"
         " set allows it (Flexible, regular VMs, created with additionalCapabilities.hibernationEnabled): a start then"
         " resumes the node with its memory instead of booting it; the OS disk holds the memory. Other sets deallocate"
         " as before, and a set that refuses is deallocated plainly. The scale-set tag `autoscaler-standby-hibernate` "
         "(true or false) overrides it per group. See docs/standby.md."),
    Spec("SCALE_DOWN_UNNEEDED_TIME", "scale_down_unneeded_time", "10m", _nonnegative_duration,
         "How long a node must be unneeded before it is removed (in `fixed` idle mode: see `SCALE_DOWN_IDLE_MODE`)."),
    Spec("SCALE_DOWN_IDLE_MODE", "scale_down_idle_mode", "auto", _choice("auto", "fixed", "break-even"),
         "`fixed` keeps an unneeded node for `SCALE_DOWN_UNNEEDED_TIME` and waits `SCALE_DOWN_DELAY_AFTER_ADD` after "
         "a scale-up, as cluster-autoscaler; `break-even` uses the group's measured boot time (median of its last 20 "
         "boots, 180 s before the first) for both: an idle node is kept about as long as replacing it would cost. "
         "`auto` is `fixed` on groups of GPU or FPGA sizes (`Standard_N...`) and `break-even` on the others. "
         "Unset, it is `auto`, or `fixed` when `SCALE_DOWN_UNNEEDED_TIME` or `SCALE_DOWN_DELAY_AFTER_ADD` is set "
         "(a time written down is meant). "
         "The scale-set tag `k8s.io_cluster-autoscaler_node-template_autoscaling-options_scaledownidlemode` "
         "overrides it per group, and a group's `..._scaledownunneededtime` tag wins over both. See "
         "docs/architecture.md, \"Idle time\"."),
    Spec("SCALE_DOWN_UNREADY_TIME", "scale_down_unready_time", "20m", _nonnegative_duration,
         "How long a NotReady node must be unneeded before it is removed."),
    Spec("SCALE_DOWN_UTILIZATION_THRESHOLD", "scale_down_utilization_threshold", "0.5", _threshold,
         "A node whose CPU and memory requests are both below this share of allocatable (DaemonSet and mirror pods "
         "taken off both) is a scale-down candidate; at it, it is kept, and `0` makes no node a candidate, as in "
         "cluster-autoscaler; "
         "a scale set's `k8s.io_cluster-autoscaler_node-template_autoscaling-options_*` tags override this and the "
         "unneeded, unready and GPU settings per group."),
    Spec("SCALE_DOWN_GPU_UTILIZATION_THRESHOLD", "scale_down_gpu_utilization_threshold", "0.5", _threshold,
         "The same for nodes with GPUs, judged by their GPU requests alone (a GPU node whose GPUs are not "
         "allocatable yet is at 0)."),
    Spec("SCALE_DOWN_IGNORE_DAEMONSETS_UTILIZATION", "scale_down_ignore_daemonsets_utilization", "true", _bool,
         "Leave DaemonSet pods out of a node's utilisation."),
    Spec("SCALE_DOWN_IGNORE_MIRROR_PODS_UTILIZATION", "scale_down_ignore_mirror_pods_utilization", "true", _bool,
         "Leave static (mirror) pods out of a node's utilisation."),
    Spec("SKIP_NODES_WITH_SYSTEM_PODS", "skip_nodes_with_system_pods", "true", _bool,
         "Keep nodes running kube-system pods that are not DaemonSet or mirror pods and have no PodDisruptionBudget, "
         "until such a pod is older than `BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT`."),
    Spec("BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT", "blocking_system_pod_disruption_timeout", "1h",
         _nonnegative_duration,
         "How old (since its creation) a kube-system pod without a PodDisruptionBudget must be before it no longer "
         "keeps its node and is evicted like any other pod; cluster-autoscaler's "
         "`--blocking-system-pod-distruption-timeout` (upstream's spelling). A pod covered by a budget follows "
         "the budget instead."),
    Spec("SKIP_NODES_WITH_LOCAL_STORAGE", "skip_nodes_with_local_storage", "true", _bool,
         "Keep nodes running pods with hostPath or disk-backed emptyDir volumes not listed in "
         "`cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes`."),
    Spec("SKIP_NODES_WITH_CUSTOM_CONTROLLER_PODS", "skip_nodes_with_custom_controller_pods", "true", _bool,
         "Keep nodes running pods owned by a controller other than ReplicationController, ReplicaSet, StatefulSet "
         "or Job (a workflow engine's, an operator's), which may never recreate them elsewhere; cluster-autoscaler's "
         "`--skip-nodes-with-custom-controller-pods`."),
    Spec("BATCH_PROTECTION", "batch_protection", "true", _bool,
         "Never evict running batch pods (owned by a Job, or matching `BATCH_POD_SELECTOR`): their node is "
         "cordoned and removed when they finish. `false` evicts them like any other pod, as cluster-autoscaler does."),
    Spec("BATCH_POD_SELECTOR", "batch_pod_selector", "", _label_selector,
         "Label selector (as in `kubectl -l`) of more pods to treat as batch work, e.g. `workload=render`."),
    Spec("BATCH_DRAIN_TIMEOUT", "batch_drain_timeout", "0s", _nonnegative_duration,
         "Longest a node waits for its batch pods before they are evicted; `0s` waits for as long as they run."),
    Spec("BATCH_CHECK_INTERVAL", "batch_check_interval", "1m", _at_most(_nonnegative_duration, QUEUE_MAX_DELAY, _QUEUE_BOUND),
         "How often a node waiting for its batch pods looks again (each look is a pod list and a ledger write)."),
    Spec("BATCH_SCALE_IN_PROTECTION", "batch_scale_in_protection", "true", _bool,
         "Protect the instances of nodes running batch work from scale-in (VMSS `protectFromScaleIn`), so a manual "
         "capacity decrease or Azure autoscale cannot take them, and lift it when they go idle. Uniform scale sets "
         "only; `false` leaves every instance's protection as it is."),
    Spec("MAX_GRACEFUL_TERMINATION_SEC", "max_graceful_termination_sec", "600", _int_at_least(0),
         "Most seconds an evicted pod is given to terminate (its own grace period if shorter)."),
    Spec("SCALE_DOWN_DELAY_AFTER_ADD", "scale_down_delay_after_add", "10m", _nonnegative_duration,
         "No scale-down in a group for this long after it scaled up (in `fixed` idle mode: see `SCALE_DOWN_IDLE_MODE`)."),
    Spec("SCALE_DOWN_DELAY_AFTER_DELETE", "scale_down_delay_after_delete", "0s", _nonnegative_duration,
         "No scale-down in a group for this long after it removed a node."),
    Spec("SCALE_DOWN_DELAY_AFTER_FAILURE", "scale_down_delay_after_failure", "3m", _nonnegative_duration,
         "No scale-down in a group for this long after a failed action."),
    Spec("MAX_SCALE_DOWN_PARALLELISM", "max_scale_down_parallelism", "10", _int_at_least(1),
         "Most nodes being drained at once, cluster-wide, shared by the groups in turn; a node whose delete is "
         "committed, or that only waits for its batch pods to finish, holds no slot."),
    # 10s: cluster-autoscaler's --scan-interval, the pace its users know; rounds run only while nodes wait.
    Spec("SCALE_DOWN_ROUND_INTERVAL", "scale_down_round_interval", "10s",
         _at_most(_nonnegative_duration, QUEUE_MAX_DELAY, _QUEUE_BOUND),
         "While due nodes wait for a MAX_SCALE_DOWN_PARALLELISM slot, the scale-down is planned again this long "
         "after each poll (a round sent on the queue), so freed slots are not left until the next "
         "UTILIZATION_POLL_SCHEDULE tick; 0s turns rounds off."),
    Spec("SCALE_DOWN_CANDIDATES_POOL_RATIO", "scale_down_candidates_pool_ratio", "0.1", _fraction,
         "Each poll simulates the removal of at most max(this share of the cluster's nodes, "
         "`SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT`) candidates with pods to move (empty ones always), in turns, so "
         "every candidate is looked at within a few polls; an unneeded node left out keeps its unneeded time but "
         "is removed only once simulated again. `1` simulates every candidate every poll. As cluster-autoscaler's "
         "`--scale-down-candidates-pool-ratio`."),
    Spec("SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT", "scale_down_candidates_pool_min_count", "50", _int_at_least(1),
         "The least number of candidates with pods to move simulated per poll, whatever the cluster's size; as "
         "cluster-autoscaler's `--scale-down-candidates-pool-min-count`."),
    Spec("USAGE_SOURCE", "usage_source", "none", _choice("none", "log-analytics", "vmss-metric"),
         "Where measured node CPU usage comes from, as a second opinion on nodes idle by requests: `none`, "
         "`log-analytics` (Container Insights `Perf` in `LOG_ANALYTICS_WORKSPACE_ID`) or `vmss-metric` (the scale "
         "set's `Percentage CPU` per instance). When it cannot be read, scale-down goes by requests alone and says so."),
    Spec("SCALE_DOWN_MEASURED_CPU_THRESHOLD", "scale_down_measured_cpu_threshold", "0.5", _fraction,
         "A node idle by requests whose measured CPU usage over `USAGE_WINDOW` is above this fraction of its "
         "capacity is kept (0.5 is 50%, like cluster-autoscaler's utilization threshold)."),
    Spec("LOAD_DRIVEN_GROUPS", "load_driven_groups", "", _group_ids,
         "Node groups (`<resource group>/<name>`, comma-separated) grown on measured load rather than pending pods, "
         "like a DaemonSet render farm; a group tagged `autoscaler-load-cpu=<fraction>` is load-driven too. Needs "
         "`USAGE_SOURCE`. See docs/load-driven.md."),
    Spec("LOAD_SCALE_UP_CPU", "load_scale_up_cpu", "0.7", _fraction,
         "A load-driven group grows when its ready nodes' average measured CPU over `USAGE_WINDOW` is above this "
         "fraction of their cores, to `ceil(nodes x average / threshold)` nodes; the tag `autoscaler-load-cpu` "
         "overrides it per group."),
    Spec("LOAD_SCALE_UP_COOLDOWN", "load_scale_up_cooldown", "5m", _duration,
         "After a load-driven group grew, how long before its load may grow it again (the new nodes' load is "
         "measured first)."),
    Spec("LOAD_BACKLOG_QUEUE", "load_backlog_queue", "", _optional(_queue_name),
         "An Azure Storage queue in the app's storage account whose length is work waiting for load-driven groups; "
         "empty: none. A group with a backlog per node grows to `ceil(length / per node)` nodes, from zero too."),
    Spec("LOAD_BACKLOG_PER_NODE", "load_backlog_per_node", "0", _int_at_least(0),
         "Queue messages one node of a load-driven group takes on (`0`: the backlog sizes no group); the tag "
         "`autoscaler-load-backlog-per-node` overrides it per group."),
    Spec("SCHEDULED_CAPACITY", "scheduled_capacity", "", _scheduled_capacity,
         "Time windows in which a node group keeps at least a minimum of nodes, as a JSON list of "
         '`{"group": "<resource group>/<name>", "start": "<six-field NCRONTAB>", "duration": "11h", "min": 10, '
         '"timezone": "Europe/Berlin"}` (`timezone` defaults to UTC). The pending poll grows the group to `min` '
         "from the window's start, with no pod asking; scale-down keeps it there until the window ends. A window "
         "may give `standby` (warm standby instances kept deallocated) instead of or beside `min`. The scale-set tag "
         "`autoscaler-scheduled-capacity` adds a group's own windows (`0 0 8 * * 1-5|11h|min=10|Europe/Berlin`, "
         "`;` between windows). Overlapping windows take the largest `min` and the largest `standby`; the group's "
         "max caps `min`. See docs/scheduled-capacity.md."),
    Spec("VIRTUAL_NODE_BACKFILL", "virtual_node_backfill", "true", _bool,
         "Move long-running pods that overflowed onto a virtual node (ACI) back onto scale-set VMs once VM room "
         "is Ready, when that pays (see docs/virtual-nodes.md); the scale sets grow for them meanwhile. Job pods "
         "and `BATCH_POD_SELECTOR` pods are never moved. `false`: pods stay where the scheduler put them."),
    Spec("VIRTUAL_NODE_BACKFILL_NAMESPACES", "virtual_node_backfill_namespaces", "", _namespaces,
         "Only pods of these namespaces (comma-separated) are moved off virtual nodes; empty: every namespace."),
    Spec("VIRTUAL_NODE_BACKFILL_SELECTOR", "virtual_node_backfill_selector", "", _label_selector,
         "Only pods this label selector (as in `kubectl -l`) selects are moved off virtual nodes; empty: every pod."),
    Spec("VIRTUAL_NODE_MAX_BACKFILL_PER_POLL", "virtual_node_max_backfill_per_poll", "10", _int_at_least(0),
         "Most pods one pending-pods poll moves off virtual nodes (each within its PodDisruptionBudget)."),
    Spec("VIRTUAL_NODE_EXPECTED_RUNTIME", "virtual_node_expected_runtime", "1h", _positive_duration,
         "How much longer a pod without `activeDeadlineSeconds` is expected to run: what moving it off ACI saves "
         "is reckoned over this."),
    Spec("VIRTUAL_NODE_MIN_REMAINING", "virtual_node_min_remaining", "5m", _nonnegative_duration,
         "A pod expected to finish within this long stays on ACI: a VM for it would boot for minutes."),
    Spec("VIRTUAL_NODE_GATING", "virtual_node_gating", "true", _bool,
         "Taint virtual nodes `vmss-autoscaler.io/virtual-node-closed=aci-full:NoSchedule` while ACI's quota or "
         "creation rate is nearly used, so overflow stays pending and the scale sets grow instead of ACI "
         "refusing pods; the taint is lifted when room returns."),
    Spec("VIRTUAL_NODE_ADMISSION", "virtual_node_admission", "polled", _choice("open", "polled"),
         "`polled`: virtual nodes are closed (the gate's taint) except for the poll interval after a pending poll "
         "found pods waiting for them that fit ACI's room, so a burst larger than the room waits and grows the "
         "scale sets instead of being bound past ACI's limits and refused (a wait of up to one "
         "`PENDING_POLL_SCHEDULE` interval). `open`: they stay open until ACI is nearly full, so overflow reaches "
         "ACI at once, for workloads whose pods arrive a few at a time."),
    Spec("VIRTUAL_NODE_CLOSE_AT", "virtual_node_close_at", "0.9", _fraction,
         "Fraction of an ACI limit (`ACI_QUOTA_CORES`, `ACI_MAX_CONTAINER_GROUPS`, `ACI_CREATES_PER_5MIN`, "
         "`ACI_CREATES_PER_HOUR`) in use at "
         "which virtual nodes are closed."),
    Spec("VIRTUAL_NODE_REOPEN_AT", "virtual_node_reopen_at", "0.75", _fraction,
         "Closed virtual nodes open again when every ACI limit is used below this fraction."),
    Spec("ACI_QUOTA_CORES", "aci_quota_cores", "100", _int_at_least(0),
         "The subscription's Azure Container Instances standard-core quota in the cluster's region (default 100)."),
    Spec("ACI_MAX_CONTAINER_GROUPS", "aci_max_container_groups", "100", _int_at_least(0),
         "ACI container groups (one per pod on a virtual node) that may exist at once in the subscription and region "
         "(default 100, Azure's standard container-group quota)."),
    Spec("ACI_CREATES_PER_5MIN", "aci_creates_per_5min", "100", _int_at_least(0),
         "ACI container groups the subscription may create per 5 minutes in the region (default 100)."),
    Spec("ACI_CREATES_PER_HOUR", "aci_creates_per_hour", "300", _int_at_least(0),
         "ACI container groups the subscription may create per hour in the region (default 300)."),
    Spec("ACI_PRICE_VCPU_SECOND", "aci_price_vcpu_second", "0.0000135", _price,
         "ACI Linux price per vCPU-second, USD (no verified public figure: set your region's)."),
    Spec("ACI_PRICE_GB_SECOND", "aci_price_gb_second", "0.0000015", _price,
         "ACI Linux price per GB-second of memory, USD."),
    Spec("QUOTA_AWARE", "quota_aware", "true", _bool,
         "Read the subscription's Compute quotas (the usages API, per region) and cap every scale-up at the vCPUs "
         "its family and regional quotas (spot: the low-priority quota) have left; the rest is planned on the next "
         "group in the same poll. `false`: ask, and learn from Azure's refusals. See docs/spot-and-quota.md."),
    Spec("QUOTA_CACHE", "quota_cache", "3m", _positive_duration,
         "How long one read of a region's Compute usages is used before it is read again (it is read again at "
         "once after a quota refusal)."),
    Spec("UNAVAILABLE_OFFERING_TTL", "unavailable_offering_ttl", "", _offering_lifetimes,
         "Override how long a refusal marks its VM size (or family, or all spot) unavailable, per failure kind: "
         "`spot-capacity=1h,sku-not-available=23h,zonal-allocation=1h,allocation=1h,overconstrained=1h,"
         "family-quota=10m,family-quota-zero=1h,low-priority-quota=1h,spot-preempted=3m` are the defaults "
         "(Karpenter's; `spot-preempted`: a Preempt notice's mark on its spot size)."),
    Spec("SPOT_FIRST", "spot_first", "true", _bool,
         "Plan pods that tolerate spot (`kubernetes.azure.com/scalesetpriority=spot:NoSchedule`) onto spot "
         "groups first, whatever `EXPANDER` says among the rest; `false`: spot groups are one option among others."),
    Spec("ON_DEMAND_POD_SELECTOR", "on_demand_pod_selector", "", _label_selector,
         "Pods this label selector picks are never planned onto spot groups, even when they tolerate spot."),
    Spec("SPOT_MAX_RUNTIME", "spot_max_runtime", "auto", _spot_max_runtime,
         "Pending pods expected to run longer than this (annotation `autoscaler.azure.com/expected-runtime`) are "
         "planned on on-demand groups, not spot, however they tolerate spot: `auto` is the break-even run time "
         "2(1-f)/(rate x SPOT_LOST_WORK_COST) for the spot price fraction f and `SPOT_EVICTION_RATE`; a duration "
         "fixes it; `off` plans every pod spot-first. The pod annotation `autoscaler.azure.com/spot` (`avoid`, "
         "`prefer`) overrides it. See docs/spot-and-quota.md."),
    Spec("SPOT_EVICTION_RATE", "spot_eviction_rate", "5%", parse_rate,
         "The spot eviction rate per instance-hour the `auto` SPOT_MAX_RUNTIME assumes (Azure shows each size's band, "
         "e.g. 0-5 %, in the portal and through the Spot Placement Score)."),
    Spec("SPOT_LOST_WORK_COST", "spot_lost_work_cost", "4", _positive_number,
         "What an hour of work lost to an eviction costs, in hours of the on-demand price: the compute redone and the "
         "delay to the result. Higher keeps shorter pods off spot."),
    Spec("SPOT_NOTICE_BATCH_PODS", "spot_notice_batch_pods", "keep", _choice("keep", "evict"),
         "On a spot node's eviction notice, batch pods (Jobs, `BATCH_POD_SELECTOR`) are `keep`: left to run, since "
         "evicting one 30 s early saves none of its work and it may finish in time (its replacement is planned at "
         "once all the same); `evict`: evicted with the other pods."),
    Spec("SPOT_EVICTION_SIGNAL", "spot_eviction_signal", "", _eviction_signal,
         "A taint (`taint:<key>`) or node condition (`condition:<type>`) an in-cluster agent puts on a node about "
         "to be evicted; such a node is handled as on Azure's Preempt notice (cordoned, pods evicted, replacements "
         "planned). Empty: none."),
    Spec("USAGE_WINDOW", "usage_window", "10m", _usage_window,
         "Measured usage is averaged over this long, back from now; at least `1m`."),
    Spec("LOG_ANALYTICS_WORKSPACE_ID", "log_analytics_workspace_id", "", _workspace_id,
         "Workspace ID (a GUID) of the Log Analytics workspace Container Insights writes to; required with "
         "`USAGE_SOURCE=log-analytics`."),
    Spec("LOG_ANALYTICS_ENDPOINT", "log_analytics_endpoint", "https://api.loganalytics.io", _https_url,
         "Log Analytics query endpoint (a sovereign cloud's, or the sandbox's); tokens are asked for this audience."),
    Spec("MAX_NODES_PER_SCALE_UP", "max_nodes_per_scale_up", "1000", _int_at_least(1),
         "Most nodes one scale-up adds to one group."),
    Spec("EXPANDER", "expander", "least-waste", parse_expander_chain,
         "How a scale-up picks among groups that could take the pending pods: `least-waste`, `most-pods`, "
         "`least-nodes`, `priority`, `price` or `random`, chained like cluster-autoscaler's, e.g. "
         "`priority,least-waste`. `price` takes the cheapest nodes per unit of work placed (`VM_PRICES`, "
         "`RETAIL_PRICES_ENDPOINT`); groups without a price rank last."),
    Spec("VM_PRICES", "vm_prices", "", _vm_prices,
         "Prices for the `price` expander as JSON, VM size to USD per node-hour, e.g. "
         "`{\"Standard_D4s_v5\": 0.192}`; sizes listed here are not looked up in the Retail Prices API."),
    Spec("RETAIL_PRICES_ENDPOINT", "retail_prices_endpoint", "https://prices.azure.com", _https_url,
         "Where the `price` expander reads VM prices (the public, unauthenticated Azure Retail Prices API; the "
         "sandbox serves its own); empty: only `VM_PRICES`. Called only when `EXPANDER` names `price`, once a day "
         "per size and region."),
    Spec("PRIORITY_EXPANDER_CONFIG", "priority_expander_config", "", _priority_config,
         "Rules of the `priority` expander as JSON, priority to regular expressions of scale set names, e.g. "
         "`{\"50\": [\"spot-.*\"], \"10\": [\".*\"]}`; the ConfigMap "
         "`kube-system/cluster-autoscaler-priority-expander` (key `priorities`, YAML) takes precedence when present."),
    Spec("MAX_NODES_TOTAL", "max_nodes_total", "0", _int_at_least(0),
         "Most nodes in the cluster, registered and upcoming; `0` for no limit."),
    Spec("CORES_TOTAL", "cores_total", "0:320000", _min_max,
         "`min:max` cores in the cluster; scale-up stops at max, scale-down at min (max `0`: no limit)."),
    Spec("MEMORY_TOTAL", "memory_total", "0:6400000", _gib_min_max,
         "`min:max` GiB of memory in the cluster, like `CORES_TOTAL`."),
    Spec("BALANCE_SIMILAR_NODE_GROUPS", "balance_similar_node_groups", "false", _bool,
         "Split a scale-up over similar groups (e.g. one scale set per zone), smallest first; zone, host and "
         "pool labels are ignored in the comparison."),
    Spec("BALANCING_IGNORE_LABELS", "balancing_ignore_labels", "", _labels,
         "More node labels to ignore when comparing groups for `BALANCE_SIMILAR_NODE_GROUPS`, comma-separated "
         "(cluster-autoscaler's `--balancing-ignore-label`)."),
    Spec("EXPENDABLE_PODS_PRIORITY_CUTOFF", "expendable_pods_priority_cutoff", "-10", _integer,
         "Pods with a priority below this never trigger a scale-up."),
    Spec("NEW_POD_SCALE_UP_DELAY", "new_pod_scale_up_delay", "0s", _nonnegative_duration,
         "Pods younger than this do not trigger a scale-up yet; the pod annotation "
         "`cluster-autoscaler.kubernetes.io/pod-scale-up-delay` may lengthen it."),
    Spec("MAX_NODE_PROVISION_TIME", "max_node_provision_time", "15m", _positive_duration,
         "A scale-up whose nodes are not Ready within this long has failed; its group backs off."),
    Spec("MAX_POD_EVICTION_TIME", "max_pod_eviction_time", "2m", _positive_duration,
         "How long a drain keeps evicting before it gives up and uncordons the node."),
    Spec("ACTION_TTL", "action_ttl", "5m", _at_most(_positive_duration, QUEUE_MAX_DELAY, _QUEUE_BOUND),
         "A scale action not started within this long after it was decided is dropped as stale."),
    Spec("ACTION_LEASE", "action_lease", "5m", _at_most(_positive_duration, QUEUE_MAX_DELAY, _QUEUE_BOUND),
         "A started step not finished within this long may be taken over by another delivery."),
    Spec("STEP_RETRY_DELAY", "step_retry_delay", "10s", _at_most(_nonnegative_duration, QUEUE_MAX_DELAY, _QUEUE_BOUND),
         "Visibility delay of a step that re-enqueues itself to wait (evictions, ARM operations)."),
    Spec("ARM_OPERATION_WAIT", "arm_operation_wait", "5s",
         _at_most(_nonnegative_duration, FUNCTION_TIMEOUT - timedelta(minutes=1), "an invocation ends at host.json's "
                  "functionTimeout of 5m, and the step must finish after its wait"),
         "How long one invocation waits on an ARM long-running operation before re-enqueueing a check."),
    Spec("DRY_RUN", "dry_run", "false", _bool,
         "Log and record every action without changing the cluster or Azure."),
    Spec("LOG_LEVEL", "log_level", "INFO", _choice("debug", "info", "warning", "error"), "Log level of our loggers."),
)


@dataclass(frozen=True, slots=True)
class Settings:
    cluster_name: str
    subscription_id: str
    node_resource_groups: tuple[str, ...]
    kube_auth: str  # kubeconfig | aks | key-vault
    kubeconfig_path: str
    aks_cluster_id: str
    aks_node_pools: Mapping[str, tuple[int, int]]  # pool -> (min, max)
    manage_aks_pools: bool
    aks_server_app_id: str
    kubeconfig_secret_uri: str
    kubeconfig_allow_exec: bool
    kubeconfig_allow_insecure_tls: bool
    kubeconfig_allow_host_files: bool
    kubeconfig_allow_http: bool
    sandbox_identity_endpoint: str
    status_configmap: tuple[str, str] | None  # (namespace, name); None writes no status
    node_mapping: str  # engine.node_mapping.METHODS
    arm_endpoint: str
    arm_ca_bundle: str
    azure_credential: str
    azure_client_id: str
    queue_name: str
    state_table: str
    pending_poll_schedule: str
    utilization_poll_schedule: str
    state_sweep_schedule: str
    state_retention: timedelta
    scale_down_enabled: bool
    scale_down_mode: str  # delete | deallocate
    scale_down_deallocated_max: int  # per group, with deallocate
    standby_instances: str  # a whole number or auto (engine.standby.parse_standby)
    standby_max: int
    standby_refill_waits_for_idle: bool  # services.standby_refill.quiet_until
    standby_pools: bool
    standby_hibernate: bool  # where the group allows it (engine.hibernation)
    provisioning_requests: bool  # services.provisioning
    provisioning_request_booking: timedelta
    gang_scale_up: str  # all-or-nothing | off (engine.gangs)
    gpu_readiness: bool  # engine.gpu_readiness
    disruption_budgets: tuple[NodeBudget, ...]  # engine.disruption_budgets
    consolidation: str  # balanced | always | off (engine.consolidation)
    consolidation_threshold: float
    drift_replacement: bool  # engine.drift
    node_max_age: timedelta  # 0: never
    replacement_timeout: timedelta  # engine.replacement
    scale_down_unneeded_time: timedelta
    scale_down_idle_mode: str  # engine.idle.IDLE_MODES: auto | fixed | break-even
    scale_down_unready_time: timedelta
    scale_down_utilization_threshold: float
    scale_down_gpu_utilization_threshold: float
    scale_down_ignore_daemonsets_utilization: bool
    scale_down_ignore_mirror_pods_utilization: bool
    skip_nodes_with_system_pods: bool
    blocking_system_pod_disruption_timeout: timedelta
    skip_nodes_with_local_storage: bool
    skip_nodes_with_custom_controller_pods: bool
    batch_protection: bool
    batch_pod_selector: LabelSelector | None
    batch_drain_timeout: timedelta
    batch_check_interval: timedelta
    batch_scale_in_protection: bool
    max_graceful_termination_sec: int
    scale_down_delay_after_add: timedelta
    scale_down_delay_after_delete: timedelta
    scale_down_delay_after_failure: timedelta
    max_scale_down_parallelism: int
    scale_down_round_interval: timedelta
    scale_down_candidates_pool_ratio: float  # share of the cluster's nodes
    scale_down_candidates_pool_min_count: int
    usage_source: str  # none | log-analytics | vmss-metric
    scale_down_measured_cpu_threshold: float  # fraction of a node's CPU capacity
    virtual_node_backfill: bool
    virtual_node_backfill_namespaces: tuple[str, ...]
    virtual_node_backfill_selector: LabelSelector | None
    virtual_node_max_backfill_per_poll: int
    virtual_node_expected_runtime: timedelta
    virtual_node_min_remaining: timedelta
    virtual_node_gating: bool
    virtual_node_admission: str
    virtual_node_close_at: float
    virtual_node_reopen_at: float
    aci_quota_cores: int
    aci_max_container_groups: int
    aci_creates_per_5min: int
    aci_creates_per_hour: int
    aci_price_vcpu_second: float
    aci_price_gb_second: float
    usage_window: timedelta
    quota_aware: bool
    quota_cache: timedelta
    unavailable_offering_ttl: Lifetimes
    spot_first: bool
    on_demand_pod_selector: LabelSelector | None
    spot_max_runtime: str  # auto | off | a duration (engine.spot_work)
    spot_eviction_rate: float
    spot_lost_work_cost: float
    spot_eviction_signal: EvictionSignal | None
    spot_notice_batch_pods: str  # keep | evict
    load_driven_groups: tuple[str, ...]
    load_scale_up_cpu: float  # fraction
    load_scale_up_cooldown: timedelta
    load_backlog_queue: str
    load_backlog_per_node: int
    scheduled_capacity: tuple[CapacityWindow, ...]
    log_analytics_workspace_id: str
    log_analytics_endpoint: str
    max_nodes_per_scale_up: int
    expander: tuple[str, ...]
    priority_expander_config: Mapping[int, tuple[str, ...]]  # priority -> regular expressions
    vm_prices: Mapping[str, float]  # lower-cased VM size -> USD per hour
    retail_prices_endpoint: str
    max_nodes_total: int
    cores_total: tuple[int, int]
    memory_total: tuple[int, int]  # bytes
    balance_similar_node_groups: bool
    balancing_ignore_labels: tuple[str, ...]
    expendable_pods_priority_cutoff: int
    new_pod_scale_up_delay: timedelta
    max_node_provision_time: timedelta
    max_pod_eviction_time: timedelta
    action_ttl: timedelta
    action_lease: timedelta
    step_retry_delay: timedelta
    arm_operation_wait: timedelta
    dry_run: bool
    log_level: str

    @property
    def cluster_limits(self) -> ClusterLimits:
        """MAX_NODES_TOTAL, CORES_TOTAL and MEMORY_TOTAL, as the engine takes them."""
        return ClusterLimits(self.max_nodes_total, self.cores_total, self.memory_total)


# Settings that name a file: with `file_exists`, one that names no file is reported with the rest.
FILE_SETTINGS = (("KUBECONFIG_PATH", "kubeconfig_path"), ("ARM_CA_BUNDLE", "arm_ca_bundle"))


def _given(env: Mapping[str, str], name: str) -> bool:
    """Whether the setting has a value of its own in `env` (not missing, not blank)."""
    raw = env.get(name)
    return raw is not None and raw.strip() != ""


def load_settings(env: Mapping[str, str], *, file_exists: Callable[[str], bool] | None = None,
                  extra_problems: Callable[[Mapping[str, str]], list[str]] | None = None) -> Settings:
    """Parse every setting; raise SettingsError naming each missing or malformed one.

    `file_exists` checks the file settings (KUBECONFIG_PATH, ARM_CA_BUNDLE); `extra_problems` adds
    problems found by code outside this module (the storage connection's adapter), so every problem
    is reported in one error.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for spec in SPECS:
        raw = env.get(spec.name)
        if raw is None or (raw.strip() == "" and not spec.blank_is_a_value):
            if spec.default is None:
                problems.append(f"{spec.name}: missing (required): {spec.help}")
                continue
            raw = spec.default
        try:
            values[spec.attr] = spec.parse(raw)
        except ValueError as exc:
            problems.append(f"{spec.name}: {exc}")
    if not _given(env, "SCALE_DOWN_IDLE_MODE") and any(
            _given(env, name) for name in ("SCALE_DOWN_UNNEEDED_TIME", "SCALE_DOWN_DELAY_AFTER_ADD")):
        values["scale_down_idle_mode"] = "fixed"  # an operator who wrote an idle time means it (the default is auto)
    if values.get("azure_credential") == "managed-identity" and not values.get("azure_client_id"):
        problems.append("AZURE_CLIENT_ID: required when AZURE_CREDENTIAL=managed-identity")
    required_by_auth = {"kubeconfig": ("KUBECONFIG_PATH", "kubeconfig_path"),
                        "aks": ("AKS_CLUSTER_ID", "aks_cluster_id"),
                        "key-vault": ("KUBECONFIG_SECRET_URI", "kubeconfig_secret_uri")}
    if values.get("kube_auth") in required_by_auth:
        name, attr = required_by_auth[values["kube_auth"]]
        if values.get(attr) == "":
            problems.append(f"{name}: missing (required when KUBE_AUTH={values['kube_auth']})")
    if values.get("manage_aks_pools") and values.get("aks_cluster_id") == "":
        problems.append("AKS_CLUSTER_ID: missing (required when MANAGE_AKS_POOLS=true: the cluster whose pools to manage)")
    if values.get("aks_node_pools") and values.get("manage_aks_pools") is False:
        problems.append("AKS_NODE_POOLS: names pools, but MANAGE_AKS_POOLS is not true: set it to manage them")
    if values.get("node_resource_groups") == () and values.get("manage_aks_pools") is False:
        problems.append("NODE_RESOURCE_GROUPS: missing (required unless MANAGE_AKS_POOLS=true): comma-separated "
                        "resource groups searched for tagged scale sets")
    # == "": a malformed workspace id is already reported above.
    if values.get("usage_source") == "log-analytics" and values.get("log_analytics_workspace_id") == "":
        problems.append("LOG_ANALYTICS_WORKSPACE_ID: required when USAGE_SOURCE=log-analytics")
    if ("virtual_node_close_at" in values and "virtual_node_reopen_at" in values
            and values["virtual_node_reopen_at"] >= values["virtual_node_close_at"]):
        problems.append(f"VIRTUAL_NODE_REOPEN_AT: must be below VIRTUAL_NODE_CLOSE_AT "
                        f"({values['virtual_node_reopen_at']} >= {values['virtual_node_close_at']})")
    if file_exists is not None:
        for name, attr in FILE_SETTINGS:
            path = values.get(attr)
            if path and not file_exists(path):
                problems.append(f"{name}: no such file: {path!r}")
    if extra_problems is not None:
        problems.extend(extra_problems(env))
    if problems:
        raise SettingsError(problems)
    return Settings(**values)


# App settings the platform or the host reads, never ours: never reported as misspelt.
_PLATFORM_PREFIXES = ("FUNCTIONS_", "AZURE_FUNCTIONS_", "WEBSITE", "APPLICATIONINSIGHTS_", "APPSETTING_", "OTEL_",
                      "PYTHON", "SCM_", "AzureWebJobs", "AzureFunctionsJobHost", "MSI_", "IDENTITY_")


def misspelt_settings(env: Mapping[str, str]) -> list[str]:
    """Warnings for app settings that look like one of ours but are not (e.g. SCALE_DOWN_UNEEDED_TIME).

    A misspelt setting is silently ignored otherwise, and its default applies: the operator believes
    they changed a behaviour they did not. Only close matches are named, so unrelated settings pass.
    Names are compared in upper case: settings are read case-sensitively, so `max_nodes_total` or `Dry_Run`
    is ignored as surely as a typo is.
    """
    known = [spec.name for spec in SPECS]
    platform = tuple(prefix.upper() for prefix in _PLATFORM_PREFIXES)
    warnings = []
    for name in sorted(env):
        upper = name.upper()
        if name in known or upper.startswith(platform) or not re.fullmatch(r"[A-Z][A-Z0-9_]{3,}", upper):
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
        if close:
            warnings.append(f"{name}: not a setting of ours; did you mean {close[0]}? (it is ignored)")
    return warnings
