"""Reaching the cluster per KUBE_AUTH: an AKS cluster with Entra ID tokens renewed before they expire,
a kubeconfig from Key Vault, and the settings that choose between them. Against the sandbox's doubles,
which check every bearer token's audience and expiry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ClientAuthenticationError

from sandbox.api import kube_api
from sandbox.api.server import SandboxServer
from sandbox.world.identity import AKS, AKS_AUDIENCE, Verdict
from shared.adapters.credentials import SandboxCredential, make_azure_credential
from shared.adapters.kube_access import BearerTokenRefresher, parse_aks_cluster_id, parse_secret_uri
from shared.adapters.kubeconfig_trust import KubeconfigTrust, check_kubeconfig
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


# --- a kubeconfig from Key Vault is checked before the client reads it -------------------------------------------
#
# Whoever can write the secret is the attacker: each variant below is a document they could upload. Refused, the
# client never reads it and the API server never sees a request; allowed by its setting, it does what it says.

Change = Callable[[dict[str, Any], Path], None]


def _cluster(**fields: Any) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        config["clusters"][0]["cluster"].update(fields)
    return change


def _user(**fields: Any) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        config["users"][0]["user"].update(fields)
    return change


def _top(key: str, value: Any) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        config[key] = value
    return change


def _token_file(config: dict[str, Any], tmp: Path) -> None:
    """`tokenFile` naming a host file whose content would be sent as the bearer token."""
    secret = tmp / "host-secret"
    secret.write_text("a-host-secret")
    del config["users"][0]["user"]["token"]
    config["users"][0]["user"]["tokenFile"] = str(secret)


def _entry(section: str, index: int, value: Any) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        config[section][index] = value
    return change


def _inner(section: str, inner: str, value: Any) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        config[section][0][inner] = value
    return change


def _without(section: str, inner: str, key: str) -> Change:
    def change(config: dict[str, Any], tmp: Path) -> None:
        del config[section][0][inner][key]
    return change


INSECURE, EXEC, FILES, HTTP = ("KUBECONFIG_ALLOW_INSECURE_TLS", "KUBECONFIG_ALLOW_EXEC", "KUBECONFIG_ALLOW_HOST_FILES",
                               "KUBECONFIG_ALLOW_HTTP")
NOT_A_BOOLEAN = "insecure-skip-tls-verify: must be true or false (a YAML boolean)"

# (id, the attacker's change to the sandbox's own kubeconfig, what the error names, the setting that allows it).
ATTACKS: list[tuple[str, Change, str, str | None]] = [
    # Each of these the client reads as "skip verification" (`verify_ssl = not value`) except 0; none is a boolean.
    ("skip-tls 1", _cluster(**{"insecure-skip-tls-verify": 1}), NOT_A_BOOLEAN, None),
    ("skip-tls 'yes'", _cluster(**{"insecure-skip-tls-verify": "yes"}), NOT_A_BOOLEAN, None),
    ("skip-tls 'false'", _cluster(**{"insecure-skip-tls-verify": "false"}), NOT_A_BOOLEAN, None),
    ("skip-tls 'True '", _cluster(**{"insecure-skip-tls-verify": "True "}), NOT_A_BOOLEAN, None),
    ("skip-tls [1]", _cluster(**{"insecure-skip-tls-verify": [1]}), NOT_A_BOOLEAN, None),
    ("skip-tls 0", _cluster(**{"insecure-skip-tls-verify": 0}), NOT_A_BOOLEAN, None),
    ("skip-tls ''", _cluster(**{"insecure-skip-tls-verify": ""}), NOT_A_BOOLEAN, None),
    ("skip-tls true", _cluster(**{"insecure-skip-tls-verify": True}), "insecure-skip-tls-verify: true", INSECURE),
    ("disable-compression 'no'", _cluster(**{"disable-compression": "no"}), "disable-compression: must be true or false",
     None),
    # Host files: the token file's content would be the bearer token; the others name host paths.
    ("tokenFile", _token_file, "tokenFile reads a file on the function host", FILES),
    ("certificate-authority path", _cluster(**{"certificate-authority": "/etc/ssl/certs/ca-certificates.crt"}),
     "certificate-authority reads a file", FILES),
    ("client-certificate path", _user(**{"client-certificate": "/etc/hostname"}), "client-certificate reads a file",
     FILES),
    ("client-key path", _user(**{"client-key": "/etc/hostname"}), "client-key reads a file", FILES),
    # Commands that would do nothing here if they ever ran: the test must never run anything itself.
    ("exec", _user(exec={"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}), "'exec'", EXEC),
    ("auth-provider", _user(**{"auth-provider": {"name": "oidc", "config": {"cmd-path": "/bin/true"}}}),
     "'auth-provider'", EXEC),
    ("empty exec", _user(exec={}), "'exec'", EXEC),
    # Servers the token would reach in clear, or no server at all (the client would call http://localhost).
    ("http server", _cluster(server="http://127.0.0.1:1"), "is not an https:// URL", HTTP),
    ("upper-case HTTPS", _cluster(server="HTTPS://127.0.0.1:1"), "is not an https:// URL", None),
    ("unix socket", _cluster(server="unix:///var/run/k8s.sock"), "is not an https:// URL", None),
    ("no scheme", _cluster(server="127.0.0.1:6443"), "is not an https:// URL", None),
    ("no server", _without("clusters", "cluster", "server"), "clusters[0].cluster ('sandbox').server: missing", None),
    # Malformed documents: the field is named, never an AttributeError from inside the client.
    ("users not a list", _top("users", "sandbox-admin"), "users: must be a list", None),
    ("users a mapping", _top("users", {"name": "sandbox-admin"}), "users: must be a list", None),
    ("user entry a string", _entry("users", 0, "sandbox-admin"), "users[0]: must be a mapping", None),
    ("user entry a list", _entry("users", 0, [["name", "sandbox-admin"]]), "users[0]: must be a mapping", None),
    ("user without a name", _entry("users", 0, {"user": {"token": "t"}}), "users[0].name: must be a non-empty string",
     None),
    ("user body a string", _inner("users", "user", "t"), "users[0].user ('sandbox-admin'): must be a mapping", None),
    ("user body null", _inner("users", "user", None), "users[0].user ('sandbox-admin'): must be a mapping", None),
    ("token a list", _user(token=["t"]), "users[0].user ('sandbox-admin').token: must be a string", None),
    ("exec a string", _user(exec="/bin/true"), "exec: must be a mapping", None),
    ("clusters entry a number", _entry("clusters", 0, 7), "clusters[0]: must be a mapping", None),
    ("cluster body a list", _inner("clusters", "cluster", []), "clusters[0].cluster ('sandbox'): must be a mapping", None),
    ("server a list", _cluster(server=["https://127.0.0.1"]), ".server: must be a string", None),
    ("contexts a string", _top("contexts", "sandbox"), "contexts: must be a list", None),
    ("context body null", _inner("contexts", "context", None), "contexts[0].context ('sandbox'): must be a mapping", None),
    ("context without cluster", _without("contexts", "context", "cluster"), "contexts[0].context ('sandbox').cluster: "
     "missing", None),
    ("current-context a list", _top("current-context", ["sandbox"]), "current-context: must be a context name", None),
]


def _attack(server: SandboxServer, change: Change, tmp: Path) -> str:
    """The sandbox's own kubeconfig from Key Vault with the attacker's change, uploaded as a new secret; its URI."""
    import yaml

    original = server.vault.secret("kubeconfig")
    assert original is not None
    config = yaml.safe_load(original.value)
    change(config, tmp)
    server.vault.set_secret("attack", yaml.safe_dump(config))
    return f"{server.url}/secrets/attack"


@pytest.mark.parametrize(("case", "change", "named", "setting"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_kubeconfig_from_key_vault_is_refused_naming_the_field_and_the_setting_that_allows_it(
    server: SandboxServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str, change: Change, named: str,
    setting: str | None,
) -> None:
    seen = seen_tokens(monkeypatch)
    uri = _attack(server, change, tmp_path)
    with pytest.raises(ClusterError) as caught:
        KubernetesCluster.from_settings(key_vault(server, uri)).list_nodes()
    message = str(caught.value)
    assert named in message, message
    assert "is refused" in message or "is not a valid kubeconfig" in message
    assert setting is None or ("is refused" in message and setting in message)  # the one setting that allows it
    assert "a-host-secret" not in message
    assert seen == []  # the API server was never asked anything: no token, no host file, went anywhere


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the point of one case
@pytest.mark.parametrize(("case", "change", "setting"), [
    ("skip-tls true", _cluster(**{"insecure-skip-tls-verify": True}), INSECURE),
    ("skip-tls false", _cluster(**{"insecure-skip-tls-verify": False}), None),
    ("CA file", _cluster(**{"certificate-authority-data": None}), FILES),  # filled in below with the sandbox's CA file
    ("token file", _token_file, FILES),  # filled in below with the sandbox's token
])
def test_what_a_setting_allows_reaches_the_cluster(
    server: SandboxServer, tmp_path: Path, case: str, change: Change, setting: str | None
) -> None:
    def allowed(config: dict[str, Any], tmp: Path) -> None:
        change(config, tmp)
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        if cluster.get("certificate-authority-data", "") is None:
            del cluster["certificate-authority-data"]
            cluster["certificate-authority"] = str(server.ca_path)
        if "tokenFile" in user:
            Path(user["tokenFile"]).write_text(server.world.token)

    uri = _attack(server, allowed, tmp_path)
    env = {"KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": uri, **({setting: "true"} if setting else {})}
    assert len(KubernetesCluster.from_settings(settings_for(server, **env)).list_nodes()) == 1


GOOD: dict[str, Any] = {
    "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example:6443", "certificate-authority-data": "Q0E="}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "c",
}


def _variant(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**GOOD, "clusters": [{"name": "c", "cluster": {**GOOD["clusters"][0]["cluster"], **(cluster or {})}}],
            "users": [{"name": "u", "user": {**GOOD["users"][0]["user"], **(user or {})}}]}


@pytest.mark.parametrize(("config", "allowed_by"), [
    (_variant(), None),
    (_variant(cluster={"insecure-skip-tls-verify": False, "tls-server-name": "k8s"}), None),
    (_variant(user={"username": "u", "password": "p"}), None),
    ({**GOOD, "users": []}, None),  # no user at all: the client sends no credentials
    ({k: v for k, v in GOOD.items() if k != "users"}, None),
    (_variant(cluster={"insecure-skip-tls-verify": True}), KubeconfigTrust(insecure_tls=True)),
    (_variant(user={"exec": {"command": "x", "apiVersion": "v1"}}), KubeconfigTrust(commands=True)),
    (_variant(user={"auth-provider": {"name": "oidc"}}), KubeconfigTrust(commands=True)),
    (_variant(user={"tokenFile": "/t"}, cluster={"certificate-authority": "/ca"}), KubeconfigTrust(host_files=True)),
    (_variant(cluster={"server": "http://k8s.example:8080"}), KubeconfigTrust(http=True)),
])
def test_a_self_contained_kubeconfig_passes_and_each_setting_allows_only_its_own_risk(
    config: dict[str, Any], allowed_by: KubeconfigTrust | None
) -> None:
    check_kubeconfig(config, "the secret", trust=allowed_by or KubeconfigTrust())
    if allowed_by is not None:
        with pytest.raises(ClusterError, match="is refused"):
            check_kubeconfig(config, "the secret", trust=KubeconfigTrust())
        everything_else = {f: not getattr(allowed_by, f) for f in ("commands", "insecure_tls", "host_files", "http")}
        with pytest.raises(ClusterError, match="is refused"):
            check_kubeconfig(config, "the secret", trust=KubeconfigTrust(**everything_else))


def test_every_entry_is_checked_not_only_the_current_context() -> None:
    config = {**GOOD, "users": [*GOOD["users"], {"name": "other", "user": {"tokenFile": "/var/run/secret"}}]}
    with pytest.raises(ClusterError, match=r"users\[1\]\.user \('other'\)\.tokenFile reads a file"):
        check_kubeconfig(config, "the secret", trust=KubeconfigTrust())


def test_the_trust_comes_from_one_setting_per_risk() -> None:
    env = {**REQUIRED, "KUBE_AUTH": "key-vault", "KUBECONFIG_SECRET_URI": "https://v.vault.azure.net/secrets/kc"}
    assert KubeconfigTrust.from_settings(load_settings(env)) == KubeconfigTrust()
    settings = load_settings({**env, EXEC: "true", INSECURE: "true", FILES: "true", HTTP: "true"})
    assert KubeconfigTrust.from_settings(settings) == KubeconfigTrust(commands=True, insecure_tls=True, host_files=True,
                                                                       http=True)
