"""services.drift: the Uniform groups whose nodes' instances were not listed are listed for model drift, once
each; other kinds, listed groups and groups without nodes are not read; a failed list leaves the group alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import AKS_AGENT_POOL, FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, Instance, NodeGroup
from shared.engine.drift import MODEL, drifted_nodes
from shared.ports import ComputeError
from shared.services.drift import LIST_INTERVAL, with_model_state
from tests.builders import T0, group, node, snapshot


class Provider:
    """Lists each group's instances as `stale` says (latestModelApplied false for those ids), counting reads."""

    def __init__(self, stale: set[str], *, fail: bool = False) -> None:
        self.stale, self.fail, self.reads = stale, fail, []

    def list_instances(self, g: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        self.reads.append(g.id)
        if self.fail:
            raise ComputeError("boom")
        return [Instance(str(i), latest_model_applied=str(i) not in self.stale) for i in range(g.capacity)]


def _cluster(kind: str, *, listed: bool = False, nodes: int = 2):
    g = replace(group(target=2), provider=kind, instances=() if not listed else (Instance("0"), Instance("1")))
    return snapshot(nodes=[node(f"n{i}", instance=i) for i in range(nodes)], groups=[g])


@pytest.mark.parametrize("kind, listed, nodes, reads", [
    (UNIFORM_SCALE_SET, False, 2, 1),
    (UNIFORM_SCALE_SET, True, 2, 0),  # node mapping listed them already
    (UNIFORM_SCALE_SET, False, 0, 0),  # no node to drift
    (FLEXIBLE_SCALE_SET, False, 2, 0),  # a member VM reports no latestModelApplied
    (AKS_AGENT_POOL, False, 2, 0),  # machines neither: a pool drifts by node image
])
def test_which_groups_are_listed(kind: str, listed: bool, nodes: int, reads: int) -> None:
    provider = Provider({"1"})
    snap = _cluster(kind, listed=listed, nodes=nodes)
    out = with_model_state(provider, snap)  # type: ignore[arg-type]
    assert len(provider.reads) == reads
    if not reads:
        assert out is snap


def test_a_listed_uniform_group_shows_its_stale_instance_to_drift() -> None:
    snap = with_model_state(Provider({"1"}), _cluster(UNIFORM_SCALE_SET))  # type: ignore[arg-type]
    assert drifted_nodes(snap, max_age=timedelta(0), now=T0) == {"n1": MODEL}


def test_a_failed_list_leaves_the_group_unlisted() -> None:
    snap = _cluster(UNIFORM_SCALE_SET)
    out = with_model_state(Provider(set(), fail=True), snap)  # type: ignore[arg-type]
    assert out.groups == snap.groups


def test_a_set_found_all_latest_is_read_again_only_when_its_etag_moves() -> None:
    provider = Provider(set())
    snap = _cluster(UNIFORM_SCALE_SET)
    snap = replace(snap, groups=tuple(replace(g, etag='"1"', name="etag-pool") for g in snap.groups),
                   nodes=tuple(node(n.name, group_name="etag-pool", instance=i) for i, n in enumerate(snap.nodes)))
    for _ in range(3):
        with_model_state(provider, snap)  # type: ignore[arg-type]
    assert len(provider.reads) == 1  # all latest at etag "1": not read again
    provider.stale = {"0"}
    moved = replace(snap, groups=tuple(replace(g, etag='"2"') for g in snap.groups))
    for interval in (1, 2):  # past the last list's interval each time
        out = with_model_state(provider, replace(moved, taken_at=T0 + interval * LIST_INTERVAL))  # type: ignore[arg-type]
    assert len(provider.reads) == 3  # the etag moved: read, and read again while an instance is stale
    assert drifted_nodes(out, max_age=timedelta(0), now=T0) == {"n0": MODEL}


def test_a_busy_or_drifted_set_is_listed_once_per_interval_and_its_last_list_stands_in_between() -> None:
    provider = Provider({"1"})
    snap = replace(_cluster(UNIFORM_SCALE_SET), groups=tuple(replace(g, etag='"1"') for g in _cluster(
        UNIFORM_SCALE_SET).groups))
    seen = []
    for minute in range(11):  # the etag moves every poll, as it does while the set is resized
        moved = replace(snap, taken_at=T0 + timedelta(minutes=minute),
                        groups=tuple(replace(g, etag=f'"{minute}"') for g in snap.groups))
        seen.append(drifted_nodes(with_model_state(provider, moved), max_age=timedelta(0), now=T0))  # type: ignore[arg-type]
    interval = int(LIST_INTERVAL.total_seconds() // 60)
    assert len(provider.reads) == -(-11 // interval)  # minutes 0, 5 and 10
    assert all(found == {"n1": MODEL} for found in seen)  # the stale instance is shown between lists too
