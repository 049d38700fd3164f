"""The shared runner for vector files whose case is one ``kind`` function
(looked up in a KINDS mapping) applied to ``input``: a positive case must
produce its ``output`` members, a negative one must fail with exactly its
``expect`` code."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from httpcrypt.errors import HTTPCryptError

Kind = Callable[[dict[str, Any]], dict[str, Any]]
# Given a positive case, checks what the kind function cannot return and
# gives the ``output`` members left to compare (by default all of them).
WantHook = Callable[[dict[str, Any]], dict[str, Any]]


def run_case(kinds: Mapping[str, Kind], case: dict[str, Any],
             want_for: WantHook | None = None) -> None:
    """Passes when a positive case produces its ``output`` member for
    member, and a negative one fails with exactly its ``expect`` code."""
    fn = kinds.get(case["kind"])
    if fn is None:
        pytest.fail(f"unknown vector kind {case['kind']!r}")
    i = case["input"]
    if case["expect"] != "ok":
        with pytest.raises(HTTPCryptError) as info:
            fn(i)
        assert info.value.code == case["expect"], f"{case['name']}: {info.value!r}"
        return
    got = fn(i)
    want = case["output"] if want_for is None else want_for(case)
    assert set(got) >= set(want), case["name"]
    for k, v in want.items():
        assert got[k] == v, f"{case['name']}: {k}"
