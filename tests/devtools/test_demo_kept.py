"""The demo's view of kept nodes: reason counts, the latest poll's verdicts, and convergence around protected nodes."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from devtools.demo import _converged, _KeptLog

UTILIZATION = logging.getLogger("shared.services.utilization")


@pytest.fixture
def kept() -> Any:
    handler = _KeptLog()  # on the root logger, as run_scenario installs it
    logging.getLogger().addHandler(handler)
    level = UTILIZATION.level
    UTILIZATION.setLevel(logging.INFO)
    yield handler
    logging.getLogger().removeHandler(handler)
    UTILIZATION.setLevel(level)


def keep(node: str, code: str, message: str) -> None:
    """The record run_utilization_poll writes for a kept node."""
    UTILIZATION.info("node %s kept (%s): %s", node, code, message,
                     extra={"node": node, "kept_reason": code})


def poll(kept: _KeptLog, *verdicts: tuple[str, str, str], completed: bool = True) -> None:
    kept.begin_poll()
    for verdict in verdicts:
        keep(*verdict)
    kept.end_poll(completed=completed)


def test_reasons_count_distinct_nodes_and_the_latest_poll_says_what_is_kept(kept: _KeptLog) -> None:
    poll(kept, ("n1", "NotUnneededLongEnough", "unneeded for 60s of 600s"),
         ("n2", "ScaleDownDisabledAnnotation", "annotation x=true"))
    poll(kept, ("n1", "NotUnneededLongEnough", "unneeded for 120s of 600s"),
         ("n2", "ScaleDownDisabledAnnotation", "annotation x=true"), ("n3", "NotUnneededLongEnough", "unneeded for 0s"))
    assert kept.reason_counts() == {"NotUnneededLongEnough": 2, "ScaleDownDisabledAnnotation": 1}
    poll(kept, ("n2", "ScaleDownDisabledAnnotation", "annotation x=true"))  # n1 and n3 were removed
    assert kept.kept_nodes() == {"n2": "ScaleDownDisabledAnnotation: annotation x=true"}
    assert kept.protected_nodes() == {"n2"}


def test_a_failed_or_skipped_poll_leaves_the_previous_verdicts(kept: _KeptLog) -> None:
    poll(kept, ("n1", "NotSafeToEvictAnnotation", "pod default/a has annotation ...=false"))
    poll(kept, completed=False)
    kept.begin_poll()
    logging.getLogger("shared.services.observe").warning("ARM is throttling discovery (retry after %ss): skipping this poll", 5)
    kept.end_poll(completed=True)
    assert kept.protected_nodes() == {"n1"}
    poll(kept)  # a poll that kept nothing
    assert kept.kept_nodes() == {} and kept.reason_counts() == {"NotSafeToEvictAnnotation": 1}


def state(idle: list[str], *, ready: int, minimum: int) -> dict[str, Any]:
    group = {"ready": ready, "booting": 0, "deleting": 0, "target": ready, "min": minimum, "idle": len(idle),
             "autoscaled": True}
    return {"done": True, "pending": 0, "pending_unplaceable": 0, "groups": {"rg/pool": group},
            "idle_nodes": {"rg/pool": idle}}


@pytest.mark.parametrize(
    ("idle", "ready", "minimum", "protected", "converged"),
    [
        (["a"], 2, 1, set(), False),  # an idle node above the minimum: the autoscaler still has work
        (["a"], 1, 1, set(), True),  # at the minimum
        (["a"], 1, 0, {"a"}, True),  # kept on purpose (scale-down-disabled)
        (["a", "b"], 3, 1, {"a"}, False),  # b may still go
        (["a"], 2, 1, {"b"}, False),  # b is protected but not idle; a may go
    ],
)
def test_protected_idle_nodes_do_not_hold_up_convergence(
    kept: _KeptLog, idle: list[str], ready: int, minimum: int, protected: set[str], converged: bool
) -> None:
    poll(kept, *((node, "ScaleDownDisabledAnnotation", "annotation") for node in sorted(protected)))
    view = SimpleNamespace(last_state=state(idle, ready=ready, minimum=minimum))
    runner = SimpleNamespace(queue_is_idle=lambda: True)
    assert _converged(None, runner, view, kept) is converged  # type: ignore[arg-type]
    if not protected:
        assert _converged(None, runner, view) is converged  # type: ignore[arg-type]
