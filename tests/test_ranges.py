import pytest

from mldebug.ranges import format_ranks, parse_ranks


@pytest.mark.parametrize(
    "ranks, text",
    [
        ([], ""),
        ([0], "0"),
        ([0, 1, 2, 3, 5, 8, 9], "0-3,5,8-9"),
        ([5, 3, 4, 3], "3-5"),
        (list(range(0, 512)) + list(range(513, 1024)), "0-511,513-1023"),
    ],
)
def test_format_and_parse_round_trip(ranks, text):
    assert format_ranks(ranks) == text
    assert parse_ranks(text) == sorted(set(ranks))


@pytest.mark.parametrize("bad", ["a", "3-1", "-1", "1-x"])
def test_parse_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_ranks(bad)
