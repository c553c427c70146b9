"""Trace readers: the Alibaba samples (cut from the real files), our user format, and every kind of bad input."""

from __future__ import annotations

import csv
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.replay import traces
from devtools.replay.traces import (
    MIB,
    ROOT,
    TRACE_DIR,
    Trace,
    TraceError,
    TracePod,
    load_trace,
    read_alibaba2018,
    read_alibaba2023,
    read_pod_arrivals,
    trace_stats,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
SAMPLE_2018 = FIXTURES / "alibaba2018-sample.csv"
SAMPLE_2023 = FIXTURES / "alibaba2023-sample.csv"
GIB = 2**30
DAY = 86_400


def _instances_per_job(path: Path) -> Counter[str]:
    with path.open(newline="") as handle:
        counts: Counter[str] = Counter()
        for row in csv.DictReader(handle):
            counts[row["job_id"]] += int(row["instances_num"])
    return counts


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# The data classes


def test_trace_span_and_arrivals_end() -> None:
    pods = (TracePod(0, 100, 1000, GIB), TracePod(50, 10, 1000, GIB), TracePod(70, 5, 1000, GIB))
    trace = Trace("t", "t.csv", pods, "note")
    assert trace.span == 100
    assert trace.arrivals_end == 70
    assert Trace("t", "t.csv", (), "note").span == 0
    assert Trace("t", "t.csv", (), "note").arrivals_end == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"at": -1.0}, "at"),
        ({"at": float("nan")}, "at"),
        ({"duration": 0.0}, "duration"),
        ({"cpu_milli": 0}, "cpu_milli"),
        ({"memory_bytes": MIB - 1}, "memory_bytes"),
        ({"memory_bytes": MIB + 1}, "memory_bytes"),
        ({"gpus": -1}, "gpus"),
    ],
)
def test_trace_pod_rejects_impossible_values(kwargs: dict, message: str) -> None:
    values = {"at": 0.0, "duration": 1.0, "cpu_milli": 1, "memory_bytes": MIB} | kwargs
    with pytest.raises(ValueError, match=message):
        TracePod(**values)


def test_trace_stats_counts_ends_before_starts() -> None:
    pods = (
        TracePod(0, 10, 1000, GIB),
        TracePod(0, 20, 2000, GIB, gpus=1),
        TracePod(10, 10, 4000, GIB, gpus=2),  # starts as the first ends: 6 cores, not 7
    )
    stats = trace_stats(Trace("t", "t.csv", pods, "note"))
    assert stats.peak_cores == 6
    assert stats.peak_gpus == 3
    assert stats.pods == 3
    assert stats.duration_p50 == 10
    assert stats.span == 20


# --------------------------------------------------------------------------------------------------
# alibaba2018


def test_alibaba2018_reads_every_instance_of_every_job_when_all_are_chosen() -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=None)
    assert trace.name == "alibaba2018"
    assert trace.source == str(SAMPLE_2018)
    assert len(trace.pods) == 130
    assert Counter(pod.job for pod in trace.pods) == _instances_per_job(SAMPLE_2018)
    assert list(trace.pods) == sorted(trace.pods, key=lambda pod: (pod.at, pod.job))
    assert "16 of the 16 jobs" in trace.note and "130" in trace.note and "384 GiB" in trace.note


@pytest.mark.parametrize(
    ("job", "task_row", "expected", "count"),
    [
        # line "499,6420,143.8,0.75,0.016338363575181838,342,1758,10,0": 0.0163... x 384 GiB = 6424.5 MiB -> 6425
        ("342", 0, TracePod(6420.0, 143.8, 750, 6425 * MIB, job="342"), 10),
        # line "500,6420,200.4,0.5,0.00805528951932286,342,1759,15,0": 3167.5 MiB -> 3168
        ("342", 1, TracePod(6420.0, 200.4, 500, 3168 * MIB, job="342"), 15),
        # line "240,55576,1.0,1.0,0.010705873217197731,215,1260,7,0": 4209.7 MiB -> 4210
        ("215", 0, TracePod(55576.0, 1.0, 1000, 4210 * MIB, job="215"), 14),  # two tasks of 7 identical instances
    ],
)
def test_alibaba2018_pods_by_hand(job: str, task_row: int, expected: TracePod, count: int) -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=None)
    pods = [pod for pod in trace.pods if pod.job == job]
    distinct = sorted(set(pods), key=lambda pod: pod.duration)
    assert distinct[task_row] == expected
    assert pods.count(expected) == count


def test_alibaba2018_machine_memory_scales_memory() -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=None, machine_memory_gib=96)
    pod = next(pod for pod in trace.pods if pod.job == "342" and pod.cpu_milli == 750)
    assert pod.memory_bytes == 1607 * MIB  # 0.016338363575181838 x 96 GiB = 1606.1 MiB, rounded up
    assert "96 GiB" in trace.note


def test_alibaba2018_sampling_is_deterministic_and_depends_on_the_seed() -> None:
    def jobs(seed: int, fraction: float = 0.5) -> frozenset[str]:
        trace = read_alibaba2018(SAMPLE_2018, job_fraction=fraction, seed=seed, window=None)
        return frozenset(pod.job for pod in trace.pods)

    assert read_alibaba2018(SAMPLE_2018, job_fraction=0.5, seed=3, window=None) == \
        read_alibaba2018(SAMPLE_2018, job_fraction=0.5, seed=3, window=None)
    assert len({jobs(seed) for seed in range(6)}) > 1
    # A larger fraction keeps every job a smaller one kept (same seed): samples nest.
    for seed in range(4):
        assert jobs(seed, 0.4) <= jobs(seed, 0.7)


@pytest.mark.parametrize("seed", range(5))
def test_alibaba2018_sampling_keeps_whole_jobs(seed: int) -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=0.5, seed=seed, window=None)
    per_job = Counter(pod.job for pod in trace.pods)
    instances = _instances_per_job(SAMPLE_2018)
    assert per_job and all(per_job[job] == instances[job] for job in per_job)
    assert f"seed {seed}" in trace.note


@pytest.mark.parametrize(
    ("window", "expected_jobs", "first_at"),
    [
        ((5000.0, 22000.0), {"226", "342", "576", "580", "584", "588", "122", "48"}, 5596.0 - 5000.0),
        ((0.0, 21836.0), {"219", "222", "226", "342", "576", "580", "584", "588", "122"}, 2008.0),
        ((21836.0, 30000.0), {"48", "5200", "593", "597", "601", "472"}, 0.0),  # start inclusive, end exclusive
    ],
)
def test_alibaba2018_window_keeps_tasks_submitted_inside_it(
    window: tuple[float, float], expected_jobs: set[str], first_at: float
) -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=window)
    assert {pod.job for pod in trace.pods} == expected_jobs
    assert trace.pods[0].at == first_at
    assert all(0 <= pod.at < window[1] - window[0] for pod in trace.pods)


def test_alibaba2018_durations_are_not_cut_at_the_window_end() -> None:
    trace = read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=(21000.0, 21300.0))
    assert {pod.job for pod in trace.pods} == {"122"}
    assert trace.pods[0].at == 209.0
    assert max(pod.duration for pod in trace.pods) == 361.0  # runs past the window's end, as in the trace


def test_alibaba2018_nothing_chosen_is_an_error() -> None:
    with pytest.raises(TraceError, match=r"alibaba2018-sample\.csv: no pods: none of the 0 jobs"):
        read_alibaba2018(SAMPLE_2018, job_fraction=1.0, window=(60000.0, 70000.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_fraction": 0.0}, "job_fraction"),
        ({"job_fraction": 1.5}, "job_fraction"),
        ({"window": (10.0, 5.0)}, "window"),
        ({"window": (-1.0, 5.0)}, "window"),
        ({"machine_memory_gib": 0}, "machine_memory_gib"),
    ],
)
def test_alibaba2018_rejects_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_alibaba2018(SAMPLE_2018, **kwargs)


# --------------------------------------------------------------------------------------------------
# alibaba2023


def test_alibaba2023_default_window_by_hand() -> None:
    trace = read_alibaba2023(SAMPLE_2023)  # days 147.5-149, arrivals 4.5x faster
    assert trace.name == "alibaba2023"
    assert len(trace.pods) == 12  # openb-pod-7148..7159; 7285 in the window was never scheduled
    # openb-pod-7148,60200,320512,4,1000,,LS,Failed,12744585,12744608,12744585
    assert trace.pods[0] == TracePod((12744585 - 147.5 * DAY) / 4.5, 23.0, 60200, 320512 * MIB, gpus=4)
    assert trace.pods[0].at == 130.0
    # openb-pod-7149,4000,22888,1,320,...,Running,12745598,12750103,12745598: a 0.32 share of a GPU -> 1 whole GPU
    assert trace.pods[1] == TracePod(1598 / 4.5, 4505.0, 4000, 22888 * MIB, gpus=1)
    assert all(pod.job == "" for pod in trace.pods)
    assert "1 skipped (1 never scheduled)" in trace.note
    assert "4.5x faster" in trace.note and "durations real" in trace.note
    assert "3 pods sharing a GPU ask for 1 whole GPU" in trace.note  # 7149 (320), 7151 and 7157 (590)


def test_alibaba2023_whole_trace_skips_and_rounds() -> None:
    trace = read_alibaba2023(SAMPLE_2023, window_days=None, time_compression=1)
    assert len(trace.pods) == 34  # 37 rows, 3 never scheduled (0061, 0084, 7285)
    assert "3 skipped (3 never scheduled)" in trace.note
    assert "1 without a memory request ask for 1 MiB" in trace.note  # openb-pod-1523
    first = trace.pods[0]  # openb-pod-0000: created 0, scheduled 0, deleted 12537496
    assert first == TracePod(0.0, 12537496.0, 12000, 16384 * MIB, gpus=1)
    gpus = Counter(pod.gpus for pod in trace.pods)
    assert gpus[8] == 1 and gpus[4] == 7 and gpus[2] == 1 and gpus[0] == 6
    assert min(pod.memory_bytes for pod in trace.pods) == MIB


def test_alibaba2023_duration_is_run_time_not_wait() -> None:
    trace = read_alibaba2023(SAMPLE_2023, window_days=None, time_compression=1)
    # openb-pod-0005: created 2759674, scheduled 2759676, deleted 12902960:
    # it arrives at its creation and runs from scheduling to deletion.
    pod = next(pod for pod in trace.pods if pod.at == 2759674)
    assert pod.duration == 12902960 - 2759676


def test_alibaba2023_window_end_cuts_durations() -> None:
    trace = read_alibaba2023(SAMPLE_2023, window_days=(147.5, 147.6), time_compression=4.5)
    replay_end = 0.1 * DAY / 4.5  # 1920 s
    assert trace.span <= replay_end + 1e-9
    pod = next(pod for pod in trace.pods if pod.cpu_milli == 4000)  # openb-pod-7149: 4505 s of run time
    assert pod.duration == pytest.approx(replay_end - 1598 / 4.5)
    assert "cut at the window's end (2 pods)" in trace.note  # and openb-pod-7156: 4212 s from 1509 s


def test_alibaba2023_compress_durations_divides_them_too() -> None:
    real = read_alibaba2023(SAMPLE_2023, window_days=(147.5, 149), time_compression=4.5)
    compressed = read_alibaba2023(SAMPLE_2023, window_days=(147.5, 149), time_compression=4.5, compress_durations=True)
    assert [pod.at for pod in real.pods] == [pod.at for pod in compressed.pods]
    assert compressed.pods[0].duration == pytest.approx(23.0 / 4.5)
    assert "durations divided by 4.5 too" in compressed.note


@pytest.mark.parametrize(("compression", "first_at"), [(1.0, 585.0), (4.5, 130.0), (10.0, 58.5)])
def test_alibaba2023_compression_divides_arrival_offsets(compression: float, first_at: float) -> None:
    trace = read_alibaba2023(SAMPLE_2023, time_compression=compression)
    assert trace.pods[0].at == pytest.approx(first_at)
    assert trace.pods[0].duration == 23.0


def test_alibaba2023_without_gpus_keeps_cpu_pods_only() -> None:
    trace = read_alibaba2023(SAMPLE_2023, window_days=None, time_compression=1, include_gpu=False)
    assert len(trace.pods) == 6 and all(pod.gpus == 0 for pod in trace.pods)
    assert "31 GPU pods left out" in trace.note


def test_alibaba2023_counts_rows_deleted_before_running(tmp_path: Path) -> None:
    text = SAMPLE_2023.read_text().replace(
        "openb-pod-7152,12000,16384,1,1000,,LS,Running,12747693,12748232,12747694",
        "openb-pod-7152,12000,16384,1,1000,,LS,Running,12747693,12747694,12747694",
    )
    trace = read_alibaba2023(_write(tmp_path, "pods.csv", text))
    assert len(trace.pods) == 11
    assert "2 skipped (1 deleted before running, 1 never scheduled)" in trace.note


def test_alibaba2023_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="time_compression"):
        read_alibaba2023(SAMPLE_2023, time_compression=0)
    with pytest.raises(ValueError, match="window_days"):
        read_alibaba2023(SAMPLE_2023, window_days=(149, 148))


def test_alibaba2023_empty_window_is_an_error() -> None:
    with pytest.raises(TraceError, match=r"alibaba2023-sample\.csv: no pods to replay in trace days 20-30"):
        read_alibaba2023(SAMPLE_2023, window_days=(20, 30))


# --------------------------------------------------------------------------------------------------
# Our user format


EXPECTED_USER_PODS = (
    TracePod(0.0, 90.0, 500, 512 * MIB, job="render"),
    TracePod(0.0, 90.0, 500, 512 * MIB, job="render"),
    TracePod(30.0, 300.0, 2000, 2 * GIB, gpus=1),
    TracePod(300.0, 5400.0, 1500, GIB, gpus=0, job="train-7"),
)


@pytest.mark.parametrize("name", ["pods.csv", "pods.json"])
def test_user_format_reads_csv_and_json_alike(name: str) -> None:
    trace = read_pod_arrivals(FIXTURES / name)
    assert trace.name == "pods"
    assert trace.pods == EXPECTED_USER_PODS  # sorted by (at, job), whatever the file's order
    assert trace.note == f"4 pods (2 jobs) from {name}, replayed as written (not sampled or compressed)."


def test_user_json_may_be_a_bare_list(tmp_path: Path) -> None:
    path = _write(tmp_path, "list.json", '[{"at": 1, "duration": "2m", "cpu": "250m", "memory": "100M"}]')
    (pod,) = read_pod_arrivals(path).pods
    assert pod == TracePod(1.0, 120.0, 250, 96 * MIB)  # 100 MB = 95.4 MiB, rounded up to whole MiB


CSV_HEADER = "at,duration,cpu,memory,gpu,job\n"
GOOD_ROW = "0,1m,1,1Gi,,\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (CSV_HEADER + GOOD_ROW + "5,1m,5x,1Gi,,\n", "bad.csv: line 3: cpu: '5x' is not a CPU quantity"),
        (CSV_HEADER + "0,1m,0,1Gi,,\n", "bad.csv: line 2: cpu: '0' is not more than 0"),
        (CSV_HEADER + "0,1m,-1,1Gi,,\n", "bad.csv: line 2: cpu: '-1' is not more than 0"),
        (CSV_HEADER + "0,1m,1,lots,,\n", "bad.csv: line 2: memory: 'lots' is not a memory quantity"),
        (CSV_HEADER + "0,1m,1,512,,\n", "bad.csv: line 2: memory: '512' is less than 1Mi (a plain number is bytes"),
        (CSV_HEADER + "0,1m,1,0,,\n", "bad.csv: line 2: memory: '0' is not more than 0"),
        (CSV_HEADER + "0,1m,1,100k,,\n", "bad.csv: line 2: memory: '100k' is less than 1Mi"),
        (CSV_HEADER + "-5,1m,1,1Gi,,\n", "bad.csv: line 2: at: '-5' is not a time"),
        (CSV_HEADER + "soon,1m,1,1Gi,,\n", "bad.csv: line 2: at: 'soon' is not a time"),
        (CSV_HEADER + "0,0,1,1Gi,,\n", "bad.csv: line 2: duration: '0' is not more than 0 s"),
        (CSV_HEADER + "0,1 week,1,1Gi,,\n", "bad.csv: line 2: duration: '1 week' is not a time"),
        (CSV_HEADER + "0,1m,1,1Gi,0.5,\n", "bad.csv: line 2: gpu: '0.5' is not a whole number of GPUs"),
        (CSV_HEADER + "0,1m,1,1Gi,-1,\n", "bad.csv: line 2: gpu: '-1' is negative"),
        (CSV_HEADER + "0,1m,1,1Gi,,Bad_Name\n", "bad.csv: line 2: job: 'Bad_Name' is not a valid name"),
        (CSV_HEADER + "0,1m,,1Gi,,\n", "bad.csv: line 2: cpu: missing"),
        (CSV_HEADER + "\n" + "0,1m,1,1Gi,,,\n", "bad.csv: line 3: 7 fields, but the header has 6"),
        ("at,duration,cpu\n0,1m,1\n", "bad.csv: line 1: memory: missing column"),
        ("at,duration,cpus,memory\n", "bad.csv: line 1: cpus: unknown column"),
        ("at,duration,cpu,memory,at\n", "bad.csv: line 1: at: column named twice"),
        ("", "bad.csv: line 1: empty file"),
        (CSV_HEADER, "bad.csv: no pods: the trace is empty"),
        (CSV_HEADER + "\n\n", "bad.csv: no pods: the trace is empty"),
    ],
)
def test_user_csv_errors_name_file_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as caught:
        read_pod_arrivals(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


POD = '{"at": 0, "duration": 60, "cpu": "1", "memory": "1Gi"}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" + POD + ",\n" + POD + ",\n{\"at\": 0, \"duration\": 60, \"cpu\": \"5x\", \"memory\": \"1Gi\"}]",
         "bad.json: [2]: cpu: '5x' is not a CPU quantity"),
        ('{"pods": [' + POD + ', {"at": 0, "duration": 60, "cpu": true, "memory": "1Gi"}]}',
         "bad.json: pods[1]: cpu: True is not a CPU quantity"),
        ('{"pods": [{"at": 0, "duration": 60, "cpu": "1"}]}', "bad.json: pods[0]: memory: missing"),
        ('{"pods": [{"at": 0, "duration": 60, "cpu": "1", "memory": "1Gi", "cpus": 2}]}',
         "bad.json: pods[0]: cpus: unknown field"),
        ('{"pods": [' + POD + ', 7]}', "bad.json: pods[1]: expected an object"),
        ('{"pods": [{"at": 0, "duration": 60, "cpu": "1", "memory": "1Gi", "job": 5}]}',
         "bad.json: pods[0]: job: 5 is not a name"),
        ('{"pods": [{"at": 0, "duration": 60, "cpu": "1", "memory": "1Gi", "gpu": 1.5}]}',
         "bad.json: pods[0]: gpu: 1.5 is not a whole number of GPUs"),
        ('{"pods": [{"at": -1, "duration": 60, "cpu": "1", "memory": "1Gi"}]}',
         "bad.json: pods[0]: at: -1 is not a time"),
        ('{"pods": [{"at": 0, "duration": [60], "cpu": "1", "memory": "1Gi"}]}',
         "bad.json: pods[0]: duration: [60] is not a time"),
        ('{"pods": [], "name": "x"}', "bad.json: $: name: unknown key"),
        ('{"trace": []}', "bad.json: $: trace: unknown key"),
        ("{}", "bad.json: $: pods: missing"),
        ('{"pods": {}}', "bad.json: pods: expected a list of pods, not dict"),
        ('"pods"', "bad.json: $: expected a list of pods, not str"),
        ("[\n" + POD + ",\n]", "bad.json: line 3: not valid JSON"),
        ("[]", "bad.json: no pods: the trace is empty"),
    ],
)
def test_user_json_errors_name_file_index_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "bad.json", text)
    with pytest.raises(TraceError) as caught:
        read_pod_arrivals(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


@pytest.mark.parametrize(
    ("name", "text", "reader", "message"),
    [
        ("trace.txt", "at,duration,cpu,memory\n", read_pod_arrivals, "trace.txt: unknown trace format '.txt'"),
        ("gone.csv", None, read_pod_arrivals, "gone.csv: cannot read the file: No such file or directory"),
        ("bin.csv", b"\xff\xfe\x00garbage", read_pod_arrivals, "bin.csv: not UTF-8 text"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,5,1,x,0.01,1,1,2,0\n",
         lambda path: read_alibaba2018(path, job_fraction=1.0), "a18.csv: line 2: cpu: 'x' is not a number"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,5,1,1,1.5,1,1,2,0\n",
         lambda path: read_alibaba2018(path, job_fraction=1.0), "a18.csv: line 2: memory: '1.5' is not a fraction"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,5,1,1,0.1,1,1,2.5,0\n",
         lambda path: read_alibaba2018(path, job_fraction=1.0), "a18.csv: line 2: instances_num: '2.5' is not a whole"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,5,0,1,0.1,1,1,2,0\n",
         lambda path: read_alibaba2018(path, job_fraction=1.0), "a18.csv: line 2: duration: '0' is not more than 0 s"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,later,1,1,0.1,1,1,2,0\n",
         read_alibaba2018, "a18.csv: line 2: submit_time: 'later' is not a number"),
        ("a18.csv", ",submit_time,duration,cpu,job_id,instances_num\n", read_alibaba2018,
         "a18.csv: line 1: memory: missing column"),
        ("a18.csv", ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n0,5,1,1,0.1,1\n",
         read_alibaba2018, "a18.csv: line 2: 6 fields, but the header has 9"),
        ("a23.csv", SAMPLE_2023.read_text().replace("12744585,12744608", "soon,12744608"), read_alibaba2023,
         "a23.csv: line 26: creation_time: 'soon' is not a number"),
        ("a23.csv", SAMPLE_2023.read_text().replace("7148,60200,320512,4,", "7148,60200,320512,four,"),
         read_alibaba2023, "a23.csv: line 26: num_gpu: 'four' is not a number"),
        ("a23.csv", SAMPLE_2023.read_text().replace("7148,60200,320512,4,1000", "7148,60200,320512,4,1500"),
         read_alibaba2023, "a23.csv: line 26: gpu_milli: 1500 is not within 0-1000"),
        ("a23.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", read_alibaba2023,
         "a23.csv: line 1: creation_time: missing column"),
    ],
)
def test_every_reader_names_file_line_and_field(
    tmp_path: Path, name: str, text: str | bytes | None, reader: Callable[[Path], Trace], message: str
) -> None:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        reader(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


# --------------------------------------------------------------------------------------------------
# Loading by name


def test_trace_dir_is_next_to_the_repository() -> None:
    assert TRACE_DIR == ROOT.parent / "shared" / "traces"
    assert (ROOT / "devtools" / "replay" / "traces.py").is_file()


@pytest.fixture
def shared_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "traces"
    directory.mkdir()
    shutil.copy(SAMPLE_2018, directory / "alibaba2018-batch-tasks.csv")
    shutil.copy(SAMPLE_2023, directory / "alibaba2023-openb-pods.csv")
    monkeypatch.setattr(traces, "TRACE_DIR", directory)
    return directory


def test_load_trace_resolves_names_and_passes_options(shared_traces: Path) -> None:
    a18 = load_trace("alibaba2018", seed=2, job_fraction=0.5, window=None)
    assert a18.source == str(shared_traces / "alibaba2018-batch-tasks.csv")
    assert a18 == read_alibaba2018(shared_traces / "alibaba2018-batch-tasks.csv", seed=2, job_fraction=0.5, window=None)
    a23 = load_trace("alibaba2023", seed=7, time_compression=1)  # nothing to sample: the seed is ignored
    assert a23.source == str(shared_traces / "alibaba2023-openb-pods.csv")
    assert a23.pods[0].at == 585.0


def test_load_trace_reads_paths_in_the_user_format(shared_traces: Path) -> None:
    assert load_trace(FIXTURES / "pods.csv").pods == EXPECTED_USER_PODS
    assert load_trace(str(FIXTURES / "pods.json")).pods == EXPECTED_USER_PODS
    with pytest.raises(TypeError, match="the user trace format takes no options, got job_fraction"):
        load_trace(FIXTURES / "pods.csv", job_fraction=0.5)


def test_load_trace_unknown_names(shared_traces: Path) -> None:
    known = r"alibaba2019: no such trace: neither a known name \(alibaba2018, alibaba2023, .*burst, .*\) nor a file"
    with pytest.raises(TraceError, match=known):
        load_trace("alibaba2019")
    with pytest.raises(TraceError, match="missing.csv: cannot read the file"):
        load_trace("missing.csv")


def test_load_trace_says_where_the_shared_traces_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces, "TRACE_DIR", tmp_path / "nowhere")
    with pytest.raises(TraceError, match=r"cannot read the file: .*\.\./shared/traces"):
        load_trace("alibaba2018")


# --------------------------------------------------------------------------------------------------
# The real files, with the documented defaults (docs/traces.md)


REAL = TRACE_DIR / "alibaba2018-batch-tasks.csv"


@pytest.mark.skipif(
    not REAL.exists(), reason=f"the shared traces are not at {TRACE_DIR} (they live next to the repository)"
)
def test_real_traces_with_their_defaults_fit_the_replay_budget() -> None:
    a18 = trace_stats(load_trace("alibaba2018"))
    assert 3_000 <= a18.pods <= 10_000  # 9,931 with seed 0
    assert a18.arrivals_end <= 8 * 3600
    assert 300 <= a18.peak_cores <= 1_000  # 867
    a23 = trace_stats(load_trace("alibaba2023"))
    assert 500 <= a23.pods <= 1_000  # 782
    assert a23.arrivals_end <= 8 * 3600 and a23.span <= 8 * 3600 + 1e-6
    assert 300 <= a23.peak_cores <= 700 and 30 <= a23.peak_gpus <= 80  # 641 cores, 56 GPUs
    assert a23.duration_p50 >= 60  # real durations: 232 s


def test_a_sandbox_scenario_replays_the_pods_the_sandbox_draws() -> None:
    from devtools.replay.traces import read_scenario
    from sandbox.world import World

    trace = load_trace("burst", seed=4)
    assert trace.name == "burst" and "scenario burst" in trace.note
    world = World("burst", seed=4)
    world.advance_by(world.scenario.duration)
    drawn = sorted((round(p["created"], 3), p["cpu_milli"], p["memory_bytes"]) for p in world.report()["pods"]
                   if not p["name"].startswith("kube-"))
    replayed = sorted((p.at, p.cpu_milli, p.memory_bytes) for p in trace.pods)
    assert replayed == drawn and len(drawn) > 10  # no autoscaler ran: every pod the world made is an arrival
    with pytest.raises(TraceError, match="no workload pods"):
        read_scenario({"name": "empty", "node_groups": [
            {"resource_group": "rg", "name": "p", "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "4", "memory": "16Gi"}, "min": 0, "max": 1}]})
