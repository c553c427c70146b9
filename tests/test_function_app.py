"""The app indexes exactly our three functions, with the triggers the host needs."""

from __future__ import annotations

import function_app
from devtools.runner import app_functions, index_app


def bindings() -> dict[str, dict]:
    return {f.get_function_name(): f.get_trigger().get_dict_repr() for f in app_functions(function_app.app)}


def test_exactly_five_functions_with_their_triggers() -> None:
    found = {name: (b["type"], b.get("schedule") or b.get("queueName")) for name, b in bindings().items()}
    assert found == {
        "poll_pending_pods": ("timerTrigger", "%PENDING_POLL_SCHEDULE%"),
        "poll_utilization": ("timerTrigger", "%UTILIZATION_POLL_SCHEDULE%"),
        "sweep_state": ("timerTrigger", "%STATE_SWEEP_SCHEDULE%"),
        "execute_scale_action": ("queueTrigger", "%SCALE_ACTIONS_QUEUE%"),
        "on_scheduled_event": ("eventGridTrigger", None),
    }


def test_timers_do_not_run_on_startup_and_queue_uses_host_storage() -> None:
    b = bindings()
    assert b["poll_pending_pods"]["runOnStartup"] is False
    assert b["poll_utilization"]["runOnStartup"] is False
    assert b["sweep_state"]["runOnStartup"] is False
    assert b["execute_scale_action"]["connection"] == "AzureWebJobsStorage"


def test_schedules_resolve_to_documented_defaults_and_overrides() -> None:
    timers, queues = index_app(function_app.app, {})
    assert {t.name: t.expression for t in timers} == {
        "poll_pending_pods": "*/10 * * * * *",
        "poll_utilization": "0 * * * * *",
        "sweep_state": "0 7 * * * *",
    }
    assert [q.queue_name for q in queues] == ["scale-actions"]
    timers, queues = index_app(function_app.app, {"PENDING_POLL_SCHEDULE": "*/10 * * * * *", "SCALE_ACTIONS_QUEUE": "q2"})
    assert timers[0].expression == "*/10 * * * * *" and queues[0].queue_name == "q2"
