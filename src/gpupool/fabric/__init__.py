"""The immutable InfiniBand GPU fabric: switches, tiers, rails, NVLink islands, links and fast queries.

May import: ``gpupool.domain``, the standard library, NumPy (and matplotlib, lazily, for pictures only).
Must not import: ``gpupool.cluster``, ``gpupool.scheduler``, ``gpupool.store``, any server or agent code.
"""

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.model import Domain, Gpu, Hca, Host, Link, Port, Switch, Tier

__all__ = ["Domain", "Fabric", "Gpu", "Hca", "Host", "Link", "Port", "Switch", "Tier"]
