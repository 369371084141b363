"""Who a workload runs as: the Unix user its tenant maps to on this node.

The mapping is the node's configuration: a file of ``tenant = "user"`` lines (TOML) for the tenants an admin
names, and for the others a documented pattern, ``<prefix><tenant>`` (``gpupool-acme``) when the tenant
name is already a valid user name, else ``<prefix-without-dash>_<hash>`` (``gpupool_3f2a...``): a plain
name never holds '_' after the prefix, so two tenants never share a user. The user must exist on the node,
or the agent creates it (``--create-users``: a system user with no home and no login shell). Root, and any
user whose primary or supplementary group is root's, is refused: no tenant runs with the node's keys.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import subprocess
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.domain.errors import InputError

USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # useradd's default NAME_REGEX, 32 characters at most
_PLAIN_TENANT = re.compile(r"[a-z0-9][a-z0-9-]*")
_MAX_USER = 32
DEFAULT_PREFIX = "gpupool-"
USERADD = ("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent")
USERADD_SHELL = ("--shell", "/usr/sbin/nologin")


@dataclass(frozen=True, slots=True)
class RunAs:
    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, as a login gives them (getgrouplist)


def load_user_map(path: Path) -> dict[str, str]:
    """``tenant = "user"`` pairs from a TOML file; each user name checked."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=str(path)) from e
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"not TOML: {e}", source=str(path)) from e
    out: dict[str, str] = {}
    for tenant, user in raw.items():
        if not isinstance(user, str) or not USER_NAME.fullmatch(user):
            raise InputError(f"{tenant}: {user!r} is not a Unix user name", source=str(path))
        out[tenant] = user
    return out


def _run_useradd(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode not in (0, 9):  # 9: it exists (another agent on this host made it meanwhile)
        raise InputError(f"{' '.join(argv)} failed: {done.stderr.strip()}", source="--create-users")


@dataclass(frozen=True)
class UserMap:
    """Tenant -> Unix user on this node. ``create``: make a missing user with ``useradd`` (root only)."""

    users: Mapping[str, str] = field(default_factory=dict)
    prefix: str = DEFAULT_PREFIX
    create: bool = False
    useradd: Callable[[Sequence[str]], None] = _run_useradd

    def __post_init__(self) -> None:
        stem = self.prefix.rstrip("-")
        if not stem or not USER_NAME.fullmatch(self.prefix) or len(stem) > _MAX_USER - 17:
            raise InputError(
                f"{self.prefix!r} must start a Unix user name and leave room for a 16-character hash",
                source="--user-prefix",
            )

    def name_for(self, tenant: str) -> str:
        mapped = self.users.get(tenant)
        if mapped is not None:
            return mapped
        if _PLAIN_TENANT.fullmatch(tenant) and len(self.prefix) + len(tenant) <= _MAX_USER:
            return self.prefix + tenant
        stem = self.prefix.rstrip("-") + "_"
        return stem + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[: _MAX_USER - len(stem)]

    def resolve(self, tenant: str) -> RunAs:
        """The user ``tenant``'s jobs run as; InputError (the job's failure reason) when there is none."""
        if not tenant:
            raise InputError("the launch names no tenant, so no user to run it as", source="tenant")
        name = self.name_for(tenant)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            if not self.create:
                raise InputError(
                    f"no Unix user {name!r} for tenant {tenant!r} on this node (create it, map the tenant in the"
                    " agent's --user-map, or start the agent with --create-users)",
                    source="tenant",
                ) from None
            self.useradd([*USERADD, *USERADD_SHELL, name])
            pw = pwd.getpwnam(name)
        groups = tuple(g for g in os.getgrouplist(name, pw.pw_gid) if g != pw.pw_gid)
        if pw.pw_uid == 0 or pw.pw_gid == 0 or 0 in groups:
            raise InputError(f"user {name!r} is root or in root's group: refused for tenant jobs", source="tenant")
        return RunAs(name, pw.pw_uid, pw.pw_gid, groups)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
