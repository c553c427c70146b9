"""Reaching the cluster per KUBE_AUTH: an AKS cluster with Entra ID tokens renewed before they expire,
a kubeconfig from Key Vault, and the settings that choose between them. Against the sandbox's doubles,
which check every bearer token's audience and expiry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ClientAuthenticationError

from sandbox import kube_api
from sandbox.identity import AKS, AKS_AUDIENCE, Verdict
from sandbox.server import SandboxServer
from shared.adapters.credentials import SandboxCredential, make_azure_credential
from shared.adapters.kube_access import BearerTokenRefresher, parse_aks_cluster_id, parse_secret_uri
from shared.adapters.kubernetes import KubernetesApiError, KubernetesCluster
from shared.context import build_context
from shared.ports import ClusterError
from shared.settings import Settings, SettingsError, load_settings
from tests.fixtures.sandbox import SandboxFactory

AKS_SCOPE = f"{AKS_AUDIENCE}/.default"


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory("burst")


def settings_for(server: SandboxServer, **env: str) -> Settings:
    return load_settings({**server.env(), **env})


def aks(server: SandboxServer, **env: str) -> Settings:
    return settings_for(server, **{"KUBE_AUTH": "aks", "AKS_CLUSTER_ID": server.aks_cluster_id, **env})


def key_vault(server: SandboxServer, uri: str | None = None) -> Settings:
    return settings_for(server, KUBE_AUTH="key-vault", KUBECONFIG_SECRET_URI=uri or server.kubeconfig_secret_uri)


def seen_tokens(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Every bearer token the Kubernetes API double is shown, in order."""
    seen: list[str | None] = []
    check = kube_api._authenticated

    def spy(world: Any, token: str | None) -> bool:
        seen.append(token)
        return check(world, token)

    monkeypatch.setattr(kube_api, "_authenticated", spy)
    return seen


# --- aks -----------------------------------------------------------------------------------------------


def test_aks_reads_the_server_from_arm_and_renews_the_entra_token_before_each_request(
    sandbox_factory: SandboxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    lifetime = 2.0
    server = sandbox_factory("burst", token_lifetime=lifetime)
    seen = seen_tokens(monkeypatch)
    settings = aks(server)
    credential = make_azure_credential(settings)
    renewing = KubernetesCluster.from_settings(settings, credential=credential)
    stuck = KubernetesCluster.from_settings(settings, credential=credential)
    stuck.api_client.configuration.refresh_api_key_hook = None  # what a client without the hook would do

    assert server.world.report()["api_calls"]["breakdown"]["arm"]["POST listClusterUserCredential"] == 2
    assert renewing.api_client.configuration.host == server.url
    assert [n.name for n in renewing.list_nodes()] == [n.name for n in stuck.list_nodes()]
    before = list(seen)
    # Identity tokens for the AKS server application (not the kubeconfig's static token); valid when sent.
    assert before and server.world.token not in before
    assert {server.world.identity.check(t, AKS).verdict for t in before} <= {Verdict.OK, Verdict.EXPIRED}

    time.sleep(lifetime + 0.1)
    assert len(renewing.list_nodes()) == 1  # a new token, taken just before the request
    fresh = seen[-1]
    assert fresh not in before and server.world.identity.check(fresh, AKS).ok
    assert server.world.identity.check(before[-1], AKS).verdict is Verdict.EXPIRED
    with pytest.raises(KubernetesApiError) as caught:
        stuck.list_nodes()  # the double checks expiry: without the hook, the old token is refused
    assert caught.value.status == 401


def test_aks_tokens_are_asked_for_the_configured_server_application(server: SandboxServer) -> None:
    other_app = "00000000-0000-0000-0000-0000000000aa"
    cluster = KubernetesCluster.from_settings(aks(server, AKS_SERVER_APP_ID=other_app))
    with pytest.raises(KubernetesApiError) as caught:
        cluster.list_nodes()  # a token for another audience: the cluster refuses it
    assert caught.value.status == 401


class _NoAksTokens:
    """The sandbox credential, except that tokens for the AKS server application are refused."""

    def __init__(self, inner: SandboxCredential) -> None:
        self.inner = inner

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        if scopes == (AKS_SCOPE,):
            raise ClientAuthenticationError("AADSTS500011: resource principal not found")
        return self.inner.get_token(*scopes, **kwargs)


@pytest.mark.parametrize(
    ("change", "credential", "message"),
    [
        ({"AKS_CLUSTER_ID": "/subscriptions/{sub}/resourceGroups/rg-sandbox/providers/Microsoft.ContainerService/"
                            "managedClusters/elsewhere"}, None, "HTTP 404 ResourceNotFound"),
        ({}, "no-aks", "token for the AKS server application (6dae42f8-4368-4678-94ff-3960e28e3630/.default)"),
        ({}, "refused", "listClusterUserCredential of AKS cluster"),
    ],
    ids=["unknown cluster", "no token for the cluster", "no token for ARM"],
)
def test_aks_failures_are_cluster_errors_saying_what_failed(
    server: SandboxServer, change: dict[str, str], credential: str | None, message: str
) -> None:
    settings = aks(server, **{k: v.format(sub=server.subscription_id) for k, v in change.items()})
    sandbox = make_azure_credential(settings)
    assert isinstance(sandbox, SandboxCredential)
    chosen: Any = {
        None: sandbox,
        "no-aks": _NoAksTokens(sandbox),
        "refused": SandboxCredential(server.identity_endpoint, ca_bundle=str(server.ca_path), identity_header="guessed"),
    }[credential]
    with pytest.raises(ClusterError) as caught:
        KubernetesCluster.from_settings(settings, credential=chosen)
    assert message in str(caught.value) and caught.value.__cause__ is not None


class _FakeCredential:
    def __init__(self, lifetime: float, wall: Callable[[], float], *, refresh_on: float | None = None) -> None:
        self.lifetime, self.wall, self.refresh_on = lifetime, wall, refresh_on
        self.calls = 0
        self.fail = False

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        if self.fail:
            raise ClientAuthenticationError("the identity endpoint is down")
        self.calls += 1
        refresh_on = None if self.refresh_on is None else int(self.wall() + self.refresh_on)
        return AccessTokenInfo(f"t{self.calls}", int(self.wall() + self.lifetime), refresh_on=refresh_on)


class _Config:
    def __init__(self) -> None:
        self.api_key: dict[str, str] = {}
        self.api_key_prefix: dict[str, str] = {}


@pytest.mark.parametrize(
    ("lifetime", "margin", "refresh_on", "later", "renewed"),
    [
        (3600, 300, None, 3299, False),  # more than the margin left: keep it
        (3600, 300, None, 3301, True),  # less than the margin left: renew
        (3600, 300, 1800, 1801, True),  # the credential said when to renew
        (3600, 60, None, 3500, False),  # a smaller margin
        (30, 300, None, 0, True),  # a token shorter than the margin: ask the credential every time (it caches)
    ],
)
def test_the_hook_renews_the_token_when_little_of_it_is_left(
    lifetime: float, margin: float, refresh_on: float | None, later: float, renewed: bool
) -> None:
    now = [10_000.0]
    credential = _FakeCredential(lifetime, lambda: now[0], refresh_on=refresh_on)
    hook = BearerTokenRefresher(credential, AKS_SCOPE, margin=margin, wall=lambda: now[0])  # type: ignore[arg-type]
    config = _Config()
    hook(config)  # type: ignore[arg-type]
    assert (config.api_key, config.api_key_prefix) == ({"BearerToken": "t1"}, {"BearerToken": "Bearer"})
    now[0] += later
    hook(config)  # type: ignore[arg-type]
    assert config.api_key["BearerToken"] == ("t2" if renewed else "t1")


def test_a_failed_renewal_keeps_the_old_token_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    now = [10_000.0]
    credential = _FakeCredential(600, lambda: now[0])
    hook = BearerTokenRefresher(credential, AKS_SCOPE, wall=lambda: now[0])  # type: ignore[arg-type]
    config = _Config()
    hook(config)  # type: ignore[arg-type]
    credential.fail = True
    now[0] += 400
    with caplog.at_level(logging.WARNING, logger="shared.adapters.kube_access"):
        hook(config)  # type: ignore[arg-type]
    assert config.api_key["BearerToken"] == "t1"
    assert "could not renew the cluster token" in caplog.text and "the identity endpoint is down" in caplog.text
    credential.fail = False
    hook(config)  # type: ignore[arg-type]
    assert config.api_key["BearerToken"] == "t2"


# --- key-vault ---------------------------------------------------------------------------------------------


def test_key_vault_holds_the_kubeconfig_that_reaches_the_cluster(server: SandboxServer) -> None:
    cluster = KubernetesCluster.from_settings(key_vault(server))
    assert len(cluster.list_nodes()) == 1
    original = server.vault.secret("kubeconfig")
    assert original is not None
    server.vault.set_secret("kubeconfig", "not: a kubeconfig")  # the latest version is read...
    with pytest.raises(ClusterError, match="is not a kubeconfig"):
        KubernetesCluster.from_settings(key_vault(server))
    pinned = KubernetesCluster.from_settings(key_vault(server, f"{server.kubeconfig_secret_uri}/{original.version}"))
    assert len(pinned.list_nodes()) == 1  # ...unless the URI names one


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("missing", None, "Key Vault secret 'missing' in https://127.0.0.1:{port} not found (KUBECONFIG_SECRET_URI): "
                          "HTTP 404 SecretNotFound"),
        ("text", "just some text", "is not a kubeconfig: it has no clusters and contexts"),
        ("broken", "clusters: [", "is not a kubeconfig: not YAML"),
        ("nocontext", '{"clusters": [{"name": "c", "cluster": {"server": "https://x"}}], "contexts": '
                      '[{"name": "c", "context": {"cluster": "c", "user": "u"}}], "current-context": "other"}',
         "load kubeconfig from Key Vault secret"),
    ],
    ids=["missing secret", "not a kubeconfig", "not YAML", "no such context"],
)
def test_a_bad_secret_is_a_cluster_error_naming_it(server: SandboxServer, name: str, value: str | None, message: str) -> None:
    if value is not None:
        server.vault.set_secret(name, value)
    with pytest.raises(ClusterError) as caught:
        KubernetesCluster.from_settings(key_vault(server, f"{server.url}/secrets/{name}"))
    assert message.format(port=server.port) in str(caught.value)
    assert caught.value.__cause__ is not None or value is not None


def test_the_composition_root_passes_its_credential_to_the_cluster(server: SandboxServer) -> None:
    env = {**server.env(), "KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": server.kubeconfig_secret_uri,
           "AzureWebJobsStorage": "UseDevelopmentStorage=true", "USAGE_SOURCE": "none"}
    assert len(build_context(env).ports.cluster.list_nodes()) == 1


# --- parsing and settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("https://v.vault.azure.net/secrets/kc", ("https://v.vault.azure.net", "kc", None)),
        ("https://v.vault.azure.net/secrets/kc/0123abcd/", ("https://v.vault.azure.net", "kc", "0123abcd")),
        ("https://127.0.0.1:8443/secrets/kubeconfig", ("https://127.0.0.1:8443", "kubeconfig", None)),
    ],
)
def test_secret_uris_name_the_vault_the_secret_and_maybe_a_version(uri: str, expected: tuple[str, str, str | None]) -> None:
    assert parse_secret_uri(uri) == expected


def test_an_aks_id_names_subscription_group_and_cluster() -> None:
    assert parse_aks_cluster_id("/subscriptions/s/resourcegroups/rg/providers/microsoft.containerservice/managedClusters/c") == (
        "s", "rg", "c")


REQUIRED = {"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg"}
AKS_ID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c"


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({}, "KUBECONFIG_PATH: missing (required when KUBE_AUTH=kubeconfig)"),
        ({"KUBE_AUTH": "aks"}, "AKS_CLUSTER_ID: missing (required when KUBE_AUTH=aks)"),
        ({"KUBE_AUTH": "key-vault"}, "KUBECONFIG_SECRET_URI: missing (required when KUBE_AUTH=key-vault)"),
        ({"KUBE_AUTH": "token"}, "KUBE_AUTH: must be one of kubeconfig, aks, key-vault"),
        ({"KUBE_AUTH": "aks", "AKS_CLUSTER_ID": "/subscriptions/s/resourceGroups/rg"}, "AKS_CLUSTER_ID: must be an AKS resource id"),
        ({"KUBE_AUTH": "aks", "AKS_CLUSTER_ID": AKS_ID, "AKS_SERVER_APP_ID": "aks-server"},
         "AKS_SERVER_APP_ID: must be the application (client) id"),
        ({"KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": "http://v.vault.azure.net/secrets/kc"},
         "KUBECONFIG_SECRET_URI: must be an https:// URL"),
        ({"KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": "https://v.vault.azure.net/keys/kc"},
         "KUBECONFIG_SECRET_URI: must be a Key Vault secret URI"),
        ({"KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": "https://v.vault.azure.net/secrets/k_c"},
         "KUBECONFIG_SECRET_URI: must be a Key Vault secret URI"),
        ({"KUBE_AUTH": "aks", "AKS_CLUSTER_ID": AKS_ID, "AZURE_CREDENTIAL": "managed-identity"},
         "AZURE_CLIENT_ID: required when AZURE_CREDENTIAL=managed-identity"),
    ],
    ids=["kubeconfig without a path", "aks without a cluster", "key-vault without a secret", "unknown mode",
         "not an AKS id", "server app not a GUID", "http vault", "not a secret", "bad secret name", "managed identity"],
)
def test_cluster_access_settings_are_checked(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({**REQUIRED, **env})
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("env", "attr", "value"),
    [
        ({"KUBE_AUTH": "AKS", "AKS_CLUSTER_ID": AKS_ID + "/"}, "aks_cluster_id", AKS_ID),
        ({"KUBE_AUTH": "aks", "AKS_CLUSTER_ID": AKS_ID}, "aks_server_app_id", "6dae42f8-4368-4678-94ff-3960e28e3630"),
        ({"KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": "https://v.vault.azure.net/secrets/kc/0123abcd/"},
         "kubeconfig_secret_uri", "https://v.vault.azure.net/secrets/kc/0123abcd"),
    ],
)
def test_cluster_access_settings_parse(env: dict[str, str], attr: str, value: str) -> None:
    assert getattr(load_settings({**REQUIRED, **env}), attr) == value


# --- a kubeconfig from Key Vault may not run commands or skip TLS (issue 14, item 13) ---------------------------

def _risky(server: SandboxServer, *, user: dict[str, Any] | None = None, insecure: bool = False) -> str:
    """The sandbox's own kubeconfig with one risky entry added to it, as YAML text."""
    import yaml

    original = server.vault.secret("kubeconfig")
    assert original is not None
    config = yaml.safe_load(original.value)
    if user is not None:
        config["users"][0]["user"] = {**config["users"][0]["user"], **user}
    if insecure:
        config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    return yaml.safe_dump(config)


RISKY = [
    # Commands that would do nothing here if they ever ran: the test must never run anything itself.
    ("exec user", {"user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}}},
     "KUBECONFIG_ALLOW_EXEC", "'exec'"),
    ("auth-provider user", {"user": {"auth-provider": {"name": "oidc", "config": {"cmd-path": "/bin/true"}}}},
     "KUBECONFIG_ALLOW_EXEC", "'auth-provider'"),
    ("insecure TLS", {"insecure": True}, "KUBECONFIG_ALLOW_INSECURE_TLS", "insecure-skip-tls-verify"),
]


@pytest.mark.parametrize(("case", "change", "setting", "named"), RISKY, ids=[r[0] for r in RISKY])
def test_a_risky_kubeconfig_from_key_vault_is_refused_naming_the_setting_that_allows_it(
    server: SandboxServer, case: str, change: dict[str, Any], setting: str, named: str
) -> None:
    server.vault.set_secret("risky", _risky(server, **change))
    with pytest.raises(ClusterError) as caught:
        KubernetesCluster.from_settings(key_vault(server, f"{server.url}/secrets/risky"))
    assert "is refused" in str(caught.value) and named in str(caught.value) and setting in str(caught.value)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the point of this test
def test_insecure_tls_allowed_by_its_setting_reaches_the_cluster(server: SandboxServer) -> None:
    server.vault.set_secret("insecure", _risky(server, insecure=True))
    allowed = settings_for(server, KUBE_AUTH="key-vault", KUBECONFIG_SECRET_URI=f"{server.url}/secrets/insecure",
                           KUBECONFIG_ALLOW_INSECURE_TLS="true")
    assert len(KubernetesCluster.from_settings(allowed).list_nodes()) == 1


@pytest.mark.parametrize(("user", "cluster", "allow_exec", "allow_insecure", "refused"), [
    ({"token": "t"}, {"server": "https://x"}, False, False, False),
    ({"exec": {"command": "x"}}, {"server": "https://x"}, False, False, True),
    ({"exec": {"command": "x"}}, {"server": "https://x"}, True, False, False),
    ({"auth-provider": {"name": "oidc"}}, {"server": "https://x"}, False, True, True),
    ({"auth-provider": {"name": "oidc"}}, {"server": "https://x"}, True, False, False),
    ({"token": "t"}, {"server": "https://x", "insecure-skip-tls-verify": True}, True, False, True),
    ({"token": "t"}, {"server": "https://x", "insecure-skip-tls-verify": "true"}, False, False, True),
    ({"token": "t"}, {"server": "https://x", "insecure-skip-tls-verify": False}, False, False, False),
    ({"token": "t"}, {"server": "https://x", "insecure-skip-tls-verify": True}, False, True, False),
])
def test_which_kubeconfigs_are_risky(user: dict[str, Any], cluster: dict[str, Any], allow_exec: bool,
                                     allow_insecure: bool, refused: bool) -> None:
    from shared.adapters.kube_access import refuse_risky_kubeconfig

    config = {"users": [{"name": "u", "user": user}], "clusters": [{"name": "c", "cluster": cluster}]}
    if refused:
        with pytest.raises(ClusterError, match="is refused"):
            refuse_risky_kubeconfig(config, "the secret", allow_exec=allow_exec, allow_insecure_tls=allow_insecure)
    else:
        refuse_risky_kubeconfig(config, "the secret", allow_exec=allow_exec, allow_insecure_tls=allow_insecure)
