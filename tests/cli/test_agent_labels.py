"""``gpupool agent --label k=v --labels-file F``: the file's labels, the flags over them, errors naming where."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.cli.agent import node_labels
from gpupool.domain.errors import InputError


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    f = tmp_path / "labels"
    f.write_text("# this rack\nzone=a\nrack = r7\n")
    assert node_labels(["zone=b", "disk=nvme"], f) == {"zone": "b", "rack": "r7", "disk": "nvme"}
    assert node_labels([], None) == {}


def test_bad_labels_name_the_flag_or_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--label"):
        node_labels(["bad key=1"], None)
    with pytest.raises(InputError, match="does not remove"):
        node_labels(["zone-"], None)
    f = tmp_path / "labels"
    f.write_text("zone=a\njunk\n")
    with pytest.raises(InputError, match=f"{f}:2"):
        node_labels([], f)
    with pytest.raises(InputError, match="cannot read"):
        node_labels([], tmp_path / "missing")
