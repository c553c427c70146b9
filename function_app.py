"""Azure Functions entry points: triggers only; everything else lives in shared/.

Imports stay light at module level (cold start): shared.context loads settings
and SDK adapters on the first invocation, not when the host indexes this file.
"""

import azure.functions as func

from shared.context import get_context

app = func.FunctionApp()


@app.timer_trigger(arg_name="timer", schedule="%PENDING_POLL_SCHEDULE%", run_on_startup=False, use_monitor=True)
def poll_pending_pods(timer: func.TimerRequest) -> None:
    """Pending pods -> scale-up actions on the queue."""
    from shared.services.pending import run_pending_poll

    context = get_context()
    run_pending_poll(context.ports, context.settings, now=context.ports.clock.now())


@app.timer_trigger(arg_name="timer", schedule="%UTILIZATION_POLL_SCHEDULE%", run_on_startup=False, use_monitor=True)
def poll_utilization(timer: func.TimerRequest) -> None:
    """Idle nodes -> unneeded-since times in Table storage -> scale-down actions on the queue."""
    from shared.services.utilization import run_utilization_poll

    context = get_context()
    run_utilization_poll(context.ports, context.settings, now=context.ports.clock.now())


@app.timer_trigger(arg_name="timer", schedule="%STATE_SWEEP_SCHEDULE%", run_on_startup=False, use_monitor=True)
def sweep_state(timer: func.TimerRequest) -> None:
    """Ledger and unneeded-since rows older than STATE_RETENTION -> removed, a bounded number per run."""
    from shared.services.retention import run_state_sweep

    context = get_context()
    run_state_sweep(context.ports, context.settings, now=context.ports.clock.now())


@app.event_grid_trigger(arg_name="event")
def on_scheduled_event(event: func.EventGridEvent) -> None:
    """Azure's spot Preempt notice (Scheduled Events via Event Grid) -> node cordoned, pods evicted, replacements."""
    from shared.services.preemption import handle_scheduled_event

    context = get_context()
    handle_scheduled_event(context.ports, context.settings, {
        "id": event.id, "subject": event.subject, "eventType": event.event_type, "data": event.get_json(),
    }, now=context.ports.clock.now())


@app.queue_trigger(arg_name="message", queue_name="%SCALE_ACTIONS_QUEUE%", connection="AzureWebJobsStorage")
def execute_scale_action(message: func.QueueMessage) -> None:
    """One step of one scale action; raising hands the message back to the host for a retry."""
    from shared.services.executor import Executor

    context = get_context()
    Executor(context.ports, context.settings).execute(
        message.get_body(), now=context.ports.clock.now(), dequeue_count=message.dequeue_count or 1
    )
