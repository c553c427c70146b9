"""Raw public trace files given by path: recognised by their header, read like the named trace, on its pools;
a file that is almost one of them names the format and the missing columns."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from devtools.replay import traces
from devtools.replay.__main__ import main
from devtools.replay.traces import (
    ALIBABA2018_HEADER,
    ALIBABA2018_REQUIRED,
    ALIBABA2023_HEADER,
    ALIBABA2023_REQUIRED,
    TRACE_DIR,
    TRACE_FILES,
    TraceError,
    load_trace,
    raw_format,
    read_alibaba2018,
    read_pod_arrivals,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
SAMPLES = {"alibaba2018": FIXTURES / "alibaba2018-sample.csv", "alibaba2023": FIXTURES / "alibaba2023-sample.csv"}
REQUIRED = {"alibaba2018": ALIBABA2018_REQUIRED, "alibaba2023": ALIBABA2023_REQUIRED}


@pytest.fixture
def shared_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "traces"
    directory.mkdir()
    for name, sample in SAMPLES.items():
        shutil.copy(sample, directory / TRACE_FILES[name])
    monkeypatch.setattr(traces, "TRACE_DIR", directory)
    return directory


def _without(sample: Path, columns: tuple[str, ...], path: Path) -> Path:
    """A copy of the sample with these columns dropped from the header and every row."""
    rows = list(csv.reader(sample.open(newline="")))
    keep = [i for i, name in enumerate(rows[0]) if name not in columns]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([[row[i] for i in keep] for row in rows])
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def test_the_samples_carry_the_published_headers() -> None:
    for name, header in (("alibaba2018", ALIBABA2018_HEADER), ("alibaba2023", ALIBABA2023_HEADER)):
        assert tuple(next(csv.reader(SAMPLES[name].open(newline="")))) == header
        assert set(REQUIRED[name]) <= set(header)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_raw_file_by_path_is_the_named_trace(name: str, shared_traces: Path, tmp_path: Path) -> None:
    shipped = shared_traces / TRACE_FILES[name]
    assert raw_format(shipped) == name
    # The 2018 sample is too small for the default 1 % of jobs: half of them, by name and by path alike.
    fraction = {"job_fraction": 0.5} if name == "alibaba2018" else {}
    assert load_trace(str(shipped), **fraction) == load_trace(name, **fraction)
    assert load_trace(shipped, seed=3, **fraction) == load_trace(name, seed=3, **fraction)
    # Under any file name, with the reader's options passed through.
    copy = tmp_path / "openb_pod_list_default.csv"
    shutil.copy(shipped, copy)
    options = {"alibaba2018": {"job_fraction": 1.0, "window": None},
               "alibaba2023": {"window_days": None, "time_compression": 1.0}}[name]
    by_path, by_name = load_trace(copy, seed=2, **options), load_trace(name, seed=2, **options)
    assert by_path.pods == by_name.pods and by_path.note == by_name.note and by_path.name == name
    assert by_path.source == str(copy)


@pytest.mark.skipif(not (TRACE_DIR / TRACE_FILES["alibaba2018"]).exists(),
                    reason=f"the shared traces are not at {TRACE_DIR}")
@pytest.mark.parametrize("name", sorted(TRACE_FILES))
def test_the_real_shipped_files_by_path_are_the_named_traces(name: str) -> None:
    assert load_trace(str(TRACE_DIR / TRACE_FILES[name])) == load_trace(name)


@pytest.mark.parametrize(("name", "column"), [(name, column) for name in sorted(REQUIRED) for column in REQUIRED[name]])
def test_a_missing_column_is_named_with_the_format(name: str, column: str, tmp_path: Path) -> None:
    path = _without(SAMPLES[name], (column,), tmp_path / "raw.csv")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert caught.value.field == column
    assert str(caught.value).startswith(f"{path}: line 1: {column}: missing column: the header looks like the ")
    assert f"({name})" in str(caught.value)


def test_every_missing_column_is_named(tmp_path: Path) -> None:
    path = _without(SAMPLES["alibaba2023"], ("creation_time", "scheduled_time"), tmp_path / "raw.csv")
    with pytest.raises(TraceError, match=r"line 1: creation_time, scheduled_time: missing columns: .*openb pod list"):
        load_trace(path)
    path = _without(SAMPLES["alibaba2018"], ("cpu", "memory", "duration"), tmp_path / "raw18.csv")
    with pytest.raises(TraceError, match=r"line 1: duration, cpu, memory: missing columns: .*\(alibaba2018\)"):
        load_trace(path)


@pytest.mark.parametrize("text", [
    # Headerless: the 2018 sample's rows without their header (as Alibaba publishes batch_task.csv: no header).
    "".join(SAMPLES["alibaba2018"].read_text().splitlines(keepends=True)[1:]),
    "m_1,t_1,j_1,1,Terminated,157213,157295,100,0.3\n",
    # Our own format with a typo, and with one stray raw column: still our format's errors.
    "at,duration,cpu,memroy\n0,1,1,1Mi\n",
    "at,duration,cpu,memory,qos\n0,1,1,1Mi,LS\n",
    # Only our format's columns that the 2018 layout shares: not enough to call it alibaba2018.
    "duration,cpu,memory,job_id\n1,1,1Mi,1\n",
])
def test_other_csv_files_keep_todays_messages(text: str, tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text(text, encoding="utf-8")
    assert raw_format(path) is None
    with pytest.raises(TraceError) as by_load:
        load_trace(path)
    with pytest.raises(TraceError) as by_reader:
        read_pod_arrivals(path)
    assert str(by_load.value) == str(by_reader.value)


def test_user_format_files_and_json_are_not_raw(tmp_path: Path) -> None:
    assert raw_format(FIXTURES / "pods.csv") is None
    assert raw_format(FIXTURES / "pods.json") is None
    assert raw_format(tmp_path / "missing.csv") is None
    assert raw_format(tmp_path) is None
    with pytest.raises(TypeError, match="the user trace format takes no options"):
        load_trace(FIXTURES / "pods.csv", job_fraction=0.5)
    # A raw file takes its reader's options; a bad one is the reader's error.
    with pytest.raises(ValueError, match="job_fraction"):
        load_trace(SAMPLES["alibaba2018"], job_fraction=2.0)
    assert load_trace(SAMPLES["alibaba2018"], job_fraction=1.0, window=None) == read_alibaba2018(
        SAMPLES["alibaba2018"], job_fraction=1.0, window=None)


def test_a_raw_openb_file_replays_on_the_alibaba2023_pools(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "openb_pod_list_default.csv"
    shutil.copy(shared_traces / TRACE_FILES["alibaba2023"], copy)
    by_path, by_name = tmp_path / "path.json", tmp_path / "name.json"
    assert main(["replay", "--trace", str(copy), "--policy", "oracle", "--json", str(by_path)]) == 0
    assert main(["replay", "--trace", "alibaba2023", "--policy", "oracle", "--json", str(by_name)]) == 0
    capsys.readouterr()
    assert json.loads(by_path.read_text()) == json.loads(by_name.read_text())
    # --pools still chooses: none of the sample's pods in the window fits the alibaba2018 pool (one D16 pool).
    assert main(["replay", "--trace", str(copy), "--policy", "oracle", "--pools", "alibaba2018"]) == 2
    assert "no pod fits any pool (cpu-d16)" in capsys.readouterr().err


def test_the_replay_command_names_the_missing_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _without(SAMPLES["alibaba2023"], ("deletion_time",), tmp_path / "openb.csv")
    assert main(["replay", "--trace", str(path), "--policy", "oracle"]) == 2
    err = capsys.readouterr().err
    assert "cannot read trace:" in err and "deletion_time: missing column" in err and "openb pod list" in err
