"""The whole path, as a user runs it: sandbox cluster, Azurite, the local runner, our three functions.

Every queue message is delivered twice, so the run also proves that no action executes twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.invariants import INVARIANTS, Invariant, Promises, Run, invariant_id, nodes_needed, run_scenario

pytestmark = pytest.mark.e2e

GROUP = "rg-sandbox-nodes/pool-d4"
PROMISES = Promises(
    # One node of 3.71 free CPU cannot run 100 pods of 1-2 CPU: every wave needs new nodes.
    scale_up_for=("default/render-a", "default/render-b", "default/render-c", "default/render-d"),
    # The pods arrive over 60 s, so two or three pending polls each pack their own pods onto new nodes and
    # may leave one part-filled node each: 3 nodes above a packing of all 100 at once.
    node_slack=3,
)


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    # Depending on `azurite` makes run_scenario reuse the suite's shared Azurite instead of owning one.
    return run_scenario("burst", tmp_path_factory.mktemp("burst"), PROMISES, speed=30, duplicate_delivery=True,
                        wall_timeout=240, extra_settings=_keep_state_for_inspection())


def _keep_state_for_inspection() -> dict[str, str]:
    return {"STATE_TABLE": "e2eburststate", "SCALE_ACTIONS_QUEUE": "e2e-burst-actions"}


@pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
def test_burst_invariants(burst: Run, invariant: Invariant) -> None:
    """Converged with every pod complete, back at the minimum, nothing killed, nodes and waits within the
    scenario's bounds, every instance deleted once, events by reason (tests/e2e/invariants.py)."""
    invariant(burst)


def test_scales_up_to_fit(burst: Run) -> None:
    # About 100 pods of 1-2 CPU cannot run on one 4-CPU node. They arrive within a minute and run 3-8 minutes,
    # so at the peak at least half of them run at once: at least half the nodes a packing of all of them needs.
    # (The upper bound, and the waits that a too-small scale-up would stretch, are invariants.)
    assert burst.summary["nodes_max"] >= nodes_needed(burst) / 2, (burst.summary["nodes_max"], nodes_needed(burst))


def test_no_action_executes_twice_under_duplicate_delivery(burst: Run) -> None:
    summary: dict[str, Any] = burst.summary
    actions = summary["actions"]
    # Every message came twice: each action's second delivery (at least one per action) was suppressed.
    assert actions["scale_up"] >= 1 and actions["scale_down"] >= 1, actions
    assert actions["duplicates_suppressed"] >= actions["scale_up"] + actions["scale_down"], actions
    assert actions["failed"] == actions["rejected"] == 0, actions
    # (Each instance deleted exactly once: the invariant instances_deleted_once.)
    deleted = summary["deletes_by_instance"]
    # Empty nodes go in bulk: one action, and one delete call, per group per poll.
    assert len(deleted) >= actions["scale_down"]
    assert summary["api_breakdown"]["arm"]["POST delete"] < len(deleted), summary["api_breakdown"]["arm"]


def test_state_table_holds_cooldown_rows(burst: Run) -> None:
    row = burst.summary["state"]["groups"][GROUP]
    assert row["last_scale_up"] is not None
    assert row["last_scale_down"] is not None
    assert row["last_scale_down"] > row["last_scale_up"]
    assert row["deleting"] == []
