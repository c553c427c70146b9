"""Warm reuse between polls: an object listed again unchanged (same uid and resourceVersion) is not converted
again, a changed one is, and one gone from the list is forgotten, so the memory follows the cluster."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration

from shared.adapters import kubernetes as adapter
from shared.adapters.kubernetes import KubernetesCluster
from tests.shared.adapters.k8s_objects import container, pod_json


class _Page:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        pass


class _ListingCore:
    """list_pod_for_all_namespaces/list_node over a mutable list of objects, paged by `limit` and `continue`."""

    def __init__(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]] | None = None) -> None:
        self.pods = pods
        self.nodes = nodes or []
        self.calls = 0

    def _page(self, items: list[dict[str, Any]], limit: int, token: str | None) -> _Page:
        self.calls += 1
        start = int(token or 0)
        chunk = items[start:start + limit]
        metadata = {"resourceVersion": "9"}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return _Page(json.dumps({"kind": "List", "metadata": metadata, "items": chunk}).encode())

    def list_pod_for_all_namespaces(self, *, limit: int, _continue: str | None, **_: Any) -> _Page:
        return self._page(self.pods, limit, _continue)

    def list_node(self, *, limit: int, _continue: str | None, **_: Any) -> _Page:
        return self._page(self.nodes, limit, _continue)


def _pod(name: str, version: str, cpu: str = "100m") -> dict[str, Any]:
    return pod_json(name=name, containers=[container(cpu, "64Mi")], metadata={"resourceVersion": version})


def _cluster(core: _ListingCore) -> KubernetesCluster:
    cluster = KubernetesCluster(ApiClient(Configuration()), page_size=2)  # several pages for five pods
    cluster._core = core  # type: ignore[assignment]  # stand-in for the generated CoreV1Api
    return cluster


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods the adapter converts, in order."""
    seen: list[str] = []
    convert = adapter.pod_from_json

    def counting(obj: Any) -> Any:
        seen.append(obj.get("metadata").get("name"))
        return convert(obj)

    monkeypatch.setattr(adapter, "pod_from_json", counting)
    return seen


def test_an_unchanged_cluster_is_not_converted_again(conversions: list[str]) -> None:
    core = _ListingCore([_pod(f"p{i}", "1") for i in range(5)])
    cluster = _cluster(core)
    first = cluster.list_pods()
    assert conversions == ["p0", "p1", "p2", "p3", "p4"]
    second = cluster.list_pods()
    assert second == first and all(a is b for a, b in zip(first, second, strict=True))  # the same objects
    assert conversions == ["p0", "p1", "p2", "p3", "p4"]  # none converted the second time
    assert core.calls == 6  # every page was still listed: reuse saves the conversion, not the read


def test_a_changed_resource_version_is_converted_again(conversions: list[str]) -> None:
    core = _ListingCore([_pod("a", "1"), _pod("b", "1", cpu="100m")])
    cluster = _cluster(core)
    cluster.list_pods()
    core.pods[1] = _pod("b", "2", cpu="700m")
    pods = {p.name: p for p in cluster.list_pods()}
    assert conversions == ["a", "b", "b"]
    assert pods["b"].requests.cpu_milli == 700


def test_deleted_objects_are_forgotten(conversions: list[str]) -> None:
    core = _ListingCore([_pod(f"p{i}", "1") for i in range(5)])
    cluster = _cluster(core)
    cluster.list_pods()
    del core.pods[1:4]
    assert [p.name for p in cluster.list_pods()] == ["p0", "p4"]
    assert {uid for uid, _version in cluster._warm_pods} == {"uid-p0", "uid-p4"}  # memory follows the cluster
    core.pods.insert(1, _pod("p2", "1"))  # the same uid and version again after it was gone: converted anew
    cluster.list_pods()
    assert conversions == ["p0", "p1", "p2", "p3", "p4", "p2"]


def test_an_object_without_uid_or_version_is_converted_every_time(conversions: list[str]) -> None:
    bare = _pod("bare", "1")
    del bare["metadata"]["uid"]
    core = _ListingCore([bare, _pod("other", "")])
    cluster = _cluster(core)
    cluster.list_pods()
    cluster.list_pods()
    assert conversions == ["bare", "other", "bare", "other"]
    assert cluster._warm_pods == {}


def test_the_pods_of_one_node_neither_use_nor_replace_the_warm_list(conversions: list[str]) -> None:
    core = _ListingCore([_pod(f"p{i}", "1") for i in range(3)])
    cluster = _cluster(core)
    cluster.list_pods()
    core.pods = core.pods[:1]  # what a field-selected list of one node would return
    cluster.list_pods_on_node("n1")
    assert len(cluster._warm_pods) == 3
    cluster.list_pods()
    assert conversions == ["p0", "p1", "p2", "p0"]


def test_a_pod_that_cannot_be_read_is_a_placeholder_and_is_never_reused(
    conversions: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    bad = _pod("bad", "1")
    bad["spec"]["nodeName"] = "n1"
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    core = _ListingCore([_pod("good", "1"), bad])
    cluster = _cluster(core)
    with caplog.at_level(logging.ERROR):
        pods = {p.name: p for p in cluster.list_pods()}
    assert pods["good"].requests.cpu_milli == 100 and not pods["good"].unsupported
    placeholder = pods["bad"]
    assert placeholder.node_name == "n1" and placeholder.owner is None
    assert placeholder.unsupported and "lots" in placeholder.unsupported[0]
    assert "cannot read default/bad" in caplog.text
    cluster.list_pods()
    assert conversions == ["good", "bad", "bad"]  # tried again each poll: it may have been fixed
