"""Break-even idle mode (engine.idle): the rent-or-buy time, per-group rules, boot measurement, the planner."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine import idle, reasons
from shared.engine.cooldowns import scale_down_blocked
from shared.engine.idle import (
    AUTO,
    BOOT_WINDOW,
    BREAK_EVEN,
    DEFAULT_BOOT,
    FIXED,
    REQUEST_WINDOW,
    START_REQUEST_WINDOW,
    boot_estimate,
    break_even_time,
    measure_boots,
    measure_starts,
    note_boot_request,
    note_start_request,
    resolve_idle_mode,
    starting_instances,
)
from shared.engine.scale_down import OPTIONS_TAG, ScaleDownOptions, group_rules, plan_scale_down
from tests.builders import T0, group, node, pod, snapshot

GID = "rg/pool"
GIVE_UP = timedelta(minutes=15)
BOOTS = (90, 100, 120, 140, 600)  # median 120 s; one boot stuck for 10 minutes
FIXED_OPTS = ScaleDownOptions(unneeded_time=timedelta(minutes=10))
BREAK_EVEN_OPTS = replace(FIXED_OPTS, idle_mode=BREAK_EVEN)
MODE_TAG = OPTIONS_TAG + "scaledownidlemode"
UNNEEDED_TAG = OPTIONS_TAG + "scaledownunneededtime"


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


# --- the rent-or-buy arithmetic ----------------------------------------------------------------------------


@pytest.mark.parametrize("boots,expected", [
    ((), DEFAULT_BOOT),
    ((75,), s(75)),
    ((60, 300), s(180)),
    (BOOTS, s(120)),  # the stuck boot moves the median by nothing
])
def test_the_boot_estimate_is_the_median_of_the_window_or_the_default(boots: tuple[int, ...],
                                                                     expected: timedelta) -> None:
    assert boot_estimate(boots) == expected
    assert break_even_time(boots) == expected * idle.BREAK_EVEN_FACTOR


@pytest.mark.parametrize("boot_s", [30, 100, 300])
@pytest.mark.parametrize("gap_s", [0, 10, 59, 100, 101, 299, 300, 301, 1000, 36000])
def test_keeping_an_idle_node_for_one_boot_costs_at_most_twice_the_clairvoyant_choice(boot_s: int, gap_s: int) -> None:
    """Ski rental: an idle gap `gap` ahead, a node costs 1 per second idle or `boot` to bring back.

    The rule keeps the node `keep` seconds: the whole gap if it is shorter, else `keep` idle plus a new boot.
    The clairvoyant keeps it through a gap shorter than a boot and removes it at once otherwise.
    """
    keep = break_even_time([boot_s]).total_seconds()
    ours = gap_s if gap_s <= keep else keep + boot_s
    clairvoyant = min(gap_s, boot_s)
    assert ours <= 2 * clairvoyant


# --- per-group rules ---------------------------------------------------------------------------------------


def rules(options: ScaleDownOptions, tags: dict[str, str] | None = None, boots: tuple[int, ...] = BOOTS):
    return group_rules(group(tags=tags), options, GroupState(GID, boots=boots))


def test_break_even_makes_the_unneeded_time_and_the_delay_after_add_the_boot_estimate() -> None:
    got = rules(BREAK_EVEN_OPTS)
    assert got.idle_mode == BREAK_EVEN
    assert got.unneeded_time == got.after_add == s(120)
    assert got.delays(BREAK_EVEN_OPTS).after_add == s(120)
    assert got.delays(BREAK_EVEN_OPTS).after_failure == BREAK_EVEN_OPTS.delays.after_failure  # the others stay


def test_break_even_without_measured_boots_uses_the_default() -> None:
    got = rules(BREAK_EVEN_OPTS, boots=())
    assert got.unneeded_time == got.after_add == DEFAULT_BOOT
    assert group_rules(group(), BREAK_EVEN_OPTS).unneeded_time == DEFAULT_BOOT  # no state row at all


def test_fixed_mode_keeps_the_settings_whatever_was_measured() -> None:
    got = rules(FIXED_OPTS)
    assert got.idle_mode == FIXED
    assert got.unneeded_time == timedelta(minutes=10)
    assert got.after_add == FIXED_OPTS.delays.after_add == timedelta(minutes=10)


@pytest.mark.parametrize("options,tag,mode,unneeded", [
    (FIXED_OPTS, "break-even", BREAK_EVEN, s(120)),
    (FIXED_OPTS, " Break-Even ", BREAK_EVEN, s(120)),
    (BREAK_EVEN_OPTS, "fixed", FIXED, timedelta(minutes=10)),
])
def test_the_group_tag_overrides_the_global_mode(options: ScaleDownOptions, tag: str, mode: str,
                                                 unneeded: timedelta) -> None:
    got = rules(options, {MODE_TAG: tag})
    assert (got.idle_mode, got.unneeded_time) == (mode, unneeded)


AUTO_OPTS = replace(FIXED_OPTS, idle_mode=AUTO)


@pytest.mark.parametrize("vm_size,mode", [
    ("Standard_D4s_v5", BREAK_EVEN),
    ("Standard_E8s_v5", BREAK_EVEN),
    ("Standard_B2s", BREAK_EVEN),
    ("", BREAK_EVEN),  # a group whose size is not known (a mixed Flexible scale set)
    ("Standard_NC4as_T4_v3", FIXED),
    ("standard_nc96ads_a100_v4", FIXED),
    ("Standard_ND96isr_H100_v5", FIXED),
    ("Standard_NV36ads_A10_v5", FIXED),
    ("Standard_NG32ads_V620_v1", FIXED),  # AMD GPUs
    ("Standard_NP10s", FIXED),  # FPGAs
])
def test_auto_is_fixed_on_gpu_and_fpga_sizes_and_break_even_on_the_others(vm_size: str, mode: str) -> None:
    assert resolve_idle_mode(AUTO, vm_size=vm_size) == mode
    got = group_rules(group(vm_size=vm_size), AUTO_OPTS, GroupState(GID, boots=BOOTS))
    assert got.idle_mode == mode
    assert got.unneeded_time == got.after_add == (s(120) if mode == BREAK_EVEN else timedelta(minutes=10))
    for explicit in (FIXED, BREAK_EVEN):  # an explicit mode is never changed by the size
        assert resolve_idle_mode(explicit, vm_size=vm_size) == explicit


def test_a_group_tag_may_ask_for_auto_and_then_the_size_decides() -> None:
    on_gpu = group_rules(group(vm_size="Standard_NC6s_v3", tags={MODE_TAG: "auto"}), BREAK_EVEN_OPTS,
                         GroupState(GID, boots=BOOTS))
    on_cpu = group_rules(group(tags={MODE_TAG: "Auto"}), FIXED_OPTS, GroupState(GID, boots=BOOTS))
    assert (on_gpu.idle_mode, on_gpu.unneeded_time) == (FIXED, timedelta(minutes=10))
    assert (on_cpu.idle_mode, on_cpu.unneeded_time) == (BREAK_EVEN, s(120))


def test_an_explicit_unneeded_time_tag_wins_over_break_even_but_the_delay_after_add_follows_the_boots() -> None:
    got = rules(BREAK_EVEN_OPTS, {UNNEEDED_TAG: "7m"})
    assert got.unneeded_time == timedelta(minutes=7)
    assert got.after_add == s(120)


def test_a_malformed_mode_tag_names_the_tag_and_the_group() -> None:
    with pytest.raises(ValueError, match=r"scale set rg/pool: tag .*scaledownidlemode: must be one of auto, fixed, break-even"):
        rules(FIXED_OPTS, {MODE_TAG: "cheap"})


@pytest.mark.parametrize("mode,scaled_up_ago,blocked", [
    (BREAK_EVEN, s(60), True),   # within the 120 s boot estimate
    (BREAK_EVEN, s(130), False),
    (FIXED, s(130), True),       # the fixed 10 minutes
])
def test_the_delay_after_a_scale_up_follows_the_mode(mode: str, scaled_up_ago: timedelta, blocked: bool) -> None:
    options = replace(FIXED_OPTS, idle_mode=mode)
    state = GroupState(GID, last_scale_up=T0 - scaled_up_ago, boots=BOOTS)
    delays = group_rules(group(), options, state).delays(options)
    assert (scale_down_blocked(state, now=T0, delays=delays) is not None) is blocked


# --- measuring boots ---------------------------------------------------------------------------------------


def test_each_new_node_takes_the_oldest_request_still_waiting_and_each_request_gives_one_boot() -> None:
    state = note_boot_request(GroupState(GID), 2, now=T0)
    state = note_boot_request(state, 1, now=T0 + s(30))
    assert state.boot_requests == ((T0, 2, 2), (T0 + s(30), 1, 1))
    old = T0 - timedelta(hours=1)  # registered before any request: not a boot
    measured = measure_boots(state, [old, T0 + s(95), T0 + s(80), T0 + s(100)], now=T0 + s(120), give_up=GIVE_UP)
    # The first request's median node is its first (80 s); the 95 s node is its second; 100 s answers the second.
    assert measured.boots == (80, 70)
    assert measured.boot_requests == ()
    assert measured.boots_counted_until == T0 + s(100)


def test_gpu_nodes_are_counted_in_registration_order_and_measured_to_the_poll_that_found_them_usable() -> None:
    # Four GPU nodes registered at 60-63 s; their GPUs come in another order. A node registered after one still
    # without GPUs waits for it, and each boot runs to the poll (`usable_at`), not to the registration.
    state = note_boot_request(GroupState(GID), 4, now=T0)
    reg = [T0 + s(60 + i) for i in range(4)]
    # Poll at 300 s: nodes 1 and 3 usable, 0 and 2 not: nothing counted (node 0 blocks every later one).
    first = measure_boots(state, [reg[1], reg[3]], now=T0 + s(300), give_up=GIVE_UP, not_yet=[reg[0], reg[2]],
                          usable_at=T0 + s(300))
    assert first is state
    # Poll at 330 s: node 0 usable too; 0 and 1 counted (2 blocks 3): the 2nd of 4 is the median, at 330 s.
    second = measure_boots(first, [reg[0], reg[1], reg[3]], now=T0 + s(330), give_up=GIVE_UP, not_yet=[reg[2]],
                           usable_at=T0 + s(330))
    assert second.boots == (330,) and second.boot_requests == ((T0, 4, 2),)
    third = measure_boots(second, reg, now=T0 + s(360), give_up=GIVE_UP, usable_at=T0 + s(360))
    assert third.boots == (330,) and third.boot_requests == ()  # the rest counted, the request's boot given once
    # Without the hold (GPU_READINESS=false), the same nodes are measured to their registration.
    assert measure_boots(state, reg, now=T0 + s(360), give_up=GIVE_UP).boots == (61,)


def test_a_large_scale_up_gives_its_median_boot_not_its_slowest() -> None:
    state = note_boot_request(GroupState(GID), 60, now=T0)
    measured = measure_boots(state, [T0 + s(60 + i) for i in range(60)], now=T0 + s(300), give_up=GIVE_UP)
    assert measured.boots == (89,)  # the 30th of 60 to register


def test_a_node_is_counted_once_and_a_request_waits_for_its_missing_nodes() -> None:
    state = note_boot_request(GroupState(GID), 3, now=T0)
    first = measure_boots(state, [T0 + s(90)], now=T0 + s(90), give_up=GIVE_UP)
    assert first.boots == () and first.boot_requests == ((T0, 3, 2),)
    assert measure_boots(first, [T0 + s(90)], now=T0 + s(120), give_up=GIVE_UP) is first  # nothing new: unchanged
    second = measure_boots(first, [T0 + s(90), T0 + s(150)], now=T0 + s(180), give_up=GIVE_UP)
    assert second.boots == (150,) and second.boot_requests == ((T0, 3, 1),)  # the 2nd of 3: the median
    third = measure_boots(second, [T0 + s(90), T0 + s(150), T0 + s(200)], now=T0 + s(210), give_up=GIVE_UP)
    assert third.boots == (150,) and third.boot_requests == ()


def test_a_request_older_than_the_provision_time_is_dropped_and_measures_no_later_node() -> None:
    state = note_boot_request(GroupState(GID), 2, now=T0)
    expired = measure_boots(state, [], now=T0 + GIVE_UP + s(1), give_up=GIVE_UP)
    assert expired.boot_requests == () and expired.boots == ()
    later = note_boot_request(expired, 1, now=T0 + timedelta(minutes=20))
    measured = measure_boots(later, [T0 + timedelta(minutes=21)], now=T0 + timedelta(minutes=22), give_up=GIVE_UP)
    assert measured.boots == (60,)  # from its own request, not from the expired one


def test_a_node_registered_before_a_request_answers_none() -> None:
    state = note_boot_request(GroupState(GID), 1, now=T0)
    assert measure_boots(state, [T0 - s(1)], now=T0 + s(10), give_up=GIVE_UP) is state


def test_the_windows_stay_bounded_and_keep_the_newest() -> None:
    state = GroupState(GID)
    for i in range(REQUEST_WINDOW + 5):
        state = note_boot_request(state, 1, now=T0 + s(i))
    assert len(state.boot_requests) == REQUEST_WINDOW
    assert state.boot_requests[0] == (T0 + s(5), 1, 1)
    state = GroupState(GID)
    for i in range(BOOT_WINDOW + 7):
        state = note_boot_request(state, 1, now=T0 + s(i))
    measured = measure_boots(state, [T0 + s(60 + 2 * i) for i in range(BOOT_WINDOW + 7)], now=T0 + s(200),
                             give_up=GIVE_UP)
    assert measured.boots == tuple(60 + i for i in range(7, BOOT_WINDOW + 7))


def test_asking_for_no_new_instance_notes_nothing() -> None:
    state = GroupState(GID)
    assert note_boot_request(state, 0, now=T0) is state


# --- measuring starts ----------------------------------------------------------------------------------------

STARTED = ("3", "4", "5")


@pytest.mark.parametrize(("ready", "poll_s", "expected"), [
    # Deallocated instances register fresh nodes: each is Ready at its registration; the 2nd of 3 is the median.
    ({"3": 40, "4": 55, "5": 70}, 80, (55,)),
    ({"5": 40, "3": 55, "4": 70}, 80, (55,)),  # whichever instance, the median time
    # Hibernated ones keep their nodes (registered before the start): Ready when a poll first sees them.
    ({"3": -3600, "4": -3600, "5": -3600}, 45, (45,)),
    ({"3": -3600, "4": 30}, 50, (50,)),  # one of each: the kept node counts from the poll, after the fresh one
    ({"3": 40}, 60, ()),  # 1 of 3: no median yet
    ({}, 60, ()),
])
def test_a_start_request_gives_its_median_instance_s_ready_time(ready, poll_s, expected) -> None:  # type: ignore[no-untyped-def]
    state = note_start_request(GroupState(GID), STARTED, now=T0)
    measured = measure_starts(state, {i: T0 + s(t) for i, t in ready.items()}, now=T0 + s(poll_s), give_up=GIVE_UP)
    assert measured.starts == expected
    assert all(0 < start <= poll_s for start in measured.starts)
    (at, started, left), = measured.start_requests  # kept, answered or not, until it expires
    assert (at, started) == (T0, STARTED) and set(left) == set(STARTED) - set(ready)
    assert measured.boots == state.boots and measured.boot_requests == state.boot_requests


def test_an_instance_is_counted_once_and_the_request_kept_until_it_expires() -> None:
    state = note_start_request(GroupState(GID), STARTED, now=T0)
    first = measure_starts(state, {"3": T0 + s(40), "4": T0 + s(50)}, now=T0 + s(60), give_up=GIVE_UP)
    assert first.starts == (50,)
    again = measure_starts(first, {"3": T0 + s(40), "4": T0 + s(50), "5": T0 + s(90)}, now=T0 + s(100),
                           give_up=GIVE_UP)
    assert again.starts == (50,) and again.start_requests == ((T0, STARTED, ()),)
    assert measure_starts(again, {"3": T0 + s(40)}, now=T0 + s(110), give_up=GIVE_UP) is again  # nothing new
    assert starting_instances(again) == frozenset(STARTED)  # their nodes are not boots while it is kept
    expired = measure_starts(again, {}, now=T0 + GIVE_UP + s(1), give_up=GIVE_UP)
    assert expired.start_requests == () and expired.starts == (50,) and starting_instances(expired) == frozenset()


def test_an_instance_never_ready_by_the_provision_time_is_no_start() -> None:
    state = note_start_request(GroupState(GID), ("3",), now=T0)
    late = measure_starts(state, {"3": T0 + GIVE_UP + s(5)}, now=T0 + GIVE_UP + s(10), give_up=GIVE_UP)
    assert late.starts == () and late.start_requests == ()


def test_start_windows_stay_bounded_and_keep_the_newest() -> None:
    state = GroupState(GID)
    for i in range(START_REQUEST_WINDOW + 3):
        state = note_start_request(state, (str(i),), now=T0 + s(i))
    assert len(state.start_requests) == START_REQUEST_WINDOW
    assert state.start_requests[0][1] == (str(3),)
    state = GroupState(GID, starts=tuple(range(BOOT_WINDOW)))
    state = note_start_request(state, ("x",), now=T0)
    measured = measure_starts(state, {"x": T0 + s(77)}, now=T0 + s(80), give_up=GIVE_UP)
    assert len(measured.starts) == BOOT_WINDOW and measured.starts[-1] == 77 and measured.starts[0] == 1


def test_starting_no_instance_notes_nothing_and_a_repeated_id_counts_once() -> None:
    state = GroupState(GID)
    assert note_start_request(state, (), now=T0) is state
    assert note_start_request(state, ("3", "3"), now=T0).start_requests == ((T0, ("3",), ("3",)),)


# --- the planner ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options,idle_for,removed", [
    (BREAK_EVEN_OPTS, s(100), False),  # idle for less than the 120 s boot estimate: kept
    (BREAK_EVEN_OPTS, s(130), True),   # longer: removed
    (FIXED_OPTS, s(130), False),       # the fixed 10 minutes keep it
])
def test_the_planner_keeps_a_node_idle_for_less_than_a_boot_and_removes_one_idle_longer(
        options: ScaleDownOptions, idle_for: timedelta, removed: bool) -> None:
    groups = [group(target=2, min_size=1)]
    nodes = [node("n0"), node("n1", instance=1)]
    state = GroupState(GID, boots=BOOTS, last_scale_up=T0 - timedelta(minutes=3))
    plan = plan_scale_down(snapshot(groups=groups, nodes=nodes, pods=[pod("keep", node_name="n1")]),
                           unneeded_since={"n0": T0 - idle_for}, group_states={GID: state}, now=T0, options=options)
    assert ([r.node for r in plan.removals] == ["n0"]) is removed
    if not removed:
        assert plan.kept["n0"].code == reasons.NOT_UNNEEDED_LONG_ENOUGH
        assert f"of {int(rules(options).unneeded_time.total_seconds())}s" in plan.kept["n0"]
