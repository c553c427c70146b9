"""Crash and resume: the local runner in a child process, killed mid-action and started again.

Development tool, for the `crash-resume` demo (devtools.demo.SCENARIO_OPTIONS) and its end-to-end
test. `RestartingRunner` runs `python -m devtools.runner` as a child process and watches the action
ledger in Table storage. The first time the ledger shows a scale-down at the chosen step (an entry of
kind `scale_down` at that step index, `started` or `done` and without an outcome: a step running, or
the action waiting there for its next delivery), it SIGKILLs the child and starts a fresh one.

A SIGKILL gives the child no chance to clean up, as when a Functions host's worker dies: whatever
it held in memory (a step half done, messages received but not yet deleted, its timers' schedule) is
lost. What survives is what the app keeps in Azurite: the ledger and cooldowns in Table storage, and
the queue, where a message the dead process had received reappears once its visibility lease runs out
(30 wall seconds; the runner's receive lease). The new process knows nothing else.

`RestartingRunner` offers what devtools.demo needs of a `LocalRunner` (`run`, `queue_is_idle`,
`stats`), and installs an app context of its own (not used to run functions) so the demo can read
the ledger and the queue. `crash_resume_problems` judges a demo summary.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.runner import RunnerStats, SandboxClock
from devtools.sandbox_clock import ClockUnavailable
from sandbox.clock import START_HOLDER
from shared.actions import SCALE_DOWN_STEPS
from shared.ports import LedgerEntry

ROOT = Path(__file__).resolve().parents[1]
KILL_STEPS = SCALE_DOWN_STEPS  # the steps a kill can be aimed at
# Wall seconds the sandbox's clock waits at most for the restarted runner, as it waits for the first one
# (`serve --wait-for-runner`): the successor's clock holder ends this hold once its own is in place.
RESTART_HOLD_SECONDS = 300.0
# One line of the runner's log (its logging.basicConfig format) from the services: what it decided or did.
_SERVICE_LINE = re.compile(r"^\S+ \S+ [A-Z]+ (shared\.services\.[\w.]+): (?P<message>.*)$")


def steps_in_flight(ledger: Iterable[LedgerEntry], step: str) -> list[dict[str, Any]]:
    """Scale-down actions at `step` in the ledger: the step running now, or the action waiting there."""
    index = SCALE_DOWN_STEPS.index(step)
    return [
        {"action": e.action_id, "node": e.node, "step": step, "attempt": e.progress[1], "ledger_status": e.status}
        for e in ledger
        if e.kind == "scale_down" and e.progress[0] == index and not e.outcome and e.status in ("started", "done")
    ]


@dataclass
class RunnerProcess:
    """One `python -m devtools.runner` child, its log and (after a clean stop) its stats file."""

    number: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    stats_path: Path
    end: str = ""  # "killed" or "stopped" once it is over
    _log_offset: int = field(default=0, repr=False)

    @classmethod
    def start(cls, number: int, *, settings_path: Path, env: Mapping[str, str], sandbox_url: str, out_dir: Path,
              duration: float) -> RunnerProcess:
        log_path, stats_path = out_dir / f"runner-{number}.log", out_dir / f"runner-{number}.stats.json"
        stats_path.unlink(missing_ok=True)
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "devtools.runner", "--settings", str(settings_path), "--sandbox-clock", sandbox_url,
                 "--duration", str(duration), "--stats", str(stats_path)],
                cwd=ROOT, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
            )
        return cls(number, popen, log_path, stats_path)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or given back."""
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        self.end = "killed"

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM: the runner finishes the batch in hand and writes its stats."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self.end = self.end or "stopped"

    def stats(self) -> RunnerStats | None:
        """What it counted, or None (killed: its counts died with it)."""
        try:
            return RunnerStats(**json.loads(self.stats_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def new_log_lines(self) -> list[str]:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._log_offset += len(complete)
        return complete.decode("utf-8", "replace").splitlines()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class RestartingRunner:
    """The local runner as a child process, SIGKILLed once when a scale-down reaches `kill_during`, then restarted."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        sandbox_url: str,
        kill_during: str,
        out_dir: Path,
        sim_seconds: Callable[[], float],
        log_sink: Callable[[str], None] | None = None,
    ) -> None:
        from shared.context import build_context, install_context

        if kill_during not in KILL_STEPS:
            raise ValueError(f"cannot kill during {kill_during!r}: expected one of {', '.join(KILL_STEPS)}")
        self._env = dict(env)
        self._sandbox_url = sandbox_url
        self._kill_during = kill_during
        self._out_dir = out_dir
        self._sim_seconds = sim_seconds
        self._log_sink = log_sink
        # Our own view of the app's storage (and a validation of the settings before any child starts).
        self.context = build_context(self._env, clock=SandboxClock.connect(sandbox_url, ca_path=self._env.get("ARM_CA_BUNDLE", "")))
        install_context(self.context)
        # The child reads local.settings.json's format; the process environment (the same values) wins anyway.
        self._settings_path = out_dir / "runner.settings.json"
        values = {k: v for k, v in self._env.items() if os.environ.get(k) != v}
        self._settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": values}, indent=2) + "\n")
        self.processes: list[RunnerProcess] = []
        self.restarts: list[dict[str, Any]] = []

    # -- what the demo uses of a LocalRunner ----------------------------------------

    def run(self, *, until: Callable[[], bool], wall_timeout: float, on_tick: Callable[[], None] | None = None,
            tick_seconds: float = 0.25) -> bool:
        """Run children until `until()` holds (True) or the wall-clock timeout passes (False); stop the last one."""
        deadline = time.monotonic() + wall_timeout
        self._start(duration=wall_timeout + 60)
        try:
            while time.monotonic() < deadline:
                self._check_alive()
                self._pump_log()
                if not self.restarts:
                    self._kill_if_in_flight(duration=deadline - time.monotonic() + 60)
                if on_tick is not None:
                    on_tick()
                if until():
                    return True
                time.sleep(tick_seconds)
            return False
        finally:
            for process in self.processes:
                process.stop()
            if self.processes:
                self._pump_log()

    def queue_is_idle(self) -> bool:
        """No message waiting, in flight or delayed (the count includes invisible ones)."""
        return bool(self.context.ports.queue.count() == 0)

    @property
    def stats(self) -> RunnerStats:
        """The counts of the children that stopped cleanly; a killed child's are lost with it."""
        total = RunnerStats()
        for process in self.processes:
            stats = process.stats()
            if stats is None:
                continue
            for name, count in stats.timer_invocations.items():
                total.timer_invocations[name] = total.timer_invocations.get(name, 0) + count
            total.queue_invocations += stats.queue_invocations
            total.failures += stats.failures
            total.poisoned += stats.poisoned
        return total

    # -- after the run ----------------------------------------------------------------

    def restart_report(self, ledger: Iterable[LedgerEntry]) -> list[dict[str, Any]]:
        """The restarts, each in-flight action with how it ended (`outcome_at_end`, "" if it never did)."""
        outcomes = {e.action_id: e.outcome for e in ledger}
        return [
            {**restart, "in_flight": [{**a, "outcome_at_end": outcomes.get(a["action"], "")} for a in restart["in_flight"]]}
            for restart in self.restarts
        ]

    def process_report(self) -> list[dict[str, Any]]:
        return [{"pid": p.pid, "end": p.end or "running", "log": str(p.log_path), "stats_lost": p.stats() is None}
                for p in self.processes]

    # -- plumbing ------------------------------------------------------------------------

    def _start(self, *, duration: float) -> RunnerProcess:
        process = RunnerProcess.start(len(self.processes) + 1, settings_path=self._settings_path, env=self._env,
                                      sandbox_url=self._sandbox_url, out_dir=self._out_dir, duration=duration)
        self.processes.append(process)
        return process

    def _check_alive(self) -> None:
        current = self.processes[-1]
        code = current.popen.poll()
        if code is not None:
            raise RuntimeError(f"the local runner (pid {current.pid}) exited by itself with code {code}; "
                               f"end of {current.log_path}:\n{current.log_tail()}")

    def _kill_if_in_flight(self, *, duration: float) -> None:
        in_flight = steps_in_flight(self.context.ports.state.list_ledger(), self._kill_during)
        if not in_flight:
            return
        victim = self.processes[-1]
        # The restart takes no sim time: a process start that a busy machine makes slow would otherwise let the
        # world run on, unwatched, for `speed` sim seconds per wall second, and the run would measure the machine.
        clock = self.context.ports.clock
        if isinstance(clock, SandboxClock):
            try:
                clock.hold(START_HOLDER, until=None, lease=RESTART_HOLD_SECONDS)
            except (OSError, ClockUnavailable) as exc:
                self._emit(f"could not hold the sandbox's clock for the restart ({exc}); sim time runs on meanwhile")
        sim_seconds = self._sim_seconds()
        victim.kill()
        self._pump_log(victim)
        successor = self._start(duration=duration)
        self.restarts.append({
            "sim_seconds": round(sim_seconds, 1), "signal": "SIGKILL", "killed_pid": victim.pid,
            "restarted_pid": successor.pid, "step": self._kill_during, "in_flight": in_flight,
        })
        nodes = ", ".join(a["node"] for a in in_flight)
        self._emit(f"runner pid {victim.pid} killed (SIGKILL) at t={sim_seconds:.0f}s during {self._kill_during} "
                   f"of {nodes}; restarted as pid {successor.pid}")

    def _pump_log(self, process: RunnerProcess | None = None) -> None:
        for line in (process or self.processes[-1]).new_log_lines():
            match = _SERVICE_LINE.match(line)
            if match:
                self._emit(match["message"])

    def _emit(self, message: str) -> None:
        if self._log_sink is not None:
            self._log_sink(message)


def crash_resume_problems(summary: Mapping[str, Any]) -> list[str]:
    """What a crash-resume run got wrong, as sentences; [] when the kill landed and the autoscaler recovered.

    The run must have converged, killed the runner during the step it aimed at, finished every action
    that step held (succeeded), and deleted each removed instance with exactly one accepted request
    and no refused one (a repeat after the instance had gone is refused by ARM, and would count there).
    """
    problems = []
    if not summary.get("converged"):
        problems.append("the run did not converge before the timeout")
    restarts = summary.get("runner_restarts", [])
    if not restarts:
        problems.append("the runner was never killed: no scale-down was seen at the step the kill was aimed at")
    for restart in restarts:
        for action in restart["in_flight"]:
            if not action["outcome_at_end"].startswith("succeeded"):
                problems.append(
                    f"action {action['action']} (node {action['node']}) was at its {action['step']} step when the runner "
                    f"was killed at t={restart['sim_seconds']}s and ended {action['outcome_at_end'] or 'unfinished'!r}"
                )
    deletes = summary.get("deletes_by_instance", {})
    if not deletes:
        problems.append("no instance was deleted")
    for instance, count in sorted(deletes.items()):
        if count != 1:
            problems.append(f"instance {instance} was deleted {count} times")
    refused = summary.get("api_breakdown", {}).get("arm", {}).get("instance_deletes_refused", {})
    for instance, count in sorted(refused.items()):
        problems.append(f"instance {instance} was named in {count} refused delete request(s) (deleted again once gone?)")
    return problems
