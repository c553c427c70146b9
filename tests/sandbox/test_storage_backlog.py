"""A render queue's backlog published as a Storage queue (Azurite): one message per frame waiting, sent when a frame
arrives or is put back, deleted when a worker takes it, so that the autoscaler's own backlog adapter reads the
world's backlog. The world stays the truth; the queue follows it, and catches up after Storage failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.queue import QueueClient

from sandbox import __main__ as sandbox_main
from sandbox.api.server import SandboxServer
from sandbox.api.storage_backlog import StorageBacklog
from sandbox.clock import ManualClock
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from shared.adapters.backlog_queue import StorageQueueBacklog
from shared.adapters.storage_connection import StorageConnection
from tests.sandbox.helpers import POOL, RG, START, SUB
from tests.sandbox.test_render_queue import farm

FLUSH_S = 15.0  # wall seconds the mirror may take to catch up on a loaded machine


@pytest.fixture
def queue(azurite: str, queue_name: str) -> Iterator[QueueClient]:
    with QueueClient.from_connection_string(azurite, queue_name) as client:
        yield client


@pytest.fixture
def mirror(azurite: str, queue_name: str) -> Iterator[StorageBacklog]:
    backlog = StorageBacklog(azurite, queue_name, retry_seconds=0.05).start()
    yield backlog
    backlog.stop()


def published(mirror: StorageBacklog, queue: QueueClient, adapter: StorageQueueBacklog) -> tuple[int, list[int]]:
    """What the autoscaler reads (the queue's length, through its own adapter) and the frames the messages name."""
    assert mirror.flush(timeout=FLUSH_S), mirror.stats()
    frames = sorted(json.loads(m.content)["frame"] for m in queue.peek_messages(max_messages=32))
    return adapter.get_backlog(), frames


def backlog_of(world: World) -> int:
    report = world.render_queue_report()
    assert report is not None
    return int(report["backlog"])


def test_the_queue_holds_one_message_per_frame_waiting_as_frames_arrive_are_taken_and_are_put_back(
        mirror: StorageBacklog, queue: QueueClient, storage_connection: StorageConnection, queue_name: str) -> None:
    # Frames 0 and 1 (10m) at 1m, frame 2 (1m) at 2m, on two nodes; node 0's VM is deleted at 5m, so frame 0
    # goes back to the backlog, and a new node takes it once Ready (6m); node 1 takes frame 2 at 11m.
    world = World(farm(frames=[{"at": "1m", "count": 2}, {"at": "2m", "count": 1, "frame_time": "1m"}],
                       frame_time="10m"), seed=0, start=START)
    world.publish_backlog(mirror)
    adapter = StorageQueueBacklog(storage_connection, queue_name)
    pool = world.scale_set(SUB, RG, POOL)
    assert published(mirror, queue, adapter) == (0, [])
    world.advance_by(60)  # both frames arrive and are taken at once
    assert published(mirror, queue, adapter) == (0, [])
    world.advance_by(60)  # frame 2 arrives, both nodes busy
    assert published(mirror, queue, adapter) == (1, [2])
    world.advance_by(180)
    world.delete_instances(pool, ["0"])
    world.set_capacity(pool, 2)
    world.advance_by(1)  # frame 0 interrupted: back in the backlog, a message again
    assert published(mirror, queue, adapter) == (2, [0, 2])
    world.advance_by(119)  # the new node is Ready and takes frame 0
    assert published(mirror, queue, adapter) == (1, [2])
    world.advance_by(300)  # node 1 ends frame 1 at 11m and takes frame 2
    assert published(mirror, queue, adapter) == (0, [])
    assert backlog_of(world) == 0
    stats = mirror.stats()
    # Frames taken in the instant they arrive may never be sent (the mirror's round had not come): every message
    # sent was deleted, none twice (the queue would be short), none failed.
    assert (stats["sent"], stats["failed"], stats["pending"]) == (stats["deleted"], 0, 0) and stats["sent"] >= 2
    adapter.close()


def test_frames_already_waiting_when_the_backlog_is_published_are_sent(
        mirror: StorageBacklog, queue: QueueClient, storage_connection: StorageConnection, queue_name: str) -> None:
    world = World(farm(frames=[{"at": "1m", "count": 7}]), seed=0, start=START)
    world.advance_by(60)  # 2 rendering, 5 waiting before anyone listens
    world.publish_backlog(mirror)
    adapter = StorageQueueBacklog(storage_connection, queue_name)
    assert published(mirror, queue, adapter) == (5, [2, 3, 4, 5, 6])
    adapter.close()


def test_a_frame_arrived_and_taken_before_the_mirror_runs_is_never_sent(azurite: str, queue_name: str) -> None:
    mirror = StorageBacklog(azurite, queue_name)
    mirror.arrived(0)
    mirror.arrived(1)
    mirror.taken(0)
    mirror.start()
    try:
        assert mirror.flush(timeout=FLUSH_S)
        assert mirror.stats() | {"queue": None} == {"queue": None, "sent": 1, "deleted": 0, "failed": 0, "pending": 0}
    finally:
        mirror.stop()


def test_a_queue_that_fails_is_retried_and_the_mirror_catches_up_with_the_world(
        mirror: StorageBacklog, queue: QueueClient, storage_connection: StorageConnection, queue_name: str) -> None:
    world = World(farm(frames=[{"at": "1m", "count": 6}, {"at": "2m", "count": 3}]), seed=0, start=START)
    world.publish_backlog(mirror)
    queue.delete_queue()  # Storage loses the queue: every send fails (QueueNotFound)
    world.advance_by(60)
    assert backlog_of(world) == 4  # the world goes on: its backlog is the truth
    assert not mirror.flush(timeout=0.5) and mirror.stats()["failed"] > 0
    queue.create_queue()
    world.advance_by(60)
    adapter = StorageQueueBacklog(storage_connection, queue_name)
    assert published(mirror, queue, adapter) == (7, [2, 3, 4, 5, 6, 7, 8])
    adapter.close()


def test_the_mirror_says_when_it_is_behind_and_when_it_caught_up_or_failed(azurite: str, queue_name: str,
                                                                          queue: QueueClient) -> None:
    """What the server holds its clock on: behind from the first note, caught up once the messages are in the queue,
    and no longer holding the world once a call failed (Storage being down must not stop sim time)."""
    told: list[bool] = []
    mirror = StorageBacklog(azurite, queue_name, retry_seconds=0.05, on_pending=told.append).start()
    try:
        for frame in range(5):
            mirror.arrived(frame)
        assert mirror.flush(timeout=FLUSH_S)
        assert told == [True, False] and queue.get_queue_properties().approximate_message_count == 5
        queue.delete_queue()
        mirror.arrived(5)  # its send fails: QueueNotFound
        assert not mirror.flush(timeout=0.5)
        assert told[2:4] == [True, False], told
    finally:
        mirror.stop(flush_seconds=0)


@pytest.mark.parametrize(("name", "problem"), [
    ("Frames", "not a valid Azure Storage queue name"),
    ("fr", "not a valid Azure Storage queue name"),
    ("frames--hq", "not a valid Azure Storage queue name"),
    ("frames-", "not a valid Azure Storage queue name"),
    ("", "must be a non-empty string"),
    (7, "must be a non-empty string"),
])
def test_a_bad_storage_queue_name_is_refused_naming_the_field(name: Any, problem: str) -> None:
    with pytest.raises(ScenarioError, match=rf"\$\.render_queue\.storage_queue: .*{problem}"):
        load_scenario(farm(storage_queue=name))


def test_the_server_publishes_the_backlog_and_names_the_queue_for_the_autoscaler(
        tmp_path: Path, azurite: str, queue: QueueClient, queue_name: str) -> None:
    doc = farm(frames=[{"at": "0s", "count": 5}], storage_queue=queue_name)
    with pytest.raises(ValueError, match=f"Storage queue {queue_name}: give a storage connection string"):
        SandboxServer(doc, workdir=tmp_path, clock=ManualClock(START))
    with SandboxServer(doc, workdir=tmp_path, clock=ManualClock(START), storage_connection=azurite) as server:
        assert server.env()["LOAD_BACKLOG_QUEUE"] == queue_name
        assert (server.world.render_queue_report() or {})["backlog"] == 3  # at t=0: two nodes took a frame each
    # Stopping lets what the world noted reach the queue.
    assert queue.get_queue_properties().approximate_message_count == 3


def test_serve_refuses_a_published_render_queue_without_a_storage_connection(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "farm.json"
    path.write_text(json.dumps(farm(storage_queue="frames")), encoding="utf-8")
    assert sandbox_main.main(["serve", "--scenario", str(path), "--workdir", str(tmp_path)]) == 2
    assert "Storage queue frames: give --storage-connection" in capsys.readouterr().err
