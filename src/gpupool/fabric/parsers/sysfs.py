"""``/sys/class/infiniband``: per-device identity, per-port state, rate, LID and traffic/error counters.

Reads a real tree, a copy of one, or the flat ``./mlx5_0/fw_ver:28.41.1000`` dump ``grep -r .`` makes of it,
through one small file interface. Only known files and the counter directories are read: the real tree links
back into ``/sys/devices`` (``device/``), so walking it blindly would never end. A file that is absent stays
absent (a missing counter is not 0). ``write_sysfs_infiniband`` lays values out in the kernel's own format,
so the emulated agent can hand the real reader the same files, byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from gpupool.domain.errors import InputError, ParseError
from gpupool.fabric.model import Hca
from gpupool.fabric.parsers._text import decode_tool_output, is_decimal, natural_key, normalise_guid, sysfs_guid
from gpupool.fabric.parsers.ibstat import parse_rate_text, parse_state_text

_DEVICE_FILES = ("node_guid", "sys_image_guid", "node_desc", "node_type", "hca_type", "board_id", "fw_ver", "hw_rev")
_COUNTER_DIRS = ("counters", "hw_counters")


@dataclass(frozen=True, slots=True)
class SysfsPort:
    port: int
    state: str = ""  # "ACTIVE" (from "4: ACTIVE")
    state_code: int = 0
    phys_state: str = ""  # "LinkUp" (from "5: LinkUp")
    phys_state_code: int = 0
    rate_gbps: float = 0.0
    width: int = 0  # lanes, from "(4X NDR)"
    speed: str | None = None  # "NDR"
    link_layer: str = ""
    lid: int | None = None
    sm_lid: int | None = None
    counters: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    hw_counters: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def infiniband(self) -> bool:
        return self.link_layer.lower() == "infiniband"


@dataclass(frozen=True, slots=True)
class SysfsDevice:
    name: str  # "mlx5_0", "mlx5_bond_0"
    ports: tuple[SysfsPort, ...]
    node_guid: str = ""  # 16 lowercase hex digits; "" when the file is absent
    sys_image_guid: str = ""
    node_desc: str = ""
    node_type: str = ""  # "1: CA"
    hca_type: str = ""
    board_id: str = ""
    fw_ver: str = ""
    hw_rev: str = ""
    numa_node: int | None = None  # device/numa_node; None when absent (or -1 in the file: no affinity)

    @property
    def link_layer(self) -> str:
        """The first port's link layer: a RoCE bond (``mlx5_bond_0``) reports ``Ethernet``."""
        return self.ports[0].link_layer if self.ports else ""


class _Files(Protocol):
    def list(self, rel: str) -> list[str]: ...

    def read(self, rel: str) -> tuple[str, str, int | None] | None: ...  # (value, source, line)

    def where(self, rel: str) -> tuple[str, int | None]: ...  # (source, line) to blame for a missing file


class _DirFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def list(self, rel: str) -> list[str]:
        p = self.root / rel if rel else self.root
        try:
            # sysfs has no dot files; skipping them hides a writer's half-written temporaries
            names = [n for n in os.listdir(p) if not n.startswith(".")] if p.is_dir() else []
            return sorted(names, key=natural_key)
        except OSError as e:
            raise InputError(f"cannot list: {e.strerror}", source=str(p)) from e

    def read(self, rel: str) -> tuple[str, str, int | None] | None:
        p = self.root / rel
        if not p.is_file():
            return None
        try:
            data = p.read_bytes()
        except OSError:
            return None  # some counters refuse reads (EINVAL) on some firmware: treat as absent
        return decode_tool_output(data, source=str(p)).strip(), str(p), None

    def where(self, rel: str) -> tuple[str, int | None]:
        return str(self.root / rel), None


class _DumpFiles:
    def __init__(self, entries: dict[str, tuple[str, int]], source: str) -> None:
        self.entries = entries
        self.source = source

    def list(self, rel: str) -> list[str]:
        prefix = f"{rel}/" if rel else ""
        names = {k[len(prefix) :].split("/", 1)[0] for k in self.entries if k.startswith(prefix) and k != rel}
        return sorted(names, key=natural_key)

    def read(self, rel: str) -> tuple[str, str, int | None] | None:
        hit = self.entries.get(rel)
        return None if hit is None else (hit[0].strip(), self.source, hit[1])

    def where(self, rel: str) -> tuple[str, int | None]:
        """The last line under ``rel``: where a dump cut short stops describing it."""
        lines = [line for key, (_, line) in self.entries.items() if key.startswith(f"{rel}/")]
        return self.source, max(lines, default=None)


def _int(files: _Files, rel: str, base: int = 10) -> int | None:
    hit = files.read(rel)
    if hit is None:
        return None
    value, source, line = hit
    try:
        return int(value, base)
    except ValueError:
        raise ParseError(f"{rel}: {value!r} is not a number", source=source, line=line) from None


def _counters(files: _Files, rel: str) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for name in files.list(rel):
        n = _int(files, f"{rel}/{name}")
        if n is not None:
            out[name] = n
    return MappingProxyType(out)


def _required(files: _Files, base: str, name: str) -> tuple[str, str, int | None]:
    """A port file the kernel always provides; its absence means a cut copy or dump."""
    hit = files.read(f"{base}/{name}")
    if hit is None:
        source, line = files.where(base)
        raise ParseError(f"{base} has no '{name}' file (truncated copy?)", source=source, line=line)
    return hit


def _state(files: _Files, base: str, name: str) -> tuple[int, str]:
    value, source, line = _required(files, base, name)
    return parse_state_text(value, name, source=source, line=line)


def _port(files: _Files, dev: str, name: str) -> SysfsPort:
    base = f"{dev}/ports/{name}"
    if not is_decimal(name):
        raise ParseError(f"port directory {name!r} is not a number", source=base)
    state_code, state = _state(files, base, "state")
    phys_code, phys = _state(files, base, "phys_state")
    rate, rate_source, rate_line = _required(files, base, "rate")
    gbps, width, speed = parse_rate_text(rate, source=rate_source, line=rate_line)
    layer = _required(files, base, "link_layer")
    return SysfsPort(
        port=int(name),
        state=state,
        state_code=state_code,
        phys_state=phys,
        phys_state_code=phys_code,
        rate_gbps=gbps,
        width=width,
        speed=speed,
        link_layer=layer[0],
        lid=_int(files, f"{base}/lid", 16),
        sm_lid=_int(files, f"{base}/sm_lid", 16),
        counters=_counters(files, f"{base}/counters"),
        hw_counters=_counters(files, f"{base}/hw_counters"),
    )


def _device(files: _Files, name: str) -> SysfsDevice:
    kw: dict[str, str] = {}
    for key in _DEVICE_FILES:
        hit = files.read(f"{name}/{key}")
        if hit is None:
            continue
        value, source, line = hit
        if key.endswith("guid"):
            guid = normalise_guid(value)
            if guid is None:
                raise ParseError(f"{name}/{key}: {value!r} is not a GUID", source=source, line=line)
            value = guid
        kw[key] = value
    numa = _int(files, f"{name}/device/numa_node")
    ports = tuple(_port(files, name, p) for p in files.list(f"{name}/ports"))
    if not ports:
        source, line = files.where(name)
        raise ParseError(f"{name} has no ports/ directory (truncated copy?)", source=source, line=line)
    return SysfsDevice(
        name=name,
        ports=ports,
        node_guid=kw.get("node_guid", ""),
        sys_image_guid=kw.get("sys_image_guid", ""),
        node_desc=kw.get("node_desc", ""),
        node_type=kw.get("node_type", ""),
        hca_type=kw.get("hca_type", ""),
        board_id=kw.get("board_id", ""),
        fw_ver=kw.get("fw_ver", ""),
        hw_rev=kw.get("hw_rev", ""),
        numa_node=numa if numa is not None and numa >= 0 else None,
    )


def _devices(files: _Files) -> tuple[SysfsDevice, ...]:
    return tuple(_device(files, name) for name in files.list(""))


def read_sysfs_infiniband(root: str | Path) -> tuple[SysfsDevice, ...]:
    """Every device under ``root`` (a ``/sys/class/infiniband`` or a copy), in natural name order."""
    p = Path(root)
    if not p.is_dir():
        raise InputError("not a directory", source=str(p))
    return _devices(_DirFiles(p))


def parse_sysfs_dump(text: str, *, source: str = "<sysfs dump>") -> tuple[SysfsDevice, ...]:
    """Parse the ``./mlx5_0/ports/1/state:4: ACTIVE`` lines that ``grep -r .`` prints inside the tree."""
    entries: dict[str, tuple[str, int]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        path, sep, value = line.partition(":")
        if not line.startswith("./") or not sep or "/" not in path[2:]:
            raise ParseError(f"not a './device/file:value' line: {line[:60]!r}", source=source, line=no)
        entries[path[2:]] = (value, no)
    if not entries:
        raise ParseError("empty sysfs dump", source=source, line=None)
    return _devices(_DumpFiles(entries, source))


def _fmt_gbps(gbps: float) -> str:
    return str(int(gbps)) if gbps == int(gbps) else f"{gbps:g}"


def _port_files(port: SysfsPort) -> dict[str, str]:
    files: dict[str, str] = {}
    if port.state:
        files["state"] = f"{port.state_code}: {port.state}"
    if port.phys_state:
        files["phys_state"] = f"{port.phys_state_code}: {port.phys_state}"
    if port.width:
        # The kernel's format: "%d%s Gb/sec (%dX%s)", the speed with a leading space.
        files["rate"] = f"{_fmt_gbps(port.rate_gbps)} Gb/sec ({port.width}X{' ' + port.speed if port.speed else ''})"
    if port.link_layer:
        files["link_layer"] = port.link_layer
    if port.lid is not None:
        files["lid"] = f"0x{port.lid:x}"
    if port.sm_lid is not None:
        files["sm_lid"] = f"0x{port.sm_lid:x}"
    for directory, counters in (("counters", port.counters), ("hw_counters", port.hw_counters)):
        for name, n in counters.items():
            files[f"{directory}/{name}"] = str(n)
    return files


def write_sysfs_infiniband(
    root: str | Path, devices: Iterable[SysfsDevice], written: MutableMapping[str, str] | None = None
) -> None:
    """Lay ``devices`` out under ``root`` as the kernel does (one value per file, newline-terminated).

    Each file is written beside itself and renamed into place, so a reader in another process (the agent
    reading an emulated node) sees the old value or the new one, never an empty file. ``written`` (path under
    ``root`` -> value), kept by a caller that writes the same tree again and again (an emulated node, every sample),
    skips the files whose value it already wrote: an idle node rewrote its ~290 files per sample, 130 ms
    of renames per 0.2 s beat, and its beats fell seconds apart on a loaded machine.
    """
    base = Path(root)
    for dev in devices:
        files: dict[str, str] = {}
        for key in _DEVICE_FILES:
            value = getattr(dev, key)
            if value:
                files[key] = sysfs_guid(value) if key.endswith("guid") else value
        if dev.numa_node is not None:
            files["device/numa_node"] = str(dev.numa_node)
        for port in dev.ports:
            files.update({f"ports/{port.port}/{k}": v for k, v in _port_files(port).items()})
        for rel, value in files.items():
            key = f"{dev.name}/{rel}"
            if written is not None and written.get(key) == value:
                continue
            path = base / key
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(value + "\n", encoding="utf-8")
            os.replace(tmp, path)
            if written is not None:
                written[key] = value


def hcas_from_sysfs(devices: Iterable[SysfsDevice], host: str | None = None) -> tuple[Hca, ...]:
    """The fabric's ``Hca`` per device with an InfiniBand port (RoCE bonds are left out)."""
    out: list[Hca] = []
    for dev in devices:
        ib = [p for p in dev.ports if p.infiniband]
        if not ib:
            continue
        if not dev.node_guid:
            raise ParseError(f"{dev.name} has no node_guid file; an HCA needs its GUID", source=f"{dev.name}/node_guid")
        out.append(
            Hca(
                guid=dev.node_guid,
                name=dev.name,
                description=dev.node_desc,
                lid=ib[0].lid or 0,
                rate_gbps=ib[0].rate_gbps,
                host=host,
                link_layer="InfiniBand",
                numa_node=dev.numa_node if dev.numa_node is not None else -1,
            )
        )
    return tuple(out)
