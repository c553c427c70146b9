"""How much of one replay goes to YAML and JSON encoding and decoding (`make bench` can print the share).

    python -m devtools.replay.encoding_share --trace alibaba2023 [--policy ours] [--seed 0]

One replay runs under a sampling profiler driven by the process's CPU clock (SIGPROF every 2 ms of CPU): each
sample is charged the CPU time since the one before and counts as encoding when any frame of the main thread's
stack is yaml, json or msgspec code, or shared/yaml_text.py (our own YAML emitter), so a yaml.dump and the
representers under it count once (no nested double count). CPU time, not wall time, because the bench shares a
machine: a replay descheduled for a while is not a replay doing more of anything. Sampling rather than
cProfile because cProfile's cost per call falls hardest on the many small calls of PyYAML's Python constructor
and representer. Checked on alibaba2023 (ours) before the status memo: timing yaml_text's load and dump
directly gave 31.8% of the replay's CPU, this sampler 32.7% (separate runs of the same code), cProfile with a
per-thread CPU clock 39%.

Limits, none of which the replay meets today: C encoders called straight from our code (msgspec.json.decode)
show in no frame, so they count as their caller's time (json.dumps/loads and yaml.load/dump are Python
functions around their C cores, and count); work on other threads counts as the main thread's, which waits
for it (services.observe reads pods on a thread of its own, no encoding there). POSIX only (setitimer).
Trace loading and the oracle bound are not part of the replay and are left out.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import CodeType, FrameType
from typing import Any

# A frame is encoding when its code's file lies in a directory of one of these names (the standard library's
# json/, site-packages' yaml/ and msgspec/).
ENCODING_PACKAGES = ("yaml", "json", "msgspec")
# And our own YAML code: block_dump writes the status document's YAML in Python, which is encoding too.
OUR_ENCODING_FILES = ("shared/yaml_text.py",)
SAMPLE_INTERVAL_S = 0.002  # of process CPU time


def is_encoding_file(filename: str) -> bool:
    """Whether code from this file encodes or decodes: yaml, json or msgspec library code, or shared/yaml_text.py."""
    path = filename.replace("\\", "/")
    return any(f"/{package}/" in path for package in ENCODING_PACKAGES) or path.endswith(OUR_ENCODING_FILES)


class EncodingSampler:
    """CPU time in and out of encoding, sampled on SIGPROF while active (a context manager; main thread only)."""

    def __init__(self, *, interval_s: float = SAMPLE_INTERVAL_S, clock: Callable[[], float] = time.process_time) -> None:
        if not hasattr(signal, "setitimer"):
            raise RuntimeError("encoding_share samples on SIGPROF (signal.setitimer), which this platform lacks")
        self.interval_s = interval_s
        self.encoding_s = 0.0
        self.total_s = 0.0
        self.samples = 0
        self._clock = clock
        self._last = 0.0
        self._verdicts: dict[CodeType, bool] = {}  # per code object: a file test per frame per sample is too slow
        self._previous: Any = None

    def in_encoding(self, frame: FrameType | None) -> bool:
        while frame is not None:
            code = frame.f_code
            verdict = self._verdicts.get(code)
            if verdict is None:
                verdict = self._verdicts[code] = is_encoding_file(code.co_filename)
            if verdict:
                return True
            frame = frame.f_back
        return False

    def charge(self, frame: FrameType | None) -> None:
        """Charge the CPU time since the last sample to this stack (coalesced signals then weigh what they missed)."""
        now = self._clock()
        spent, self._last = now - self._last, now
        self.total_s += spent
        self.samples += 1
        if self.in_encoding(frame):
            self.encoding_s += spent

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.charge(frame)

    def __enter__(self) -> EncodingSampler:
        self._previous = signal.signal(signal.SIGPROF, self._on_signal)
        self._last = self._clock()
        signal.setitimer(signal.ITIMER_PROF, self.interval_s, self.interval_s)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0.0)
        # None: the handler before was not set from Python; the default is what there was.
        signal.signal(signal.SIGPROF, signal.SIG_DFL if self._previous is None else self._previous)
        self.charge(None)  # the tail since the last sample, in no known frame: counted as not encoding

    @property
    def share(self) -> float:
        return self.encoding_s / self.total_s if self.total_s > 0 else 0.0


def measure(trace: Any, policy: str = "ours", *, seed: int = 0, config: Any = None) -> dict[str, Any]:
    """Replay `trace` (a name, a raw trace file, a pod-arrival file, or a Trace) under `policy`; time its encoding.

    Returns {"trace", "policy", "total_s", "encoding_s", "share", "wall_s", "samples"}: CPU seconds of the replay
    (loading the trace left out), CPU seconds with a yaml/json/msgspec frame on the stack, their ratio, the wall
    time of the run, and how many samples the figures rest on.
    """
    from devtools.replay.harness import ReplayConfig
    from devtools.replay.pools import DEFAULT_POOLS, POOL_SETS
    from devtools.replay.run import replay
    from devtools.replay.traces import Trace, load_trace, trace_pools_name

    if isinstance(trace, Trace):
        loaded = trace
    else:
        loaded = load_trace(trace, seed=seed)
        if config is None:
            kind = trace_pools_name(trace)
            config = ReplayConfig(seed=seed, pools=POOL_SETS.get(kind or str(trace), DEFAULT_POOLS))
    config = config if config is not None else ReplayConfig(seed=seed)
    wall = time.perf_counter()
    with EncodingSampler() as sampler:
        replay(loaded, policy, config)
    wall = time.perf_counter() - wall
    return {"trace": loaded.name, "policy": policy, "total_s": round(sampler.total_s, 3),
            "encoding_s": round(sampler.encoding_s, 3), "share": round(sampler.share, 4), "wall_s": round(wall, 3),
            "samples": sampler.samples}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.replay.encoding_share",
                                     description="Share of one replay's CPU time spent encoding and decoding YAML and JSON.")
    parser.add_argument("--trace", required=True, help="alibaba2018, alibaba2023 or a trace file (as `replay --trace`)")
    parser.add_argument("--policy", default="ours", help="a replay policy (default ours)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from devtools.replay.policies import POLICIES
    from devtools.replay.spot import quiet_spot_logs
    from devtools.replay.traces import TraceError

    if args.policy not in POLICIES:
        print(f"unknown policy {args.policy!r}: choose one of {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    quiet_spot_logs()
    try:
        result = measure(args.trace, args.policy, seed=args.seed)
    except (TraceError, OSError) as exc:
        print(f"cannot read trace: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
