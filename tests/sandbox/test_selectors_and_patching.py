from __future__ import annotations

from typing import Any

import pytest

from sandbox.api.patching import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, PatchError, apply_patch, json_patch, merge_patch
from sandbox.model.selectors import SelectorError, object_filter

POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web", "tier": "front"}},
    "spec": {"nodeName": "node-1", "hostNetwork": False},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("labels", "fields", "matches"),
    [
        ("app=web", None, True),
        ("app==web", None, True),
        ("app!=web", None, False),
        ("app", None, True),
        ("!app", None, False),
        ("missing", None, False),
        ("!missing", None, True),
        ("app in (web,api)", None, True),
        ("app notin (web)", None, False),
        ("app in (api), tier=front", None, False),
        ("app=web,tier in (front,back)", None, True),
        (None, "spec.nodeName=node-1", True),
        (None, "spec.nodeName=node-2", False),
        (None, "status.phase!=Succeeded,status.phase!=Failed", True),
        (None, "status.phase=Pending", False),
        (None, "metadata.name==web-1", True),
        (None, "spec.hostNetwork=false", True),
        ("app=web", "spec.nodeName=node-1", True),
    ],
)
def test_selectors(labels: str | None, fields: str | None, matches: bool) -> None:
    assert object_filter(labels, fields, "pods")(POD) is matches


@pytest.mark.parametrize(
    ("labels", "fields", "resource", "message"),
    [
        ("app in (web", None, "pods", "unbalanced"),
        ("app in ()", None, "pods", "at least one value"),
        ("a=b,,c", None, "pods", "empty requirement"),
        (None, "spec.priority=1", "pods", "field label not supported: spec.priority"),
        (None, "spec.nodeName=x", "nodes", "field label not supported"),
        (None, "nonsense", "pods", "invalid field selector"),
    ],
)
def test_bad_selectors(labels: str | None, fields: str | None, resource: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        object_filter(labels, fields, resource)


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A, abridged
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


NODE: dict[str, Any] = {"metadata": {"resourceVersion": "7", "labels": {"a": "1"}}, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}


@pytest.mark.parametrize(
    ("operations", "expected"),
    [
        ([{"op": "add", "path": "/spec/unschedulable", "value": True}], {**NODE, "spec": {**NODE["spec"], "unschedulable": True}}),
        ([{"op": "add", "path": "/spec/taints/-", "value": {"key": "y", "effect": "NoExecute"}}],
         {**NODE, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}, {"key": "y", "effect": "NoExecute"}]}}),
        ([{"op": "remove", "path": "/spec/taints/0"}], {**NODE, "spec": {"taints": []}}),
        ([{"op": "replace", "path": "/metadata/labels/a", "value": "2"}], {**NODE, "metadata": {"resourceVersion": "7", "labels": {"a": "2"}}}),
        ([{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}, {"op": "remove", "path": "/metadata/labels/a"}],
         {**NODE, "metadata": {"resourceVersion": "7", "labels": {}}}),
        ([{"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}],
         {**NODE, "metadata": {**NODE["metadata"], "annotations": {"a": "1"}}}),
        ([{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/b"}],
         {**NODE, "metadata": {"resourceVersion": "7", "labels": {"b": "1"}}}),
        ([{"op": "add", "path": "/metadata/labels/k8s.io~1role", "value": "x"}],
         {**NODE, "metadata": {"resourceVersion": "7", "labels": {"a": "1", "k8s.io/role": "x"}}}),
    ],
)
def test_json_patch(operations: list[dict[str, Any]], expected: Any) -> None:
    assert json_patch(NODE, operations) == expected
    assert NODE["metadata"]["labels"] == {"a": "1"}  # the original is never touched


@pytest.mark.parametrize(
    ("operations", "unprocessable", "message"),
    [
        ([{"op": "test", "path": "/metadata/resourceVersion", "value": "6"}], True, "test failed"),
        ([{"op": "replace", "path": "/spec/unschedulable", "value": True}], True, "does not exist"),
        ([{"op": "remove", "path": "/spec/taints/3"}], True, "out of bounds"),
        ([{"op": "jump", "path": "/a"}], False, "unknown op"),
        ([{"op": "add", "path": "spec"}], False, "needs 'value'"),
        ({"op": "add"}, False, "must be a list"),
    ],
)
def test_json_patch_failures(operations: Any, unprocessable: bool, message: str) -> None:
    with pytest.raises(PatchError, match=message) as caught:
        json_patch(NODE, operations)
    assert caught.value.unprocessable is unprocessable


@pytest.mark.parametrize(
    ("content_type", "patch", "taints"),
    [
        (STRATEGIC_MERGE_PATCH, {"spec": {"taints": [{"key": "new", "effect": "NoSchedule"}]}}, [{"key": "new", "effect": "NoSchedule"}]),
        (MERGE_PATCH + "; charset=utf-8", {"spec": {"taints": None}}, None),
        (JSON_PATCH, [{"op": "add", "path": "/spec/taints/0", "value": {"key": "z", "effect": "NoSchedule"}}],
         [{"key": "z", "effect": "NoSchedule"}, {"key": "x", "effect": "NoSchedule"}]),
    ],
)
def test_apply_patch_dispatches_on_content_type(content_type: str, patch: Any, taints: Any) -> None:
    assert apply_patch(content_type, NODE, patch)["spec"].get("taints") == taints


def test_apply_patch_refuses_unknown_types() -> None:
    with pytest.raises(PatchError, match="unsupported"):
        apply_patch("application/apply-patch+yaml", NODE, {})
