"""Kernel-log XID reader against gpud's recorded dmesg with XID 119, and the file's life: appends, rotation."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpupool.agent.xid_log import KernelLogXidReader, parse_xid_line, pci_key
from gpupool.domain.errors import ParseError

DMESG = Path(__file__).resolve().parents[2] / "data" / "xid-dmesg" / "dmesg-with-xid-119-gpud.txt"
BUS = {"0000:9b:00": 4}


def copy_log(tmp_path: Path) -> Path:
    dst = tmp_path / "kern.log"
    shutil.copyfile(DMESG, dst)
    os.chmod(dst, 0o644)
    return dst


def test_pci_key_spellings_agree() -> None:
    assert pci_key("00000000:9B:00.0") == pci_key("PCI:0000:9b:00") == pci_key("0000:9b:00.0") == "0000:9b:00"
    with pytest.raises(ParseError):
        pci_key("not-a-bus")


def test_reads_every_xid_of_the_recorded_log_once() -> None:
    r = KernelLogXidReader(DMESG, BUS)
    events = r.read()
    # The log has five "NVRM: Xid" lines, all 119 on the GPU at 9b:00; rate-limit notes are not events.
    assert [e.code for e in events] == [119] * 5
    assert {e.gpu_index for e in events} == {4}
    first = events[0]
    assert (first.pci_bus_id, first.pid, first.process) == ("0000:9b:00", 2024380, "nvidia-smi")
    assert first.stamp == "[Sun Feb 23 16:24:18 2025]"
    assert first.message.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert [e.process for e in events[3:]] == ["cache_mgr_main", "gpud"]
    assert r.read() == ()
    assert r.errors == ()


def test_unknown_bus_keeps_the_event_without_an_index() -> None:
    (ev, *_) = KernelLogXidReader(DMESG, {}).read()
    assert ev.gpu_index is None and ev.code == 119


def test_line_variants() -> None:
    old = parse_xid_line("[ 12.5] NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.", {"0000:3b:00": 2})
    assert old is not None and (old.code, old.gpu_index, old.pid, old.message) == (
        79,
        2,
        None,
        "GPU has fallen off the bus.",
    )
    unknown = parse_xid_line(
        "Feb 23 16:24:18 node7 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, DBE", {}
    )
    assert unknown is not None and (unknown.code, unknown.pid, unknown.process, unknown.message) == (
        48,
        None,
        None,
        "DBE",
    )
    assert unknown.stamp == "Feb 23 16:24:18 node7 kernel:"
    assert parse_xid_line("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad", {}) is None
    with pytest.raises(ParseError, match="without an XID number") as e:
        parse_xid_line("NVRM: Xid (PCI:0000:18:00): abc, pid=1", {}, source="kern.log", line_no=7)
    assert (e.value.source, e.value.line) == ("kern.log", 7)


def test_appended_lines_are_read_once_and_a_partial_line_waits(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS)
    assert len(r.read()) == 5
    with log.open("a") as f:
        f.write("[Sun Feb 23 17:00:00 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fal")
    assert r.read() == ()  # no newline yet: the driver is still writing it
    with log.open("a") as f:
        f.write("len off the bus.\n")
    (ev,) = r.read()
    assert (ev.code, ev.message) == (79, "GPU has fallen off the bus.")
    assert r.read() == ()


def test_a_malformed_xid_line_is_skipped_and_reported_with_its_line(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS)
    r.read()
    with log.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:9b:00): ??\n[1] NVRM: Xid (PCI:0000:9b:00): 74, pid=9, name=a, NVLink\n")
    (ev,) = r.read()
    assert ev.code == 74
    (err,) = r.errors
    assert err.line == len(DMESG.read_text().splitlines()) + 1 and err.source == str(log)


def test_truncation_starts_again_from_the_top(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS)
    assert len(r.read()) == 5
    log.write_text("[2] NVRM: Xid (PCI:0000:9b:00): 94, pid=3, name=p, Contained\n")  # copytruncate + new line
    assert [e.code for e in r.read()] == [94]


def test_rotation_reads_the_new_file_from_its_start(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS)
    r.read()
    log.rename(tmp_path / "kern.log.1")
    assert r.read() == ()  # not recreated yet
    # A new file as long as the old one, so only the inode (not the size) tells it apart.
    text = DMESG.read_text().replace("): 119,", "): 120,")
    log.write_text(text)
    assert [e.code for e in r.read()] == [120] * 5


def test_rotation_by_rename_and_create_is_noticed_by_inode(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS)
    r.read()
    new = tmp_path / "new.log"
    new.write_text(DMESG.read_text() + "[3] NVRM: Xid (PCI:0000:9b:00): 63, pid=1, name=a, remap\n")
    os.replace(new, log)  # same name, same first bytes, longer: only the inode changed
    assert [e.code for e in r.read()] == [119] * 5 + [63]


def test_from_end_skips_what_an_earlier_boot_logged(tmp_path: Path) -> None:
    log = copy_log(tmp_path)
    r = KernelLogXidReader(log, BUS, from_end=True)
    assert r.read() == ()
    with log.open("a") as f:
        f.write("[4] NVRM: Xid (PCI:0000:9b:00): 95, pid=1, name=a, Uncontained\n")
    assert [e.code for e in r.read()] == [95]
