"""Label keys, values, ``k=v``/``k-`` words and the labels file: bad input names itself and where it is."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InputError
from gpupool.domain.labels import check_label, parse_assignments, parse_labels_file


@pytest.mark.parametrize(
    "key", ["zone", "a", "gpupool/gpu-model", "network.topology.nvidia.com/leaf", "rack_7.b", "A1/b2"]
)
def test_good_keys(key: str) -> None:
    check_label(key, "NVIDIA H100 80GB HBM3", "here")


@pytest.mark.parametrize("key", ["", "-a", "a-", "a b", "a=b", "/a", "a/", "a//b", "x" * 254, "é"])
def test_bad_keys_name_the_key_and_the_source(key: str) -> None:
    with pytest.raises(InputError) as e:
        check_label(key, "v", "--label")
    assert e.value.source == "--label" and repr(key) in e.value.message


def test_values_are_printable_and_bounded() -> None:
    check_label("k", "", "s")
    for bad in ("a\nb", "\x00", "v" * 257):
        with pytest.raises(InputError):
            check_label("k", bad, "s")


def test_assignments_set_and_remove() -> None:
    assert parse_assignments(["zone=b", "rack-", "note=a=b", "empty="], "label") == (
        {"zone": "b", "note": "a=b", "empty": ""},
        ("rack",),
    )
    for words in (["zone"], ["-"], ["zone=a", "zone-"]):
        with pytest.raises(InputError):
            parse_assignments(words, "label")


def test_labels_file_lines_comments_and_errors_with_line_numbers() -> None:
    text = "# site\nzone = b\n\nrack=r7\n"
    assert parse_labels_file(text, "labels.txt") == {"zone": "b", "rack": "r7"}
    with pytest.raises(InputError) as e:
        parse_labels_file("zone=b\nnonsense\n", "labels.txt")
    assert e.value.line == 2 and str(e.value).startswith("labels.txt:2:")
    with pytest.raises(InputError) as e:
        parse_labels_file("zone=b\nzone=c\n", "labels.txt")
    assert e.value.line == 2 and "twice" in str(e.value)
    with pytest.raises(InputError) as e:
        parse_labels_file("ok=1\nbad key=1\n", "labels.txt")
    assert e.value.line == 2
