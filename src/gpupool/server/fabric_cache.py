"""The current scheduling fabric, rebuilt only when the stored fabric or the set of registered agents changes."""

from __future__ import annotations

import threading

from gpupool.fabric.fabric import Fabric
from gpupool.server.topology import pick_fabric
from gpupool.store import Store
from gpupool.store.server_ops import ServerOps, topology_key


class FabricCache:
    def __init__(self, store: Store, ops: ServerOps) -> None:
        self._store = store
        self._ops = ops
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._fabric: Fabric | None = None

    def current(self) -> tuple[Fabric | None, tuple[object, ...]]:
        """The fabric and the key it was built for (a new key means a new fabric)."""
        key = topology_key(self._store)
        with self._lock:
            if key != self._key:
                stored = self._store.get_fabric()
                self._fabric = pick_fabric(None if stored is None else stored.fabric, self._ops.agents())
                self._key = key
            return self._fabric, key
