"""A user's file read as text (job files, admin files, batch scripts, calendars): one that is not UTF-8,
missing or unreadable is a ParseError naming the file and what it was meant to be."""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.errors import ParseError


def read_text(path: str | Path, what: str) -> str:
    """``path``'s text; ``what`` names the file in the error ("the job file")."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"the {what} is not UTF-8 text (byte {e.start})", source=str(path)) from None
    except OSError as e:
        raise ParseError(f"cannot read the {what}: {e.strerror}", source=str(path)) from None
