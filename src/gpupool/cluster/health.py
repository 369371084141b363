"""Health rules live in the domain (``gpupool.domain.health``) so the agent grades with the very same
thresholds; the cluster state keeps this name for them."""

from gpupool.domain.health import HealthRules

__all__ = ["HealthRules"]
