"""devtools.azurite: starting, reusing, sharing and stopping Azurite on loopback ports."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.data.tables import TableServiceClient

from devtools.azurite import (
    DEFAULT_PORTS,
    AzuriteError,
    AzuritePorts,
    probe_server,
    shared_azurite,
    start_azurite,
)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def spare_ports() -> AzuritePorts:
    """Ports other than the shared Azurite's, for an Azurite of the test's own."""
    blob, queue, table = free_ports(3)
    return AzuritePorts(blob=blob, queue=queue, table=table)


@pytest.fixture
def http_server_port() -> Iterator[int]:
    """A loopback HTTP server that is not Azurite."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_an_azurite_already_running_is_reused_and_left_running(azurite: str, tmp_path: Path) -> None:
    process = start_azurite(tmp_path)
    assert not process.owned
    process.stop()
    assert str(probe_server(DEFAULT_PORTS.table)).startswith("Azurite-Table")


def test_started_azurite_serves_and_stop_ends_it(tmp_path: Path, spare_ports: AzuritePorts) -> None:
    with start_azurite(tmp_path, ports=spare_ports, stop_at_exit=False) as process:
        assert process.owned
        with TableServiceClient.from_connection_string(process.connection_string) as service:
            assert service.create_table_if_not_exists("probe").table_name == "probe"
    for port in (spare_ports.blob, spare_ports.queue, spare_ports.table):
        assert probe_server(port) is None


@pytest.mark.parametrize(
    ("arrange", "message"),
    [
        pytest.param("no-node-modules", "make bootstrap", id="not-installed"),
        pytest.param("queue-port-taken", "not Azurite", id="port-taken-by-another-server"),
        pytest.param("blob-port-taken", "exited", id="azurite-fails-to-start"),
    ],
)
def test_start_failures_say_what_to_do(
    tmp_path: Path, spare_ports: AzuritePorts, http_server_port: int, arrange: str, message: str
) -> None:
    ports, node_modules = spare_ports, Path(__file__).resolve().parents[2] / "node_modules"
    if arrange == "no-node-modules":
        node_modules = tmp_path / "node_modules"
    elif arrange == "queue-port-taken":
        ports = AzuritePorts(blob=spare_ports.blob, queue=http_server_port, table=spare_ports.table)
    else:
        ports = AzuritePorts(blob=http_server_port, queue=spare_ports.queue, table=spare_ports.table)
    with pytest.raises(AzuriteError, match=message):
        start_azurite(tmp_path, ports=ports, node_modules=node_modules, stop_at_exit=False)


def test_shared_lease_first_holder_starts_last_holder_stops(tmp_path: Path, spare_ports: AzuritePorts) -> None:
    lease_dir = tmp_path / "lease"
    with shared_azurite(lease_dir, ports=spare_ports) as outer:
        with shared_azurite(lease_dir, ports=spare_ports) as inner:
            assert inner == outer
        assert str(probe_server(spare_ports.queue)).startswith("Azurite-Queue")  # the outer holder still needs it
    assert probe_server(spare_ports.queue) is None
