"""The picture a person looks at after a run: nodes per group against pending and running pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_timeline(report: dict[str, Any], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display here, and none needed
    import matplotlib.pyplot as plt

    samples = report["timeline"]
    minutes = [s["t"] / 60 for s in samples]
    fig, (nodes_ax, pods_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 6.5), height_ratios=(1, 1))
    groups = sorted({name for s in samples for name in s["groups"]})
    for name in groups:
        nodes_ax.step(minutes, [s["groups"].get(name, {}).get("ready", 0) for s in samples], where="post",
                      label=f"{name} ready")
        nodes_ax.step(minutes, [s["groups"].get(name, {}).get("target", 0) for s in samples], where="post",
                      linestyle="--", label=f"{name} target")
    nodes_ax.set_ylabel("nodes")
    nodes_ax.legend(loc="upper right", fontsize="small")
    nodes_ax.grid(alpha=0.3)
    pods_ax.fill_between(minutes, [s["pending"] for s in samples], step="post", alpha=0.5, color="tab:red",
                         label="pending pods")
    pods_ax.step(minutes, [s["running"] for s in samples], where="post", color="tab:green", label="running pods")
    if any("frames_backlog" in s for s in samples):  # a render queue: the frames waiting and those rendering
        pods_ax.step(minutes, [s.get("frames_backlog", 0) for s in samples], where="post", color="tab:purple",
                     label="frames waiting")
        pods_ax.step(minutes, [s.get("frames_rendering", 0) for s in samples], where="post", color="tab:orange",
                     linestyle="--", label="frames rendering")
        pods_ax.set_ylabel("pods, frames")
    else:
        pods_ax.set_ylabel("pods")
    pods_ax.set_xlabel("sandbox time (minutes)")
    pods_ax.legend(loc="upper right", fontsize="small")
    pods_ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
