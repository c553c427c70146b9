"""How the autoscaler reaches the cluster's API server: a configured `kubernetes.client.ApiClient` per KUBE_AUTH.

Adapter module. `new_api_client` does I/O for `aks` and `key-vault` (ARM, Key Vault,
the credential's token endpoint); `kubeconfig` only reads a file.

- `kubeconfig`: the file KUBECONFIG_PATH, whatever user it holds.
- `aks`: an Entra ID-enabled AKS cluster. ARM's `listClusterUserCredential` (allowed by
  the "Azure Kubernetes Service Cluster User Role") gives the API server's address and
  CA; its user entry, which runs kubelogin, is dropped. Requests carry a bearer token of
  the app's own credential for `<AKS_SERVER_APP_ID>/.default`, renewed before it expires
  by the client configuration's `refresh_api_key_hook`, which the kubernetes client calls
  before every request (`Configuration.auth_settings` -> `get_api_key_with_prefix`), so
  one ApiClient stays usable for as long as the function instance lives.
- `key-vault`: a kubeconfig kept as a Key Vault secret (KUBECONFIG_SECRET_URI), read once
  with the app's credential (role "Key Vault Secrets User"), and refused if it is malformed or
  asks the host for more than a server, CA data and credentials inline (`kubeconfig_trust`)
  unless a KUBECONFIG_ALLOW_* setting allows it.

ARM_CA_BUNDLE applies to the ARM and Key Vault calls, as to every Azure call, so the
sandbox's doubles can stand in for both.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException

from shared import yaml_text
from shared.adapters.kubeconfig_trust import KubeconfigTrust, check_kubeconfig
from shared.ports import ClusterError
from shared.settings import Settings, parse_aks_cluster_id, parse_secret_uri

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

__all__ = ["REFRESH_MARGIN", "BearerTokenRefresher", "new_api_client", "parse_aks_cluster_id", "parse_secret_uri"]

log = logging.getLogger(__name__)

# Renew the cluster token when less than this is left (Entra tokens live 60-90 minutes; a
# managed identity's up to 24 hours): the same margin azure-core's policies keep.
REFRESH_MARGIN: Final = 300.0
_ENTRA_USER: Final = "entra-id"  # the user entry that replaces kubelogin's: no credentials, the hook adds them


def new_api_client(
    settings: Settings,
    configuration: Configuration,
    *,
    credential: TokenCredential | None = None,
    refresh_margin: float = REFRESH_MARGIN,
) -> ApiClient:
    """An ApiClient for the cluster, per `settings.kube_auth`, on `configuration` (retries and such already set).

    `credential` is the app's Azure credential (built from the settings when None and needed).
    Every failure is a ClusterError saying what could not be read.
    """
    if settings.kube_auth == "kubeconfig":
        try:
            return kube_config.new_client_from_config(
                config_file=settings.kubeconfig_path, persist_config=False, client_configuration=configuration
            )
        except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # The client fails on a file that is YAML but no kubeconfig with a TypeError or KeyError.
            raise ClusterError(f"load kubeconfig {settings.kubeconfig_path!r}: {type(exc).__name__}: {exc}") from exc
    if credential is None:
        from shared.adapters.credentials import make_azure_credential

        credential = make_azure_credential(settings)
    if settings.kube_auth == "aks":
        return _aks_client(settings, configuration, credential, refresh_margin)
    if settings.kube_auth == "key-vault":
        text = read_kubeconfig_secret(settings, credential)
        source = f"Key Vault secret {settings.kubeconfig_secret_uri}"
        config = _kubeconfig_dict(text, source)
        check_kubeconfig(config, source, trust=KubeconfigTrust.from_settings(settings))
        return _client_from_dict(config, source, configuration)
    raise ValueError(f"KUBE_AUTH: unknown mode {settings.kube_auth!r} (use kubeconfig, aks or key-vault)")


# --- aks -------------------------------------------------------------------------------


class BearerTokenRefresher:
    """A `Configuration.refresh_api_key_hook` keeping a bearer token for one scope fresh.

    Asks the credential again once less than `margin` seconds of the token are left (or
    once its `refresh_on` has passed). A failed renewal is logged and the old token kept:
    the request then fails with 401 as a KubernetesApiError, and the next one tries again.
    Thread-safe: the kubernetes client may call it from several threads at once.
    """

    def __init__(
        self,
        credential: TokenCredential,
        scope: str,
        *,
        margin: float = REFRESH_MARGIN,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._credential = credential
        self.scope = scope
        self._margin = margin
        self._wall = wall
        self._lock = threading.Lock()
        self._token = ""
        self._expires_on = 0.0
        self._refresh_on: float | None = None
        self.renewals = 0  # tokens taken from the credential, for tests and logs

    def token(self) -> str:
        """The current token, renewed first if due; raises what the credential raises."""
        with self._lock:
            if self._due():
                self._renew()
            return self._token

    def __call__(self, configuration: Configuration) -> None:
        with self._lock:
            if self._due():
                try:
                    self._renew()
                except Exception as exc:  # noqa: BLE001 - any credential failure: keep the old token, say why
                    log.warning("could not renew the cluster token for %s: %s: %s", self.scope, type(exc).__name__, exc)
            configuration.api_key["BearerToken"] = self._token
            configuration.api_key_prefix["BearerToken"] = "Bearer"

    def _due(self) -> bool:
        now = self._wall()
        if not self._token or self._expires_on - now < self._margin:
            return True
        return self._refresh_on is not None and now >= self._refresh_on

    def _renew(self) -> None:
        get_info = getattr(self._credential, "get_token_info", None)
        if get_info is not None:
            info = get_info(self.scope)
            token, expires_on, refresh_on = info.token, info.expires_on, info.refresh_on
        else:
            access = self._credential.get_token(self.scope)
            token, expires_on, refresh_on = access.token, access.expires_on, None
        self._token, self._expires_on, self._refresh_on = token, float(expires_on), refresh_on
        self.renewals += 1
        log.debug("cluster token for %s renewed; it expires at %s", self.scope, expires_on)


def read_aks_user_kubeconfig(settings: Settings, credential: TokenCredential) -> str:
    """The user kubeconfig of AKS_CLUSTER_ID, through ARM's listClusterUserCredential."""
    from azure.core.exceptions import AzureError
    from azure.mgmt.containerservice import ContainerServiceClient

    from shared.adapters.compute import arm_client_options

    what = f"listClusterUserCredential of AKS cluster {settings.aks_cluster_id}"
    subscription, resource_group, name = parse_aks_cluster_id(settings.aks_cluster_id)
    client = ContainerServiceClient(
        credential, subscription, **arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=60)
    )
    try:
        results = client.managed_clusters.list_cluster_user_credentials(resource_group, name)
    except AzureError as exc:
        raise ClusterError(f"{what}: {_azure_message(exc)}") from exc
    finally:
        client.close()
    kubeconfigs = list(results.kubeconfigs or ())
    chosen = next((k for k in kubeconfigs if k.name == "clusterUser"), kubeconfigs[0] if kubeconfigs else None)
    if chosen is None or not chosen.value:
        raise ClusterError(f"{what}: the answer holds no kubeconfig")
    try:
        return chosen.value.decode("utf-8") if isinstance(chosen.value, bytes) else str(chosen.value)
    except UnicodeDecodeError as exc:
        raise ClusterError(f"{what}: the kubeconfig is not UTF-8 text") from exc


def _aks_client(settings: Settings, configuration: Configuration, credential: TokenCredential, margin: float) -> ApiClient:
    source = f"the user kubeconfig of AKS cluster {settings.aks_cluster_id}"
    config = _without_user_credentials(_kubeconfig_dict(read_aks_user_kubeconfig(settings, credential), source))
    api_client = _client_from_dict(config, source, configuration)
    refresher = BearerTokenRefresher(credential, f"{settings.aks_server_app_id}/.default", margin=margin)
    try:
        refresher.token()
    except Exception as exc:  # noqa: BLE001 - whatever the credential raises, name the scope
        api_client.close()
        raise ClusterError(f"token for the AKS server application ({refresher.scope}): {type(exc).__name__}: {exc}") from exc
    refresher(configuration)
    configuration.refresh_api_key_hook = refresher
    log.info("cluster access: AKS cluster %s at %s with Entra ID tokens for %s",
             settings.aks_cluster_id, configuration.host, refresher.scope)
    return api_client


def _without_user_credentials(config: dict[str, Any]) -> dict[str, Any]:
    """The kubeconfig with the current context's user replaced by one holding nothing (no kubelogin to run)."""
    contexts = [c for c in config.get("contexts") or () if isinstance(c, dict)]
    current = config.get("current-context") or (contexts[0].get("name") if contexts else None)
    out = dict(config)
    out["contexts"] = [
        {**c, "context": {**(c.get("context") or {}), "user": _ENTRA_USER}} if c.get("name") == current else c
        for c in contexts
    ]
    out["users"] = [{"name": _ENTRA_USER, "user": {}}]
    out["current-context"] = current
    return out


# --- key-vault ---------------------------------------------------------------------------


def read_kubeconfig_secret(settings: Settings, credential: TokenCredential) -> str:
    """The text of the Key Vault secret KUBECONFIG_SECRET_URI."""
    from azure.core.exceptions import AzureError, ResourceNotFoundError
    from azure.keyvault.secrets import SecretClient

    vault_url, name, version = parse_secret_uri(settings.kubeconfig_secret_uri)
    what = f"Key Vault secret {name!r}" + (f" version {version}" if version else "") + f" in {vault_url}"
    client = SecretClient(
        vault_url,
        credential,
        # The SDK checks that the challenge's resource (vault.azure.net) is a parent domain of the
        # vault's host, which 127.0.0.1 can never be: off for the sandbox only, on everywhere else.
        verify_challenge_resource=settings.azure_credential != "sandbox",
        connection_verify=settings.arm_ca_bundle or True,
        connection_timeout=5,
        read_timeout=30,
        retry_total=2,
        retry_backoff_max=4,
    )
    try:
        secret = client.get_secret(name, version)
    except ResourceNotFoundError as exc:
        raise ClusterError(f"{what} not found (KUBECONFIG_SECRET_URI): {_azure_message(exc)}") from exc
    except AzureError as exc:
        raise ClusterError(f"read {what}: {_azure_message(exc)}") from exc
    finally:
        client.close()
    if not secret.value:
        raise ClusterError(f"{what} is empty, not a kubeconfig")
    return secret.value


# --- shared ----------------------------------------------------------------------------


def _kubeconfig_dict(text: str, source: str) -> dict[str, Any]:
    try:
        config = yaml_text.safe_load(text)
    except yaml_text.YAMLError as exc:
        raise ClusterError(f"{source} is not a kubeconfig: not YAML: {exc}") from exc
    if not isinstance(config, dict) or not config.get("clusters") or not config.get("contexts"):
        raise ClusterError(f"{source} is not a kubeconfig: it has no clusters and contexts")
    return config


def _client_from_dict(config: dict[str, Any], source: str, configuration: Configuration) -> ApiClient:
    try:
        return kube_config.new_client_from_config_dict(config, persist_config=False, client_configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # The shape is checked before (key-vault); AttributeError is the client's answer to one it did not expect.
        raise ClusterError(f"load kubeconfig from {source}: {type(exc).__name__}: {exc}") from exc


def _client_from_text(text: str, source: str, configuration: Configuration) -> ApiClient:
    return _client_from_dict(_kubeconfig_dict(text, source), source, configuration)


def _azure_message(exc: Exception) -> str:
    """An SDK error in one line: its status and ARM or Key Vault error code when it has them."""
    status = getattr(exc, "status_code", None)
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    text = str(getattr(exc, "message", None) or exc).splitlines()[0] if str(exc) else type(exc).__name__
    head = " ".join(part for part in (f"HTTP {status}" if status else "", code or "") if part)
    return f"{head}: {text}" if head else f"{type(exc).__name__}: {text}"
