import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.fabric.hostlist import compress, expand, hostlist_key


def test_compress_keeps_zero_padding() -> None:
    assert compress([f"dgx{i:03d}" for i in range(1, 32)]) == "dgx[001-031]"


def test_compress_several_prefixes_gaps_and_plain_names() -> None:
    names = ["n7", "n2", "login1", "n1", "n3", "login", "gpu-a10", "gpu-a9", "n2"]
    assert compress(names) == "gpu-a[9-10],login,login1,n[1-3,7]"


def test_compress_single_names_have_no_brackets() -> None:
    assert compress(["dgx001"]) == "dgx001"
    assert compress(["head"]) == "head"
    assert compress([]) == ""


def test_compress_never_joins_different_paddings() -> None:
    # n8 and n08 are different hosts; a range prints at its low end's width, so they cannot share one.
    out = compress(["n8", "n08", "n09", "n10"])
    assert sorted(expand(out)) == sorted(["n8", "n08", "n09", "n10"])
    assert compress(["n98", "n99", "n100"]) == "n[98-100]"
    assert compress(["n098", "n099", "n100"]) == "n[098-100]"


def test_compress_folds_only_the_trailing_number() -> None:
    assert compress(["r1-n1", "r1-n2", "r2-n1"]) == "r1-n[1-2],r2-n1"


def test_expand_the_brief_example() -> None:
    assert expand("dgx[001-003,007],login1") == ["dgx001", "dgx002", "dgx003", "dgx007", "login1"]


def test_expand_keeps_written_order_width_suffixes_and_products() -> None:
    assert expand("b,a") == ["b", "a"]
    assert expand("n[8-10]") == ["n8", "n9", "n10"]
    assert expand("n[08-10]") == ["n08", "n09", "n10"]
    assert expand("n[1-2]-ib") == ["n1-ib", "n2-ib"]
    assert expand("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand("a, b  c") == ["a", "b", "c"]
    assert expand("  ") == []


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("n[1-3", "never closed"),
        ("n]1", "without '\\['"),
        ("n[[1]]", "nested"),
        ("n[]", "empty brackets"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "bad range"),
        ("n[1-2-3]", "bad range"),
        ("n[1,,2]", "empty element"),
        ("a,,b", "empty name"),
        (",a", "empty name"),
        ("a,", "ends with ','"),
        ("n[\u00b9-3]", "bad range"),  # a superscript one is a digit to str.isdigit, not to Slurm
        ("n[1-99999999]", "more than"),
    ],
)
def test_bad_expressions_raise_value_error_naming_the_problem(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand(expr)


@pytest.mark.parametrize("name", ["", "a b", "a,b", "n[1]", "x]"])
def test_names_that_cannot_be_written_as_a_hostlist_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        compress(["ok1", name])


def test_hostlist_key_orders_numbers_naturally() -> None:
    assert sorted(["dgx10", "dgx2", "dgx", "a9"], key=hostlist_key) == ["a9", "dgx", "dgx2", "dgx10"]


_prefix = st.text(alphabet="abz1-._", min_size=0, max_size=4)  # a digit inside a prefix too
_number = st.tuples(st.integers(min_value=0, max_value=130), st.integers(min_value=0, max_value=4))


@st.composite
def _name(draw: st.DrawFn) -> str:
    prefix = draw(_prefix)
    if draw(st.booleans()):
        n, width = draw(_number)
        return f"{prefix}{n:0{width}d}" if width else f"{prefix}{n}"
    return prefix or "x"


@given(st.lists(_name(), max_size=60))
def test_expand_of_compress_is_the_sorted_unique_names(names: list[str]) -> None:
    assert expand(compress(names)) == sorted(set(names), key=hostlist_key)


@given(st.lists(_name(), max_size=60))
def test_compress_is_a_fixed_point(names: list[str]) -> None:
    once = compress(names)
    assert compress(expand(once)) == once
