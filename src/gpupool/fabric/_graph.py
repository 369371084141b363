"""Small graph helpers for deriving the fabric: union-find and nesting of domain partitions."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int32]


class UnionFind:
    __slots__ = ("parent",)

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def labels(self) -> list[int]:
        """Dense component labels, numbered in order of first appearance."""
        dense: dict[int, int] = {}
        return [dense.setdefault(self.find(i), len(dense)) for i in range(len(self.parent))]


def nest(inner: IntArray, outer: IntArray) -> IntArray:
    """Merge outer domains so that every inner domain lies inside exactly one outer domain."""
    uf = UnionFind(len(inner))
    first_inner: dict[int, int] = {}
    first_outer: dict[int, int] = {}
    for h in range(len(inner)):
        for table, key in ((first_inner, int(inner[h])), (first_outer, int(outer[h]))):
            if key in table:
                uf.union(table[key], h)
            else:
                table[key] = h
    return np.asarray(uf.labels(), dtype=np.int32)
