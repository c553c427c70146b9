"""`make demo`: the autoscaler doing its main job against the sandbox, end to end.

Starts Azurite and the sandbox (as a separate process, so it is a real HTTPS
server to our adapters), runs a scenario through the local functions runner
with a live terminal view, then writes out/<scenario>/summary.json and
timeline.png, stops everything it started, and exits 0 when the run
converged: every pod finished and every group back at its minimum (or above
it only by idle nodes kept on purpose, such as scale-down-disabled ones). A
scenario's `expect_unschedulable` names pods meant to stay Pending: the run then
converges only with exactly those waiting, each reported unplaceable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from devtools.azurite import connection_string, shared_azurite
from devtools.crash import KILL_STEPS, RestartingRunner, crash_resume_problems
from devtools.runner import LocalRunner, build_runner
from shared.engine import reasons

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("devtools.demo")

# Demo tuning. The runner gives the app's queue delays in sim time (devtools.sim_time_queue), but Storage hides a
# message for whole wall seconds, and the clock stands still while a delay shorter than one wall second rounds up:
# so the steps that wait re-check once a wall second at the run's speed (30 sim seconds at 30), and a step waits at
# most one wall second in-process on ARM. The schedules and the other delays are the production defaults.
def demo_settings(speed: float) -> dict[str, str]:
    one_wall_second = f"{max(1, round(speed))}s"
    return {
        "STEP_RETRY_DELAY": one_wall_second,
        "ARM_OPERATION_WAIT": "1s",
        "SCALE_DOWN_ROUND_INTERVAL": one_wall_second,
        "LOG_LEVEL": "info",
    }


# What `make demo SCENARIO=<name>` does beyond the defaults, per scenario (the command line overrides it).
# kill_runner_during: run the local runner as a child process, SIGKILL it the first time a scale-down
# is at this step, start a fresh one, and check the recovery (devtools/crash.py). speed: the default
# --speed. Our own work (polls, steps, queue hops) takes wall time, which the sandbox's clock multiplies
# by its speed: at 30, a 1-second poll of a 500-node cluster is 30 sandbox seconds, which no real
# cluster would see. A big scenario runs slower so that what it measures is the autoscaler's design.
# settings: app settings of the scenario's own, over demo_settings and the defaults.
#
# The scenarios whose expectations are written in cluster-autoscaler's fixed idle times (an idle node goes
# after SCALE_DOWN_UNNEEDED_TIME, 10 minutes; a group waits SCALE_DOWN_DELAY_AFTER_ADD after growing) run in
# `fixed` idle mode; the default `auto` would remove their idle plain-VM nodes after about one boot.
FIXED_IDLE_TIMES = {"SCALE_DOWN_IDLE_MODE": "fixed"}
SCENARIO_OPTIONS: dict[str, dict[str, Any]] = {
    "crash-resume": {"kill_runner_during": "drain"},
    "many-idle": {"speed": 5.0, "settings": FIXED_IDLE_TIMES},
    "protected": {"settings": FIXED_IDLE_TIMES},
    "render-farm": {"settings": FIXED_IDLE_TIMES},
    "k3s-daemonset-farm": {"settings": FIXED_IDLE_TIMES},
    "stuck-pending": {"settings": FIXED_IDLE_TIMES},
    # The quota is raised a minute after the first request fails: with the default 3-minute QUOTA_CACHE the retry
    # Kueue makes a minute later would still plan against the old limit. A short cache shows the raise at once.
    "gang-atomic": {"settings": {"QUOTA_CACHE": "6s"}},
    # Three D8s onto one D16 of the same family saves a third of their price while moving every pod they hold: a
    # balanced score of 0.33, under the default 0.5 when they are the cluster's only candidates; and the default
    # budget (10 % of 4 nodes: 1) never lets three be replaced at once (docs/consolidation.md).
    "consolidate-replace": {"settings": {"CONSOLIDATION_THRESHOLD": "0.3",
                                         "DISRUPTION_BUDGETS": "nodes=3&reasons=Replace,Drifted"}},
    # Two drifted nodes replaced at a time (the default budget, 10 % of ten nodes, allows one).
    "drift-rollout": {"settings": {"DISRUPTION_BUDGETS": "nodes=2&reasons=Drifted"}},
}
DEFAULT_SPEED = 30.0
# The runner holds the sandbox's clock while it works (devtools/sandbox_clock.py), so a scenario takes more wall
# time than its duration at its speed, the more the busier the machine; its end in sim time (the duration) stops it.
HELD_TIME_ALLOWANCE = 4
# So a run's wall time says nothing about the autoscaler: a run gives up when its sim time has gone as far as its
# wall timeout would take it on an idle machine (wall_timeout * speed sim seconds), or when sim time has stood still
# for STALL_WALL_SECONDS (a hang: the runner holds the clock for one invocation at most a minute), and only as a
# last resort after WALL_CAP_FACTOR times its wall timeout. A busy machine makes a run slower, never shorter in sim
# time, so it cannot fail a scenario's bounds or its convergence.
STALL_WALL_SECONDS = 180.0
WALL_CAP_FACTOR = 8
RUNNER_START_WAIT_SECONDS = 300.0  # the sandbox's clock waits this long at most for the runner to start


@dataclass
class SandboxProcess:
    process: subprocess.Popen[str]
    url: str
    ca_path: str
    env: dict[str, str]

    def get(self, path: str, *, timeout: float = 30.0, attempts: int = 3) -> Any:
        """GET a control endpoint; a sandbox too busy to answer in `timeout` is asked again (`attempts` in all)."""
        context = ssl.create_default_context(cafile=self.ca_path)
        for attempt in range(1, attempts + 1):
            try:
                with urllib.request.urlopen(f"{self.url}{path}", context=context, timeout=timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError:
                raise  # the sandbox answered: asking again would get the same
            except (OSError, ValueError) as exc:  # a timeout, a refused or cut-off connection, a cut-off body
                if attempt == attempts or self.process.poll() is not None:
                    raise
                log.warning("the sandbox did not answer %s in %.0fs (%s); asking again", path, timeout, exc)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


@contextmanager
def sandbox_process(scenario: str, *, speed: float, seed: int, workdir: Path) -> Iterator[SandboxProcess]:
    workdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--scenario", scenario, "--speed", str(speed),
         "--seed", str(seed), "--port", "0", "--workdir", str(workdir),
         # Sim time starts when the runner does: its start-up (imports, settings, storage) is wall time a busy
         # machine stretches, in which the scenario's first arrivals would otherwise wait for it.
         "--wait-for-runner", str(RUNNER_START_WAIT_SECONDS),
         # The runner's storage account (Azurite's, started before the sandbox): a render queue published there.
         "--storage-connection", connection_string()],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(workdir / "sandbox.log", "w"), text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the sandbox did not start; see {workdir / 'sandbox.log'}")
        info = json.loads(line)
        yield SandboxProcess(process, info["url"].rstrip("/"), info["ca_path"], dict(info["env"]))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


class _ActionLog(logging.Handler):
    """Keeps the latest decisions and actions for the live view."""

    def __init__(self, size: int = 10) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[str] = deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("shared.services"):
            self.lines.append(record.getMessage())


# Reasons that mean someone asked for the node to stay (an annotation, a budget, a pod's storage): such a
# node, even idle, is not one the autoscaler should still remove, so it does not hold up convergence.
PROTECTION_CODES = frozenset({
    reasons.SCALE_DOWN_DISABLED_ANNOTATION, reasons.NOT_SAFE_TO_EVICT, reasons.DO_NOT_DISRUPT, reasons.LOCAL_STORAGE,
    reasons.NOT_ENOUGH_PDB, reasons.NOT_REPLICATED, reasons.UNMOVABLE_KUBE_SYSTEM_POD,
})


class _KeptLog(logging.Handler):
    """Why the utilisation polls keep nodes, from their `node ... kept (<code>): ...` records.

    Their flat `node` and `kept_reason` attributes (custom dimensions in Application Insights) name
    the node and the reason code. Every code is counted per
    distinct node; the verdicts of the latest finished poll (`_track_utilization_polls` marks
    where each begins and ends; a poll skipped because ARM throttled discovery does not count)
    say which nodes are kept now. An in-process runner only: a child process's records never come here.
    """

    POLL_SKIPPED = "skipping this poll"  # shared.services.observe's warning when ARM throttles discovery

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._guard = threading.Lock()
        self._nodes_by_code: dict[str, set[str]] = {}
        self._latest: dict[str, tuple[str, str]] = {}  # node -> (code, message)
        self._current: dict[str, tuple[str, str]] | None = None  # the poll under way
        self._poll_thread: int | None = None
        self._skipped = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "shared.services.observe" and self.POLL_SKIPPED in record.getMessage():
            with self._guard:
                self._skipped = self._skipped or record.thread == self._poll_thread
            return
        node, code = getattr(record, "node", None), getattr(record, "kept_reason", None)
        if record.name != "shared.services.utilization" or node is None or code is None:
            return
        node, code = str(node), str(code)
        text = record.getMessage()
        prefix = f"node {node} kept ({code}): "
        message = text[len(prefix):] if text.startswith(prefix) else text
        with self._guard:
            self._nodes_by_code.setdefault(code, set()).add(node)
            if self._current is not None and record.thread == self._poll_thread:
                self._current[node] = (code, message)
            elif self._poll_thread is None:
                self._latest[node] = (code, message)  # polls not tracked: the last word about each node

    def begin_poll(self) -> None:
        with self._guard:
            self._current, self._poll_thread, self._skipped = {}, threading.get_ident(), False

    def end_poll(self, *, completed: bool) -> None:
        with self._guard:
            if completed and not self._skipped and self._current is not None:
                self._latest = self._current
            self._current = None

    def reason_counts(self) -> dict[str, int]:
        """Reason code -> how many distinct nodes were kept for it at least once."""
        with self._guard:
            return {code: len(nodes) for code, nodes in sorted(self._nodes_by_code.items())}

    def kept_nodes(self) -> dict[str, str]:
        """Node -> `<code>: <message>`, for the nodes the latest poll kept."""
        with self._guard:
            return {node: f"{code}: {message}" for node, (code, message) in sorted(self._latest.items())}

    def protected_nodes(self) -> set[str]:
        """Nodes the latest poll kept for a protection (PROTECTION_CODES)."""
        with self._guard:
            return {node for node, (code, _) in self._latest.items() if code in PROTECTION_CODES}


def _track_utilization_polls(runner: LocalRunner, kept: _KeptLog) -> None:
    """Wrap the runner's poll_utilization so `kept` sees where each poll begins and ends."""
    for index, timer in enumerate(runner.timers):
        if timer.name != "poll_utilization":
            continue

        def tracked(*args: Any, _call: Any = timer.call, **kwargs: Any) -> Any:
            kept.begin_poll()
            completed = False
            try:
                result = _call(*args, **kwargs)
                completed = True
                return result
            finally:
                kept.end_poll(completed=completed)

        runner.timers[index] = replace(timer, call=tracked)


def run_scenario(
    scenario: str,
    *,
    out_dir: Path,
    speed: float = 30.0,
    seed: int = 0,
    duplicate_delivery: bool = False,
    live: bool = True,
    wall_timeout: float = 170.0,
    extra_settings: dict[str, str] | None = None,
    kill_runner_during: str | None = None,
) -> dict[str, Any]:
    """Run one scenario to convergence (or the timeout); return the summary, also written to out_dir.

    `wall_timeout` is how long the run may take on an idle machine: it gives up once its sim time has gone that
    far (`wall_timeout * speed`), or stood still (SimProgress), never merely because a busy machine made it slow.

    `kill_runner_during` (a scale-down step, e.g. "drain") runs the runner as a child process that is
    SIGKILLed and restarted once an action is at that step; the summary then holds `runner_restarts`
    and `crash_check` (devtools/crash.py).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:12]
    actions = _ActionLog()
    logging.getLogger().addHandler(actions)
    kept = _KeptLog()
    logging.getLogger().addHandler(kept)
    # A lease on the one Azurite every demo and test session on this machine shares: whoever started it
    # stops it only once the last user is done, so a run never loses its storage halfway through.
    azurite = contextlib.ExitStack()
    azurite.enter_context(shared_azurite())
    try:
        with sandbox_process(scenario, speed=speed, seed=seed, workdir=out_dir / "sandbox") as sandbox:
            env = {
                **os.environ,
                **sandbox.env,
                "AzureWebJobsStorage": connection_string(),
                # A fresh table and queue per run: Azurite may be a developer's long-running one, shared
                # with other runs at the same time (each would take, or clear, the other's messages).
                "STATE_TABLE": f"demo{run_id}",
                "SCALE_ACTIONS_QUEUE": f"demo-{run_id}",
                **demo_settings(speed),
                **SCENARIO_OPTIONS.get(scenario, {}).get("settings", {}),
                **(extra_settings or {}),
            }
            runner: LocalRunner | RestartingRunner
            if kill_runner_during:
                if duplicate_delivery:
                    raise ValueError("duplicate delivery is an in-process runner's option; not with kill_runner_during")
                runner = RestartingRunner(env, sandbox_url=sandbox.url, kill_during=kill_runner_during, out_dir=out_dir,
                                          sim_seconds=lambda: float(sandbox.get("/sandbox/clock")["sim_seconds"]),
                                          log_sink=actions.lines.append)
            else:
                runner = build_runner(env, sandbox_url=sandbox.url, duplicate_delivery=duplicate_delivery)
                _track_utilization_polls(runner, kept)
            from shared.context import get_context

            context = get_context()
            _reset_storage(context)
            view = LiveView(scenario, sandbox, actions, enabled=live)
            ended: dict[str, bool] = {}

            progress = SimProgress(sim_budget=wall_timeout * speed, stall_wall_seconds=STALL_WALL_SECONDS)

            def finished() -> bool:
                if _converged(sandbox, runner, view, kept):
                    ended["converged"] = True
                    return True
                state = view.last_state or {}
                # The sandbox's clock stops at the scenario's duration (ARM's throttling buckets with it):
                # nothing after that is a measurement, so the run ends there, not converged.
                if state.get("done_reason") == "duration-reached":
                    return True
                return progress.exhausted(state.get("sim_seconds"), wall=time.monotonic())

            with view:
                runner.run(until=finished, wall_timeout=wall_timeout * WALL_CAP_FACTOR, on_tick=view.refresh)
            if progress.ended_by:
                log.warning("run ended before converging: %s", progress.ended_by)
            converged = ended.get("converged", False)
            report = sandbox.get("/sandbox/report")
            ledger = context.ports.state.list_ledger()
            mapping, refused, unneeded_by_group = _final_view(context)
            summary = build_summary(scenario, report, ledger,
                                    converged=converged, wall_seconds=time.monotonic() - started, runner=runner,
                                    kept=kept, unneeded_time_s=unneeded_by_group)
            summary["state"] = _state_rows(context, report["nodes_by_group"])
            summary["node_mapping"], summary["refused_groups"] = mapping, refused
            summary["capacity_buffers"] = buffers_at_end(context)
            from sandbox.model.scenario import load_scenario

            loaded = load_scenario(scenario)
            summary["expectations"] = (check_expectations(summary, loaded.expect_at_most)
                                       + check_expectations(summary, loaded.expect_at_least, at_least=True))
            if isinstance(runner, RestartingRunner):
                summary["runner_restarts"] = runner.restart_report(ledger)
                summary["runner_processes"] = runner.process_report()
                summary["crash_check"] = {"kill_runner_during": kill_runner_during,
                                          "problems": crash_resume_problems(summary)}
            (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            from devtools.timeline import write_timeline

            write_timeline(report, out_dir / "timeline.png", title=f"scenario {scenario}")
            return summary
    finally:
        logging.getLogger().removeHandler(actions)
        logging.getLogger().removeHandler(kept)
        azurite.close()
        from shared.context import install_context

        install_context(None)


def _state_rows(context: Any, group_ids: Iterable[str]) -> dict[str, Any]:
    """What Table storage holds at the end: per group cooldown rows, and nodes still marked unneeded."""
    state = context.ports.state
    rows = {}
    for group_id in group_ids:
        row = state.get_group(group_id)
        rows[group_id] = {
            "last_scale_up": row.last_scale_up.isoformat() if row.last_scale_up else None,
            "last_scale_down": row.last_scale_down.isoformat() if row.last_scale_down else None,
            "last_failure": row.last_failure.isoformat() if row.last_failure else None,
            "deleting": list(row.removing),
        }
    return {"groups": rows, "unneeded": {n: t.isoformat() for n, t in state.list_unneeded().items()}}


def _reset_storage(context: Any) -> None:
    """A demo starts from empty state; Azurite may be a developer's long-running one."""
    context.ports.queue.clear()
    context.ports.queue.poison().clear()


@dataclass
class SimProgress:
    """When a run that has not converged gives up, judged by its sim time rather than the wall clock.

    `exhausted` is asked with the sandbox's latest sim time: True once it reached `sim_budget`, or once it has not
    moved for `stall_wall_seconds` of wall time (`ended_by` then says which).
    """

    sim_budget: float
    stall_wall_seconds: float
    ended_by: str = ""
    _last_sim: float | None = None
    _moved_at: float | None = None

    def exhausted(self, sim_seconds: float | None, *, wall: float) -> bool:
        if self._moved_at is None:
            self._moved_at = wall
        if sim_seconds is not None and (self._last_sim is None or sim_seconds > self._last_sim):
            self._last_sim, self._moved_at = sim_seconds, wall
        if self._last_sim is not None and self._last_sim >= self.sim_budget:
            self.ended_by = f"sim time reached its budget of {self.sim_budget:.0f}s"
        elif wall - self._moved_at >= self.stall_wall_seconds:
            self.ended_by = f"sim time stood still at {self._last_sim}s for {self.stall_wall_seconds:.0f} wall seconds"
        return bool(self.ended_by)


def _converged(
    sandbox: SandboxProcess, runner: LocalRunner | RestartingRunner, view: LiveView, kept: _KeptLog | None = None
) -> bool:
    """The workload is done and the autoscaler has nothing left to do.

    Settled means: no scale action queued or in flight, no node booting or being deleted, and no
    autoscaled group holding an idle node above its minimum (one the autoscaler should still remove).
    An idle node the latest utilisation poll kept for a protection (PROTECTION_CODES, e.g. the
    scale-down-disabled annotation) stays on purpose: it is not one of those. Pods left Pending: those the
    scenario's `expect_unschedulable` names (`expected_unschedulable_met`), or without that field, those no pool
    could hold even empty.
    """
    state = view.last_state
    if not state or not state.get("done"):
        return False
    expected = state.get("expect_unschedulable")
    if expected is not None:
        if not expected_unschedulable_met(expected, pending=state.get("pending", 0)):
            return False
    elif state.get("pending", 0) - state.get("pending_unplaceable", 0) - state.get("pending_provider_failed", 0):
        # A pod no pool could hold even empty stays pending for good; the autoscaler rightly leaves it. So does one
        # a virtual node's provider refused (ProviderFailed): nothing retries it (summary.json's virtual_node).
        return False
    protected = kept.protected_nodes() if kept is not None else set()
    for group_id, group in state.get("groups", {}).items():
        if group["booting"] or group["deleting"] or group["ready"] + group.get("deallocated", 0) != group["target"]:
            return False
        if group.get("autoscaled", True) and group["idle"] and group["ready"] > group["min"]:
            staying = set(state.get("idle_nodes", {}).get(group_id, ())) & protected
            if group["idle"] > len(staying):
                return False
    return runner.queue_is_idle()


def expected_unschedulable_met(expected: dict[str, Any], *, pending: int) -> bool:
    """The scenario's `expect_unschedulable`, met: the pods still Pending are exactly the expected ones (no other
    pod waits, each named workload has its count waiting), and the autoscaler reported each as unplaceable."""
    waiting = [pod for workload in expected.values() for pod in workload["pending"]]
    return (
        pending == len(waiting)
        and all(len(workload["pending"]) == workload["expected"] for workload in expected.values())
        and all(pod["reason"] for pod in waiting)
    )
def _events_by_workload(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Event reasons per workload (pods' events summed over the workload's pods), other objects by their key."""
    workload_of = {f"{p['namespace']}/{p['name']}": p["workload"] for p in report["pods"]}
    result: dict[str, dict[str, int]] = {}
    for about, reasons in report.get("events_by_object", {}).items():
        into = result.setdefault(workload_of.get(about, about), {})
        for reason, count in reasons.items():
            into[reason] = into.get(reason, 0) + count
    return dict(sorted(result.items()))


def _waits_by_workload(pods: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per workload, the longest a pod waited from creation to running (binding, on a VM node; its container
    group running, on a virtual node); None when one of its pods never ran. A pod ACI refused is left out: its
    replacement waits from its creation."""
    result: dict[str, float | None] = {}
    for pod in pods:
        if pod.get("outcome") == "failed":
            continue
        wait = None if pod.get("started") is None else pod["started"] - pod["waiting_since"]
        key = pod["workload"]
        if key in result and (result[key] is None or wait is None):
            result[key] = None
        else:
            result[key] = wait if key not in result else max(result[key] or 0.0, wait or 0.0)
    return dict(sorted(result.items()))


def check_expectations(summary: dict[str, Any], bounds: Iterable[tuple[str, float]], *,
                       at_least: bool = False) -> list[dict[str, Any]]:
    """The scenario's `expect_at_most` (or, `at_least`, `expect_at_least`) bounds against the summary: one row
    per bound, `met` or a `problem`."""
    rows = []
    key = "at_least" if at_least else "at_most"
    for path, bound in bounds:
        value: Any = summary
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            rows.append({"path": path, key: bound, "value": value, "met": False,
                         "problem": f"summary.json has no number at {path}"})
            continue
        met = value >= bound if at_least else value <= bound
        side = "less" if at_least else "more"
        rows.append({"path": path, key: bound, "value": value, "met": met,
                     **({} if met else {"problem": f"{path} is {value:g}, {side} than {bound:g}"})})
    return rows


def removal_lag(report: dict[str, Any], *, unneeded_time_s: float | Mapping[str, float],
                group: str | None = None) -> dict[str, float | int]:
    """How late removals started: for each node removed while empty, the time from when it became removable
    (its last pod gone, or its creation, plus its group's unneeded time) to its delete starting; p50, p95, max.

    `unneeded_time_s`: one time for every group, or per group id (a group missing from it counts from the
    moment its node was empty, which only overstates the lag).

    Nodes removed with pods still on them (drained, or waited for) are left out: when those became
    removable depends on the autoscaler's utilisation rules, which the sandbox does not judge.
    `group`: only that group's nodes."""
    stopped: dict[str, list[float]] = {}
    for pod in report["pods"]:
        # A pod leaves its node when it finishes, or when it stops otherwise (evicted, deleted, killed).
        ends = [t for t in (pod.get("finished"), pod.get("stopped")) if t is not None]
        if pod.get("node") and ends:
            stopped.setdefault(pod["node"], []).append(min(ends))
    lags = []
    for entry in report.get("scale_down_order", []):
        if entry["pods"] or entry.get("delete_started_at") is None or (group is not None and entry["group"] != group):
            continue
        created = entry["cordoned_at"] - entry["age_seconds"]
        last = max([created, *(t for t in stopped.get(entry["node"], []) if t <= entry["cordoned_at"])])
        keep = (unneeded_time_s if isinstance(unneeded_time_s, int | float)
                else unneeded_time_s.get(entry["group"], 0.0))
        lags.append(max(0.0, entry["delete_started_at"] - (last + keep)))
    lags.sort()
    return {"nodes": len(lags), "p50": _percentile(lags, 50), "p95": _percentile(lags, 95),
            "max": round(lags[-1], 1) if lags else 0}


def ready_at_first_pod(report: dict[str, Any]) -> dict[str, int]:
    """Per group, its Ready nodes when the first workload pod was created (the latest timeline sample at or before
    it): capacity that was there before any pod asked, as a scheduled window or a standby promises. Empty when no
    workload pod was created."""
    created = [p["created"] for p in report["pods"] if p.get("created") is not None]
    samples = [s for s in report.get("timeline", []) if created and s["t"] <= min(created)]
    if not samples:
        return {}
    return {group: counts["ready"] for group, counts in sorted(samples[-1]["groups"].items())}


def first_removal_s(report: dict[str, Any]) -> dict[str, float]:
    """Per group that removed a node, when its first removal started (the node cordoned), in sim seconds: a
    scheduled window's capacity is kept until the window closes and released after."""
    first: dict[str, float] = {}
    for entry in report.get("scale_down_order", []):
        first[entry["group"]] = min(first.get(entry["group"], entry["cordoned_at"]), entry["cordoned_at"])
    return dict(sorted(first.items()))


_SCALE_SET_WRITES = frozenset({"PATCH virtualMachineScaleSets", "PUT virtualMachineScaleSets", "POST delete",
                               "POST deallocate", "POST start"})


def buffers_at_end(context: Any) -> dict[str, dict[str, Any]]:
    """Each CapacityBuffer at the end as the cluster holds it: spec.replicas, and the status the autoscaler wrote
    (replicas, readyReplicas, conditions as `status (reason)`). Empty without buffers or their CRD."""
    listed = context.ports.cluster.list_capacity_buffers() or []
    return {f"{b.namespace}/{b.name}": {
        "spec_replicas": b.replicas, "replicas": b.status.replicas, "ready_replicas": b.status.ready_replicas,
        "conditions": {c.type: f"{c.status} ({c.reason})" for c in b.status.conditions}} for b in listed}


def _final_view(context: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, float]]:
    """How nodes map to instances at the end (a fresh observe, as a poll would see them) in the status
    ConfigMap's layout (nodes per method, unmanaged and ambiguous counts, the nodes left alone with why), the
    groups marked for the autoscaler that it refuses (group id -> why), and each group's unneeded time in
    seconds as the planner applies it now (`scale_down.group_rules`: in break-even idle mode it follows the
    group's measured boots, so it may have moved during the run; the end's is what removal lag is read against)."""
    from shared.engine.status import node_mapping_doc
    from shared.services.observe import observe
    from shared.services.plan import unneeded_times_by_group

    snapshot = observe(context.ports, now=context.ports.clock.now(), node_mapping=context.settings.node_mapping)
    unneeded = unneeded_times_by_group(snapshot.groups, context.settings, context.ports.state)
    return node_mapping_doc(snapshot), dict(snapshot.refused), {g: t.total_seconds() for g, t in unneeded.items()}


def build_summary(
    scenario: str, report: dict[str, Any], ledger: list[Any], *, converged: bool, wall_seconds: float,
    runner: LocalRunner | RestartingRunner, kept: _KeptLog | None = None,
    unneeded_time_s: float | Mapping[str, float] = 600.0,
) -> dict[str, Any]:
    # A replacement of a pod ACI refused waits from the refused pod's creation (`waiting_since`).
    waits = sorted(p["started"] - p["waiting_since"] for p in report["pods"] if p.get("started") is not None)

    def outcome_count(kind: str, prefix: str) -> int:
        return sum(1 for e in ledger if e.kind == kind and e.outcome.startswith(prefix))

    return {
        "scenario": scenario,
        "converged": converged,
        "sim_seconds": report["sim_seconds"],
        "wall_seconds": round(wall_seconds, 1),
        "pods_total": report["pods_total"],
        "pods_completed": report["pods_completed"],
        "pods_unschedulable_at_end": report["pods_unschedulable"],
        # The scenario's expect_unschedulable: pods left Pending on purpose, each with the autoscaler's reason.
        "expected_unschedulable": [
            {"workload": workload, **pod}
            for workload, entry in report.get("expect_unschedulable", {}).items() for pod in entry["pending"]
        ],
        "pending_wait_s": {"p50": _percentile(waits, 50), "p95": _percentile(waits, 95), "max": waits[-1] if waits else 0},
        "running_pods_evicted": report["running_pods_evicted"],
        "running_pods_evicted_by_workload": _evicted_by_workload(report["pods"]),
        "pods_killed": report.get("pods_killed", 0),
        # Writes to nodes of no scale set (a k3s server): the autoscaler must never touch them.
        "unmanaged_nodes_touched": sum(report.get("unmanaged_nodes_touched", {}).values()),
        "unmanaged_nodes_touched_by_node": report.get("unmanaged_nodes_touched", {}),
        # Writes to scale sets themselves (capacity, deleteInstances, power): none when every group is an AKS pool.
        "direct_scale_set_writes": sum(
            count for call, count in report["api_calls"].get("breakdown", {}).get("arm", {}).items()
            if isinstance(count, int) and call in _SCALE_SET_WRITES),
        "node_seconds": round(report["node_seconds"], 1),
        "nodes_max": report["nodes_max"],
        "nodes_by_group_at_end": {group: counts["ready"] for group, counts in report["nodes_by_group"].items()},
        # Warm standby: instances deallocated at the end (deallocating included), and starts of deallocated
        # instances over the run (a scale-up using the standby), per group.
        "standby": {
            "deallocated_at_end": {group: counts.get("deallocated", 0)
                                   for group, counts in report["nodes_by_group"].items()},
            "instances_started": sum(report["api_calls"].get("breakdown", {}).get("arm", {})
                                     .get("instances_started", {}).values()),
        },
        "placements": _placements(report["pods"]),
        "events": dict(sorted(report.get("events_by_reason", {}).items())),
        "events_by_workload": _events_by_workload(report),
        "pod_wait_s_by_workload": _waits_by_workload(report["pods"]),
        "instances_created_by_group": report.get("instances_created_by_group", {}),
        # Instance-mix scale sets (sandbox `instance_mix`): VMs created and alive by size, pods by workload and size.
        "instance_mix": report.get("instance_mix"),
        # Nodes removed, in the order their removal started (cordoned), with their age and utilisation then.
        "scale_down_order": report.get("scale_down_order", []),
        # A render queue's frames (sandbox `render_queue`): put back after their worker stopped, and the whole tally.
        "frames_interrupted": (report.get("render_queue") or {}).get("frames_interrupted", 0),
        "render_queue": report.get("render_queue"),
        # The scenario's virtual node (sandbox `virtual_node`): ACI pods started and refused, cost, where pods ended.
        "virtual_node": report.get("virtual_node"),
        # Spot scale sets (sandbox `evictions`, `spot_capacity`): evictions, lost work, stale Nodes, fallbacks;
        # and the Compute quotas (sandbox `quotas`): peak usage and the capacity requests refused for quota.
        "spot": report.get("spot"),
        "spot_outcome": spot_outcome(report),
        "quota": report.get("quota"),
        "standby_pools": report.get("standby_pools") or {},
        # Instances a successful capacity increase left Failed (sandbox `allocation_failures`): deleted, how soon,
        # and how soon another scale set was grown.
        "allocation": report.get("allocation"),
        # Gang jobs (sandbox `gang_jobs`, `kueue`): attempts, admissions, gang waits, capacity held by partial gangs.
        "gang_jobs": report.get("gang_jobs"),
        "gang_outcome": gang_outcome(report),
        # Replacements: the new node before the old one's drain, no node with a Job running cordoned.
        "replacement_outcome": replacement_outcome(report),
        # Model changes (sandbox `model_changes`): stale instances replaced, left at the end, most disrupted at once.
        "drift": report.get("drift"),
        "capacity_added": capacity_added(report),
        # What the autoscaler made of it: pods left on ACI, moved back onto VMs, and how long they stayed there.
        "virtual_node_outcome": virtual_node_outcome(report),
        # How long after becoming removable each node removed while empty started to be deleted (seconds).
        "removal_lag_s": removal_lag(report, unneeded_time_s=unneeded_time_s),
        "removal_lag_s_by_group": {g: removal_lag(report, unneeded_time_s=unneeded_time_s, group=g)
                                   for g in sorted({e["group"] for e in report.get("scale_down_order", [])})},
        # How long each new node took from the capacity increase that created its VM to registering (seconds): p50,
        # p95, max over all nodes and per group, and each node's own figure (the sandbox's `node_registration`).
        "node_registration_s": (report.get("node_registration") or {}).get("seconds"),
        "node_registration_s_by_group": (report.get("node_registration") or {}).get("seconds_by_group", {}),
        "node_registrations": (report.get("node_registration") or {}).get("nodes", []),
        # Capacity ahead of demand: each group's Ready nodes when the first workload pod was created, and when its
        # first removal started (sim seconds; groups that removed none left out).
        "ready_at_first_pod_by_group": ready_at_first_pod(report),
        "first_removal_s_by_group": first_removal_s(report),
        # Reason code -> distinct nodes kept for it during the run; node -> its reason in the latest poll.
        "kept_reasons": kept.reason_counts() if kept is not None else {},
        "kept_nodes": kept.kept_nodes() if kept is not None else {},
        "groups_at_end": report["nodes_by_group"],
        "actions": {
            "scale_up": outcome_count("scale_up", "succeeded"),
            "scale_down": outcome_count("scale_down", "succeeded"),
            "skipped": sum(1 for e in ledger if e.outcome.startswith("skipped")),
            "failed": sum(1 for e in ledger if e.outcome.startswith("failed")),
            "rejected": sum(1 for e in ledger if e.outcome.startswith("rejected")),
            "duplicates_suppressed": sum(e.duplicates for e in ledger),
        },
        "api_calls": {k: report["api_calls"][k] for k in ("arm_reads", "arm_writes", "k8s_reads", "k8s_writes")},
        "api_breakdown": report["api_calls"].get("breakdown", {}),
        # Accepted delete requests naming each instance ("<scale set>/<instance id>"): 1 each, or something deleted twice.
        "deletes_by_instance": report["api_calls"].get("breakdown", {}).get("arm", {}).get("instances_deleted", {}),
        "runner": {"timer_invocations": runner.stats.timer_invocations, "queue_invocations": runner.stats.queue_invocations,
                   "failures": runner.stats.failures, "poisoned": runner.stats.poisoned},
    }


NOTICE_SECONDS = 30.0  # Azure's Preempt notice comes (at least) this long before the eviction


def spot_outcome(report: dict[str, Any]) -> dict[str, Any] | None:
    """How the autoscaler answered each spot eviction (None without any).

    `notice_lead_s_min`: for evictions announced by a Preempt notice, the least time by which a capacity increase
    made after the notice came before the VM went (positive: replacements asked for before the VM was gone;
    None for one never answered); `no_notice_lag_s_max`: for evictions without notice, the most time from the
    VM going to the next capacity increase; `unanswered`: evictions no capacity increase followed.
    """
    spot = report.get("spot")
    if not spot or not spot.get("eviction_log"):
        return None
    increases = sorted(e["t"] for e in spot.get("capacity_increases", []) if e.get("outcome") == "ok")
    leads, lags, unanswered = [], [], 0
    for eviction in spot["eviction_log"]:
        since = eviction["t"] - NOTICE_SECONDS if eviction["notice"] else eviction["t"]
        first = next((t for t in increases if t >= since), None)
        if first is None:
            unanswered += 1
        elif eviction["notice"]:
            leads.append(round(eviction["t"] - first, 1))
        else:
            lags.append(round(first - eviction["t"], 1))
    return {"notice_lead_s_min": min(leads) if leads else None, "no_notice_lag_s_max": max(lags) if lags else None,
            "unanswered": unanswered}


def replacement_outcome(report: dict[str, Any]) -> dict[str, Any]:
    """Replacements (consolidation, drift): capacity first, then the drain; busy batch nodes left alone.

    `drain_lead_s_min`: over the removals of nodes that were there at the start, the least time from the first new
    node registering to the removal's cordon (positive: the new capacity came first; None when no new node came or
    no old node was removed); `job_nodes_cordoned_early`: removals cordoned while a Job pod that ran on the node had
    not ended yet (the sandbox registers a node Ready, so registration stands for Ready here).
    """
    registered = {r["node"]: r["registered"] for r in (report.get("node_registration") or {}).get("nodes", [])
                  if r.get("registered") is not None}
    first_new = min(registered.values(), default=None)
    jobs = _job_workloads(report)
    job_end: dict[str, float] = {}
    for pod in report["pods"]:
        if pod.get("workload") in jobs and pod.get("node") and pod.get("started") is not None:
            end = pod.get("finished") or pod.get("stopped") or float("inf")
            job_end[pod["node"]] = max(job_end.get(pod["node"], 0.0), end)
    old = [r for r in report.get("scale_down_order", []) if r["node"] not in registered]
    leads = [round(r["cordoned_at"] - first_new, 1) for r in old if first_new is not None]
    return {"drain_lead_s_min": min(leads) if leads else None,
            "job_nodes_cordoned_early": sum(1 for r in report.get("scale_down_order", [])
                                            if r["cordoned_at"] < job_end.get(r["node"], 0.0))}


def gang_outcome(report: dict[str, Any]) -> dict[str, Any] | None:
    """The gang jobs' attempts counted by outcome (`succeeded`, `failed`, `booking-expired`, `pod-lost`) and by the
    reason of the condition that ended them (`QuotaExceeded`, `BookingExpired`, ...), so a scenario can bound them;
    None without gang jobs."""
    gangs = report.get("gang_jobs")
    if not gangs:
        return None
    outcomes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for job in gangs["jobs"].values():
        for attempt in job["attempts"]:
            if attempt["outcome"]:
                outcomes[attempt["outcome"]] = outcomes.get(attempt["outcome"], 0) + 1
            if attempt["reason"]:
                reasons[attempt["reason"]] = reasons.get(attempt["reason"], 0) + 1
    return {"attempts_by_outcome": dict(sorted(outcomes.items())), "attempts_by_reason": dict(sorted(reasons.items()))}


def capacity_added(report: dict[str, Any]) -> dict[str, int] | None:
    """Instances added by accepted capacity increases (and starts) before and after the first quota change of the
    scenario's `quota_changes` (None without one): what a quota too small for a whole request let through."""
    changes = (report.get("gang_jobs") or {}).get("quota_changes") or []
    if not changes:
        return None
    at = min(change["t"] for change in changes)
    added = {"before_first_quota_change": 0, "after_first_quota_change": 0}
    for entry in (report.get("spot") or {}).get("capacity_increases", []):
        if entry["outcome"] == "ok" and entry["to"] > entry["from"]:
            added["before_first_quota_change" if entry["t"] < at else "after_first_quota_change"] += (
                entry["to"] - entry["from"])
    return added


def virtual_node_outcome(report: dict[str, Any]) -> dict[str, Any] | None:
    """Where pods ended with a virtual node in the scenario (None without one).

    `on_virtual_node_at_end`: pods still running or waiting there; `on_vms_at_end`: workload pods running on VM
    nodes; `moved_back`: pods evicted from the virtual node while running (the backfill); `batch_evicted`: Job
    pods evicted anywhere (never expected); `max_seconds_on_aci`: the longest a moved pod ran on ACI first.
    """
    block = report.get("virtual_node")
    if block is None:
        return None
    name = block["node"]
    pods = [p for p in report["pods"] if p.get("workload")]
    live = [p for p in pods if p["outcome"] in ("running", "pending")]
    moved = [p for p in pods if p["node"] == name and p["evicted_while_running"]]
    return {
        "on_virtual_node_at_end": sum(1 for p in live if p["node"] == name),
        "on_vms_at_end": sum(1 for p in live if p["node"] not in (None, name) and p["outcome"] == "running"),
        "moved_back": len(moved),
        "batch_evicted": sum(1 for p in pods if p["evicted_while_running"] and p["workload"] in _job_workloads(report)),
        "max_seconds_on_aci": round(max((p["stopped"] - p["started"] for p in moved
                                         if p["started"] is not None and p["stopped"] is not None), default=0.0), 1),
    }


def _job_workloads(report: dict[str, Any]) -> set[str]:
    return {name for name, kind in (report.get("workload_kinds") or {}).items() if kind == "Job"}


def _evicted_by_workload(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Pods evicted while running, per workload (a ReplicaSet's are expected in a drain; a Job's are not)."""
    counts: dict[str, int] = {}
    for pod in pods:
        if pod.get("evicted_while_running"):
            workload = pod.get("workload") or "(none)"
            counts[workload] = counts.get(workload, 0) + 1
    return dict(sorted(counts.items()))


def _placements(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Pods per node group they ran on (a pod evicted and replaced counts once per pod object)."""
    counts: dict[str, int] = {}
    for pod in pods:
        if pod.get("group"):
            counts[pod["group"]] = counts.get(pod["group"], 0) + 1
    return dict(sorted(counts.items()))


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    rank = max(0, min(len(values) - 1, round(pct / 100 * len(values) + 0.5) - 1))  # nearest-rank
    return round(values[rank], 1)


STATE_TIMEOUT_SECONDS = 5.0  # the live view's wait for the sandbox's state; a later refresh asks again


class LiveView:
    """Nodes per group, pending pods and the latest actions, redrawn as the scenario runs."""

    def __init__(self, scenario: str, sandbox: SandboxProcess, actions: _ActionLog, *, enabled: bool) -> None:
        self._scenario = scenario
        self._sandbox = sandbox
        self._actions = actions
        self._enabled = enabled
        self._live: Any = None
        self._last_fetch = 0.0
        self._last_print = 0.0
        self.last_state: dict[str, Any] = {}
        self.skipped = 0  # refreshes the sandbox did not answer in time

    def __enter__(self) -> LiveView:
        if self._enabled and sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(self._render(), refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)
        elif self._enabled:
            print(self._line(), flush=True)

    def refresh(self) -> None:
        """Fetch the sandbox's state and redraw. A sandbox slow to answer (a busy machine) is skipped: the view and
        the convergence check keep the last state until the next refresh, a view never ends the run."""
        now = time.monotonic()
        if now - self._last_fetch < 0.5:
            return
        self._last_fetch = now
        try:
            self.last_state = self._sandbox.get("/sandbox/state", timeout=STATE_TIMEOUT_SECONDS, attempts=1)
        except (OSError, ValueError) as exc:  # urllib's errors and timeouts are OSErrors; a cut-off body a ValueError
            if self._sandbox.process.poll() is not None:
                raise RuntimeError(f"the sandbox exited (code {self._sandbox.process.returncode}); see its log") from exc
            self.skipped += 1
            log.info("the sandbox's state did not come in %.0fs (%s); keeping the last one", STATE_TIMEOUT_SECONDS, exc)
            return
        if self._live is not None:
            self._live.update(self._render())
        elif self._enabled and now - self._last_print >= 5:
            self._last_print = now
            print(self._line(), flush=True)

    def _line(self) -> str:
        s = self.last_state
        groups = " ".join(f"{name}={g['ready']}r/{g['booting']}b/{g['deleting']}d(target {g['target']})"
                          for name, g in s.get("groups", {}).items())
        return f"[t={s.get('sim_seconds', 0):>6.0f}s] pending={s.get('pending', 0)} running={s.get('running', 0)} " \
               f"finished={s.get('finished', 0)} {groups}"

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        s = self.last_state
        table = Table(title=f"scenario {self._scenario}  t={s.get('sim_seconds', 0):.0f}s (sandbox time)")
        for column in ("node group", "target", "ready", "booting", "deleting", "min", "max"):
            table.add_column(column, justify="right" if column != "node group" else "left")
        for name, g in s.get("groups", {}).items():
            table.add_row(name, *(str(g.get(k, "")) for k in ("target", "ready", "booting", "deleting", "min", "max")))
        pods = f"pods: pending {s.get('pending', 0)}  running {s.get('running', 0)}  finished {s.get('finished', 0)}"
        recent = "\n".join(self._actions.lines) or "(no actions yet)"
        return Group(table, pods, "latest decisions and actions:", recent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="burst", help="a scenario name (sandbox/scenarios) or a file path")
    parser.add_argument("--speed", type=float, default=None,
                        help=f"sandbox seconds per wall second (default {DEFAULT_SPEED:g}, or the scenario's SCENARIO_OPTIONS)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default out/<scenario>)")
    parser.add_argument("--duplicate-delivery", action="store_true", help="deliver every queue message twice")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"wall seconds before giving up (default: {HELD_TIME_ALLOWANCE} times the scenario's duration at this "
                             "speed, plus a minute: the clock stands still while the runner works)")
    parser.add_argument("--kill-runner-during", choices=(*KILL_STEPS, "never"), default=None,
                        help="run the runner as a child process, SIGKILL it once a scale-down is at this step, restart it "
                             "and check that every action finished and no instance was deleted twice (default: the "
                             "scenario's SCENARIO_OPTIONS, e.g. drain for crash-resume; otherwise never)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)  # INFO from our loggers feeds the live view, not the terminal
    logging.getLogger("shared").setLevel(logging.INFO)
    name = Path(args.scenario).stem
    out_dir = args.out or ROOT / "out" / name
    kill = args.kill_runner_during or SCENARIO_OPTIONS.get(name, {}).get("kill_runner_during")
    kill = None if kill == "never" else kill
    speed = args.speed or SCENARIO_OPTIONS.get(name, {}).get("speed", DEFAULT_SPEED)
    timeout = args.timeout
    if timeout is None:
        from sandbox.model.scenario import load_scenario

        timeout = load_scenario(args.scenario).duration / speed * HELD_TIME_ALLOWANCE + 60
    summary = run_scenario(args.scenario, out_dir=out_dir, speed=speed, seed=args.seed,
                           duplicate_delivery=args.duplicate_delivery, wall_timeout=timeout, kill_runner_during=kill)
    print(json.dumps({k: summary[k] for k in ("scenario", "converged", "pods_total", "pods_completed",
                                              "running_pods_evicted", "nodes_max", "nodes_by_group_at_end",
                                              "pending_wait_s", "actions")}, indent=2))
    if kill:
        print(json.dumps({k: summary[k] for k in ("wall_seconds", "runner_restarts", "deletes_by_instance",
                                                  "running_pods_evicted_by_workload")}, indent=2))
    print(f"wrote {out_dir / 'summary.json'} and {out_dir / 'timeline.png'}")
    for row in summary["expectations"]:
        bound = f"<= {row['at_most']:g}" if "at_most" in row else f">= {row['at_least']:g}"
        print(f"expected {row['path']} {bound}: {row['value']}", "(met)" if row["met"] else "(NOT MET)")
    if not summary["converged"]:
        print("the scenario did not converge before its duration or the timeout (see summary.json)", file=sys.stderr)
        return 1
    unmet = [row["problem"] for row in summary["expectations"] if not row["met"]]
    if unmet:
        print(f"the scenario's expectations are not met: {'; '.join(unmet)}", file=sys.stderr)
        return 1
    if kill:
        problems = summary["crash_check"]["problems"]
        if problems:
            print(f"crash check failed (runner killed during {kill}):", file=sys.stderr)
            for problem in problems:
                print(f"  - {problem}", file=sys.stderr)
            return 1
        restart = summary["runner_restarts"][0]
        print(f"crash check passed: runner killed at t={restart['sim_seconds']}s during {kill} of "
              f"{', '.join(a['node'] for a in restart['in_flight'])}, restarted; every action it held finished and "
              f"each of the {len(summary['deletes_by_instance'])} deleted instances was deleted exactly once")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
