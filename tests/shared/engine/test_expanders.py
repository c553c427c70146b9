from __future__ import annotations

import random
from fractions import Fraction
from itertools import permutations

import pytest

from shared.domain import Resources
from shared.engine.expanders import (
    EXPANDERS,
    ExpanderContext,
    ExpanderError,
    ExpansionOption,
    apply_chain,
    choose,
    parse_expander_chain,
    parse_priorities,
    waste_score,
)
from tests.builders import GIB, group, pod, res, template


def opt(name: str, *, nodes: int = 1, pods: int = 1, cap: Resources | None = None, req: Resources | None = None,
        rg: str = "rg", price: float | None = None) -> ExpansionOption:
    """An option for group `name`: `nodes` new nodes of `cap` at `price` an hour each, placing `pods` pods
    that request `req` in total."""
    cap = cap or res(4, 16)
    return ExpansionOption.build(group(name, rg=rg), template(cap), nodes, [pod(f"{name}-p{i}") for i in range(pods)],
                                 requested=req if req is not None else res(pods, pods), price_per_hour=price)


def names(options: list[ExpansionOption]) -> list[str]:
    return [o.group.name for o in options]


def test_build_sums_the_pods_requests_and_takes_the_templates_allocatable() -> None:
    option = ExpansionOption.build(group("a"), template(res(8, 32)), 2, [pod("x", cpu=1, mem=2), pod("y", cpu=0.5, mem=1)])
    assert option.requested == Resources(1500, 3 * GIB, 0)
    assert option.capacity == res(8, 32)


@pytest.mark.parametrize("option,score", [
    (opt("a", cap=res(4, 16), req=res(3, 12)), Fraction(1, 4) + Fraction(1, 4)),
    (opt("a", nodes=2, cap=res(4, 16), req=res(6, 16)), Fraction(1, 4) + Fraction(1, 2)),
    (opt("a", cap=res(4, 16), req=res(4, 16)), Fraction(0)),
    (opt("a", cap=Resources(0, 16 * GIB), req=Resources(0, 8 * GIB)), Fraction(1, 2)),  # no CPU offered: none wasted
], ids=["one node", "two nodes", "snug", "no cpu"])
def test_waste_score_is_cas_unused_cpu_share_plus_unused_memory_share(option: ExpansionOption, score: Fraction) -> None:
    assert waste_score(option) == score


EXPANDER_CASES = [
    # (id, expander, options, priorities config, expected survivors)
    ("least-waste: the snugger group", "least-waste",
     [opt("big", cap=res(16, 64), req=res(3, 12)), opt("small", cap=res(4, 16), req=res(3, 12))], None, ["small"]),
    ("least-waste: memory share counts as much as cpu", "least-waste",
     [opt("cpu-rich", cap=res(8, 16), req=res(4, 16)), opt("mem-rich", cap=res(4, 32), req=res(4, 16))], None,
     ["cpu-rich", "mem-rich"]),
    ("least-waste: equal scores are all kept", "least-waste",
     [opt("a", req=res(2, 8)), opt("b", req=res(2, 8)), opt("c", req=res(1, 8))], None, ["a", "b"]),
    ("most-pods: the group placing most pods", "most-pods",
     [opt("a", pods=3), opt("b", pods=5), opt("c", pods=4)], None, ["b"]),
    ("most-pods: ties kept", "most-pods", [opt("a", pods=5), opt("b", pods=5), opt("c", pods=1)], None, ["a", "b"]),
    ("least-nodes: the group adding fewest nodes", "least-nodes",
     [opt("a", nodes=3), opt("b", nodes=1), opt("c", nodes=2)], None, ["b"]),
    ("least-nodes: options adding no node never win", "least-nodes",
     [opt("a", nodes=0), opt("b", nodes=2), opt("c", nodes=2)], None, ["b", "c"]),
    ("priority: highest matching priority wins", "priority",
     [opt("spot-a"), opt("ondemand-a"), opt("gpu")], {10: [".*"], 50: ["^spot-"]}, ["spot-a"]),
    ("priority: a group matching several rules takes the highest", "priority",
     [opt("spot-a"), opt("b")], {10: ["spot"], 20: ["-a$", "^b$"]}, ["spot-a", "b"]),
    ("priority: groups matching nothing rank below every match", "priority",
     [opt("a"), opt("b"), opt("c")], {1: ["^c$"]}, ["c"]),
    ("priority: negative priorities still order", "priority",
     [opt("a"), opt("b")], {-5: ["^a$"], -1: ["^b$"]}, ["b"]),
    ("priority: matches the group id (resource group) too", "priority",
     [opt("pool", rg="rg-spot"), opt("pool2", rg="rg-main")], {50: ["^rg-spot/"], 10: [".*"]}, ["pool"]),
    ("priority: no group matching keeps all (CA falls back to the rest)", "priority",
     [opt("a"), opt("b")], {10: ["^zzz$"]}, ["a", "b"]),
    ("priority: no rules keeps all", "priority", [opt("a"), opt("b")], None, ["a", "b"]),
    ("price: the cheaper nodes for the same pods", "price",
     [opt("d8", req=res(6, 24), cap=res(8, 32), price=0.384), opt("d4x2", nodes=2, req=res(6, 24), price=0.192 * 2)],
     None, ["d8"]),
    ("price: judged per unit of work placed, not per node", "price",
     [opt("big", req=res(16, 64), cap=res(16, 64), price=0.768), opt("small", req=res(3, 12), price=0.192)],
     None, ["big"]),
    ("price: memory-heavy pods are counted by their memory", "price",
     [opt("cpu-work", req=res(4, 4), price=0.3), opt("memory-work", req=res(1, 30), cap=res(4, 32), price=0.3)],
     None, ["memory-work"]),  # 30 GiB is 7.5 units of work, 4 cores 4 units: same price, more placed
    ("price: groups without a price rank last", "price",
     [opt("unknown"), opt("priced", price=5.0)], None, ["priced"]),
    ("price: no prices at all keeps every option for the rest of the chain", "price",
     [opt("a"), opt("b")], None, ["a", "b"]),
    ("price: equal prices are all kept", "price",
     [opt("a", price=0.1), opt("b", price=0.1)], None, ["a", "b"]),
    ("random: exactly one", "random", [opt("a"), opt("b"), opt("c")], None, 1),
    ("empty in, empty out", "least-waste", [], None, []),
]


@pytest.mark.parametrize("case_id,name,options,config,expected", EXPANDER_CASES, ids=[c[0] for c in EXPANDER_CASES])
def test_each_expander_keeps_its_best_options(case_id, name, options, config, expected) -> None:
    kept = EXPANDERS[name](options, context=ExpanderContext(parse_priorities(config), random.Random(1)))
    if isinstance(expected, int):
        assert len(kept) == expected and kept[0] in options
    else:
        assert names(kept) == expected


CHAIN_CASES = [
    # (id, chain, options, priorities, expected chosen group)
    ("default least-waste", ("least-waste",),
     [opt("big", cap=res(16, 64), req=res(3, 12)), opt("small", cap=res(4, 16), req=res(3, 12))], None, "small"),
    ("priority then least-waste breaks the tie", ("priority", "least-waste"),
     [opt("spot-big", cap=res(16, 64), req=res(3, 12)), opt("spot-small", cap=res(4, 16), req=res(3, 12)),
      opt("ondemand", cap=res(4, 16), req=res(4, 16))], {50: ["^spot-"], 10: [".*"]}, "spot-small"),
    ("priority wins over least-waste when it leaves one", ("priority", "least-waste"),
     [opt("spot", cap=res(16, 64), req=res(1, 1)), opt("snug", req=res(4, 16))], {50: ["^spot"]}, "spot"),
    ("most-pods then least-nodes", ("most-pods", "least-nodes"),
     [opt("a", pods=5, nodes=3), opt("b", pods=5, nodes=2), opt("c", pods=4, nodes=1)], None, "b"),
    ("least-nodes then most-pods", ("least-nodes", "most-pods"),
     [opt("a", pods=5, nodes=3), opt("b", pods=5, nodes=2), opt("c", pods=4, nodes=1)], None, "c"),
    ("ties left at the end go to the lowest group id", ("least-waste",),
     [opt("zeta", req=res(2, 8)), opt("alpha", req=res(2, 8))], None, "alpha"),
    ("a single option is chosen whatever the chain", ("least-nodes",), [opt("only", nodes=0)], None, "only"),
    ("price then least-waste when the prices tie", ("price", "least-waste"),
     [opt("big", cap=res(16, 64), req=res(3, 12), price=0.2), opt("small", cap=res(4, 16), req=res(3, 12), price=0.2)],
     None, "small"),
    ("priority then price", ("priority", "price"),
     [opt("spot-a", price=0.05), opt("spot-b", price=0.04), opt("ondemand", price=0.01)], {50: ["^spot-"]}, "spot-b"),
]


@pytest.mark.parametrize("case_id,chain,options,config,expected", CHAIN_CASES, ids=[c[0] for c in CHAIN_CASES])
def test_choose_applies_the_chain_then_the_lowest_group_id(case_id, chain, options, config, expected) -> None:
    for order in permutations(options):
        chosen = choose(list(order), chain=chain, priorities=config)
        assert chosen is not None and chosen.group.name == expected, order


def test_choose_returns_none_without_options() -> None:
    assert choose([], chain=("least-waste",)) is None


def test_chain_stops_once_one_option_is_left() -> None:
    options = [opt("spot", nodes=0), opt("other")]
    # least-nodes would drop the zero-node option, but priority already left it alone.
    context = ExpanderContext(parse_priorities({50: ["spot"]}))
    assert names(apply_chain(options, chain=("priority", "least-nodes"), context=context)) == ["spot"]


def test_random_is_seeded_and_independent_of_the_options_order() -> None:
    options = [opt(n, req=res(2, 8)) for n in "abcdef"]
    picks = {choose(list(order), chain=("least-waste", "random"), rng=7).group.name  # type: ignore[union-attr]
             for order in permutations(options, len(options))}
    assert len(picks) == 1
    spread = {choose(options, chain=("random",), rng=seed).group.name for seed in range(50)}  # type: ignore[union-attr]
    assert spread == set("abcdef")


def test_random_takes_a_random_instance_too() -> None:
    options = [opt("a"), opt("b"), opt("c")]
    first = choose(options, chain=("random",), rng=random.Random(3))
    assert first == choose(options, chain=("random",), rng=random.Random(3))


def test_choose_accepts_parsed_priorities_and_json_text() -> None:
    options = [opt("a"), opt("b")]
    assert choose(options, chain=("priority",), priorities='{"5": ["^b$"]}').group.name == "b"  # type: ignore[union-attr]
    parsed = parse_priorities({5: ["^b$"]})
    assert choose(options, chain=("priority",), priorities=parsed).group.name == "b"  # type: ignore[union-attr]


@pytest.mark.parametrize("text,chain", [
    ("least-waste", ("least-waste",)),
    (" Priority , least-waste ", ("priority", "least-waste")),
    ("priority,most-pods,least-nodes,least-waste,random", ("priority", "most-pods", "least-nodes", "least-waste", "random")),
    ("random", ("random",)),
])
def test_parse_expander_chain(text: str, chain: tuple[str, ...]) -> None:
    assert parse_expander_chain(text) == chain


@pytest.mark.parametrize("text,message", [
    ("", "name at least one expander"),
    ("fewest", "unknown expander 'fewest' (known: least-waste, most-pods, least-nodes, priority, price, random)"),
    ("priority,least_waste", "unknown expander 'least_waste'"),
    ("least-waste,,random", "empty expander name"),
    ("least-waste,least-waste", "expander 'least-waste' is named twice"),
    ("random,least-waste", "expander 'least-waste' follows 'random'"),
    ("priority,grpc", "expander 'grpc' is not supported"),
])
def test_parse_expander_chain_rejects(text: str, message: str) -> None:
    with pytest.raises(ExpanderError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_expander_chain(text)


@pytest.mark.parametrize("config,expected", [
    (None, []),
    ("", []),
    ("  ", []),
    ({}, []),
    ({10: ["a", "b"], 50: ["c"]}, [(50, ["c"]), (10, ["a", "b"])]),
    ('{"10": [".*t2\\\\.large.*"], "50": [".*m4.*"]}', [(50, [".*m4.*"]), (10, [r".*t2\.large.*"])]),
    ({"10": ["a"], 10: ["b"]}, [(10, ["a", "b"])]),  # "10" and 10 are one priority
    ({"-3": "solo"}, [(-3, ["solo"])]),  # a lone pattern
])
def test_parse_priorities(config, expected) -> None:
    parsed = parse_priorities(config)
    assert [(p, [r.pattern for r in rules]) for p, rules in parsed.rules] == expected


@pytest.mark.parametrize("config,message", [
    ("{", "not valid JSON"),
    ("[1, 2]", "must map priorities to lists of regular expressions"),
    ({"ten": ["a"]}, "priority 'ten' is not an integer"),
    ({"1.5": ["a"]}, "priority '1.5' is not an integer"),
    ({True: ["a"]}, "priority True is not an integer"),
    ({10: ["ok", "(unclosed"]}, "priority 10: bad regular expression '\\(unclosed'"),
    ({10: [1]}, "priority 10: expected a list of regular expressions"),
    ({10: {"a": 1}}, "priority 10: expected a list of regular expressions"),
])
def test_parse_priorities_rejects(config, message: str) -> None:
    with pytest.raises(ExpanderError, match=message):
        parse_priorities(config)
