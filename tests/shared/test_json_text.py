"""JSON from outside parsed with a bound on its nesting: counted outside strings, refused before json.loads recurses."""

from __future__ import annotations

import json

import pytest

from shared.json_text import MAX_DEPTH, TooDeep, depth, loads


@pytest.mark.parametrize(("text", "expected"), [
    ("1", 0),
    ('"[[[{{{"', 0),  # brackets in a string
    ('"a\\"[["', 0),  # after an escaped quote, still in the string
    ("[]", 1),
    ('{"a": [1, {"b": []}]}', 4),
    ('[[1], [2], [[3]]]', 3),
    ('{"k": "]]]}}}", "v": [[]]}', 3),  # closing brackets in a string do not unwind
])
def test_depth_counts_arrays_and_objects_outside_strings(text: str, expected: int) -> None:
    assert depth(text) == expected
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,  # json.loads: RecursionError
    '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
    "[" * 1_000,  # not even closed: refused for its depth before json reads it
])
def test_a_document_deeper_than_the_bound_is_refused_naming_its_depth(text: str) -> None:
    with pytest.raises(TooDeep, match=f"at most {MAX_DEPTH}"):
        loads(text)


def test_the_bound_is_the_callers_and_bytes_are_read_as_json_reads_them() -> None:
    assert loads(b'{"a": [[1]]}', max_depth=3) == {"a": [[1]]}
    with pytest.raises(TooDeep, match="nested 3 levels deep; at most 2"):
        loads(b'{"a": [[1]]}', max_depth=2)
    with pytest.raises(json.JSONDecodeError):
        loads("[1,")
