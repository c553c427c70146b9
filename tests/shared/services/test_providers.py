"""ProviderRouter: each call about a group reaches the provider of the group's kind; operation tokens of the
default provider stay as they were (ledger rows of older versions resume), others carry their kind."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from shared.domain import Instance, NodeGroup, VmSizeCapacity
from shared.ports import Operation
from shared.services.providers import ProviderRouter


@dataclass
class Memory:
    """A NodeGroupProvider in memory: its groups, and the calls it received."""

    kind: str
    groups: list[NodeGroup]
    calls: list[tuple[str, str]] = field(default_factory=list)

    def list_node_groups(self) -> list[NodeGroup]:
        return list(self.groups)

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        self.calls.append(("get_node_group", group_id))
        return next((g for g in self.groups if g.id == group_id), None)

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        self.calls.append(("get_instance", group.id))
        return Instance(instance_id)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        self.calls.append(("list_instances", group.id))
        return []

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        self.calls.append(("list_private_ips", group.id))
        return {}

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        self.calls.append(("list_vm_sizes", location))
        return []

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        self.calls.append(("list_prices", ",".join(g.id for g in groups)))
        return {g.id: 1.0 for g in groups}

    def _begin(self, verb: str, group: NodeGroup) -> Operation:
        self.calls.append((verb, group.id))
        return Operation(f"tok-{self.kind}-{verb}", "InProgress")

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        return self._begin("begin_resize", group)

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        return self._begin("begin_delete_instances", group)

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        return self._begin("begin_deallocate_instances", group)

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        return self._begin("begin_start_instances", group)

    def _get(self, verb: str, token: str) -> Operation:
        self.calls.append((verb, token))
        return Operation(token, "Succeeded")

    def get_resize_operation(self, token: str) -> Operation:
        return self._get("get_resize_operation", token)

    def get_delete_operation(self, token: str) -> Operation:
        return self._get("get_delete_operation", token)

    def get_deallocate_operation(self, token: str) -> Operation:
        return self._get("get_deallocate_operation", token)

    def get_start_operation(self, token: str) -> Operation:
        return self._get("get_start_operation", token)


def _group(name: str, kind: str) -> NodeGroup:
    return NodeGroup("rg", name, 0, 5, 1, "Standard_D4s_v5", provider=kind)


@pytest.fixture
def pair() -> tuple[ProviderRouter, Memory, Memory]:
    uniform = Memory("vmss-uniform", [_group("pool-a", "vmss-uniform")])
    other = Memory("fake", [_group("pool-b", "fake")])
    return ProviderRouter([uniform, other]), uniform, other


BEGINS = ["begin_resize", "begin_delete_instances", "begin_deallocate_instances", "begin_start_instances"]
GETS = {"begin_resize": "get_resize_operation", "begin_delete_instances": "get_delete_operation",
        "begin_deallocate_instances": "get_deallocate_operation", "begin_start_instances": "get_start_operation"}


def _begin(router: ProviderRouter, verb: str, group: NodeGroup) -> Operation:
    method = getattr(router, verb)
    return method(group, 3) if verb == "begin_resize" else method(group, ["0"])


def test_discovery_lists_every_provider_s_groups_each_marked_with_its_kind(pair) -> None:  # type: ignore[no-untyped-def]
    router, _, _ = pair
    assert {(g.name, g.provider) for g in router.list_node_groups()} == {("pool-a", "vmss-uniform"), ("pool-b", "fake")}


@pytest.mark.parametrize("verb", BEGINS)
def test_a_change_reaches_only_the_provider_of_the_group_s_kind_and_resumes_there(pair, verb: str) -> None:  # type: ignore[no-untyped-def]
    router, uniform, other = pair
    for group, mine, theirs in ((uniform.groups[0], uniform, other), (other.groups[0], other, uniform)):
        operation = _begin(router, verb, group)
        assert (verb, group.id) in mine.calls and not any(group.id == g for _, g in theirs.calls)
        resumed = getattr(router, GETS[verb])(operation.token)
        assert mine.calls[-1] == (GETS[verb], f"tok-{mine.kind}-{verb}")  # the provider sees its own token
        assert resumed.token == operation.token and resumed.done


def test_the_default_provider_s_tokens_travel_unprefixed_so_older_ledger_rows_resume(pair) -> None:  # type: ignore[no-untyped-def]
    router, uniform, other = pair
    assert _begin(router, "begin_resize", uniform.groups[0]).token == "tok-vmss-uniform-begin_resize"
    assert _begin(router, "begin_resize", other.groups[0]).token == "fake|tok-fake-begin_resize"
    # A base64 continuation token written before providers existed goes to the default provider as it is.
    router.get_delete_operation("eyJ2ZXJzaW9uIjoxfQ==")
    assert uniform.calls[-1] == ("get_delete_operation", "eyJ2ZXJzaW9uIjoxfQ==")


def test_prices_are_asked_of_each_provider_for_its_own_groups_only(pair) -> None:  # type: ignore[no-untyped-def]
    router, uniform, other = pair
    groups = router.list_node_groups()
    assert router.list_prices(groups) == {"rg/pool-a": 1.0, "rg/pool-b": 1.0}
    assert ("list_prices", "rg/pool-a") in uniform.calls and ("list_prices", "rg/pool-b") in other.calls
    uniform.calls.clear()
    router.list_prices([other.groups[0]])
    assert not any(verb == "list_prices" for verb, _ in uniform.calls)  # no groups of its kind: not asked


def test_reads_by_group_id_go_to_the_provider_that_listed_the_group(pair) -> None:  # type: ignore[no-untyped-def]
    router, uniform, other = pair
    router.list_node_groups()
    assert router.get_node_group("rg/pool-b") == other.groups[0]
    assert ("get_node_group", "rg/pool-b") not in uniform.calls
    assert router.get_node_group("rg/missing") is None  # unknown: every provider was asked


@pytest.mark.parametrize("kinds, error", [
    ([], "at least one provider"),
    (["vmss-uniform", "vmss-uniform"], "distinct"),
    (["a|b"], "without '|'"),
])
def test_a_bad_provider_list_is_refused_naming_what_is_wrong(kinds: list[str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ProviderRouter([Memory(k, []) for k in kinds])


def test_a_group_of_an_unconfigured_kind_is_refused_not_sent_to_the_default(pair) -> None:  # type: ignore[no-untyped-def]
    router, uniform, _ = pair
    with pytest.raises(ValueError, match="provider 'aks-pool', which is not configured"):
        router.begin_resize(_group("pool-c", "aks-pool"), 2)
    assert not any(verb == "begin_resize" for verb, _ in uniform.calls)


def test_one_group_discovered_by_two_providers_is_an_error(pair) -> None:  # type: ignore[no-untyped-def]
    _, uniform, _ = pair
    twin = Memory("fake", [_group("pool-a", "fake")])
    with pytest.raises(ValueError, match="rg/pool-a is discovered by both vmss-uniform and fake"):
        ProviderRouter([uniform, twin]).list_node_groups()


def test_the_scale_set_behind_an_aks_pool_managed_as_a_pool_is_one_group_not_two() -> None:
    """AKS copies a tagged pool's tags to its scale set: the pool is kept, its scale set skipped; a scale set
    whose pool is not managed as a pool stays a group of its own."""
    pool = NodeGroup("rg-aks", "batch", 0, 5, 1, "Standard_D4s_v5", provider="aks-agentpool")
    behind = NodeGroup("mc_rg-aks", "aks-batch-123-vmss", 0, 5, 1, "Standard_D4s_v5",
                       tags={"aks-managed-poolName": "batch"})
    other = NodeGroup("mc_rg-aks", "aks-web-123-vmss", 0, 5, 1, "Standard_D4s_v5", tags={"aks-managed-poolName": "web"})
    router = ProviderRouter([Memory("vmss-uniform", [behind, other]), Memory("aks-agentpool", [pool])])
    assert {g.id for g in router.list_node_groups()} == {"rg-aks/batch", "mc_rg-aks/aks-web-123-vmss"}
    assert router.get_node_group("rg-aks/batch") == pool
