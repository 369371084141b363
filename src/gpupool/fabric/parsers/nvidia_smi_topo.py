"""``nvidia-smi topo -m`` (and ``-mp``): the GPU/NIC connection matrix, the NIC legend and CPU/NUMA affinity.

Real output is tab-separated with the header underlined by ANSI escapes; copies pasted into issues and logs
have the tabs expanded to spaces. Every cell of the matrix is one token, so the parser splits on any run of
whitespace and only the header, whose trailing column names contain spaces, is read by name. Drivers before
the ``NIC Legend`` (2021) label NIC columns with the device name (``mlx5_0``) instead of ``NIC0``; both work.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpupool.domain.errors import ParseError
from gpupool.fabric.parsers._text import is_decimal, strip_ansi

# PCIe distance, closest first. SOC is what drivers before NODE existed printed for SYS.
PCIE_RANK: Mapping[str, int] = MappingProxyType({"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4})
TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

_TRAILING_RE = re.compile("|".join(re.escape(c) for c in TRAILING_COLUMNS))
_NV_RE = re.compile(r"^NV([1-9]\d*)$")
_GPU_RE = re.compile(r"^GPU\d+$")
_NIC_RE = re.compile(r"^NIC\d+$")
_DEVICE_RE = re.compile(r"^[A-Za-z][\w.\-]*$")
_LEGEND_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_CPU_LIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")


def nvlink_count(token: str) -> int:
    """``"NV18"`` -> 18; 0 for anything that is not an NVLink cell."""
    m = _NV_RE.match(token)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    """One host's ``nvidia-smi topo -m``. NIC columns are keyed by device name (``mlx5_0``), not ``NIC0``."""

    gpus: tuple[str, ...]  # "GPU0", ...
    nics: tuple[str, ...]  # device names from the legend, in NIC order
    links: Mapping[tuple[str, str], str]  # (row, col) -> "NV18" / "PIX" / "X" ...
    numa: Mapping[str, int]  # GPU -> NUMA affinity, -1 when N/A or not printed
    cpu_affinity: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # GPU -> "0-47,96-143"

    def nvlink_islands(self) -> tuple[int, ...]:
        """Island id per GPU: connected components over NV# links, numbered in order of first GPU."""
        parent = list(range(len(self.gpus)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, a in enumerate(self.gpus):
            for j in range(i + 1, len(self.gpus)):
                if nvlink_count(self.links[(a, self.gpus[j])]) > 0:
                    ri, rj = find(i), find(j)
                    parent[max(ri, rj)] = min(ri, rj)
        dense: dict[int, int] = {}
        return tuple(dense.setdefault(find(i), len(dense)) for i in range(len(self.gpus)))

    def gpu_nic(self, among: Collection[str] | None = None) -> tuple[int | None, ...]:
        """Per GPU, the index into ``nics`` of its closest NIC (PIX < PXB < PHB < NODE < SYS; ties -> lowest).

        ``among`` limits the choice to those device names (the InfiniBand HCAs, leaving out a RoCE bond);
        None where no NIC qualifies. A NIC reached over NVLink (never seen in practice) counts as closest.
        """
        out: list[int | None] = []
        for g in self.gpus:
            best: tuple[int, int] | None = None
            for k, nic in enumerate(self.nics):
                if among is not None and nic not in among:
                    continue
                token = self.links[(g, nic)]
                rank = -1 if nvlink_count(token) else PCIE_RANK[token]
                if best is None or (rank, k) < best:
                    best = (rank, k)
            out.append(None if best is None else best[1])
        return tuple(out)

    def nvlink_max(self) -> int:
        """Largest NV# bond between any two GPUs (0 for a PCIe-only host)."""
        return max((nvlink_count(self.links[(a, b)]) for a in self.gpus for b in self.gpus if a != b), default=0)


def _check_cell(token: str, row: str, col: str, source: str, line: int) -> None:
    if row == col:
        if token != "X":
            raise ParseError(f"diagonal cell of {row} is {token!r}, expected 'X'", source=source, line=line)
        return
    if token in PCIE_RANK or nvlink_count(token):
        return
    raise ParseError(f"unknown link token {token!r} in row {row}, column {col}", source=source, line=line)


def _numa_value(token: str, what: str, row: str, source: str, line: int) -> int:
    if token == "N/A":
        return -1
    if is_decimal(token):
        return int(token)
    raise ParseError(f"unknown {what} token {token!r} for {row}", source=source, line=line)


def _header_columns(header: str, source: str, line: int) -> tuple[list[str], list[str]]:
    m = _TRAILING_RE.search(header)
    label_text = header if m is None else header[: m.start()]
    trailing: list[str] = [] if m is None else _TRAILING_RE.findall(header, m.start())
    if m is not None:
        rest = _TRAILING_RE.sub("", header[m.start() :]).strip()
        if rest:
            raise ParseError(f"unknown column header {rest!r}", source=source, line=line)
    labels = label_text.split()
    seen_other = False
    for lab in labels:
        if _GPU_RE.match(lab):
            if seen_other:
                raise ParseError(f"GPU column {lab} after NIC columns", source=source, line=line)
        elif _DEVICE_RE.match(lab):
            seen_other = True
        else:
            raise ParseError(f"unknown column header {lab!r}", source=source, line=line)
    if len(set(labels)) != len(labels):
        raise ParseError("duplicate column header", source=source, line=line)
    return labels, trailing


def parse_topo_matrix(text: str, *, source: str = "<nvidia-smi topo -m>") -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output. Text around the matrix (a shell prompt, a log) is ignored."""
    lines = strip_ansi(text).splitlines()
    start = None
    for i, ln in enumerate(lines):
        toks = ln.split()
        if toks and toks[0] == "GPU0" and (len(toks) == 1 or toks[1] != "X"):
            start = i
            break
    if start is None:
        raise ParseError("no topology matrix (no header line starting with GPU0)", source=source, line=None)
    labels, trailing = _header_columns(lines[start], source, start + 1)
    n = len(labels)
    links: dict[tuple[str, str], str] = {}
    numa: dict[str, int] = {}
    cpu: dict[str, str] = {}
    row_no = 0
    i = start + 1
    while row_no < n:
        if i >= len(lines) or not lines[i].strip():
            raise ParseError(
                f"matrix ends after {row_no} of {n} rows (truncated?)", source=source, line=min(i + 1, len(lines))
            )
        toks = lines[i].split()
        label = labels[row_no]
        if toks[0] != label:
            raise ParseError(f"expected the row of {label}, found {lines[i].strip()[:40]!r}", source=source, line=i + 1)
        cells, extra = toks[1 : n + 1], toks[n + 1 :]
        if len(cells) < n:
            raise ParseError(f"row {label} has {len(cells)} cells, the header has {n}", source=source, line=i + 1)
        for col, tok in zip(labels, cells, strict=True):
            _check_cell(tok, label, col, source, i + 1)
            links[(label, col)] = tok
        if extra and len(extra) != len(trailing):
            raise ParseError(
                f"row {label} has {len(extra)} affinity values for {len(trailing)} columns", source=source, line=i + 1
            )
        if _GPU_RE.match(label):
            if len(extra) != len(trailing):
                raise ParseError(f"row {label} has no affinity values", source=source, line=i + 1)
            values = dict(zip(trailing, extra, strict=True))
            cpu_aff = values.get("CPU Affinity", "N/A")
            if cpu_aff != "N/A" and not _CPU_LIST_RE.match(cpu_aff):
                raise ParseError(f"unknown CPU affinity token {cpu_aff!r} for {label}", source=source, line=i + 1)
            cpu[label] = cpu_aff
            numa[label] = _numa_value(values.get("NUMA Affinity", "N/A"), "NUMA affinity", label, source, i + 1)
            if "GPU NUMA ID" in values:
                _numa_value(values["GPU NUMA ID"], "GPU NUMA ID", label, source, i + 1)
        row_no += 1
        i += 1
    legend: dict[str, str] = {}
    in_legend = False
    for ln in lines[i:]:
        if ln.strip() == "NIC Legend:":
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND_RE.match(ln)
            if m is not None:
                legend[m.group(1)] = m.group(2)
            elif ln.strip() and legend:
                break
    names: dict[str, str] = {}
    for lab in labels:
        if _NIC_RE.match(lab):
            if lab not in legend:
                raise ParseError(
                    f"{lab} has no entry in the NIC Legend (truncated output?)", source=source, line=len(lines)
                )
            names[lab] = legend[lab]
        else:
            names[lab] = lab
    gpus = tuple(lab for lab in labels if _GPU_RE.match(lab))
    nics = tuple(names[lab] for lab in labels if not _GPU_RE.match(lab))
    if len(set(names.values())) != len(names):
        raise ParseError("two NIC columns name the same device", source=source, line=len(lines))
    renamed = {(names[a], names[b]): tok for (a, b), tok in links.items()}
    return TopoMatrix(
        gpus=gpus,
        nics=nics,
        links=MappingProxyType(renamed),
        numa=MappingProxyType(numa),
        cpu_affinity=MappingProxyType(cpu),
    )
