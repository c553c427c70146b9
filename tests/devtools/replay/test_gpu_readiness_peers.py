"""The ca emulation sees a GPU node Ready without allocatable GPUs as CA does: unready (its GPU label, no GPU:
FilterOutNodesWithUnreadyResources), and its group's template keeps the GPUs (it is built from no such node)."""

from __future__ import annotations

from dataclasses import replace

from devtools.replay.pools import CPU_POOL, GPU_POOL_2
from tests.devtools.replay.test_ca import CONFIG, drive, pod, trace


def test_a_gpu_node_without_its_gpus_is_unready_to_ca_until_they_come() -> None:
    config = replace(CONFIG, pools=(CPU_POOL, GPU_POOL_2))
    run, ca, _ = drive(trace(pod(1, 3600, 1000, gpus=2, job="train")), config=config, until_s=60)
    seen_waiting = seen_usable = False
    for _ in range(60):  # from the scale-up on, every 30 s for 30 minutes
        snapshot = ca._snapshot(run.world.now)
        gpu_group = next(g for g in snapshot.groups if g.id.endswith(GPU_POOL_2.name))
        for node in snapshot.nodes:
            ref = node.instance
            if ref is None or ref.group_id != gpu_group.id:
                continue
            has_gpus = node.allocatable.amount("nvidia.com/gpu") > 0
            assert node.ready is has_gpus  # Ready to CA exactly when its GPUs are allocatable
            seen_waiting |= not has_gpus
            seen_usable |= has_gpus
            assert snapshot.templates[gpu_group.id].allocatable.amount("nvidia.com/gpu") == GPU_POOL_2.gpus
        run.world.advance_by(30)
    assert seen_waiting and seen_usable  # Ready without GPUs first, then with them
