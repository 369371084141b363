"""Where a command will write, checked before it does any work: a bad path is one line naming the option, and
nothing is written (no half-made folder, no output of a long run thrown away at its end)."""

from __future__ import annotations

import os
from pathlib import Path

from gpupool.domain.errors import InputError


def _existing_parent(path: Path) -> Path:
    """The nearest ancestor of ``path`` that exists (``path``'s own folder when it does)."""
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def _writable_folder(folder: Path, path: Path, option: str) -> None:
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder, so {path} cannot be written", source=option)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"the folder {folder} is not writable", source=option)


def output_file(path: Path, option: str, *, make_folder: bool = False) -> Path:
    """``path`` if a file can be written there: its folder exists (or ``make_folder``: its nearest existing
    ancestor is a folder one may write in) and the path is not itself a folder."""
    if path.is_dir():
        raise InputError(f"{path} is a folder; give a file name", source=option)
    folder = path.absolute().parent
    if not folder.exists() and not make_folder:
        raise InputError(f"the folder {folder} does not exist (create it first)", source=option)
    _writable_folder(_existing_parent(path), path, option)
    return path


def output_folder(path: Path, option: str) -> Path:
    """``path`` if a command may fill it with files: a folder already, or a name it can create (every
    missing ancestor is made, as ``mkdir -p``), never an existing file."""
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{path} exists and is not a folder", source=option)
        _writable_folder(path, path, option)
        return path
    _writable_folder(_existing_parent(path), path, option)
    return path
