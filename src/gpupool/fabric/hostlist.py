"""Slurm hostlist expressions: ``dgx[001-031],login1`` <-> the names they stand for.

The syntax follows Slurm's ``hostlist.c``: comma (or whitespace) separated items; an item may hold bracket
groups of comma separated numbers and ``lo-hi`` ranges. A range prints its numbers zero padded to the width
of its ``lo`` text, so ``n[08-10]`` is ``n08 n09 n10`` and ``n[8-10]`` is ``n8 n9 n10``. Text after a bracket
is a suffix (``n[1-2]-ib``), and several bracket groups in one item give every combination, left to right.
``compress`` folds only a name's trailing number, as Slurm's ``hostlist_ranged_string`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import product

__all__ = ["MAX_NAMES", "compress", "expand", "hostlist_key"]

MAX_NAMES = 1 << 20  # a bound on one expansion, so a typo such as n[1-999999999] fails fast instead of eating memory
_TRAILING_DIGITS = re.compile(r"^(.*?)([0-9]+)$", re.DOTALL)
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() would accept superscripts and other scripts' digits
_FORBIDDEN = re.compile(r"[\[\],\s]")  # characters a name cannot hold and still be written as a hostlist


def hostlist_key(name: str) -> tuple[str, int, str]:
    """Sort key that orders names the way ``compress`` writes them: by prefix, then by trailing number.

    ``dgx2`` sorts before ``dgx10``; a name without a trailing number sorts before the numbered names of the
    same prefix (``login`` < ``login1``). The digit text breaks ties between ``n8`` and ``n08``.
    """
    m = _TRAILING_DIGITS.match(name)
    if m is None:
        return (name, -1, "")
    return (m.group(1), int(m.group(2)), m.group(2))


# ---------------------------------------------------------------- expand


def _split_top(expr: str) -> list[str]:
    """Split on commas and whitespace outside brackets; reject empty items and bad brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    in_segment = 0  # items seen since the last comma: "a ,b" is fine, "a,,b" is not

    def flush() -> None:
        nonlocal current, in_segment
        if current:
            items.append("".join(current))
            current = []
            in_segment += 1

    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:
                raise ValueError(f"nested '[' at position {i + 1} in hostlist {expr!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise ValueError(f"']' without '[' at position {i + 1} in hostlist {expr!r}")
            depth = 0
        elif not depth and (ch == "," or ch.isspace()):
            # Slurm separates names by commas and by whitespace.
            flush()
            if ch == ",":
                if not in_segment:
                    raise ValueError(f"empty name before ',' at position {i + 1} in hostlist {expr!r}")
                in_segment = 0
            continue
        current.append(ch)
    if depth:
        raise ValueError(f"'[' is never closed in hostlist {expr!r}")
    flush()
    if items and not in_segment:
        raise ValueError(f"hostlist {expr!r} ends with ','")
    return items


def _expand_range(part: str, expr: str) -> list[str]:
    """One bracket element: ``7`` or ``001-031``, printed at the width of its low end."""
    lo_text, sep, hi_text = part.partition("-")
    if not _DIGITS.fullmatch(lo_text) or (sep and not _DIGITS.fullmatch(hi_text)):
        raise ValueError(f"bad range {part!r} in hostlist {expr!r}: expected N or LO-HI with decimal digits")
    lo = int(lo_text)
    hi = int(hi_text) if sep else lo
    if hi < lo:
        raise ValueError(f"range {part!r} in hostlist {expr!r} runs backwards")
    if hi - lo + 1 > MAX_NAMES:
        raise ValueError(f"range {part!r} in hostlist {expr!r} holds more than {MAX_NAMES} names")
    width = len(lo_text)
    return [str(n).zfill(width) for n in range(lo, hi + 1)]


def _expand_item(item: str, expr: str) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    count = 1
    while pos < len(item):
        open_at = item.find("[", pos)
        if open_at < 0:
            pieces.append([item[pos:]])
            break
        if open_at > pos:
            pieces.append([item[pos:open_at]])
        close_at = item.index("]", open_at)  # present: _split_top checked the brackets balance
        body = item[open_at + 1 : close_at]
        if not body:
            raise ValueError(f"empty brackets in hostlist {expr!r}")
        values: list[str] = []
        for part in body.split(","):
            if not part:
                raise ValueError(f"empty element inside brackets in hostlist {expr!r}")
            values.extend(_expand_range(part, expr))
        count *= len(values)
        if count > MAX_NAMES:
            raise ValueError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
        pieces.append(values)
        pos = close_at + 1
    return ["".join(combo) for combo in product(*pieces)]


def expand(expr: str) -> list[str]:
    """Every name of a hostlist expression, in the order written (duplicates kept, as ``scontrol`` does).

    ``expand("dgx[001-003,007],login1")`` -> ``["dgx001", "dgx002", "dgx003", "dgx007", "login1"]``.
    An empty or blank expression is the empty list. Malformed expressions raise ``ValueError``.
    """
    names: list[str] = []
    for item in _split_top(expr):
        names.extend(_expand_item(item, expr))
        if len(names) > MAX_NAMES:
            raise ValueError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
    return names


# ---------------------------------------------------------------- compress


def _check_name(name: str) -> None:
    if not name:
        raise ValueError("a host name in a hostlist cannot be empty")
    if _FORBIDDEN.search(name):
        raise ValueError(f"host name {name!r} cannot be written as a hostlist: it holds '[', ']', ',' or whitespace")


def compress(names: Iterable[str]) -> str:
    """The shortest Slurm-style hostlist of the distinct ``names``, in ``hostlist_key`` order.

    ``compress(["dgx003", "dgx001", "dgx002", "dgx007"])`` -> ``"dgx[001-003,007]"``. Zero padding is kept:
    a range joins only names whose digits print at the range's width, so ``n8, n09`` stay apart. The result
    satisfies ``expand(compress(x)) == sorted(set(x), key=hostlist_key)``. Names holding ``[``, ``]``, ``,``
    or whitespace raise ``ValueError``.
    """
    unique = sorted(set(names), key=hostlist_key)
    for name in unique:
        _check_name(name)
    items: list[str] = []
    i = 0
    while i < len(unique):
        prefix, num, digits = hostlist_key(unique[i])
        if num < 0:
            items.append(unique[i])
            i += 1
            continue
        # The numbered names of this prefix are contiguous in key order; fold them into ranges.
        ranges: list[str] = []
        count = 0
        while i < len(unique):
            p, num, digits = hostlist_key(unique[i])
            if p != prefix or num < 0:
                break
            width = len(digits)
            last = num
            i += 1
            while i < len(unique):
                p2, n2, d2 = hostlist_key(unique[i])
                if p2 != prefix or n2 != last + 1 or d2 != str(n2).zfill(width):
                    break
                last = n2
                i += 1
            ranges.append(digits if last == num else f"{digits}-{str(last).zfill(width)}")
            count += last - num + 1
        if count == 1:
            items.append(prefix + ranges[0])
        else:
            items.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(items)
