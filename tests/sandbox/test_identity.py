"""The sandbox's identity: the token endpoint, and how each double checks tokens (audience, expiry),
plus the AKS managed cluster in ARM and the Key Vault double that hold the ways into the cluster."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
import yaml

from sandbox.api import arm_api, kube_api, token_endpoint
from sandbox.api.keyvault_api import Vault
from sandbox.api.server import SandboxServer
from sandbox.api.wire import Request
from sandbox.world import World
from sandbox.world import identity
from sandbox.world.identity import AKS_AUDIENCE, ARM_AUDIENCE, KEY_VAULT_AUDIENCE, TokenIssuer, Verdict
from sandbox.world.managed_cluster import ManagedCluster
from tests.fixtures.sandbox import SandboxFactory
from tests.sandbox.helpers import grant, scenario

SUB = "11111111-2222-3333-4444-555555555555"
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
AKS_PATH = f"/subscriptions/{SUB}/resourceGroups/rg-aks/providers/Microsoft.ContainerService/managedClusters"


@pytest.fixture
def world() -> World:
    world = World(scenario(), start=datetime(2030, 1, 7, 9, tzinfo=UTC))
    world.managed_cluster = ManagedCluster(SUB, "rg-aks", "test-cluster", "https://127.0.0.1:8443", CA)
    grant(world, ARM_AUDIENCE, "arm")
    grant(world, AKS_AUDIENCE, "aks")
    grant(world, f"{AKS_AUDIENCE}/.default", "aks-scope")  # a scope is the same audience
    grant(world, AKS_AUDIENCE, "aks-expired", lifetime=-1)
    grant(world, KEY_VAULT_AUDIENCE, "vault")
    grant(world, KEY_VAULT_AUDIENCE, "vault-expired", lifetime=-1)
    return world


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


# --- the token endpoint ----------------------------------------------------------------------------------


GOOD = {"resource": ARM_AUDIENCE, "api-version": "2019-08-01"}


@pytest.mark.parametrize(
    ("method", "header", "query", "status", "message"),
    [
        ("GET", identity.IDENTITY_HEADER, GOOD, 200, None),
        ("GET", identity.IDENTITY_HEADER, {**GOOD, "client_id": identity.CLIENT_ID}, 200, None),
        ("GET", None, GOOD, 401, "X-IDENTITY-HEADER"),
        ("GET", "guessed", GOOD, 401, "X-IDENTITY-HEADER"),
        ("GET", identity.IDENTITY_HEADER, {**GOOD, "api-version": "2017-09-01"}, 400, "api-version must be 2019-08-01"),
        ("GET", identity.IDENTITY_HEADER, {"api-version": "2019-08-01"}, 400, "resource parameter is required"),
        ("GET", identity.IDENTITY_HEADER, {**GOOD, "client_id": "someone"}, 400, "No User Assigned"),
        ("GET", identity.IDENTITY_HEADER, {**GOOD, "object_id": "x"}, 400, "client_id only"),
        ("POST", identity.IDENTITY_HEADER, GOOD, 405, "GET only"),
    ],
    ids=["system-assigned", "user-assigned", "no header", "wrong header", "old api-version", "no resource",
         "unknown client id", "object id", "POST"],
)
def test_the_token_endpoint_answers_as_app_services(
    method: str, header: str | None, query: dict[str, str], status: int, message: str | None
) -> None:
    issuer = TokenIssuer(lifetime=600)
    headers = {"X-IDENTITY-HEADER": header} if header else {}
    response = token_endpoint.handle_token_request(issuer, Request.build(method, identity.TOKEN_PATH, query, headers))
    body = response.json()
    assert response.status == status
    if status != 200:
        assert body["statusCode"] == status and message in body["message"]
        return
    assert set(body) == {"access_token", "expires_on", "resource", "token_type", "client_id"}
    assert body["resource"] == ARM_AUDIENCE and body["token_type"] == "Bearer" and body["client_id"] == identity.CLIENT_ID
    assert isinstance(body["expires_on"], str) and int(body["expires_on"]) == pytest.approx(time.time() + 600, abs=2)
    assert issuer.check(body["access_token"], identity.ARM).ok


def test_tokens_expire_in_wall_time_and_are_bound_to_their_audience() -> None:
    now = [1000.0]
    issuer = TokenIssuer(lifetime=60, wall=lambda: now[0])
    arm = issuer.issue("https://management.azure.com/").token  # azure-identity may send either form
    assert [issuer.check(arm, service).verdict for service in (identity.ARM, identity.AKS, identity.KEY_VAULT)] == [
        Verdict.OK, Verdict.WRONG_AUDIENCE, Verdict.WRONG_AUDIENCE]
    assert issuer.check("forged", identity.ARM).verdict is Verdict.UNKNOWN
    assert issuer.check(None, identity.ARM).verdict is Verdict.UNKNOWN
    now[0] = 1059.9
    assert issuer.check(arm, identity.ARM).ok
    now[0] = 1060.0
    assert issuer.check(arm, identity.ARM).verdict is Verdict.EXPIRED
    issuer.alias(identity.ARM, "https://127.0.0.1:8443/")
    assert issuer.check(issuer.issue("https://127.0.0.1:8443/.default").token, identity.ARM).ok


def test_the_token_lifetime_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenIssuer(lifetime=0)


# --- the doubles' checks -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "status"),
    [("sandbox-token", 200), ("aks", 200), ("aks-scope", 200), (None, 401), ("aks-expired", 401), ("arm", 401),
     ("vault", 401), ("forged", 401)],
    ids=["kubeconfig token", "AKS token", "AKS scope token", "none", "expired AKS token", "ARM token", "vault token",
         "forged"],
)
def test_the_kubernetes_api_takes_the_kubeconfig_token_or_an_unexpired_aks_token(
    world: World, token: str | None, status: int
) -> None:
    response = kube_api.handle(world, Request.build("GET", "/api/v1/nodes", "", bearer(token)))
    assert response.status == status
    if status == 401:
        assert response.json()["reason"] == "Unauthorized" and response.json()["kind"] == "Status"


@pytest.mark.parametrize(
    ("method", "path", "token", "status", "code"),
    [
        ("POST", f"{AKS_PATH}/test-cluster/listClusterUserCredential", "arm", 200, None),
        ("POST", f"{AKS_PATH}/TEST-cluster/listClusterUserCredential", "arm", 200, None),  # ARM ignores case
        ("POST", f"{AKS_PATH}/other/listClusterUserCredential", "arm", 404, "ResourceNotFound"),
        ("POST", AKS_PATH.replace("rg-aks", "rg-other") + "/test-cluster/listClusterUserCredential", "arm", 404,
         "ResourceNotFound"),
        ("POST", AKS_PATH.replace(SUB, "99999999-0000-0000-0000-000000000000") + "/test-cluster/listClusterUserCredential",
         "arm", 404, "SubscriptionNotFound"),
        ("GET", f"{AKS_PATH}/test-cluster/listClusterUserCredential", "arm", 405, "MethodNotAllowed"),
        ("POST", f"{AKS_PATH}/test-cluster/listClusterUserCredential", "aks", 401, "InvalidAuthenticationTokenAudience"),
    ],
    ids=["the cluster", "any case", "another cluster", "another group", "another subscription", "GET", "AKS token"],
)
def test_arm_lists_the_user_credential_of_the_managed_cluster_only(
    world: World, method: str, path: str, token: str, status: int, code: str | None
) -> None:
    response = arm_api.handle(world, Request.build(method, path, "api-version=2026-08-01", bearer(token)))
    assert response.status == status
    if code:
        assert response.json()["error"]["code"] == code
        return
    (entry,) = response.json()["kubeconfigs"]
    config = yaml.safe_load(base64.b64decode(entry["value"]))
    assert entry["name"] == "clusterUser"
    assert config["clusters"][0]["cluster"] == {"certificate-authority-data": base64.b64encode(CA).decode(),
                                                "server": "https://127.0.0.1:8443"}
    exec_user = config["users"][0]["user"]["exec"]
    assert exec_user["command"] == "kubelogin" and AKS_AUDIENCE in exec_user["args"]


def vault_get(vault: Vault, path: str, token: str | None, api_version: str = "7.6") -> Any:
    return vault.handle(Request.build("GET", path, f"api-version={api_version}", {**bearer(token), "Host": "127.0.0.1:8443"}))


@pytest.mark.parametrize(
    ("path", "token", "api_version", "status", "code", "message"),
    [
        ("/secrets/kubeconfig", None, "7.6", 401, "Unauthorized", "AKV10000: Request is missing a Bearer or PoP token."),
        ("/secrets/kubeconfig", "arm", "7.6", 401, "Unauthorized", "AKV10022: Invalid audience"),
        ("/secrets/kubeconfig", "vault-expired", "7.6", 401, "Unauthorized", "expired"),
        ("/secrets/kubeconfig", "forged", "7.6", 401, "Unauthorized", "invalid"),
        ("/secrets/kubeconfig", "vault", "6.0", 400, "BadParameter", "not recognized"),
        ("/secrets/missing", "vault", "7.6", 404, "SecretNotFound", "A secret with (name/id) missing was not found"),
        ("/secrets/kubeconfig/0123abcd", "vault", "2026-04-01", 404, "SecretNotFound", "kubeconfig/0123abcd"),
    ],
    ids=["no token: the challenge", "ARM token", "expired", "forged", "bad api-version", "missing", "missing version"],
)
def test_key_vault_refuses_as_the_service_does(
    world: World, path: str, token: str | None, api_version: str, status: int, code: str, message: str
) -> None:
    vault = Vault(world.identity)
    vault.set_secret("kubeconfig", "apiVersion: v1")
    response = vault_get(vault, path, token, api_version)
    assert response.status == status
    assert response.json()["error"]["code"] == code and message in response.json()["error"]["message"]
    if status == 401:
        challenge = response.headers["WWW-Authenticate"]
        assert challenge == (f'Bearer authorization="https://login.microsoftonline.com/{identity.TENANT_ID}", '
                             'resource="https://vault.azure.net"')


def test_key_vault_answers_the_latest_version_or_the_one_named(world: World) -> None:
    vault = Vault(world.identity)
    first = vault.set_secret("kubeconfig", "one")
    vault.set_secret("KubeConfig", "two", content_type="application/yaml")  # names are case-insensitive
    latest = vault_get(vault, "/secrets/kubeconfig", "vault").json()
    assert latest["value"] == "two" and latest["contentType"] == "application/yaml"
    assert latest["id"].startswith("https://127.0.0.1:8443/secrets/KubeConfig/")
    assert latest["attributes"]["enabled"] is True
    assert vault_get(vault, f"/secrets/kubeconfig/{first.version}", "vault").json()["value"] == "one"


# --- over HTTPS ---------------------------------------------------------------------------------------------


def test_the_server_serves_the_identity_endpoint_the_cluster_and_the_vault(sandbox_factory: SandboxFactory) -> None:
    server: SandboxServer = sandbox_factory("burst")
    ca = str(server.ca_path)

    def token(resource: str) -> str:
        response = requests.get(server.identity_endpoint, params={"resource": resource, "api-version": "2019-08-01"},
                                headers={"X-IDENTITY-HEADER": identity.IDENTITY_HEADER}, verify=ca, timeout=10)
        assert response.status_code == 200
        return str(response.json()["access_token"])

    # Tokens asked for the URL the sandbox serves ARM at are ARM's, as a sovereign cloud's endpoint is.
    arm = {"Authorization": f"Bearer {token(server.url)}"}
    listed = requests.post(f"{server.url}{server.aks_cluster_id}/listClusterUserCredential?api-version=2026-08-01",
                           headers=arm, verify=ca, timeout=10)
    config = yaml.safe_load(base64.b64decode(listed.json()["kubeconfigs"][0]["value"]))
    assert config["clusters"][0]["cluster"]["server"] == server.url
    assert base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]) == server.ca_path.read_bytes()

    secret = requests.get(f"{server.kubeconfig_secret_uri}?api-version=7.6", verify=ca, timeout=10,
                          headers={"Authorization": f"Bearer {token(KEY_VAULT_AUDIENCE)}"})
    stored = yaml.safe_load(secret.json()["value"])
    assert stored["users"][0]["user"] == {"token": server.world.token}
    assert stored["clusters"][0]["cluster"]["server"] == server.url

    nodes = requests.get(f"{server.url}/api/v1/nodes", verify=ca, timeout=10,
                         headers={"Authorization": f"Bearer {token(AKS_AUDIENCE)}"})
    assert nodes.status_code == 200 and len(nodes.json()["items"]) == 1
