"""Live cluster state: the one reducer ``ClusterState.apply(event)``, immutable snapshots, health rules.
May import: ``gpupool.fabric``, ``gpupool.domain``, the standard library (no clock, random or I/O), NumPy.
Must not import: ``gpupool.scheduler``, ``store``, ``server``, ``sim``, ``agent``; time, random, uuid, asyncio, os.
"""

from gpupool.cluster.health import HealthRules
from gpupool.cluster.index import FabricIndex, Level
from gpupool.cluster.snapshot import ClusterSnapshot, RunningJob
from gpupool.cluster.state import ClusterState

__all__ = ["ClusterSnapshot", "ClusterState", "FabricIndex", "HealthRules", "Level", "RunningJob"]
