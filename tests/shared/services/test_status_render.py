"""The status ConfigMap's text is what it was before the memo of our last write and block_dump: same bytes, same reads.

services.status keeps the document it last wrote per ConfigMap and uses it instead of parsing the ConfigMap's
text back while that text is still ours; engine.status renders with yaml_text.block_dump instead of safe_dump.
Both are speed only, so every poll's text must equal the one the parse-and-safe_dump path writes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import shared.services.status as status_service
from shared import yaml_text
from shared.ports import ClusterError
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.shared.services.test_executor import App, make_memory_app

STATUS = ("kube-system", "cluster-autoscaler-status")
WIDTH = {"sort_keys": False, "default_flow_style": False, "width": yaml_text.BLOCK_WIDTH}


def _old_render(doc: Any) -> str:
    return yaml_text.safe_dump(dict(doc), **WIDTH)


def _text(app: App) -> str:
    data = app.context.ports.cluster.get_config_map(*STATUS)
    assert data is not None, "no status ConfigMap"
    return data["status"]


def _polls(app: App) -> Iterator[str]:
    """A day's worth of polls in miniature: scale-down candidates, a burst of pending pods, its nodes booting."""
    ports, settings_ = app.context.ports, app.context.settings
    steps: list[tuple[float, Callable[..., Any]]] = [
        (0, run_utilization_poll), (30, run_pending_poll), (60, run_utilization_poll),
        (3600 + 5, run_pending_poll), (30, run_pending_poll), (30, run_utilization_poll),
        (90, run_pending_poll), (600, run_utilization_poll), (30, run_pending_poll),
    ]
    for seconds, poll in steps:
        app.clock.advance(seconds)
        poll(ports, settings_, now=app.clock.now())
        yield f"{poll.__name__}: {_text(app)}"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts services.status parses (an empty memo to start with: other tests' writes are not this test's)."""
    monkeypatch.setattr(status_service, "_LAST_WRITTEN", {})
    seen: list[str] = []
    parse = status_service.parse_previous

    def spy(text: str | None) -> dict[str, Any] | None:
        if text is not None:
            seen.append(text)
        return parse(text)

    monkeypatch.setattr(status_service, "parse_previous", spy)
    return seen


def test_polls_write_the_texts_the_parse_and_safe_dump_path_writes(parses: list[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fast = make_memory_app(settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    texts = []
    for text in _polls(fast):
        texts.append(text)
        # The memo holds exactly what parsing the ConfigMap gives.
        ((key, (written, doc)),) = status_service._LAST_WRITTEN.items()
        assert key == STATUS and "status: " + written == "status: " + _text(fast)
        assert doc == yaml.safe_load(written)
    assert parses == [], "a poll parsed our own last write back"
    assert len(set(texts)) == len(texts), "every poll writes its own time, so no two texts are alike"

    monkeypatch.setattr(status_service, "_previous", lambda key, text: status_service.parse_previous(text))
    monkeypatch.setattr(status_service, "render_status", _old_render)
    slow = make_memory_app(settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    assert list(_polls(slow)) == texts
    assert len(parses) == len(texts) - 1  # the parse path reads every write but the first poll's (none yet)
    # The texts went through the conditions' changes (so transition times were carried over, and moved).
    groups = [g for t in texts for g in yaml.safe_load(t.split(": ", 1)[1])["nodeGroups"]]
    assert {g["scaleUp"]["status"] for g in groups} == {"Needed", "NoActivity"}
    assert "CandidatesPresent" in {g["scaleDown"]["status"] for g in groups}


def test_a_poll_leaves_the_document_it_was_handed_as_it_was(parses: list[str]) -> None:
    app = make_memory_app(settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    before: dict[str, Any] | None = None
    kept: dict[str, Any] | None = None
    for _ in _polls(app):
        if before is not None:
            assert kept == before, "a poll changed the memo's document, which the next poll reads as previous"
        (_, kept), = status_service._LAST_WRITTEN.values()
        before = copy.deepcopy(kept)


def test_another_writers_text_is_parsed_and_read(parses: list[str]) -> None:
    app = make_memory_app()
    ports, settings_ = app.context.ports, app.context.settings
    run_utilization_poll(ports, settings_, now=app.clock.now())
    # Another writer (CA, another replica) wrote the same status with an older transition time.
    theirs = yaml.safe_load(_text(app))
    theirs["clusterWide"]["health"]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    their_text = yaml.safe_dump(theirs, **WIDTH)
    ports.cluster.write_config_map(*STATUS, data={"status": their_text}, annotations={})
    app.clock.advance(30)
    run_utilization_poll(ports, settings_, now=app.clock.now())
    assert parses == [their_text]
    ours = yaml.safe_load(_text(app))
    assert ours["clusterWide"]["health"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"  # unchanged status: kept
    assert status_service._LAST_WRITTEN[STATUS][0] == _text(app)


def test_a_failed_write_leaves_the_memo_on_what_the_configmap_holds(parses: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_memory_app()
    ports, settings_ = app.context.ports, app.context.settings
    run_utilization_poll(ports, settings_, now=app.clock.now())
    held = status_service._LAST_WRITTEN[STATUS]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ClusterError("write configmap: 409")

    monkeypatch.setattr(ports.cluster, "write_config_map", refuse)
    app.clock.advance(30)
    run_utilization_poll(ports, settings_, now=app.clock.now())
    assert status_service._LAST_WRITTEN[STATUS] is held and held[0] == _text(app)


# -- block_dump: safe_dump's text ----------------------------------------------------------------------------

ODD_STRINGS = [
    "", " ", "yes", "No", "TRUE", "off", "On", "null", "Null", "~", "y", "n", "123", "-1", "1.5", "1e3", "0x1F", "0o7",
    "1:30", ".inf", ".NaN", "<<", "=", "-", "-a", "a-", "a: b", "a:b", "a #b", "#a", "'q'", '"q"', "it's", "a\nb",
    "a\n", "\n", " lead", "trail ", "ümlaut", "a\tb", "\x07", "2030-01-07T13:17:20Z", "2030-01-07T13:17:20.5Z",
    "2030-01-07", "2030-01-07 13:17:20.000000000 +0000 UTC", "2030-01-07 13:17:20", "@x", "`x", "a,b", "[x]", "{x}",
    "!x", "&x", "*x", "|", ">", "%x", "?x", "? x", "- x", "a - b", "x" * 200, "rg/pool", "pool_a.b-c/d", "_x",
    "Standard_D4s_v5", "Quota exceeded: 8 of 10 cores (Standard DSv5 Family vCPUs)",
]
ODD_NUMBERS = [0, -1, 10**20, True, False, None, 0.0, -0.0, 1.5, 1e20, 1e-7, 123456789.125, math.inf, -math.inf]


@pytest.mark.parametrize("value", ODD_STRINGS + ODD_NUMBERS, ids=repr)
def test_block_dump_writes_a_scalar_as_safe_dump_does(value: Any) -> None:
    doc = {"v": value, "l": [value, {"k": value}], "m": {"n": {"k": value}}}
    assert yaml_text.block_dump(doc) == yaml_text.safe_dump(doc, **WIDTH) == yaml.safe_dump(doc, **WIDTH)


@pytest.mark.parametrize("key", ["", "yes", "a b", "a: b", "1", "x" * 200, "ümlaut", "a\nb", 1, None], ids=repr)
def test_block_dump_writes_a_key_as_safe_dump_does(key: Any) -> None:
    doc = {"a": {key: 1, "b": [{key: "x"}]}}
    # yaml_text's dumper, not PyYAML's Python one: for an empty key libyaml writes `'': 1`, Python `? ''`.
    assert yaml_text.block_dump(doc) == yaml_text.safe_dump(doc, **WIDTH)


SHARED: dict[str, Any] = {"x": 1}


@pytest.mark.parametrize("doc", [
    {"a": SHARED, "b": SHARED},  # one dict twice: an anchor and an alias
    {"a": [], "b": {}, "c": [{}], "d": [[1, 2], []]},  # empty collections in flow style; a list in a list
    {"a": float("nan"), "b": (1, 2)},  # .nan; a tuple, which SafeDumper refuses
    {"when": __import__("datetime").date(2030, 1, 7), "set": {1, 2}, "bytes": b"\x00"},
    {}, [1, 2], "text",  # not a mapping at the top
], ids=repr)
def test_block_dump_hands_what_it_does_not_write_to_safe_dump(doc: Any) -> None:
    try:
        expected = yaml_text.safe_dump(doc, **WIDTH)
    except yaml.YAMLError as exc:
        with pytest.raises(type(exc)):
            yaml_text.block_dump(doc)
        return
    assert yaml_text.block_dump(doc) == expected


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=30), st.sampled_from(ODD_STRINGS))
_KEYS = st.one_of(st.sampled_from(["status", "name", "lastProbeTime", "a b", "yes", "1", ""]), st.text(max_size=12))
_PLAIN_DATA = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                              st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _PLAIN_DATA, min_size=1, max_size=5))
def test_block_dump_is_safe_dump_on_any_plain_document(doc: dict[str, Any]) -> None:
    assert yaml_text.block_dump(doc) == yaml_text.safe_dump(doc, **WIDTH)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_KEYS, _PLAIN_DATA, min_size=1, max_size=5))
def test_block_dump_is_the_python_dumpers_text_where_pyyaml_lacks_libyaml(doc: dict[str, Any]) -> None:
    kept = yaml_text._DUMPER
    yaml_text._DUMPER = yaml.SafeDumper  # what yaml_text falls back to without libyaml
    try:
        assert yaml_text.block_dump(doc) == yaml.safe_dump(doc, **WIDTH)
    finally:
        yaml_text._DUMPER = kept


def test_a_status_document_is_written_without_pyyaml(parses: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_memory_app(settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    texts = [text.split(": ", 1)[1] for text in _polls(app)]

    def no_pyyaml(data: Any, *args: Any, **kwargs: Any) -> str:
        # One scalar's spelling (`_Emitter._pyyaml`: a string with spaces or indicators, cached per document) is
        # PyYAML's to decide; the document itself never is.
        if type(data) is dict and list(data) == ["k"] and not isinstance(data["k"], (dict, list)):
            return kept(data, *args, **kwargs)
        raise AssertionError("block_dump handed a status document to PyYAML")

    docs = [yaml.safe_load(text) for text in texts]
    kept = yaml_text.safe_dump
    monkeypatch.setattr(yaml_text, "safe_dump", no_pyyaml)
    assert [yaml_text.block_dump(doc) for doc in docs] == texts
