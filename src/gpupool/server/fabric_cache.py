"""The current scheduling fabric: the imported one, parsed once per stored version, else the synthetic one.

The synthetic fabric (``topology``) is rebuilt when the set of registered agents changes, from inventories
each validated once per registration, so a burst of registrations costs one rebuild per reader's pass (the
loop's cycle), not one per registration; a registration itself never builds a fabric (its derived labels come
from the imported fabric only, see ``labels``).
"""

from __future__ import annotations

import threading

from gpupool.fabric.fabric import Fabric
from gpupool.schemas.agent import RegisterRequest
from gpupool.server.topology import synthetic_fabric
from gpupool.store import Store
from gpupool.store.server_ops import ServerOps, fabric_version, topology_key


class FabricCache:
    def __init__(self, store: Store, ops: ServerOps) -> None:
        self._store = store
        self._ops = ops
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # one build at a time: readers arriving meanwhile take its result
        self._key: tuple[object, ...] | None = None
        self._fabric: Fabric | None = None
        self._imported: tuple[int | None, Fabric | None] = (None, None)  # (stored version, parsed)
        self._inventories: dict[str, tuple[float, RegisterRequest]] = {}  # host -> (registered_s, inventory)
        # What it cost so far, for tests to hold: stored fabrics parsed, agents' inventories validated.
        self.parsed = 0
        self.validated = 0

    def imported(self) -> tuple[Fabric | None, int | None]:
        """The fabric an operator imported and its version ((None, None) when none): one cheap read, and a
        parse only when the version changed."""
        return self._parsed(fabric_version(self._store))

    def current(self) -> tuple[Fabric | None, tuple[object, ...]]:
        """The fabric and the key it was built for (a new key means a new fabric)."""
        key = topology_key(self._store)
        with self._lock:
            if key == self._key:
                return self._fabric, key
        with self._build_lock:
            with self._lock:
                if key == self._key:
                    return self._fabric, key
            version = key[0]
            fabric, _ = self._parsed(version if isinstance(version, int) else None)
            if fabric is None:
                fabric = synthetic_fabric(self._registered())
            with self._lock:
                self._key, self._fabric = key, fabric
            return fabric, key

    def _parsed(self, version: int | None) -> tuple[Fabric | None, int | None]:
        with self._lock:
            if version == self._imported[0]:
                return self._imported[1], version
        stored = None if version is None else self._store.get_fabric()
        got = (None, None) if stored is None else (stored.version, stored.fabric)
        self.parsed += stored is not None
        with self._lock:
            self._imported = got
        return got[1], got[0]

    def _registered(self) -> list[RegisterRequest]:
        """Every registered agent's inventory, validated once per registration."""
        kept: dict[str, tuple[float, RegisterRequest]] = {}
        for a in self._ops.agents():
            old = self._inventories.get(a.host)
            if old is not None and old[0] == a.registered_s:
                kept[a.host] = old
            else:
                kept[a.host] = (a.registered_s, RegisterRequest.model_validate(a.inventory))
                self.validated += 1
        self._inventories = kept
        return [inv for _, inv in kept.values()]
