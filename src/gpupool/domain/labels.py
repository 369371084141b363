"""Node labels: what a key and a value may be, the ``k=v`` / ``k-`` words that set and remove them, and the
keys gpupool derives itself.

Keys look like Kubernetes' (an optional ``prefix/`` and a name of letters, digits, ``-``, ``_`` and ``.``, at
most 253 characters in all); values are any printable text up to 256 characters (a GPU model has spaces). A
node's labels come from two owners kept apart: its agent (``gpupool agent --label``, a labels file, and the
derived keys below, written at every registration) and admins (``gpupool label``), whose value wins for a key
both set; an admin label survives the agent registering again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gpupool.domain.errors import InputError

# Derived at registration from the agent's inventory and the fabric (``gpupool.server.labels``).
GPU_MODEL = "gpupool/gpu-model"
LEAF = "gpupool/leaf"  # only for a host cabled to one leaf (single-homed); a rail-optimised host has one per rail
SU = "gpupool/su"  # the scalable unit, as the fabric picture names it: su01, su02, ...
# The node's container runtime (podman, apptainer, enroot), and "yes" on every node that has one: a job with
# an image is placed only where gpupool/containers=yes (or where its own gpupool/container-runtime says).
CONTAINER_RUNTIME = "gpupool/container-runtime"
CONTAINERS = "gpupool/containers"
RAILS = "gpupool/rails"  # how many rails (leaves of distinct rail rank) the host's HCAs reach
# NVIDIA Topograph's keys, as ``gpupool fabric export labels`` writes them: tier 0 (``leaf``) is a single-homed
# host's leaf or a rail-optimised host's scalable unit; ``spine`` and ``core`` name its spine group and core
# component by their first switch; ``accelerator`` a multi-node NVLink domain.
TOPOGRAPH_ACCELERATOR = "network.topology.nvidia.com/accelerator"
TOPOGRAPH_LEAF = "network.topology.nvidia.com/leaf"
TOPOGRAPH_SPINE = "network.topology.nvidia.com/spine"
TOPOGRAPH_CORE = "network.topology.nvidia.com/core"

_KEY = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
MAX_KEY = 253
MAX_VALUE = 256


def check_label(key: str, value: str, source: str) -> None:
    """Raise ``InputError`` naming ``source`` when ``key`` or ``value`` cannot be a label."""
    if len(key) > MAX_KEY or not _KEY.fullmatch(key):
        raise InputError(
            f"label key {key!r} must be [prefix/]name of letters, digits, '-', '_' and '.' "
            f"(starting and ending with a letter or digit, at most {MAX_KEY} characters)",
            source=source,
        )
    if len(value) > MAX_VALUE or not value.isprintable():
        raise InputError(
            f"label {key}: the value must be printable text of at most {MAX_VALUE} characters", source=source
        )


def check_labels(labels: Mapping[str, str], source: str) -> dict[str, str]:
    for k, v in labels.items():
        check_label(k, v, source)
    return dict(labels)


def parse_assignments(words: Sequence[str], source: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """``key=value`` words set labels, ``key-`` words remove them: ``({key: value}, (removed keys))``."""
    sets: dict[str, str] = {}
    removed: list[str] = []
    for word in words:
        if "=" in word:
            key, value = word.split("=", 1)
            check_label(key, value, source)
            sets[key] = value
        elif word.endswith("-") and len(word) > 1:
            check_label(word[:-1], "", source)
            removed.append(word[:-1])
        else:
            raise InputError(f"{word!r} is neither key=value (set) nor key- (remove)", source=source)
    both = sorted(set(sets) & set(removed))
    if both:
        raise InputError(f"label {both[0]} is both set and removed", source=source)
    return sets, tuple(removed)


def parse_labels_file(text: str, source: str) -> dict[str, str]:
    """One ``key=value`` per line; blank lines and lines starting with ``#`` are skipped."""
    out: dict[str, str] = {}
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise InputError(f"expected key=value, got {line!r}", source=source, line=no)
        key, value = (part.strip() for part in line.split("=", 1))
        try:
            check_label(key, value, source)
        except InputError as e:
            raise InputError(e.reason, source=source, line=no) from None
        if key in out:
            raise InputError(f"label {key} is set twice", source=source, line=no)
        out[key] = value
    return out
