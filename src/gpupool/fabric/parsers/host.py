"""One ``Host`` (and its InfiniBand ``Hca`` values) from the outputs of the tools a node agent runs.

``nvidia-smi -q -x`` says what the GPUs are; ``nvidia-smi topo -m`` says which share NVLink, their NUMA node
and which NIC sits closest to each; ``ibstat`` names the HCAs and their GUIDs. Each output is optional: a host
without InfiniBand has no ``ibstat``, a host whose topology is unknown gets no NVLink claims.
"""

from __future__ import annotations

from gpupool.domain.errors import InputError
from gpupool.fabric.model import Gpu, Hca, Host
from gpupool.fabric.parsers._text import natural_key
from gpupool.fabric.parsers.ibstat import hcas_from_ibstat, parse_ibstat
from gpupool.fabric.parsers.nvidia_smi import SmiReport, parse_query_text, parse_query_xml, parse_topo_matrix
from gpupool.fabric.parsers.nvidia_smi_topo import TopoMatrix

# One NVLink (generations 2-4: V100, A100, H100) carries 25 GB/s each way = 200 Gb/s.
NVLINK_LINK_GBPS = 200.0


def gpus_from(report: SmiReport | None, matrix: TopoMatrix | None, *, source: str) -> tuple[Gpu, ...]:
    """GPUs of a query report, with NVLink islands and NUMA nodes from ``topo -m`` when there is one.

    Without a matrix every GPU is its own NVLink island, since nothing shows they share one; a matrix that
    counts other GPUs than the report is an ``InputError``.
    """
    if report is None:
        return ()
    if matrix is not None and len(matrix.gpus) != len(report.gpus):
        raise InputError(
            f"nvidia-smi -q -x lists {len(report.gpus)} GPUs but topo -m shows {len(matrix.gpus)}", source=source
        )
    islands = matrix.nvlink_islands() if matrix is not None else tuple(range(len(report.gpus)))
    return tuple(
        g.to_gpu(i, nvlink_island=islands[i], numa_node=matrix.numa[matrix.gpus[i]] if matrix is not None else None)
        for i, g in enumerate(report.gpus)
    )


def host_from_tools(
    name: str,
    *,
    smi_xml: str | None,
    topo: str | None,
    ibstat: str | None,
    smi_text: str | None = None,
    nvlink_link_gbps: float = NVLINK_LINK_GBPS,
) -> tuple[Host, tuple[Hca, ...]]:
    """Combine the three outputs (any may be None) into a ``Host`` and its InfiniBand HCAs.

    ``smi_text`` (plain ``nvidia-smi -q``) stands in for ``smi_xml`` when only that was captured.
    Without ``topo`` every GPU is its own NVLink island, since nothing shows they share one. ``gpu_hca``
    maps each GPU to its closest InfiniBand HCA by ``topo``'s NIC affinity; it stays empty (rail order)
    when any GPU has no InfiniBand NIC in the matrix. ``nvlink_gbps`` is the widest GPU-to-GPU NV# bond
    times ``nvlink_link_gbps`` (pass 400 for NVLink 5, Blackwell).
    """
    report = None
    if smi_xml is not None:
        report = parse_query_xml(smi_xml, source=f"{name}: nvidia-smi -q -x")
    elif smi_text is not None:
        report = parse_query_text(smi_text, source=f"{name}: nvidia-smi -q")
    matrix = parse_topo_matrix(topo, source=f"{name}: nvidia-smi topo -m") if topo is not None else None
    cas = parse_ibstat(ibstat, source=f"{name}: ibstat") if ibstat is not None else ()
    hcas = tuple(sorted(hcas_from_ibstat(cas, host=name), key=lambda h: natural_key(h.name)))

    gpus = gpus_from(report, matrix, source=name)

    gpu_hca: tuple[int, ...] = ()
    if matrix is not None and hcas and len(matrix.gpus) == len(gpus):
        order = [h.name for h in hcas]
        closest = matrix.gpu_nic(among=set(order))
        if all(k is not None for k in closest):
            gpu_hca = tuple(order.index(matrix.nics[k]) for k in closest if k is not None)

    host = Host(
        name=name,
        gpus=gpus,
        hcas=tuple(h.guid for h in hcas),
        nvlink_gbps=(matrix.nvlink_max() * nvlink_link_gbps) if matrix is not None else 0.0,
        gpu_hca=gpu_hca,
    )
    return host, hcas
