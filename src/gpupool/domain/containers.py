"""A job's container: its image, bind mounts and working directory, and the rules they must pass.

Pure: the API checks a submitted job with ``check_container`` and the agent checks again before it builds a
container runtime's command line (``agent/containers.py``). The rules are those every runtime gpupool drives
can take as given: paths are absolute and normal (no ``..``), and hold neither ``:`` nor ``,`` (the separators
of ``--volume SRC:DST:ro``, Apptainer's ``--bind`` and enroot's ``--mount``); environment values hold no
newline (Podman reads them from an ``--env-file``, one variable a line, so they stay off its command line).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import InputError

MAX_MOUNTS = 64
MAX_PATH_BYTES = 4096
MAX_IMAGE_BYTES = 512
# A registry reference (registry/name:tag@sha256:...), a local image name, or a file (an Apptainer .sif, an
# enroot .sqsh): no whitespace, no option look-alike.
_IMAGE = re.compile(r"[A-Za-z0-9./_][A-Za-z0-9./_:@+=-]*")


@dataclass(frozen=True, slots=True)
class Mount:
    """A host path bound into the container: ``source`` on the node at ``target`` inside."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Container:
    image: str
    mounts: tuple[Mount, ...] = ()
    workdir: str = ""  # inside the container; "" -> the rank's own working directory, mounted at its path


def _path(path: str, where: str) -> str:
    if not path.startswith("/"):
        raise InputError(f"{path!r} is not an absolute path", source=where)
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InputError(f"longer than {MAX_PATH_BYTES} bytes", source=where)
    bad = next((c for c in path if c in ":,\n\x00"), None)
    if bad is not None:
        raise InputError(f"{path!r} holds {bad!r}, which container runtimes take as a separator", source=where)
    if posixpath.normpath(path) != path.rstrip("/") or path.rstrip("/") == "":
        raise InputError(f"{path!r} is not a normal path (no '.', '..', '//', and not '/')", source=where)
    return path


def check_container(c: Container, env: Mapping[str, str] | None = None, field: str = "") -> None:
    """Raise InputError naming the field (``image``, ``mounts[i].source``, ``workdir``, ``env.KEY``)."""
    at = f"{field}." if field else ""
    if len(c.image.encode("utf-8", "surrogatepass")) > MAX_IMAGE_BYTES or not _IMAGE.fullmatch(c.image):
        raise InputError(
            f"{c.image[:64]!r} is not an image reference (letters, digits and ./_:@+=-, not starting with"
            f" '-', at most {MAX_IMAGE_BYTES} bytes)",
            source=f"{at}image",
        )
    if len(c.mounts) > MAX_MOUNTS:
        raise InputError(f"{len(c.mounts)} mounts; at most {MAX_MOUNTS}", source=f"{at}mounts")
    seen: set[str] = set()
    for i, m in enumerate(c.mounts):
        _path(m.source, f"{at}mounts[{i}].source")
        target = _path(m.target, f"{at}mounts[{i}].target").rstrip("/")
        if target in seen:
            raise InputError(f"{target!r} is the target of an earlier mount", source=f"{at}mounts[{i}].target")
        seen.add(target)
    if c.workdir:
        _path(c.workdir, f"{at}workdir")
    check_container_env(env or {})


def check_container_env(env: Mapping[str, str], field: str = "env") -> None:
    for key, value in env.items():
        if "\n" in value or "\r" in value:
            raise InputError(
                "holds a line break, which cannot reach a container's environment", source=f"{field}.{key}"
            )


def container_from_json(raw: Mapping[str, object], where: str) -> Container:
    """The stored (JSON) form back; InputError naming ``where`` when it is not one."""
    try:
        mounts = raw.get("mounts", [])
        assert isinstance(mounts, Sequence)
        return Container(
            str(raw["image"]),
            tuple(Mount(str(m["source"]), str(m["target"]), bool(m.get("read_only", False))) for m in mounts),
            str(raw.get("workdir", "")),
        )
    except (KeyError, TypeError, AssertionError, AttributeError) as e:
        raise InputError(f"not a container description: {e!r}", source=where) from None


def container_to_json(c: Container) -> dict[str, object]:
    return {
        "image": c.image,
        "mounts": [{"source": m.source, "target": m.target, "read_only": m.read_only} for m in c.mounts],
        "workdir": c.workdir,
    }
