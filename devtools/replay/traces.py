"""Workload traces as the pods a replay creates: when each arrives, how long it runs, what it requests.

Two public Alibaba traces (see ../shared/traces/README.md) and one format of our own are read into
a `Trace`: a sorted tuple of `TracePod`s and a `note` that says, with its numbers, how the trace was
sampled, windowed or compressed. Every report prints the note, so a figure is never quoted without
the cut of the trace it came from. docs/traces.md documents the formats, the defaults and the
statistics they give; keep the three in step. A path to a raw public file (an openb pod list as
published, the 2018 batch tasks as CloudSimPy lays them out) is recognised by its header (`raw_format`)
and read like the named trace.

The Alibaba traces are far larger (2018: 2.55M pods, peak ~132k cores) or far sparser (2023: ~10 pods
an hour over 30 days) than a few simulated hours of a Python discrete-event replay can use, so each
reader has defaults that cut the trace to about eight hours of arrivals and a few hundred cores of
peak demand. Problems are reported as `TraceError`s naming the file, the line (or JSON index), the
field and what is wrong.

Run `python -m devtools.replay.traces [alibaba2018|alibaba2023|PATH ...]` for the statistics of a trace
as read with its defaults.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import random
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sandbox.model.scenario import SCENARIO_DIR
from sandbox.model.units import parse_bytes, parse_count, parse_cpu_milli, parse_duration

ROOT = Path(__file__).resolve().parents[2]
TRACE_DIR = ROOT.parent / "shared" / "traces"
TRACE_FILES: Mapping[str, str] = {
    "alibaba2018": "alibaba2018-batch-tasks.csv",
    "alibaba2023": "alibaba2023-openb-pods.csv",
}

MIB = 2**20
GPU_RESOURCE = "nvidia.com/gpu"
HOUR = 3600.0
DAY = 86_400.0

# alibaba2018 defaults (docs/traces.md has the statistics they give and how they were chosen).
ALIBABA2018_JOB_FRACTION = 0.01
ALIBABA2018_WINDOW = (0.0, 8 * HOUR)
# The trace normalises memory to the largest machine and never publishes its size; its machines have
# 96 cores. We assume 4 GiB per core, the general-purpose ratio (Azure's D96s_v5: 96 vCPUs, 384 GiB).
ALIBABA2018_MACHINE_MEMORY_GIB = 384.0

# alibaba2023 defaults: the busiest day and a half (days 147.5-149), arrivals 4.5x faster, so 8 h.
ALIBABA2023_WINDOW_DAYS = (147.5, 149.0)
ALIBABA2023_TIME_COMPRESSION = 4.5

# The raw public files' headers as published, and the columns their readers need. A file given by path
# whose header holds a reader's columns is read by that reader with the named trace's defaults.
ALIBABA2018_HEADER = ("", "submit_time", "duration", "cpu", "memory", "job_id", "task_id", "instances_num", "disk")
ALIBABA2018_REQUIRED = ("submit_time", "duration", "cpu", "memory", "job_id", "instances_num")
ALIBABA2023_HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                      "creation_time", "deletion_time", "scheduled_time")
ALIBABA2023_REQUIRED = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time",
                        "scheduled_time")

_USER_FIELDS = ("at", "duration", "cpu", "memory", "gpu", "job")
_USER_REQUIRED = ("at", "duration", "cpu", "memory")
_JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class TraceError(ValueError):
    """A trace file is missing, unreadable or invalid; the message names file, line or index, and field."""

    def __init__(self, source: str, where: str, field: str, problem: str) -> None:
        super().__init__(": ".join(part for part in (source, where, field, problem) if part))
        self.source = source
        self.where = where
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod to create during a replay, with its requests as the scheduler sees them."""

    at: float  # seconds after the trace's (replayed) start when the pod is created, >= 0
    duration: float  # seconds it runs once started, > 0
    cpu_milli: int  # CPU request, millicores, >= 1
    memory_bytes: int  # memory request, bytes, >= 1 MiB, whole MiB
    gpus: int = 0  # whole nvidia.com/gpu requested
    job: str = ""  # the job it belongs to (pods of one job share one Job owner); "" = its own bare pod

    def __post_init__(self) -> None:
        # Readers check their input with file and line; this catches a pod built by hand or by a bug.
        if not (self.at >= 0 and math.isfinite(self.at)):
            raise ValueError(f"TracePod.at must be a finite number of seconds >= 0, not {self.at!r}")
        if not (self.duration > 0 and math.isfinite(self.duration)):
            raise ValueError(f"TracePod.duration must be a finite number of seconds > 0, not {self.duration!r}")
        if self.cpu_milli < 1:
            raise ValueError(f"TracePod.cpu_milli must be at least 1, not {self.cpu_milli!r}")
        if self.memory_bytes < MIB or self.memory_bytes % MIB:
            raise ValueError(f"TracePod.memory_bytes must be a whole number of MiB, at least 1, "
                             f"not {self.memory_bytes!r}")
        if self.gpus < 0:
            raise ValueError(f"TracePod.gpus must be >= 0, not {self.gpus!r}")


@dataclass(frozen=True, slots=True)
class Trace:
    """The pods of one replay, sorted by (at, job), and how they were cut from their source."""

    name: str  # "alibaba2018", "alibaba2023", or the user file's stem
    source: str  # the file it came from
    pods: tuple[TracePod, ...]  # sorted by (at, job)
    note: str  # how it was sampled / windowed / compressed, with the numbers; printed in every report

    @property
    def span(self) -> float:
        """When the last pod would end if every pod started on arrival (0 for an empty trace)."""
        return max((pod.at + pod.duration for pod in self.pods), default=0.0)

    @property
    def arrivals_end(self) -> float:
        """When the last pod arrives (0 for an empty trace)."""
        return max((pod.at for pod in self.pods), default=0.0)


@dataclass(frozen=True, slots=True)
class TraceStats:
    """What a trace asks of a cluster if every pod started on arrival: the figures docs/traces.md quotes."""

    pods: int
    jobs: int  # distinct non-empty `job` values
    arrivals_end: float
    span: float
    peak_cores: float
    peak_gpus: int
    mean_cores: float  # averaged over [0, arrivals_end]
    core_hours: float
    duration_p50: float
    duration_p95: float

    def lines(self) -> list[str]:
        return [
            f"pods {self.pods:,} ({self.jobs:,} jobs), arrivals over {self.arrivals_end / HOUR:.2f} h, "
            f"all done by {self.span / HOUR:.2f} h",
            f"peak demand {self.peak_cores:,.0f} cores, {self.peak_gpus} GPUs; mean {self.mean_cores:,.0f} cores "
            f"while arriving; {self.core_hours:,.0f} core-hours",
            f"duration p50 {self.duration_p50:,.0f} s, p95 {self.duration_p95:,.0f} s",
        ]


def trace_stats(trace: Trace) -> TraceStats:
    """Peak and mean concurrent demand (unlimited capacity: each pod runs from `at` to `at + duration`)."""
    events: list[tuple[float, int, int]] = []
    for pod in trace.pods:
        events.append((pod.at, pod.cpu_milli, pod.gpus))
        events.append((pod.at + pod.duration, -pod.cpu_milli, -pod.gpus))
    events.sort(key=lambda event: (event[0], event[1]))  # at the same instant, ends before starts
    cpu = gpus = peak_cpu = peak_gpus = 0
    area = 0.0
    last = 0.0
    end = trace.arrivals_end
    for moment, d_cpu, d_gpus in events:
        if last < end:
            area += cpu * (min(moment, end) - last)
        last = moment
        cpu += d_cpu
        gpus += d_gpus
        peak_cpu = max(peak_cpu, cpu)
        peak_gpus = max(peak_gpus, gpus)
    durations = sorted(pod.duration for pod in trace.pods)
    return TraceStats(
        pods=len(trace.pods),
        jobs=len({pod.job for pod in trace.pods if pod.job}),
        arrivals_end=end,
        span=trace.span,
        peak_cores=peak_cpu / 1000,
        peak_gpus=peak_gpus,
        mean_cores=area / end / 1000 if end > 0 else 0.0,
        core_hours=sum(pod.cpu_milli * pod.duration for pod in trace.pods) / 1000 / HOUR,
        duration_p50=_percentile(durations, 0.50),
        duration_p95=_percentile(durations, 0.95),
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# ---------------------------------------------------------------------------------------------------
# Loading by name


def load_trace(name_or_path: str | Path, *, seed: int = 0, **options: Any) -> Trace:
    """A trace by name ("alibaba2018", "alibaba2023": the files in TRACE_DIR) or a path.

    A path is a raw public trace file when its header says so (`raw_format`: an Alibaba openb pod list
    as published, the 2018 batch tasks in CloudSimPy's jobs.csv layout), read as the named trace is,
    with the same defaults; otherwise it is in our user format (CSV or JSON).
    `seed` chooses the sampled jobs of alibaba2018; the other traces are not sampled and ignore it.
    `options` go to the reader (`read_alibaba2018`, `read_alibaba2023`); the user format takes none.
    """
    if isinstance(name_or_path, str) and name_or_path in TRACE_FILES:
        return _read_raw(name_or_path, TRACE_DIR / TRACE_FILES[name_or_path], seed=seed, **options)
    fmt = raw_format(name_or_path)
    if fmt is not None:
        return _read_raw(fmt, Path(name_or_path), seed=seed, **options)
    if options:
        raise TypeError(f"the user trace format takes no options, got {', '.join(sorted(options))}")
    path = Path(name_or_path)
    if isinstance(name_or_path, str) and path.suffix == "" and (SCENARIO_DIR / f"{name_or_path}.json").exists():
        return read_scenario(name_or_path, seed=seed)
    if not path.exists() and path.suffix == "":
        known = ", ".join([*TRACE_FILES, *sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))])
        raise TraceError(str(path), "", "", f"no such trace: neither a known name ({known}) nor a file")
    return read_pod_arrivals(path)


def _read_raw(fmt: str, path: Path, *, seed: int, **options: Any) -> Trace:
    if fmt == "alibaba2018":
        return read_alibaba2018(path, seed=seed, **options)
    return read_alibaba2023(path, **options)


# format -> (its header as published, the columns its reader needs)
_RAW_FORMATS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "alibaba2018": (ALIBABA2018_HEADER, ALIBABA2018_REQUIRED),
    "alibaba2023": (ALIBABA2023_HEADER, ALIBABA2023_REQUIRED),
}
_RAW_WORDS: Mapping[str, str] = {
    "alibaba2018": "Alibaba 2018 batch tasks in CloudSimPy's jobs.csv layout",
    "alibaba2023": "Alibaba 2023 openb pod list",
}
# A header is "almost" a raw format with at least this many of its published columns that our user format
# lacks: one column of ours (duration, cpu, memory) or one stray name is a user file with a typo, not a raw trace.
_RAW_LOOKALIKE_COLUMNS = 2


def raw_format(path: str | Path) -> str | None:
    """Which raw public trace a file is ("alibaba2018", "alibaba2023"), from its header; None for anything else.

    A header holding every column a reader needs is that format (extra columns are fine). A header
    that shares at least two of a format's published columns outside our user format, but lacks some
    the reader needs, is a TraceError naming the format and the missing columns. JSON files, files
    that do not exist and headers like neither (our user format, a headerless CSV) give None: the
    user-format reader reports them as it always has.
    """
    path = Path(path)
    if path.suffix.lower() == ".json" or not path.is_file():
        return None
    source = str(path)
    with _open(path) as handle:
        header = next(csv.reader(handle), None)
    if not header:
        return None
    names = {name.strip() for name in header}
    best: tuple[int, str, list[str]] | None = None
    for fmt, (published, required) in _RAW_FORMATS.items():
        missing = [name for name in required if name not in names]
        if not missing:
            return fmt
        shared = sum(1 for name in published if name and name not in _USER_FIELDS and name in names)
        if shared >= _RAW_LOOKALIKE_COLUMNS and (best is None or shared > best[0]):
            best = (shared, fmt, missing)
    if best is None:
        return None
    _, fmt, missing = best
    plural = "s" if len(missing) > 1 else ""
    raise TraceError(source, "line 1", ", ".join(missing),
                     f"missing column{plural}: the header looks like the {_RAW_WORDS[fmt]} ({fmt}), whose reader "
                     f"needs {', '.join(_RAW_FORMATS[fmt][1])}")


def read_scenario(name_or_path: str | Path, *, seed: int = 0) -> Trace:
    """A sandbox scenario's workloads as a trace (docs/scenarios.md), each pod drawn as the world draws it.

    The same seed gives the same arrival times, requests and durations as the scenario run by the
    sandbox. Pods without a duration (services) run until the scenario's end. Only what a trace holds
    is kept: requests, GPUs, times and the workload as the job; node selectors, tolerations, affinity,
    PDBs and the scenario's node groups are not (the replay's pools take their place).
    """
    from sandbox.model.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(name_or_path)
    except ScenarioError as exc:
        raise TraceError(exc.source, exc.path, "", exc.problem) from exc
    pods: list[TracePod] = []
    for spec in scenario.workloads:
        # The world's stream for this workload: it draws the owner's uid first, then each pod in turn.
        rng = random.Random(f"{seed}|workload|{spec.namespace}|{spec.name}")
        rng.getrandbits(128)
        for wave in range(spec.repeat_times):
            for _ in range(spec.count):
                at = spec.at + wave * spec.repeat_every + rng.uniform(0.0, spec.spread)
                cpu = max(1, round(spec.cpu.sample(rng)))
                memory = max(MIB, round(spec.memory.sample(rng) / MIB) * MIB)
                duration = scenario.duration - at if spec.duration is None else round(spec.duration.sample(rng), 3)
                if spec.ephemeral_storage is not None:
                    spec.ephemeral_storage.sample(rng)  # drawn by the world too: keeps the stream in step
                if at >= scenario.duration or duration <= 0:
                    continue
                pods.append(TracePod(at=round(at, 3), duration=duration, cpu_milli=cpu, memory_bytes=memory,
                                     gpus=int(spec.extended.get(GPU_RESOURCE, 0)), job=spec.name))
    if not pods:
        raise TraceError(scenario.source, "$.workloads", "", "the scenario has no workload pods to replay")
    note = (f"Sandbox scenario {scenario.name} (seed {seed}): {len(pods):,} pods drawn as the sandbox draws them; "
            "services run to the scenario's end; scheduling constraints and node groups not replayed.")
    return Trace(scenario.name, scenario.source, _sorted(pods), note)


@contextmanager
def _open(path: Path) -> Iterator[TextIO]:
    """The file as text; a missing or unreadable file is a TraceError (with a hint for the shared traces)."""
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        hint = " (the Alibaba traces live in ../shared/traces next to the repository; see its README)" \
            if path.parent == TRACE_DIR else ""
        raise TraceError(str(path), "", "", f"cannot read the file: {exc.strerror or exc}{hint}") from exc
    with handle:
        try:
            yield handle
        except UnicodeDecodeError as exc:
            raise TraceError(str(path), "", "", f"not UTF-8 text: {exc.reason}") from exc


def _header(reader: Any, source: str, required: Sequence[str], allowed: Sequence[str] | None = None) -> dict[str, int]:
    """Column name -> index from a CSV header line; names the missing, unknown and repeated columns."""
    header = next(reader, None)
    if header is None:
        raise TraceError(source, "line 1", "", f"empty file; expected a header naming {', '.join(required)}")
    names = [name.strip() for name in header]
    columns: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in columns:
            raise TraceError(source, "line 1", name, "column named twice in the header")
        if allowed is not None and name not in allowed:
            raise TraceError(source, "line 1", name, f"unknown column (expected {', '.join(allowed)})")
        columns[name] = index
    missing = [name for name in required if name not in columns]
    if missing:
        raise TraceError(source, "line 1", missing[0], f"missing column (the header needs {', '.join(required)})")
    return columns


def _cells(row: list[str], width: int, source: str, line: int) -> list[str] | None:
    """The row's cells, stripped; None for a blank line; a TraceError when its width is wrong."""
    if not row or all(not cell.strip() for cell in row):
        return None
    if len(row) != width:
        raise TraceError(source, f"line {line}", "", f"{len(row)} fields, but the header has {width}")
    return [cell.strip() for cell in row]


def _number(text: str, source: str, line: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(source, f"line {line}", field, f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(source, f"line {line}", field, f"{text!r} is not a finite number")
    return value


def _whole(text: str, source: str, line: int, field: str) -> int:
    value = _number(text, source, line, field)
    if value != int(value):
        raise TraceError(source, f"line {line}", field, f"{text!r} is not a whole number")
    return int(value)


def _sorted(pods: list[TracePod]) -> tuple[TracePod, ...]:
    pods.sort(key=lambda pod: (pod.at, pod.job))  # stable: ties keep file order
    return tuple(pods)


# ---------------------------------------------------------------------------------------------------
# Alibaba cluster-trace-v2018 batch tasks (as sampled by CloudSimPy)


def read_alibaba2018(
    path: str | Path,
    *,
    job_fraction: float = ALIBABA2018_JOB_FRACTION,
    seed: int = 0,
    window: tuple[float, float] | None = ALIBABA2018_WINDOW,
    machine_memory_gib: float = ALIBABA2018_MACHINE_MEMORY_GIB,
) -> Trace:
    """Whole jobs of the 2018 batch trace, each task instance one pod.

    Each job is chosen on its own with probability `job_fraction`, by a draw that depends only on
    `seed` and its job_id (so a larger fraction keeps every job a smaller one kept, and a file cut
    from the trace chooses the same jobs). Every instance of every task of a chosen job is a pod;
    dropping instances instead would make every job smaller, never fewer. `window` (trace seconds,
    [start, end); None: the whole trace) keeps the tasks submitted inside it, and their pods arrive
    at submit_time - start. Durations are the trace's, whether or not they end inside the window.
    Memory is the trace's fraction of a machine times `machine_memory_gib`, rounded up to whole MiB.
    Dependencies between tasks (the N_M task names) are not replayed: every task arrives at its submit time.
    """
    if not 0 < job_fraction <= 1:
        raise ValueError(f"job_fraction must be in (0, 1], not {job_fraction!r}")
    if not machine_memory_gib > 0:
        raise ValueError(f"machine_memory_gib must be more than 0, not {machine_memory_gib!r}")
    start, end = _window(window, "window")
    path = Path(path)
    source = str(path)
    chosen: dict[str, bool] = {}
    jobs_in_window: set[str] = set()
    jobs_kept: set[str] = set()
    pods: list[TracePod] = []
    memory_mib_per_fraction = machine_memory_gib * 1024
    with _open(path) as handle:
        reader = csv.reader(handle)
        columns = _header(reader, source, ALIBABA2018_REQUIRED)
        width = len(columns)  # the header's width, the unnamed index column included
        i_submit, i_duration, i_cpu = columns["submit_time"], columns["duration"], columns["cpu"]
        i_memory, i_job, i_instances = columns["memory"], columns["job_id"], columns["instances_num"]
        for row in reader:
            line = reader.line_num
            cells = _cells(row, width, source, line)
            if cells is None:
                continue
            job = cells[i_job]
            if not job:
                raise TraceError(source, f"line {line}", "job_id", "empty")
            submit = _number(cells[i_submit], source, line, "submit_time")
            if not start <= submit < end:
                continue
            jobs_in_window.add(job)
            keep = chosen.get(job)
            if keep is None:
                keep = chosen[job] = _draw(seed, job) < job_fraction
            if not keep:
                continue  # sample first: the 2.5M instances of the whole trace are never built
            duration = _number(cells[i_duration], source, line, "duration")
            cpu = _number(cells[i_cpu], source, line, "cpu")
            memory = _number(cells[i_memory], source, line, "memory")
            instances = _whole(cells[i_instances], source, line, "instances_num")
            if duration <= 0:
                raise TraceError(source, f"line {line}", "duration", f"{cells[i_duration]!r} is not more than 0 s")
            if cpu <= 0:
                raise TraceError(source, f"line {line}", "cpu", f"{cells[i_cpu]!r} is not more than 0 cores")
            if not 0 < memory <= 1:
                raise TraceError(source, f"line {line}", "memory",
                                 f"{cells[i_memory]!r} is not a fraction of a machine in (0, 1]")
            if instances < 1:
                raise TraceError(source, f"line {line}", "instances_num", f"{cells[i_instances]!r} is less than 1")
            pod = TracePod(
                at=submit - start,
                duration=duration,
                cpu_milli=max(1, round(cpu * 1000)),
                memory_bytes=max(1, math.ceil(memory * memory_mib_per_fraction - 1e-9)) * MIB,
                job=job,
            )
            pods.extend([pod] * instances)  # identical instances share one immutable object
            jobs_kept.add(job)
    if not pods:
        raise TraceError(source, "", "", f"no pods: none of the {len(jobs_in_window):,} jobs submitted in the "
                         f"window was chosen at job_fraction {job_fraction:g} with seed {seed}; use a larger "
                         "fraction or window")
    note = (
        f"{len(jobs_kept):,} of the {len(jobs_in_window):,} jobs submitted in {_span_words(start, end)}, "
        f"each chosen with probability {job_fraction:g} (seed {seed}); all {len(pods):,} of their task instances "
        f"are pods, with the trace's arrival times and durations (not compressed) and memory = fraction of a "
        f"machine x {machine_memory_gib:g} GiB (assumed: the trace does not publish machine sizes)."
    )
    return Trace("alibaba2018", source, _sorted(pods), note)


def _draw(seed: int, job: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, job): the same on every machine and Python version."""
    digest = hashlib.blake2b(f"{seed}:{job}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _window(window: tuple[float, float] | None, name: str) -> tuple[float, float]:
    if window is None:
        return 0.0, math.inf
    try:
        start, end = (float(bound) for bound in window)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (start, end), not {window!r}") from None
    if not (0 <= start < end):
        raise ValueError(f"{name} must satisfy 0 <= start < end, not {window!r}")
    return start, end


def _span_words(start: float, end: float) -> str:
    if math.isinf(end):
        return "the whole trace"
    shifted = f", replayed from {start:,.0f} s = 0" if start else ""
    return f"trace seconds {start:,.0f}-{end:,.0f} ({(end - start) / HOUR:g} h{shifted})"


# ---------------------------------------------------------------------------------------------------
# Alibaba cluster-trace-gpu-v2023 (openb pods)


def read_alibaba2023(
    path: str | Path,
    *,
    window_days: tuple[float, float] | None = ALIBABA2023_WINDOW_DAYS,
    time_compression: float = ALIBABA2023_TIME_COMPRESSION,
    compress_durations: bool = False,
    include_gpu: bool = True,
) -> Trace:
    """The GPU cluster's pods created in a window of days, with arrivals replayed `time_compression` times faster.

    A pod arrives at (creation_time - window start) / time_compression and runs for its real run time,
    deletion_time - scheduled_time: compressing arrivals raises concurrency, which this sparse trace
    needs, while keeping durations keeps each pod's work real (a 10-minute pod stays 10 minutes next to
    nodes that take minutes to boot). `compress_durations=True` divides durations too, which keeps the
    real cluster's concurrency and turns most pods into seconds-long ones. Every pod stops at the
    replayed window's end at the latest: services outlive any window. A pod that shares a GPU in the
    real cluster (num_gpu 1, gpu_milli < 1000) asks for 1 whole GPU here. Rows that cannot be replayed
    (never scheduled; deleted before running) are skipped and counted in the note; `include_gpu=False`
    also leaves out every GPU pod. window_days None: the whole trace, uncut.
    """
    if not time_compression > 0 or not math.isfinite(time_compression):
        raise ValueError(f"time_compression must be a finite number more than 0, not {time_compression!r}")
    if window_days is None:
        start, end = 0.0, math.inf
    else:
        day_start, day_end = _window(window_days, "window_days")
        start, end = day_start * DAY, day_end * DAY
    replay_end = (end - start) / time_compression
    duration_divisor = time_compression if compress_durations else 1.0
    path = Path(path)
    source = str(path)
    skipped: Counter[str] = Counter()
    cut = shared_gpu = no_memory = 0
    pods: list[TracePod] = []
    required = ALIBABA2023_REQUIRED
    with _open(path) as handle:
        reader = csv.reader(handle)
        columns = _header(reader, source, required)
        width = len(columns)
        index = {name: columns[name] for name in required}
        for row in reader:
            line = reader.line_num
            cells = _cells(row, width, source, line)
            if cells is None:
                continue
            created = _number(cells[index["creation_time"]], source, line, "creation_time")
            if not start <= created < end:
                continue
            gpus = _whole(cells[index["num_gpu"]], source, line, "num_gpu")
            gpu_milli = _whole(cells[index["gpu_milli"]], source, line, "gpu_milli")
            if gpus < 0:
                raise TraceError(source, f"line {line}", "num_gpu", f"{gpus} is negative")
            if not 0 <= gpu_milli <= 1000:
                raise TraceError(source, f"line {line}", "gpu_milli", f"{gpu_milli} is not within 0-1000")
            if gpus == 0 and gpu_milli > 0:
                gpus = 1  # a share of one GPU without a count: it still needs a GPU node
            if gpus and not include_gpu:
                skipped["GPU pods left out"] += 1
                continue
            scheduled_text = cells[index["scheduled_time"]]
            if not scheduled_text:
                skipped["never scheduled"] += 1
                continue
            scheduled = _number(scheduled_text, source, line, "scheduled_time")
            deleted = _number(cells[index["deletion_time"]], source, line, "deletion_time")
            if scheduled < created:
                skipped["scheduled before created"] += 1
                continue
            if deleted <= scheduled:
                skipped["deleted before running"] += 1
                continue
            cpu_milli = _whole(cells[index["cpu_milli"]], source, line, "cpu_milli")
            memory_mib = _whole(cells[index["memory_mib"]], source, line, "memory_mib")
            if cpu_milli < 1:
                raise TraceError(source, f"line {line}", "cpu_milli", f"{cpu_milli} is less than 1")
            if memory_mib < 0:
                raise TraceError(source, f"line {line}", "memory_mib", f"{memory_mib} is negative")
            if memory_mib == 0:
                no_memory += 1  # a pod without a memory request: the smallest request a TracePod can carry
                memory_mib = 1
            at = (created - start) / time_compression
            duration = (deleted - scheduled) / duration_divisor
            if at + duration > replay_end:
                duration = replay_end - at
                cut += 1
            if gpus == 1 and 0 < gpu_milli < 1000:
                shared_gpu += 1
            pods.append(TracePod(at, duration, cpu_milli, memory_mib * MIB, gpus=gpus))
    if not pods:
        raise TraceError(source, "", "", f"no pods to replay in {_days_words(start, end)} "
                         f"({sum(skipped.values())} rows there skipped)")
    window_words = _days_words(start, end)
    if time_compression != 1:
        window_words += f", arrivals {time_compression:g}x faster (over {replay_end / HOUR:.3g} h)" \
            if math.isfinite(replay_end) else f", arrivals {time_compression:g}x faster"
    durations = f"durations divided by {time_compression:g} too" if compress_durations and time_compression != 1 \
        else "durations real"
    ended = f" and cut at the window's end ({cut:,} pods)" if math.isfinite(replay_end) else ""
    skipped_words = ", ".join(f"{count:,} {reason}" for reason, count in sorted(skipped.items()))
    extras = [f"{shared_gpu:,} pods sharing a GPU ask for 1 whole GPU"] if shared_gpu else []
    if no_memory:
        extras.append(f"{no_memory:,} without a memory request ask for 1 MiB")
    note = (
        f"Pods created in {window_words}; {durations}{ended}. "
        f"{len(pods):,} pods replayed, {sum(skipped.values()):,} skipped"
        f"{f' ({skipped_words})' if skipped_words else ''}{''.join(f'; {extra}' for extra in extras)}."
    )
    return Trace("alibaba2023", source, _sorted(pods), note)


def _days_words(start: float, end: float) -> str:
    if math.isinf(end):
        return "the whole trace"
    return f"trace days {start / DAY:g}-{end / DAY:g} ({(end - start) / HOUR:g} h)"


# ---------------------------------------------------------------------------------------------------
# Our user format: CSV or JSON (docs/traces.md)


def read_pod_arrivals(path: str | Path) -> Trace:
    """A trace in our documented format, CSV or JSON by the file's extension; pods replayed as written."""
    path = Path(path)
    source = str(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        pods = _read_user_csv(path, source)
    elif suffix == ".json":
        pods = _read_user_json(path, source)
    else:
        shown = suffix or "(no extension)"
        raise TraceError(source, "", "", f"unknown trace format {shown!r}: use a .csv or .json file")
    if not pods:
        raise TraceError(source, "", "", "no pods: the trace is empty")
    jobs = len({pod.job for pod in pods if pod.job})
    note = f"{len(pods):,} pods ({jobs:,} jobs) from {path.name}, replayed as written (not sampled or compressed)."
    return Trace(path.stem, source, _sorted(pods), note)


def _read_user_csv(path: Path, source: str) -> list[TracePod]:
    pods: list[TracePod] = []
    with _open(path) as handle:
        reader = csv.reader(handle)
        columns = _header(reader, source, _USER_REQUIRED, _USER_FIELDS)
        width = len(columns)
        for row in reader:
            line = reader.line_num
            cells = _cells(row, width, source, line)
            if cells is None:
                continue
            values = {name: cells[index] for name, index in columns.items() if cells[index] != ""}
            pods.append(_user_pod(values, source, f"line {line}"))
    return pods


def _read_user_json(path: Path, source: str) -> list[TracePod]:
    with _open(path) as handle:
        text = handle.read()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(source, f"line {exc.lineno}", "", f"not valid JSON: {exc.msg} at column {exc.colno}") from exc
    prefix = ""
    if isinstance(document, dict):
        unknown = sorted(set(document) - {"pods"})
        if unknown:
            raise TraceError(source, "$", unknown[0], "unknown key (the top-level object holds only \"pods\")")
        if "pods" not in document:
            raise TraceError(source, "$", "pods", "missing (expected {\"pods\": [...]} or a list of pods)")
        document = document["pods"]
        prefix = "pods"
    if not isinstance(document, list):
        raise TraceError(source, prefix or "$", "", f"expected a list of pods, not {type(document).__name__}")
    pods: list[TracePod] = []
    for index, item in enumerate(document):
        where = f"{prefix}[{index}]"
        if not isinstance(item, dict):
            raise TraceError(source, where, "",
                             f"expected an object with {', '.join(_USER_REQUIRED)}, not {type(item).__name__}")
        for key in item:
            if key not in _USER_FIELDS:
                raise TraceError(source, where, str(key), f"unknown field (expected {', '.join(_USER_FIELDS)})")
        values = {key: value for key, value in item.items() if value is not None and value != ""}
        pods.append(_user_pod(values, source, where))
    return pods


def _user_pod(values: Mapping[str, Any], source: str, where: str) -> TracePod:
    """One pod from its fields (CSV text or JSON values), each checked with its name in the error."""
    for name in _USER_REQUIRED:
        if name not in values:
            raise TraceError(source, where, name, "missing")

    def fail(name: str, problem: str) -> TraceError:
        return TraceError(source, where, name, problem)

    def seconds(name: str) -> float:
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise fail(name, f"{value!r} is not a time (use seconds or e.g. 90s, 5m, 1h30m)")
        try:
            return parse_duration(value)
        except ValueError:
            raise fail(name, f"{value!r} is not a time (use seconds or e.g. 90s, 5m, 1h30m)") from None

    def quantity(name: str, parse: Any, kind: str, examples: str) -> int:
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise fail(name, f"{value!r} is not a {kind} quantity (use e.g. {examples})")
        try:
            return parse(value)
        except ValueError:
            raise fail(name, f"{value!r} is not a {kind} quantity (use e.g. {examples})") from None

    at = seconds("at")
    duration = seconds("duration")
    if duration <= 0:
        raise fail("duration", f"{values['duration']!r} is not more than 0 s")
    cpu_milli = quantity("cpu", parse_cpu_milli, "CPU", "500m or 2")
    if cpu_milli < 1:
        raise fail("cpu", f"{values['cpu']!r} is not more than 0")
    memory = quantity("memory", parse_bytes, "memory", "512Mi, 2Gi or a number of bytes")
    if memory <= 0:
        raise fail("memory", f"{values['memory']!r} is not more than 0")
    if memory < MIB:
        plain = re.fullmatch(r"\d+", str(values["memory"]).strip())
        hint = f" (a plain number is bytes: did you mean {values['memory']}Mi?)" if plain else ""
        raise fail("memory", f"{values['memory']!r} is less than 1Mi{hint}")
    gpus = 0
    if "gpu" in values:
        value = values["gpu"]
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError
            gpus = parse_count(value)
        except ValueError:
            raise fail("gpu", f"{value!r} is not a whole number of GPUs") from None
        if gpus < 0:
            raise fail("gpu", f"{value!r} is negative")
    job = values.get("job", "")
    if not isinstance(job, str):
        raise fail("job", f"{job!r} is not a name")
    if job and not _JOB_NAME.fullmatch(job):
        raise fail("job", f"{job!r} is not a valid name (lowercase letters, digits and '-', at most 63, "
                   "starting and ending with a letter or digit)")
    return TracePod(
        at=at,
        duration=duration,
        cpu_milli=cpu_milli,
        memory_bytes=-(-memory // MIB) * MIB,  # whole MiB, rounded up: a request is never under-counted
        gpus=gpus,
        job=job,
    )


# ---------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Print each trace's note and statistics as read with its defaults (how docs/traces.md got its figures)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.replay.traces", description=main.__doc__)
    parser.add_argument("traces", nargs="*", default=list(TRACE_FILES), help="alibaba2018, alibaba2023 or a path")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.traces:
        try:
            trace = load_trace(name, seed=args.seed)
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{trace.name} ({trace.source})")
        print(f"  {trace.note}")
        for line in trace_stats(trace).lines():
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def trace_pools_name(name_or_path: str) -> str | None:
    """The named trace whose pools a trace argument gets by default: the name itself, or the format of a raw
    public trace file (`raw_format`); None for our own formats."""
    return name_or_path if name_or_path in TRACE_FILES else raw_format(name_or_path)
