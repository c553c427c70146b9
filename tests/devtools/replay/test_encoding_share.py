"""devtools.replay.encoding_share: which frames are encoding, each sample counted once, and one replay's figures."""

from __future__ import annotations

import json
import sys
import time
from types import FrameType
from typing import Any

import pytest
import yaml

from devtools.replay import encoding_share
from devtools.replay.encoding_share import EncodingSampler, is_encoding_file, measure
from tests.devtools.replay.test_replay import CONFIG, burst


@pytest.mark.parametrize(("filename", "encoding"), [
    (json.__file__, True),
    (json.decoder.__file__, True),
    (yaml.__file__, True),
    ("/venv/lib/python3.11/site-packages/yaml/constructor.py", True),
    ("/venv/lib/python3.11/site-packages/msgspec/__init__.py", True),
    ("C:\\venv\\Lib\\site-packages\\yaml\\emitter.py", True),
    ("/work/main/shared/yaml_text.py", True),  # our YAML emitter is encoding too
    ("/work/main/shared/engine/status.py", False),
    ("/work/main/shared/services/status.py", False),
    ("/work/main/devtools/replay/jsonish.py", False),  # a json package is a directory, not a name's start
    ("<frozen runpy>", False),
])
def test_encoding_frames_are_the_libraries_and_our_yaml_module(filename: str, encoding: bool) -> None:
    assert is_encoding_file(filename) is encoding


class _Ticks:
    """A CPU clock that moves one second per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_sample_is_charged_once_however_deep_in_encoding_it_is() -> None:
    sampler = EncodingSampler(clock=_Ticks())
    sampler.charge(sys._getframe())  # our own code: one second, not encoding

    def inside(found: Any) -> Any:
        frame = sys._getframe()
        sampler.charge(frame)
        return found

    json.loads('{"a": 1}', object_hook=inside)  # under json's decoder: encoding
    # yaml inside json inside yaml-free code: still one sample, one second.
    json.loads('{"a": 1}', object_hook=lambda d: yaml.safe_load("x: 1") and inside(d))
    assert (sampler.samples, sampler.total_s, sampler.encoding_s) == (3, 3.0, 2.0)
    assert sampler.share == pytest.approx(2 / 3)


def test_no_frame_is_not_encoding() -> None:
    sampler = EncodingSampler(clock=_Ticks())
    frame: FrameType | None = None
    sampler.charge(frame)
    assert (sampler.total_s, sampler.encoding_s, sampler.share) == (1.0, 0.0, 0.0)


def _spin(seconds: float, work: Any) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        work()


def test_the_sampler_sees_cpu_time_spent_in_json_and_outside_it() -> None:
    doc = {"k": [{"a": i, "b": str(i)} for i in range(200)]}
    with EncodingSampler() as sampler:
        _spin(0.4, lambda: json.dumps(doc))
        _spin(0.4, lambda: sum(i * i for i in range(2_000)))
    assert sampler.samples >= 50
    assert sampler.total_s == pytest.approx(0.8, rel=0.25)
    # json.dumps is most of the first half (the loop's own clock reads are not): far from 0 and from 1.
    assert 0.25 <= sampler.share <= 0.65


def test_one_replay_reports_its_figures() -> None:
    result = measure(burst(), "ours", config=CONFIG)
    assert set(result) == {"trace", "policy", "total_s", "encoding_s", "share", "wall_s", "samples"}
    assert (result["trace"], result["policy"]) == ("burst", "ours")
    assert 0 < result["total_s"] and 0 <= result["encoding_s"] <= result["total_s"]
    assert result["share"] == pytest.approx(result["encoding_s"] / result["total_s"], abs=1e-3)


def test_the_command_prints_json_and_refuses_an_unknown_policy(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding_share, "measure", lambda trace, policy, seed: {"trace": trace, "policy": policy,
                                                                                 "share": 0.1})
    assert encoding_share.main(["--trace", "alibaba2023"]) == 0
    assert json.loads(capsys.readouterr().out) == {"trace": "alibaba2023", "policy": "ours", "share": 0.1}
    assert encoding_share.main(["--trace", "alibaba2023", "--policy", "nope"]) == 2
    assert "unknown policy" in capsys.readouterr().err
