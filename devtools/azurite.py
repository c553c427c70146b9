"""Start and stop Azurite, the Azure Storage emulator, for demos, tests and `func start`.

Development tool: starts and kills processes, binds 127.0.0.1 ports, writes a log under
the work directory and a small lease file under the system temp directory.

- `start_azurite(workdir)` runs the project's node_modules/.bin/azurite (installed by
  `make bootstrap`, i.e. scripts/bootstrap.sh) and waits until its queue and table
  services answer. If Azurite already answers on the ports (a developer's own), it is
  reused and `stop()` leaves it alone.
- `shared_azurite()` is a lease for concurrent users of one Azurite (pytest-xdist
  workers, parallel test sessions): the first starts it, the last one out stops it.
- `python -m devtools.azurite` runs it in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
ACCOUNT_NAME = "devstoreaccount1"
# Azurite's well-known development key (public, documented by Microsoft; not a secret).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT = 30.0
_LOG_NAME = "azurite.log"


class AzuriteError(RuntimeError):
    """Azurite could not be started or reached; the message says what to do."""


@dataclass(frozen=True, slots=True)
class AzuritePorts:
    blob: int = 10000
    queue: int = 10001
    table: int = 10002


DEFAULT_PORTS = AzuritePorts()


def connection_string(ports: AzuritePorts = DEFAULT_PORTS) -> str:
    """An explicit connection string for Azurite on `ports` (equal to UseDevelopmentStorage=true on the defaults)."""
    base = f"http://{HOST}"
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={base}:{ports.blob}/{ACCOUNT_NAME};"
        f"QueueEndpoint={base}:{ports.queue}/{ACCOUNT_NAME};"
        f"TableEndpoint={base}:{ports.table}/{ACCOUNT_NAME};"
    )


@dataclass(slots=True)
class AzuriteProcess:
    """A running Azurite. `pid` is None when it was already running and is not ours to stop."""

    ports: AzuritePorts
    pid: int | None = None
    log_path: Path | None = None
    _popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def owned(self) -> bool:
        return self.pid is not None

    @property
    def connection_string(self) -> str:
        return connection_string(self.ports)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Terminate Azurite and its children if we started it; idempotent; a no-op for a reused one."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        if self._popen is not None:
            _terminate_group(pid, timeout=timeout, popen=self._popen)
            self._popen = None
        else:
            _terminate_group(pid, timeout=timeout)

    def wait(self) -> int:
        """Block until an Azurite we started exits; its exit code. Raises AzuriteError for a reused one."""
        if self._popen is None:
            raise AzuriteError("this Azurite was not started here, so it cannot be waited for")
        return self._popen.wait()

    def __enter__(self) -> AzuriteProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_azurite(
    workdir: Path,
    *,
    in_memory: bool = True,
    ports: AzuritePorts = DEFAULT_PORTS,
    timeout: float = START_TIMEOUT,
    node_modules: Path = PROJECT_ROOT / "node_modules",
    stop_at_exit: bool = True,
) -> AzuriteProcess:
    """Run Azurite (or reuse one already answering on `ports`) and wait until queue and table answer.

    Persistent data (in_memory=False) and the log go to `workdir`. With stop_at_exit,
    an Azurite we started is also stopped when this Python process exits normally.
    Raises AzuriteError with the log's tail when it does not come up within `timeout` seconds.
    """
    queue_server, table_server = probe_server(ports.queue), probe_server(ports.table)
    if _is_azurite(queue_server) and _is_azurite(table_server):
        return AzuriteProcess(ports)  # a developer's own, or another session's: reuse, never stop
    for service, port, server in (("queue", ports.queue, queue_server), ("table", ports.table, table_server)):
        if server is not None:
            what = f"Azurite's {server!r}" if _is_azurite(server) else f"something that is not Azurite ({server!r})"
            raise AzuriteError(
                f"{service} port {HOST}:{port} is taken by {what}, but queue and table do not both answer as "
                "Azurite; stop whatever holds the port, or run the full `azurite` (all three services)"
            )
    executable = node_modules / ".bin" / "azurite"
    if not executable.exists():
        raise AzuriteError(f"{executable} is missing: run `make bootstrap` (scripts/bootstrap.sh) to install Azurite")

    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / _LOG_NAME
    args = [str(executable), "--silent", "--skipApiVersionCheck", "--disableTelemetry"]
    # Azurite refuses --location together with --inMemoryPersistence; in memory, cwd holds any stray file.
    args += ["--inMemoryPersistence", "--extentMemoryLimit", "512"] if in_memory else ["--location", str(workdir)]
    args += [
        "--blobHost", HOST, "--blobPort", str(ports.blob),
        "--queueHost", HOST, "--queuePort", str(ports.queue),
        "--tableHost", HOST, "--tablePort", str(ports.table),
    ]  # fmt: skip
    with log_path.open("ab") as log:
        # A new session makes Azurite the leader of its own process group, so stop() can
        # kill it with its children, and a Ctrl-C meant for the caller does not reach it.
        popen = subprocess.Popen(
            args, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    process = AzuriteProcess(ports, pid=popen.pid, log_path=log_path, _popen=popen)
    try:
        _wait_until_ready(popen, ports, timeout=timeout, log_path=log_path)
    except BaseException:
        process.stop()
        raise
    if stop_at_exit:
        atexit.register(process.stop)
    return process


def probe_server(port: int, *, timeout: float = 1.0) -> str | None:
    """The HTTP Server header of whatever answers on HOST:port; None when nothing listens there.

    Something that listens but does not speak HTTP gives "" (taken, and not Azurite).
    """
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", "/")
        return connection.getresponse().getheader("Server", "")
    except ConnectionRefusedError:
        return None
    except (OSError, http.client.HTTPException):
        return ""
    finally:
        connection.close()


def _is_azurite(server: str | None) -> bool:
    return bool(server) and str(server).startswith("Azurite")


def _wait_until_ready(popen: subprocess.Popen[bytes], ports: AzuritePorts, *, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise AzuriteError(f"Azurite exited with code {popen.returncode} while starting:\n{_tail(log_path)}")
        if _is_azurite(probe_server(ports.queue, timeout=0.5)) and _is_azurite(probe_server(ports.table, timeout=0.5)):
            return
        time.sleep(0.1)
    raise AzuriteError(
        f"Azurite did not answer on {HOST}:{ports.queue} and {HOST}:{ports.table} within {timeout:.0f} s:\n"
        f"{_tail(log_path)}"
    )


def _tail(log_path: Path, *, lines: int = 20) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {log_path}: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or f"(log {log_path} is empty)"


def _terminate_group(pid: int, *, timeout: float, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group `pid` leads, SIGKILL it after `timeout`, and reap it if it is our child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        if _wait_gone(pid, timeout=timeout, popen=popen):
            return


def _wait_gone(pid: int, *, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        # Reap it if it happens to be our child (an Azurite this process started for a lease).
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    # An Azurite started by another lease holder stays a zombie after it exits until that
    # holder reaps it; it is gone all the same.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


# --- a lease shared by concurrent users ---------------------------------------------------


def default_lease_dir(ports: AzuritePorts = DEFAULT_PORTS) -> Path:
    # Keyed by user and port: the ports are what every concurrent session shares.
    return Path(tempfile.gettempdir()) / f"vmss-autoscaler-azurite-{os.getuid()}-{ports.queue}"


@contextlib.contextmanager
def shared_azurite(
    lease_dir: Path | None = None, *, ports: AzuritePorts = DEFAULT_PORTS, timeout: float = START_TIMEOUT
) -> Iterator[str]:
    """Hold a lease on one in-memory Azurite shared by every process using `lease_dir`; yield its connection string.

    The first holder starts Azurite (or finds a developer's own, which is never stopped);
    the last one to leave stops the one a holder started. Holders are process ids, and dead
    ones are dropped, so a crashed test session does not keep Azurite alive forever.
    """
    lease_dir = lease_dir or default_lease_dir(ports)
    lease_dir.mkdir(parents=True, exist_ok=True)
    started: AzuriteProcess | None = None
    with _locked(lease_dir):
        state = _read_lease(lease_dir)
        process = start_azurite(lease_dir / "data", ports=ports, timeout=timeout, stop_at_exit=False)
        if process.owned:
            started = process
            state["pid"] = process.pid
        elif state["pid"] is not None and not _is_azurite_process(state["pid"]):
            state["pid"] = None  # the Azurite answering is not one a holder started
        state["holders"].append(os.getpid())
        _write_lease(lease_dir, state)
    try:
        yield process.connection_string
    finally:
        with _locked(lease_dir):
            state = _read_lease(lease_dir)
            with contextlib.suppress(ValueError):
                state["holders"].remove(os.getpid())
            if not state["holders"] and state["pid"] is not None:
                if started is not None and started.pid == state["pid"]:
                    started.stop()
                elif _is_azurite_process(state["pid"]):
                    _terminate_group(state["pid"], timeout=10.0)
                state["pid"] = None
            _write_lease(lease_dir, state)


@contextlib.contextmanager
def _locked(lease_dir: Path) -> Iterator[None]:
    with (lease_dir / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_lease(lease_dir: Path) -> dict[str, Any]:
    try:
        state = json.loads((lease_dir / "lease.json").read_text())
        pid, holders = state.get("pid"), [int(holder) for holder in state.get("holders", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        pid, holders = None, []
    return {"pid": pid if isinstance(pid, int) else None, "holders": [h for h in holders if _alive(h)]}


def _write_lease(lease_dir: Path, state: dict[str, Any]) -> None:
    (lease_dir / "lease.json").write_text(json.dumps(state))


def _is_azurite_process(pid: int) -> bool:
    # Guard against a recycled pid before signalling it: only an Azurite command line counts.
    try:
        return b"azurite" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# --- command line -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.azurite", description="Run Azurite in the foreground (for `func start`)."
    )
    parser.add_argument("--in-memory", action="store_true", help="keep no data on disk")
    parser.add_argument(
        "--location", type=Path, default=PROJECT_ROOT / ".azurite", help="data and log directory (default .azurite/)"
    )
    options = parser.parse_args(argv)
    try:
        process = start_azurite(options.location, in_memory=options.in_memory)
    except AzuriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not process.owned:
        print(f"Azurite already answers on {HOST}:{process.ports.queue} and :{process.ports.table}; using that one.")
        return 0
    # SIGTERM (e.g. from a process manager) must stop Azurite too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"Azurite is running (pid {process.pid}, log {process.log_path}); Ctrl-C stops it.")
    print("AzureWebJobsStorage=UseDevelopmentStorage=true")
    try:
        code = process.wait()
        print(f"Azurite exited with code {code}; see {process.log_path}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        process.stop()


if __name__ == "__main__":
    sys.exit(main())
