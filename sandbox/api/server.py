"""One HTTPS server on 127.0.0.1 serving the API doubles and /sandbox/ controls.

The doubles: Kubernetes (`/api`, `/apis`, `/version`), ARM (`/subscriptions/...`), Log Analytics
(`/loganalytics/...`), a Key Vault holding the cluster's kubeconfig (`/secrets/...`, at the root
like a vault's URL) and a managed identity token endpoint (`/msi/token`, as App Service's). ARM,
Log Analytics and Key Vault take only the identity endpoint's expiring tokens; the Kubernetes API
takes the kubeconfig's static token or an identity token for the AKS server application, and ARM
describes the cluster as an Entra ID-enabled AKS cluster (`aks_cluster_id`).

TLS material comes from `trustme` at start: a throwaway CA (written to
`workdir/ca.pem`) and a server certificate for 127.0.0.1 and localhost, so the
official clients verify the connection exactly as they would against the real
services. A ticker thread moves the world to `clock.now()` every ~100 ms of wall
time and every request does so first, under `world.lock`.

Controls under `/sandbox/`: the clock (`GET /sandbox/clock`, `POST /sandbox/clock/advance` with a manual
clock, `POST /sandbox/clock/hold` and `/release` with a running one: the local runner holds it while it has
due work in hand, so a starved runner does not see sim time run on without it), `GET /sandbox/report` and `/sandbox/state`, faults (`GET`/`POST /sandbox/faults`) and the Event Grid
events the world published (`GET /sandbox/eventgrid/events?after=<seq>`: Spot eviction notices).

A render queue whose scenario names a `storage_queue` is published there (sandbox.api.storage_backlog, in the account
of `storage_connection`); the clock is held while that queue is behind the world's backlog.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import socket
import ssl
import threading
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import trustme

from sandbox.api import arm_api, kube_api, loganalytics_api, prices_api, token_endpoint
from sandbox.api.keyvault_api import Vault
from sandbox.api.storage_backlog import StorageBacklog
from sandbox.api.wire import Request, Response, json_response
from sandbox.clock import DEFAULT_HOLD_LEASE, START_HOLDER, Clock, ManualClock, SimClock
from sandbox.model import aci
from sandbox.model.scenario import Scenario, load_scenario
from sandbox.world import World
from sandbox.world import identity
from sandbox.world.errors import ArmError, KubeError
from sandbox.world.faults import FaultError
from sandbox.world.managed_cluster import ManagedCluster

log = logging.getLogger(__name__)

TICK_SECONDS = 0.1
KUBECONFIG_SECRET = "kubeconfig"  # the Key Vault double's secret holding the kubeconfig
BACKLOG_HOLDER = "storage-backlog"  # the clock's holder while the published backlog's queue is behind
BACKLOG_HOLD_LEASE = 5.0  # wall seconds: a queue slower than this to catch up no longer stops sim time


def _is_kubernetes_path(path: str) -> bool:
    return path.rstrip("/") in ("/version", "/api", "/apis") or path.startswith(("/api/", "/apis/"))


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext, app: SandboxServer) -> None:
        super().__init__(address, _Handler)
        self.context = context
        self.app = app

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake happens here, on the per-connection thread, so one slow client
        # cannot stall the accept loop.
        request.settimeout(30)
        # Headers and body go out in separate writes; without NODELAY, Nagle plus delayed ACKs
        # add ~40 ms to every keep-alive request.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the SDKs reuse connections
    server: _TLSServer

    def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's naming
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        request = Request.build(self.command, unquote(split.path), split.query, dict(self.headers.items()), body)
        response = self.server.app.dispatch(request)
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the base class
        log.debug("%s %s", self.address_string(), format % args)


class SandboxServer:
    """The simulated cluster world behind one HTTPS endpoint. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        scenario: Scenario | str | Path | Mapping[str, Any],
        *,
        speed: float = 1.0,
        seed: int = 0,
        workdir: Path,
        port: int = 0,
        start: datetime | None = None,
        clock: Clock | None = None,
        token_lifetime: float = identity.DEFAULT_TOKEN_LIFETIME,
        aks_resource_group: str | None = None,
        aks_cluster_name: str | None = None,
        wait_for_runner: float = 0.0,
        storage_connection: str = "",
    ) -> None:
        """`token_lifetime`: wall seconds each identity token lives. `aks_resource_group` and
        `aks_cluster_name` name the cluster in ARM (default `rg-<cluster name>` and the cluster name).
        `wait_for_runner`: the clock stands at 0 until a local runner holds it (and ends the start hold), for at
        most this many wall seconds, so a runner slow to start (a busy machine) misses none of the scenario.
        `storage_connection`: a Storage connection string (Azurite's) where a render queue whose scenario names a
        `storage_queue` is published (sandbox.api.storage_backlog); required for such a scenario."""
        self.scenario = load_scenario(scenario)
        render_queue = self.scenario.render_queue
        self._backlog_queue = render_queue.storage_queue if render_queue is not None else None
        if self._backlog_queue and not storage_connection.strip():
            raise ValueError(f"scenario {self.scenario.name} publishes its render queue's backlog in Storage queue "
                             f"{self._backlog_queue}: give a storage connection string (--storage-connection)")
        self._storage_connection = storage_connection.strip()
        self._backlog: StorageBacklog | None = None
        if clock is None:
            begin = start or self.scenario.start or datetime.now(UTC).replace(microsecond=0)
            clock = (SimClock(begin, speed, held_by=START_HOLDER, lease=wait_for_runner) if wait_for_runner > 0
                     else SimClock(begin, speed))
        self._clock = clock
        self._world = World(
            self.scenario, seed=seed, start=getattr(clock, "start", None) or clock.now(), token_lifetime=token_lifetime
        )
        self._aks_resource_group = aks_resource_group or f"rg-{self.scenario.cluster_name}"
        self._aks_cluster_name = aks_cluster_name or self.scenario.cluster_name
        self._vault = Vault(self._world.identity)
        self._workdir = Path(workdir).resolve()
        self._port = port
        self._httpd: _TLSServer | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SandboxServer:
        if self._httpd is not None:
            return self
        self._workdir.mkdir(parents=True, exist_ok=True)
        authority = trustme.CA(organization_name="autoscaler sandbox")
        certificate = authority.issue_cert("127.0.0.1", "localhost")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        certificate.configure_cert(context)
        authority.cert_pem.write_to_path(str(self.ca_path))
        self._httpd = _TLSServer(("127.0.0.1", self._port), context, self)
        self._port = self._httpd.server_address[1]
        self._write_kubeconfig()
        self._register_identity(authority.cert_pem.bytes())
        if self._backlog_queue:
            self._backlog = StorageBacklog(self._storage_connection, self._backlog_queue,
                                           on_pending=self._hold_for_backlog).start()
            self._world.publish_backlog(self._backlog)
        self._stop.clear()
        serve = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="sandbox-http", daemon=True
        )
        self._threads = [serve, threading.Thread(target=self._tick, name="sandbox-clock", daemon=True)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._httpd = None
        if self._backlog is not None:
            self._backlog.stop()
            self._backlog = None

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self._world.advance(self._clock.now())
            except Exception:  # keep the clock alive; the failure shows up in the log and in requests
                log.exception("advancing the sandbox world failed")

    def _hold_for_backlog(self, pending: bool) -> None:
        """The published backlog is part of the world: sim time stands while its queue is behind (a lease bounds it)."""
        if isinstance(self._clock, SimClock):
            if pending:
                self._clock.hold(BACKLOG_HOLDER, lease=BACKLOG_HOLD_LEASE)
            else:
                self._clock.release(BACKLOG_HOLDER)

    def _register_identity(self, ca_pem: bytes) -> None:
        """What needs the URL: the audiences of our own endpoints, the AKS cluster, the kubeconfig secret."""
        issuer = self._world.identity
        # The SDKs ask for tokens for the endpoint they are pointed at, as in a sovereign cloud.
        issuer.alias(identity.ARM, self.url)
        issuer.alias(identity.LOG_ANALYTICS, f"{self.url}{loganalytics_api.PREFIX}")
        with self._world.lock:
            self._world.managed_cluster = ManagedCluster(
                self.subscription_id, self._aks_resource_group, self._aks_cluster_name, self.url, ca_pem
            )
        # What an operator would put in Key Vault: a self-contained kubeconfig (CA inline, static token).
        config = json.loads(self.kubeconfig_path.read_text(encoding="utf-8"))
        config["clusters"][0]["cluster"] = {
            "server": self.url, "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }
        self._vault.set_secret(KUBECONFIG_SECRET, json.dumps(config, indent=2) + "\n", content_type="application/yaml")

    def _write_kubeconfig(self) -> None:
        name = self.scenario.cluster_name
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)}}],
            "users": [{"name": f"{name}-admin", "user": {"token": self._world.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin", "namespace": "default"}}],
            "current-context": name,
            "preferences": {},
        }
        # JSON is YAML, and the kubernetes client loads kubeconfig with a YAML loader.
        self.kubeconfig_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------ properties

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def ca_path(self) -> Path:
        return self._workdir / "ca.pem"

    @property
    def kubeconfig_path(self) -> Path:
        return self._workdir / "kubeconfig"

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def world(self) -> World:
        return self._world

    @property
    def subscription_id(self) -> str:
        return self._world.subscription_id

    @property
    def vault(self) -> Vault:
        """The Key Vault double (its secret `kubeconfig` holds the cluster's kubeconfig)."""
        return self._vault

    @property
    def identity_endpoint(self) -> str:
        """The managed identity token endpoint (header `X-IDENTITY-HEADER: sandbox.world.identity.IDENTITY_HEADER`)."""
        return f"{self.url}{identity.TOKEN_PATH}"

    @property
    def aks_cluster_id(self) -> str:
        """The ARM resource id of the cluster as an AKS managed cluster: AKS_CLUSTER_ID for KUBE_AUTH=aks."""
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self._aks_resource_group}"
            f"/providers/Microsoft.ContainerService/managedClusters/{self._aks_cluster_name}"
        )

    @property
    def kubeconfig_secret_uri(self) -> str:
        """The Key Vault secret holding the kubeconfig: KUBECONFIG_SECRET_URI for KUBE_AUTH=key-vault."""
        return f"{self.url}/secrets/{KUBECONFIG_SECRET}"

    def env(self) -> dict[str, str]:
        """The app settings that point the autoscaler at this sandbox."""
        return {
            "CLUSTER_NAME": self.scenario.cluster_name,
            "AZURE_SUBSCRIPTION_ID": self.subscription_id,
            "NODE_RESOURCE_GROUPS": ",".join(self.scenario.resource_groups),
            "KUBECONFIG_PATH": str(self.kubeconfig_path),
            "ARM_ENDPOINT": self.url,
            "ARM_CA_BUNDLE": str(self.ca_path),
            "AZURE_CREDENTIAL": "sandbox",
            "SANDBOX_IDENTITY_ENDPOINT": self.identity_endpoint,
            # Measured usage from the Log Analytics double (whose CA is ARM_CA_BUNDLE's).
            "USAGE_SOURCE": "log-analytics",
            "LOG_ANALYTICS_ENDPOINT": f"{self.url}{loganalytics_api.PREFIX}",
            "LOG_ANALYTICS_WORKSPACE_ID": self._world.workspace_id,
            # The Retail Prices double (unauthenticated, like the real API), read by the `price` expander.
            "RETAIL_PRICES_ENDPOINT": self.url,
            # A cluster with AKS agent pools: the agent-pool backend manages them through this cluster's agentPools API.
            **({"AKS_CLUSTER_ID": self.aks_cluster_id, "MANAGE_AKS_POOLS": "true"}
               if any(g.agent_pool is not None for g in self.scenario.node_groups) else {}),
            # A Flexible set's Standby Pool: the autoscaler keeps its ready capacity (docs/standby-pools.md).
            **({"STANDBY_POOLS": "true"} if any(g.standby_pool is not None for g in self.scenario.node_groups) else {}),
            # A virtual node: its ACI quota, creation rates and prices, as the operator would set them.
            **aci.app_settings(self.scenario.virtual_node),
            # A render queue published in Storage (in the storage account the runner is given): the backlog to read.
            **({"LOAD_BACKLOG_QUEUE": self._backlog_queue} if self._backlog_queue else {}),
        }

    # ------------------------------------------------------------------ requests

    def dispatch(self, request: Request) -> Response:
        """Route one request; never raises (a bug becomes a 500 in the right API's error shape)."""
        is_arm = request.path.startswith("/subscriptions")
        is_loganalytics = request.path.startswith(loganalytics_api.PREFIX + "/")
        try:
            if request.path.startswith("/sandbox/"):
                return self._control(request)
            # Neither touches the world: no lock, no advance.
            if request.path.rstrip("/").lower() == identity.TOKEN_PATH:
                return token_endpoint.handle_token_request(self._world.identity, request)
            if request.path.startswith("/secrets/"):
                return self._vault.handle(request)
            if request.path.rstrip("/") == prices_api.PREFIX:
                return prices_api.handle(request, base_url=self.url)
            with self._world.lock:
                self._world.advance(self._clock.now())
                if is_arm:
                    response = arm_api.handle(self._world, request)
                elif is_loganalytics:
                    response = loganalytics_api.handle(self._world, request)
                elif _is_kubernetes_path(request.path):
                    response = kube_api.handle(self._world, request)
                else:
                    response = json_response(404, {"error": f"no route for {request.path}"})
            return self._wall_retry_after(response)
        except Exception as exc:  # pragma: no cover - defensive: keep the server answering
            log.error("sandbox request %s %s failed:\n%s", request.method, request.path, traceback.format_exc())
            if is_arm:
                return arm_api.error_response(ArmError(500, "InternalServerError", f"sandbox bug: {exc}"))
            if is_loganalytics:
                return loganalytics_api.error_response(500, "InternalServerError", f"sandbox bug: {exc}")
            return kube_api.status_response(KubeError(500, "InternalError", f"sandbox bug: {exc}"))

    def _wall_retry_after(self, response: Response) -> Response:
        """The doubles speak sim seconds; clients sleep wall seconds.

        Retry-After must stay a whole number (azure-mgmt-compute parses it with int()), so a
        sub-second LRO poll delay at high speed travels as `retry-after-ms`, which azure-core
        honours when Retry-After is absent. Throttling (429) always keeps Retry-After, at least 1.
        """
        raw = response.headers.get("Retry-After")
        if raw is None:
            return response
        wall = float(raw) / self._clock.speed
        headers = dict(response.headers)
        if wall >= 1 or response.status == 429:
            headers["Retry-After"] = str(max(1, math.ceil(wall)))
        elif wall == 0:
            headers["Retry-After"] = "0"
        else:
            del headers["Retry-After"]
            headers["retry-after-ms"] = str(max(1, round(wall * 1000)))
        return Response(response.status, headers, response.body)

    def _control(self, request: Request) -> Response:
        world = self._world
        world.advance(self._clock.now())
        route = (request.method, request.path.rstrip("/"))
        if route == ("GET", "/sandbox/clock"):
            held = {"bound": self._clock.bound()} if isinstance(self._clock, SimClock) else {}
            return json_response(200, {"now": world.now.isoformat(), "sim_seconds": world.t, "speed": self._clock.speed,
                                       **held})
        if route == ("POST", "/sandbox/clock/advance"):
            if not isinstance(self._clock, ManualClock):
                return json_response(409, {"error": "only a manual clock can be advanced"})
            seconds = float((request.json() or {}).get("seconds", 0))
            self._clock.advance(seconds)
            world.advance(self._clock.now())
            return json_response(200, {"now": world.now.isoformat(), "sim_seconds": world.t, "speed": self._clock.speed})
        if route in (("POST", "/sandbox/clock/hold"), ("POST", "/sandbox/clock/release")):
            return self._hold(request, release=route[1].endswith("release"))
        if route == ("GET", "/sandbox/report"):
            return json_response(200, world.report())
        if route == ("GET", "/sandbox/state"):
            return json_response(200, world.state())
        if route == ("GET", "/sandbox/eventgrid/events"):
            # Spot eviction notices as Event Grid would deliver them (sandbox.world.scheduled_events), after a sequence number.
            try:
                after = int(request.query.get("after", "0"))
            except ValueError:
                return json_response(400, {"error": "after must be a whole number (the last seq already read)"})
            return json_response(200, {"events": world.eventgrid_events(after)})
        if route == ("GET", "/sandbox/faults"):
            return json_response(200, {"faults": world.faults()})
        if route == ("POST", "/sandbox/faults"):
            return self._inject(request)
        return json_response(404, {"error": f"no control endpoint {request.method} {request.path}"})

    def _hold(self, request: Request, *, release: bool) -> Response:
        """A runner holds the clock while it has due work in hand (sandbox.clock.SimClock.hold)."""
        clock = self._clock
        if not isinstance(clock, SimClock):
            return json_response(409, {"error": "only a running clock can be held (a manual clock moves only when told)"})
        try:
            body = request.json() or {}
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            holder = body.get("holder")
            if not isinstance(holder, str) or not holder:
                raise ValueError("holder must be a non-empty string naming who holds the clock")
            if release:
                sim = clock.release(holder)
            else:
                until, lease = body.get("until"), body.get("lease_seconds", DEFAULT_HOLD_LEASE)
                if isinstance(until, bool) or not isinstance(until, int | float | None):
                    raise ValueError("until must be sim seconds or null (stop the clock where it is)")
                if isinstance(lease, bool) or not isinstance(lease, int | float):
                    raise ValueError("lease_seconds must be a number of wall seconds")
                sim = clock.hold(holder, until=until, lease=float(lease))
        except ValueError as exc:
            return json_response(400, {"error": f"invalid clock hold: {exc}"})
        self._world.advance(clock.now())
        return json_response(200, {"now": self._world.now.isoformat(), "sim_seconds": sim, "speed": clock.speed,
                                   "bound": clock.bound()})

    def _inject(self, request: Request) -> Response:
        try:
            body = request.json()
            if not isinstance(body, dict):
                raise FaultError("the body must be a JSON object")
            if body.get("kind") == "scale_up_failure":
                self._world.fail_next_scale_up(
                    str(body["scale_set"]),
                    code=str(body.get("code", "QuotaExceeded")),
                    message=body.get("message"),
                    count=int(body.get("count", 1)),
                    resource_group=body.get("resource_group"),
                )
            else:
                self._world.inject_fault(
                    body["target"],
                    status=int(body["status"]),
                    count=int(body.get("count", 1)),
                    code=body.get("code"),
                    message=body.get("message"),
                    retry_after=body.get("retry_after"),
                )
        except (ValueError, KeyError, TypeError) as exc:
            return json_response(400, {"error": f"invalid fault: {exc}"})
        return json_response(201, {"faults": self._world.faults()})
