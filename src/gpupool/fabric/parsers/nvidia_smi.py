"""``nvidia-smi -q -x`` (XML, DTD v11-v13) and plain ``nvidia-smi -q`` into one ``SmiReport``; ``topo -m``.

Both query formats are read into the same small tree of (key, value, line) nodes whose keys are normalised
(``FB Memory Usage`` and ``fb_memory_usage`` both become ``fb_memory_usage``), so one table of paths serves
both and every error can name its line. Inventory (what a GPU is) and telemetry (how it is doing) are kept
apart: the fabric needs the first, the node agent polls the second with the same parser.
"""

from __future__ import annotations

import bisect
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpupool.domain.errors import ParseError
from gpupool.fabric.model import Gpu
from gpupool.fabric.parsers._text import is_decimal, line_starts
from gpupool.fabric.parsers.nvidia_smi_topo import TopoMatrix, parse_topo_matrix

__all__ = [
    "SmiGpu",
    "SmiReport",
    "SmiTelemetry",
    "TopoMatrix",
    "parse_query_text",
    "parse_query_xml",
    "parse_topo_matrix",
]

# Values nvidia-smi prints instead of a reading; all mean "no value" to us.
_NO_VALUE = frozenset(
    {"n/a", "not supported", "unknown error", "insufficient permissions", "requested functionality has been deprecated"}
)
_KEY_RE = re.compile(r"[^0-9a-z]+")
_MIB_RE = re.compile(r"^(\d+) MiB$")
_PCT_RE = re.compile(r"^(\d+(?:\.\d+)?) ?%$")
_TEMP_RE = re.compile(r"^(-?\d+(?:\.\d+)?) C$")
_WATT_RE = re.compile(r"^(\d+(?:\.\d+)?) W$")
_INT_RE = re.compile(r"^\d+$")
_DOCTYPE_SUBSET_RE = re.compile(r"<!DOCTYPE[^>\[]*\[")
_START_TAG_RE = re.compile(r"<([A-Za-z_][^\s/>]*)")
_HIDDEN_RE = re.compile(r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|<!DOCTYPE[^>]*>", re.DOTALL)
_TEXT_LINE_RE = re.compile(r"^( *)(\S.*?)(?:\s+:(?: (.*))?)?$")
_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


@dataclass(frozen=True, slots=True)
class SmiTelemetry:
    """What the node agent samples. None: the GPU or driver does not report it (``N/A``)."""

    gpu_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_mib: int | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    performance_state: str | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None


@dataclass(frozen=True, slots=True)
class SmiGpu:
    product_name: str
    memory_total_mib: int
    uuid: str
    pci_bus_id: str
    mig_mode: bool | None  # None: the GPU has no MIG (prints N/A)
    numa_node: int | None = None  # only some drivers print it
    minor_number: int | None = None
    telemetry: SmiTelemetry = field(default_factory=SmiTelemetry)

    def to_gpu(self, index: int, nvlink_island: int = 0, numa_node: int | None = None) -> Gpu:
        """The fabric's ``Gpu``; ``numa_node`` (from ``topo -m``) wins over the query's, unknown -> -1."""
        numa = numa_node if numa_node is not None and numa_node >= 0 else self.numa_node
        return Gpu(
            index=index,
            model=self.product_name,
            memory_mib=self.memory_total_mib,
            nvlink_island=nvlink_island,
            numa_node=numa if numa is not None and numa >= 0 else -1,
            uuid=self.uuid,
            pci_bus_id=self.pci_bus_id,
            mig_mode=bool(self.mig_mode),
        )


@dataclass(frozen=True, slots=True)
class SmiReport:
    driver_version: str
    cuda_version: str | None
    gpus: tuple[SmiGpu, ...]


@dataclass(slots=True)
class _Node:
    """One key of either query format; ``key`` is normalised, ``value`` None for a pure section.

    Mutable because the text parser appends children as it reads; it never leaves this module.
    """

    key: str
    value: str | None
    line: int | None
    children: list[_Node] = field(default_factory=list)

    def find(self, path: str) -> _Node | None:
        node = self
        for part in path.split("/"):
            found = next((c for c in node.children if c.key == part), None)
            if found is None:
                return None
            node = found
        return node


def _norm(key: str) -> str:
    return _KEY_RE.sub("_", key.lower()).strip("_")


class _Reader:
    """Looks values up under one GPU node and converts them, raising ``ParseError`` at the value's line."""

    def __init__(self, gpu: _Node, source: str) -> None:
        self.gpu = gpu
        self.source = source

    def raw(self, *paths: str) -> tuple[str | None, int | None]:
        """The first of ``paths`` that exists and holds a reading; (None, line) if all are N/A or absent."""
        line = None
        for path in paths:
            node = self.gpu.find(path)
            if node is None or node.value is None:
                continue
            line = node.line
            if node.value.strip().strip("[]").lower() not in _NO_VALUE:
                return node.value.strip(), node.line
        return None, line

    def _match(self, pattern: re.Pattern[str], unit: str, paths: tuple[str, ...]) -> str | None:
        value, line = self.raw(*paths)
        if value is None:
            return None
        m = pattern.match(value)
        if m is None:
            raise ParseError(f"{paths[0]}: expected a value in {unit}, got {value!r}", source=self.source, line=line)
        return m.group(1) if m.groups() else m.group(0)

    def mib(self, *paths: str) -> int | None:
        v = self._match(_MIB_RE, "MiB", paths)
        return None if v is None else int(v)

    def pct(self, *paths: str) -> float | None:
        v = self._match(_PCT_RE, "%", paths)
        return None if v is None else float(v)

    def celsius(self, *paths: str) -> float | None:
        v = self._match(_TEMP_RE, "C", paths)
        return None if v is None else float(v)

    def watts(self, *paths: str) -> float | None:
        v = self._match(_WATT_RE, "W", paths)
        return None if v is None else float(v)

    def count(self, *paths: str) -> int | None:
        v = self._match(_INT_RE, "a count", paths)
        return None if v is None else int(v)

    def flag(self, *paths: str) -> bool | None:
        value, line = self.raw(*paths)
        if value is None:
            return None
        low = value.lower()
        if low in ("enabled", "yes"):
            return True
        if low in ("disabled", "no"):
            return False
        raise ParseError(
            f"{paths[0]}: expected Enabled/Disabled or Yes/No, got {value!r}", source=self.source, line=line
        )

    def text(self, *paths: str) -> str | None:
        return self.raw(*paths)[0]

    def ecc_sums(self, path: str) -> tuple[int | None, int | None]:
        """(corrected, uncorrected) summed over the memories of one ECC block, both layouts of it."""
        block = self.gpu.find(path)
        if block is None:
            return None, None
        if block.find("single_bit") is not None:  # pre-Ampere: single_bit/total, double_bit/total
            return self.count(f"{path}/single_bit/total"), self.count(f"{path}/double_bit/total")
        corrected: int | None = None
        uncorrected: int | None = None
        for child in block.children:
            if "correctable" not in child.key or child.value is None:
                continue
            n = self.count(f"{path}/{child.key}")
            if n is None:
                continue
            if "uncorrectable" in child.key:
                uncorrected = (uncorrected or 0) + n
            else:
                corrected = (corrected or 0) + n
        return corrected, uncorrected


def _gpu_from_node(gpu: _Node, bus_id: str | None, source: str) -> SmiGpu:
    r = _Reader(gpu, source)
    name = r.text("product_name")
    uuid = r.text("uuid", "gpu_uuid")
    pci = r.text("pci/pci_bus_id", "pci/bus_id") or bus_id
    total = r.mib("fb_memory_usage/total")
    for what, value in (("product name", name), ("UUID", uuid), ("PCI bus id", pci), ("FB memory total", total)):
        if value is None:
            raise ParseError(f"GPU {bus_id or '?'} has no {what} (truncated output?)", source=source, line=gpu.line)
    assert name is not None and uuid is not None and pci is not None and total is not None
    vol_c, vol_u = r.ecc_sums("ecc_errors/volatile")
    agg_c, agg_u = r.ecc_sums("ecc_errors/aggregate")
    telemetry = SmiTelemetry(
        gpu_util_pct=r.pct("utilization/gpu_util", "utilization/gpu"),
        memory_util_pct=r.pct("utilization/memory_util", "utilization/memory"),
        memory_used_mib=r.mib("fb_memory_usage/used"),
        temperature_c=r.celsius("temperature/gpu_temp", "temperature/gpu_current_temp"),
        memory_temperature_c=r.celsius("temperature/memory_temp", "temperature/memory_current_temp"),
        # Newer drivers split the reading into instant and average; instant is what older ones printed.
        power_draw_w=r.watts(
            "gpu_power_readings/instant_power_draw",
            "gpu_power_readings/instantaneous_power_draw",
            "gpu_power_readings/power_draw",
            "power_readings/power_draw",
            "gpu_power_readings/average_power_draw",
        ),
        power_limit_w=r.watts(
            "gpu_power_readings/current_power_limit",
            "power_readings/enforced_power_limit",
            "power_readings/power_limit",
        ),
        performance_state=r.text("performance_state"),
        ecc_enabled=r.flag("ecc_mode/current_ecc", "ecc_mode/current"),
        ecc_volatile_corrected=vol_c,
        ecc_volatile_uncorrected=vol_u,
        ecc_aggregate_corrected=agg_c,
        ecc_aggregate_uncorrected=agg_u,
        retired_pages_single_bit=r.count(
            "retired_pages/multiple_single_bit_retirement/retired_count", "retired_pages/single_bit_ecc"
        ),
        retired_pages_double_bit=r.count(
            "retired_pages/double_bit_retirement/retired_count", "retired_pages/double_bit_ecc"
        ),
        retired_pages_pending=r.flag(
            "retired_pages/pending_retirement",
            "retired_pages/pending_page_blacklist",
            "retired_pages/pending_blacklist",
        ),
        remapped_rows_correctable=r.count("remapped_rows/remapped_row_corr", "remapped_rows/correctable_error"),
        remapped_rows_uncorrectable=r.count("remapped_rows/remapped_row_unc", "remapped_rows/uncorrectable_error"),
        remapped_rows_pending=r.flag("remapped_rows/remapped_row_pending", "remapped_rows/pending"),
        remapped_rows_failure=r.flag("remapped_rows/remapped_row_failure", "remapped_rows/remapping_failure_occurred"),
    )
    return SmiGpu(
        product_name=name,
        memory_total_mib=total,
        uuid=uuid,
        pci_bus_id=pci,
        mig_mode=r.flag("mig_mode/current_mig", "mig_mode/current"),
        numa_node=r.count("numa_node", "gpu_numa_id"),
        minor_number=r.count("minor_number"),
        telemetry=telemetry,
    )


def _report(root: _Node, gpus: list[tuple[_Node, str | None]], source: str) -> SmiReport:
    driver = root.find("driver_version")
    if driver is None or not driver.value:
        raise ParseError("no driver version (not nvidia-smi -q output?)", source=source, line=1)
    cuda = root.find("cuda_version")
    cuda_v = cuda.value.strip() if cuda is not None and cuda.value else None
    if cuda_v is not None and cuda_v.lower() in _NO_VALUE:
        cuda_v = None
    return SmiReport(
        driver_version=driver.value.strip(),
        cuda_version=cuda_v,
        gpus=tuple(_gpu_from_node(g, bus, source) for g, bus in gpus),
    )


def _xml_to_node(elem: ET.Element, lines: dict[int, int]) -> _Node:
    children = [_xml_to_node(c, lines) for c in elem]
    value = None if children else (elem.text or "").strip()
    return _Node(_norm(elem.tag), value, lines.get(id(elem)), children)


def parse_query_xml(text: str, *, source: str = "<nvidia-smi -q -x>") -> SmiReport:
    """Parse ``nvidia-smi -q -x``. The DOCTYPE names an external DTD, which is never loaded; a DTD with an
    internal subset or any entity declaration is refused, so no entity is ever expanded."""
    if "<!ENTITY" in text or _DOCTYPE_SUBSET_RE.search(text):
        m = re.search(r"<!ENTITY|<!DOCTYPE", text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        raise ParseError("DTD entity declarations are not accepted in nvidia-smi XML", source=source, line=line)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ParseError(f"malformed XML: {e.msg}", source=source, line=e.position[0]) from e
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"root element is <{root.tag}>, expected <nvidia_smi_log>", source=source, line=1)
    # ElementTree keeps no line numbers; start tags in the text come in the same order as elements.
    hidden = _HIDDEN_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    starts = line_starts(text)
    tags = [(m.group(1), bisect.bisect_right(starts, m.start())) for m in _START_TAG_RE.finditer(hidden)]
    elems = list(root.iter())
    lines: dict[int, int] = {}
    if len(tags) == len(elems) and all(t == e.tag for (t, _), e in zip(tags, elems, strict=True)):
        lines = {id(e): ln for e, (_, ln) in zip(elems, tags, strict=True)}
    tree = _xml_to_node(root, lines)
    gpu_nodes = [(n, e.get("id")) for n, e in zip(tree.children, root, strict=True) if n.key == "gpu"]
    return _report(tree, gpu_nodes, source)


def parse_query_text(text: str, *, source: str = "<nvidia-smi -q>") -> SmiReport:
    """Parse plain ``nvidia-smi -q``: 4-space indented ``Key : Value`` blocks, one ``GPU <bus id>`` per GPU."""
    root = _Node("", None, None)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    gpus: list[tuple[_Node, str | None]] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        ln = raw.rstrip()
        if not ln.strip() or ln.startswith("====="):
            continue
        m = _TEXT_LINE_RE.match(ln)
        indent = len(ln) - len(ln.lstrip(" "))
        if m is None or ln[indent] == "\t" or indent % 4:
            raise ParseError(f"not an nvidia-smi -q line: {ln.strip()[:60]!r}", source=source, line=no)
        depth = indent // 4
        while stack[-1][0] >= depth:
            stack.pop()
        if stack[-1][0] != depth - 1:
            raise ParseError("indented deeper than its section", source=source, line=no)
        key, value = m.group(2), m.group(3)
        has_colon = value is not None or re.search(r"\s:$", ln) is not None
        if depth == 0 and not has_colon:
            g = _GPU_HEADER_RE.match(key)
            if g is None:
                raise ParseError(f"not an nvidia-smi -q line: {key[:60]!r}", source=source, line=no)
            node = _Node("gpu", None, no)
            gpus.append((node, g.group(1)))
        else:
            node = _Node(_norm(key), (value or "") if has_colon else None, no)
        stack[-1][1].children.append(node)
        stack.append((depth, node))
    # A cut at a GPU boundary leaves every block well formed; only the announced count reveals it.
    attached = root.find("attached_gpus")
    declared = attached.value.strip() if attached is not None and attached.value else ""
    if is_decimal(declared) and int(declared) != len(gpus):
        raise ParseError(
            f"says {declared} attached GPUs but lists {len(gpus)} (truncated?)",
            source=source,
            line=len(text.splitlines()),
        )
    return _report(root, gpus, source)
