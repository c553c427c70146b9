"""Domain values the scheduler's filters rest on: resource arithmetic with extended resources, selectors."""

from __future__ import annotations

import pytest

from shared.domain import HostPort, LabelSelector, PodAffinityTerm, Resources, SelectorRequirement
from tests.builders import pod, res

GPU = "nvidia.com/gpu"


def test_extended_resources_are_canonical_so_equal_values_compare_equal() -> None:
    a = Resources(1, 2, 3, 4, (("b", 1), ("a", 2), ("c", 0)))
    b = Resources(1, 2, 3, 4, {"a": 2, "b": 1})  # type: ignore[arg-type]  # a mapping is accepted too
    assert a == b
    assert a.extended == (("a", 2), ("b", 1))
    assert hash(a) == hash(b)
    assert Resources(extended=(("x", 0),)) == Resources()


ARITHMETIC = [
    ("plain", res(1, 2, 1), res(0.5, 1, 1), res(1.5, 3, 2), res(0.5, 1, 0)),
    ("ephemeral storage", res(1, 1, eph_gib=10), res(0, 0, eph_gib=4), res(1, 1, eph_gib=14), res(1, 1, eph_gib=6)),
    ("a GPU on one side only", res(1, 1, gpu=2), res(0, 0), res(1, 1, gpu=2), res(1, 1, gpu=2)),
    ("GPUs on both sides", res(0, 0, gpu=2), res(0, 0, gpu=2), res(0, 0, gpu=4), res(0, 0)),
    ("taking what is not there goes negative", res(0, 0), res(0, 0, gpu=1), res(0, 0, gpu=1),
     Resources(extended=((GPU, -1),))),
]


@pytest.mark.parametrize(("a", "b", "total", "difference"), [c[1:] for c in ARITHMETIC], ids=[c[0] for c in ARITHMETIC])
def test_addition_and_subtraction_cover_every_resource(a: Resources, b: Resources, total: Resources,
                                                       difference: Resources) -> None:
    assert a + b == total
    assert a - b == difference
    assert (a + b) - b == a


def test_is_zero_and_amount() -> None:
    assert Resources().is_zero()
    assert not res(0, 0, eph_gib=1).is_zero()
    assert not res(0, 0, gpu=1).is_zero()
    assert res(0, 0, gpu=3).amount(GPU) == 3
    assert res(0, 0).amount(GPU) == 0


def test_fits_in_treats_an_absent_resource_as_zero_capacity_and_a_zero_request_as_fitting() -> None:
    assert not res(1, 1, gpu=1).fits_in(res(8, 32, 10))
    assert res(1, 1, gpu=1).fits_in(res(8, 32, 10, gpu=1))
    assert res(0, 0, 1).fits_in(Resources(-100, -100, 5, -1, ((GPU, -1),)))


LABELS = {"app": "web", "tier": "front"}
LABEL_SELECTORS = [
    ("empty selects everything", LabelSelector(), True),
    ("matchLabels", LabelSelector((("app", "web"),)), True),
    ("matchLabels, another value", LabelSelector((("app", "db"),)), False),
    ("matchLabels and expressions are ANDed",
     LabelSelector((("app", "web"),), (SelectorRequirement("tier", "NotIn", ("front",)),)), False),
    ("Exists", LabelSelector((), (SelectorRequirement("tier", "Exists"),)), True),
    ("an unknown operator matches nothing", LabelSelector((), (SelectorRequirement("tier", "Near", ("x",)),)), False),
]


@pytest.mark.parametrize(("selector", "matches"), [c[1:] for c in LABEL_SELECTORS], ids=[c[0] for c in LABEL_SELECTORS])
def test_label_selector(selector: LabelSelector, matches: bool) -> None:
    assert selector.matches(LABELS) is matches


def test_selector_keys_name_what_a_selector_reads() -> None:
    selector = LabelSelector((("app", "web"),), (SelectorRequirement("tier", "Exists"),))
    assert selector.keys == {"app", "tier"}


NAMESPACES = [
    ("the owner's namespace by default", PodAffinityTerm("h", LabelSelector()), "default", True),
    ("not another namespace by default", PodAffinityTerm("h", LabelSelector()), "other", False),
    ("listed namespaces", PodAffinityTerm("h", LabelSelector(), ("other",)), "other", True),
    ("listed namespaces only", PodAffinityTerm("h", LabelSelector(), ("other",)), "default", False),
    ("every namespace", PodAffinityTerm("h", LabelSelector(), (), True), "third", True),
    ("an absent selector selects nothing", PodAffinityTerm("h", None), "default", False),
]


@pytest.mark.parametrize(("term", "namespace", "selected"), [c[1:] for c in NAMESPACES], ids=[c[0] for c in NAMESPACES])
def test_pod_affinity_term_namespaces(term: PodAffinityTerm, namespace: str, selected: bool) -> None:
    assert term.selects(pod("p", namespace=namespace, labels=LABELS), "default") is selected


def test_host_port_wildcard_conflicts() -> None:
    assert HostPort(80).conflicts_with(HostPort(80, "TCP", "10.0.0.1"))
    assert not HostPort(80, "UDP").conflicts_with(HostPort(80))
    assert not HostPort(80, "TCP", "10.0.0.1").conflicts_with(HostPort(80, "TCP", "10.0.0.2"))
