"""The one CPU-set module: parse (bounded, with clear errors), format and split, as every layer uses them."""

from __future__ import annotations

import time

import pytest

from dlinfra.payload.cpuset import MAX_CPU, CpuSetError, format_cpuset, parse_cpuset, split_cpuset


@pytest.mark.parametrize(
    ("value", "cpus"),
    [
        ("0-3,6", (0, 1, 2, 3, 6)),
        ("5", (5,)),
        (" 1 , 2-3 ", (1, 2, 3)),
        ("3,1,1-2", (1, 2, 3)),
        (4, (4,)),
        ([3, 1], (1, 3)),
        (("0-1", 4), (0, 1, 4)),
        (f"0-{MAX_CPU}", tuple(range(MAX_CPU + 1))),
    ],
)
def test_parse(value: object, cpus: tuple[int, ...]) -> None:
    assert parse_cpuset(value) == cpus


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "'' is not a CPU set"),
        ("two", "'two' is not a CPU set"),
        ("0-3,a", "'0-3,a' is not a CPU set ('a' is not a CPU number or range)"),
        ("0,,1", "(an empty item)"),
        ("-1", "'-1' is not a CPU set"),
        ("3-1", "range '3-1' runs backwards"),
        ("0-99999999999", f"CPU 99999999999 is past the largest id Linux allows ({MAX_CPU})"),
        ("1" * 5000, "5,000 characters is too long for a CPU set"),
        ([], "[] names no CPUs"),
        ([-1], "CPU -1 is negative"),
        (True, "True is not a CPU set"),
        (2.0, "2.0 is not a CPU set"),
        ({"a": 1}, "is not a CPU set"),
    ],
)
def test_parse_refuses_with_a_clear_error(value: object, message: str) -> None:
    with pytest.raises(CpuSetError) as err:
        parse_cpuset(value)
    assert message in str(err.value)
    assert len(str(err.value)) < 200  # one line, whatever the input
    assert isinstance(err.value, ValueError)


def test_a_huge_range_fails_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(CpuSetError):
        parse_cpuset("0-" + "9" * 4000)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("cpus", "text"),
    [((0, 1, 2, 5), "0-2,5"), ({7, 8, 0, 1, 2, 5}, "0-2,5,7-8"), ([3], "3"), ([4, 4, 5], "4-5"), ((), "")],
)
def test_format_and_round_trip(cpus: object, text: str) -> None:
    assert format_cpuset(cpus) == text  # type: ignore[arg-type]
    if text:
        assert parse_cpuset(text) == tuple(sorted(set(cpus)))  # type: ignore[call-overload]


def test_split_gives_disjoint_contiguous_near_equal_chunks() -> None:
    assert split_cpuset(list(range(8)), 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert split_cpuset([4, 5], 1) == [[4, 5]]
    assert split_cpuset([0, 1, 2], 5) == [[0], [1], [2], [], []]  # callers decide whether empty is allowed
