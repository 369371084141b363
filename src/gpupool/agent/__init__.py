"""The node agent: probes GPUs and HCAs, launches and stops workloads, reports to the server.
May import: gpupool.domain, gpupool.fabric, gpupool.schemas (the agent protocol), stdlib, nvidia-ml-py, httpx.
Must not import: server, store, scheduler, sim.
"""

from gpupool.agent.emulated import EmulatedNode
from gpupool.agent.gpu import FileGpuProbe, GpuInventory, GpuProbe
from gpupool.agent.health import GpuHealth, NodeHealth, PortHealth, assess_node
from gpupool.agent.ib import PortRates, PortSample, SysfsIbProbe, port_rates
from gpupool.agent.runtime import WorkloadHandle, WorkloadRuntime, WorkloadState, WorkloadStatus
from gpupool.agent.xid_log import KernelLogXidReader, XidEvent, parse_xid_line, pci_key
from gpupool.domain.workload import workload_env

# NvmlGpuProbe lives in gpupool.agent.nvml: importing it needs nvidia-ml-py, the rest of the agent does not.
__all__ = [
    "EmulatedNode",
    "FileGpuProbe",
    "GpuHealth",
    "GpuInventory",
    "GpuProbe",
    "KernelLogXidReader",
    "NodeHealth",
    "PortHealth",
    "PortRates",
    "PortSample",
    "SysfsIbProbe",
    "WorkloadHandle",
    "WorkloadRuntime",
    "WorkloadState",
    "WorkloadStatus",
    "XidEvent",
    "assess_node",
    "parse_xid_line",
    "pci_key",
    "port_rates",
    "workload_env",
]
