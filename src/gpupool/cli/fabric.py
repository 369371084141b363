"""``gpupool fabric``: import, generate, show, export and draw InfiniBand GPU fabrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpupool.cli.paths import output_file
from gpupool.domain.errors import InputError
from gpupool.fabric import Fabric, Tier, generators, jsonio
from gpupool.fabric.diff import diff_fabrics
from gpupool.fabric.export.ibnetdiscover import to_ibnetdiscover
from gpupool.fabric.export.nccl import nccl_topology_env
from gpupool.fabric.export.slurm import topology_block, topology_conf
from gpupool.fabric.export.topograph import node_labels_json, node_labels_kubectl
from gpupool.fabric.merge import KNOWN_GPUS, GpuDefaults, merge_gpus, read_inventories, require_gpus
from gpupool.fabric.parsers.attribution import NameSources
from gpupool.fabric.parsers.iblinkinfo import read_iblinkinfo
from gpupool.fabric.parsers.ibnetdiscover import IbImport, read_ibnetdiscover
from gpupool.fabric.parsers.lst import read_lst
from gpupool.fabric.parsers.nodemap import read_host_map, read_node_name_map
from gpupool.fabric.parsers.topograph import LABEL_STYLES, read_node_labels, read_slurm_fabric
from gpupool.fabric.summary import summarize

app = typer.Typer(help="Discover, generate, inspect and export InfiniBand GPU fabrics.", no_args_is_help=True)
import_app = typer.Typer(help="Import a fabric from a real tool's output.", no_args_is_help=True)
generate_app = typer.Typer(help="Generate a fabric from a reference design.", no_args_is_help=True)
export_app = typer.Typer(help="Export a fabric for other tools.", no_args_is_help=True)
app.add_typer(import_app, name="import")
app.add_typer(generate_app, name="generate")
app.add_typer(export_app, name="export")

Output = Annotated[
    Path,
    typer.Option("-o", "--output", help="Where to write the fabric JSON.", callback=lambda p: output_file(p, "-o")),
]
# The largest generators' arguments within generators.MAX_HOSTS (31 hosts in one SU, k^3/4 in a fat-tree).
MAX_SUS = (generators.MAX_HOSTS + 1) // generators.SUPERPOD_NODES_PER_SU
MAX_K = 50
SERVERS = {"dgx-h100": generators.DGX_H100, "pcie-l40s": generators.ServerSpec.pcie()}
ServerOpt = Annotated[str, typer.Option("--server", help=f"Server model: {', '.join(SERVERS)}.")]


_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _leaf_name(fabric: Fabric, hca_guid: str) -> str:
    leaf = int(fabric.hca_leaf[fabric.hca_index(hca_guid)])
    return fabric.switches[leaf].name if leaf >= 0 else ""


def _server(name: str) -> generators.ServerSpec:
    if name not in SERVERS:
        raise typer.BadParameter(f"unknown server {name!r}; choose one of {', '.join(SERVERS)}", param_hint="--server")
    return SERVERS[name]


def _save(fabric: Fabric, output: Path, extra: dict[str, Any] | None = None) -> None:
    jsonio.save(fabric, output)
    s = summarize(fabric)
    if extra:
        s.update(extra)
    _err.print(
        f"wrote {output}: {s['hosts']} hosts, {s['gpus']} GPUs, {s['hcas']} HCAs "
        f"({s['unattributed_hcas']} unattributed), {s['switches']['leaf']} leaves, {s['switches']['spine']} spines, "
        f"{s['switches']['core']} cores, {s['rails']} rails, {s['scalable_units']} scalable units"
    )


NodeNameMap = Annotated[
    Path | None,
    typer.Option(
        "--node-name-map",
        help='opensm node-name map (GUID "name" per line) or ibhosts/ibswitches output; a bare name is a host.',
    ),
]
HostMap = Annotated[
    Path | None,
    typer.Option("--host-map", help="GUID -> host: 'GUID host' lines (/etc/hosts-style) or CSV GUID,host."),
]
StripDomain = Annotated[
    str,
    typer.Option("--strip-domain", help="Cut this domain off host names (cluster.local), or '*' for any domain."),
]
AllowUnknown = Annotated[
    bool,
    typer.Option("--allow-unknown-guids", help="A site-wide map may name GUIDs this dump lacks (warn, not fail)."),
]


def _names(node_name_map: Path | None, host_map: Path | None, strip_domain: str) -> NameSources:
    return NameSources(
        node_names=read_node_name_map(node_name_map) if node_name_map is not None else {},
        host_map=read_host_map(host_map) if host_map is not None else {},
        strip_domain=strip_domain,
    )


def _report(result: IbImport, output: Path) -> None:
    _save(result.fabric, output)
    for w in result.warnings:
        _err.print(f"warning: {w}", markup=False)
    _err.print(
        f"{result.aggregation_nodes} SHARP aggregation nodes left out; {result.inferred_hcas} HCAs attributed "
        f"by port position; {result.unattributed_hcas} HCAs unattributed"
        + (f" (gpupool fabric show {output} --unattributed says why)" if result.unattributed_hcas else "")
    )


@import_app.command("ibnetdiscover")
def import_ibnetdiscover(
    file: Annotated[Path, typer.Argument(help="ibnetdiscover output (default, -g, -p or --node-name-map).")],
    output: Output,
    node_name_map: NodeNameMap = None,
    host_map: HostMap = None,
    strip_domain: StripDomain = "",
    allow_unknown_guids: AllowUnknown = False,
) -> None:
    """Import `ibnetdiscover` output in any of its formats."""
    names = _names(node_name_map, host_map, strip_domain)
    _report(read_ibnetdiscover(file, names=names, allow_unknown_guids=allow_unknown_guids), output)


@import_app.command("iblinkinfo")
def import_iblinkinfo(
    file: Annotated[Path, typer.Argument(help="iblinkinfo output (default or -l).")],
    output: Output,
    node_name_map: NodeNameMap = None,
    host_map: HostMap = None,
    strip_domain: StripDomain = "",
    allow_unknown_guids: AllowUnknown = False,
) -> None:
    """Import `iblinkinfo` (or `iblinkinfo -l`) output."""
    names = _names(node_name_map, host_map, strip_domain)
    _report(read_iblinkinfo(file, names=names, allow_unknown_guids=allow_unknown_guids), output)


@import_app.command("lst")
def import_lst(
    file: Annotated[Path, typer.Argument(help="ibdiagnet2.lst or opensm-subnet.lst.")],
    output: Output,
    node_name_map: NodeNameMap = None,
    host_map: HostMap = None,
    strip_domain: StripDomain = "",
    allow_unknown_guids: AllowUnknown = False,
) -> None:
    """Import an LST link list (ibdiagnet's `ibdiagnet2.lst`, opensm's `opensm-subnet.lst`)."""
    names = _names(node_name_map, host_map, strip_domain)
    _report(read_lst(file, names=names, allow_unknown_guids=allow_unknown_guids), output)


@import_app.command("slurm")
def import_slurm(
    file: Annotated[Path, typer.Argument(help="Slurm topology.conf, tree or block plugin (gpupool's, Topograph's).")],
    output: Output,
    nvlink_blocks: Annotated[
        bool, typer.Option("--nvlink-blocks", help="Blocks are multi-node NVLink domains (Topograph's GB200 racks).")
    ] = False,
) -> None:
    """Import a Slurm `topology.conf` (tree or block form)."""
    _save(read_slurm_fabric(file, nvlink_blocks=nvlink_blocks), output)


@import_app.command("labels")
def import_labels(
    file: Annotated[Path, typer.Argument(help="kubectl get nodes -o json, or kubectl get nodes --show-labels.")],
    output: Output,
) -> None:
    """Import NVIDIA Topograph's node labels (any of its three key families)."""
    _save(read_node_labels(file), output)


@generate_app.command("superpod")
def generate_superpod(
    output: Output,
    sus: Annotated[int, typer.Option("--sus", min=1, max=MAX_SUS, help="Scalable units (32 node slots each).")] = 4,
    server: ServerOpt = "dgx-h100",
) -> None:
    """NVIDIA DGX H100 SuperPOD, rail-optimised scalable units."""
    _save(generators.superpod(sus, _server(server)), output)


@generate_app.command("fat-tree")
def generate_fat_tree(
    output: Output,
    k: Annotated[int, typer.Option("--k", min=2, max=MAX_K, help="Switch radix (even).")] = 4,
    gpus_per_host: Annotated[int, typer.Option("--gpus-per-host", min=0, max=generators.MAX_GPUS_PER_HOST)] = 8,
    server: ServerOpt = "dgx-h100",
) -> None:
    """3-tier k-ary fat-tree."""
    _save(generators.fat_tree(k, gpus_per_host, _server(server)), output)


@generate_app.command("leaf-spine")
def generate_leaf_spine(
    output: Output,
    leaves: Annotated[int, typer.Option("--leaves", min=1, max=generators.MAX_HOSTS)],
    spines: Annotated[int, typer.Option("--spines", min=1, max=generators.MAX_HOSTS)],
    hosts_per_leaf: Annotated[int, typer.Option("--hosts-per-leaf", min=1, max=generators.MAX_HOSTS)],
    gpus_per_host: Annotated[int, typer.Option("--gpus-per-host", min=0, max=generators.MAX_GPUS_PER_HOST)] = 8,
    oversubscription: Annotated[float, typer.Option("--oversubscription", min=0.01, max=1000.0)] = 1.0,
    server: ServerOpt = "dgx-h100",
) -> None:
    """2-tier leaf/spine with a given oversubscription."""
    _save(
        generators.leaf_spine(leaves, spines, hosts_per_leaf, gpus_per_host, oversubscription, _server(server)), output
    )


@app.command("merge")
def merge(
    file: Annotated[Path, typer.Argument(help="Fabric JSON (an import).")],
    output: Output,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            help="Directory of <host>/ directories: nvidia-smi.xml|.txt, topo.txt, ibstat.txt, infiniband/.",
        ),
    ] = None,
    gpus_per_host: Annotated[
        int,
        typer.Option(
            "--gpus-per-host", min=0, max=generators.MAX_GPUS_PER_HOST, help="GPUs of hosts without inventory."
        ),
    ] = 0,
    gpu_model: Annotated[
        str, typer.Option("--gpu-model", help=f"With --gpus-per-host: {', '.join(KNOWN_GPUS)}, ...")
    ] = "",
    gpu_memory_mib: Annotated[
        int | None, typer.Option("--gpu-memory-mib", min=1, max=10_000_000, help="For other models.")
    ] = None,
    nvlink_gbps: Annotated[
        float | None, typer.Option("--nvlink-gbps", min=0, max=1e6, help="Per-GPU NVLink Gb/s.")
    ] = None,
) -> None:
    """Add GPUs to a fabric: per-host inventories, and/or one server model for every other host."""
    if inventory is None and not gpus_per_host:
        raise typer.BadParameter("give --inventory DIR, --gpus-per-host N --gpu-model M, or both")
    if gpus_per_host and not gpu_model:
        raise typer.BadParameter("--gpus-per-host needs --gpu-model", param_hint="--gpu-model")
    defaults = GpuDefaults.of(gpus_per_host, gpu_model, gpu_memory_mib, nvlink_gbps) if gpus_per_host else None
    result = merge_gpus(jsonio.load(file), read_inventories(inventory) if inventory else (), defaults)
    _save(result.fabric, output)
    for w in result.warnings:
        _err.print(f"warning: {w}", markup=False)
    _err.print(
        f"{len(result.from_inventory)} hosts from inventories ({len(result.rail_by_affinity)} with GPUs mapped to "
        f"rail HCAs by PCI affinity), {len(result.from_defaults)} from --gpus-per-host, "
        f"{len(result.without_gpus)} without GPUs"
    )


@app.command("diff")
def diff(
    old: Annotated[Path, typer.Argument(help="Fabric JSON before (an import).")],
    new: Annotated[Path, typer.Argument(help="Fabric JSON after, imported the same way.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """What changed between two imports: hosts, HCAs, switches, links gone or slower. Exit 1 if anything was lost."""
    d = diff_fabrics(jsonio.load(old), jsonio.load(new))
    if as_json:
        typer.echo(json.dumps(d.to_dict()))
    else:
        typer.echo(f"{old} -> {new}: " + ("LOST" if d.lost else "changed, nothing lost" if d.changed else "no change"))
        for what, items in (
            ("hosts gone", d.hosts_gone),
            ("HCAs gone", d.hcas_gone),
            ("HCAs moved to another host", d.hcas_moved),
            ("switches gone", d.switches_gone),
            ("hosts with fewer GPUs", d.gpus_fewer),
            ("hosts new", d.hosts_new),
            ("HCAs new", d.hcas_new),
            ("switches new", d.switches_new),
        ):
            if items:
                typer.echo(f"{what} ({len(items)}): {', '.join(items)}")
        for what, changes in (
            ("links gone", d.links_gone),
            ("links slower", d.links_slower),
            ("links new", d.links_new),
            ("links faster", d.links_faster),
        ):
            if changes:
                typer.echo(f"{what} ({len(changes)}):")
                for c in changes:
                    rate = " -> ".join(r for r in (c.before, c.after) if r)
                    typer.echo(f"  {c.ends}  {rate}")
    if d.lost:
        raise typer.Exit(1)


@app.command("show")
def show(
    file: Annotated[Path, typer.Argument(help="Fabric JSON.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    unattributed: Annotated[
        bool, typer.Option("--unattributed", help="List every HCA without a host, and why, instead.")
    ] = False,
) -> None:
    """Summarise a fabric: hosts, GPUs, HCAs, switches per tier, rails, scalable units, how hosts were found."""
    fabric = jsonio.load(file)
    if unattributed:
        rows = [
            {
                "guid": h.guid,
                "description": h.description,
                "leaf": _leaf_name(fabric, h.guid),
                "reason": h.unattributed_reason,
            }
            for h in fabric.unattributed_hcas
        ]
        if as_json:
            typer.echo(json.dumps(rows))
        else:
            for r in rows:
                typer.echo(f"{r['guid']}  {r['leaf'] or '-'}  {r['description']!r}: {r['reason'] or 'unknown'}")
        return
    s = summarize(fabric)
    if as_json:
        typer.echo(json.dumps(s))
        return
    console = Console(highlight=False)
    table = Table(title=f"fabric {fabric.name}", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("hosts", "gpus", "hcas", "unattributed_hcas", "rails", "scalable_units", "links"):
        table.add_row(key.replace("_", " "), str(s[key]))
    for tier in Tier:
        name = tier.name.lower()
        over = s["oversubscription"].get(name)
        table.add_row(f"{name} switches", f"{s['switches'][name]}" + (f"  (max {over}:1 down:up)" if over else ""))
    console.print(table)
    if s["found_by"]["hosts"]:
        console.print(
            "hosts found by: "
            + ", ".join(f"{m} {n} ({s['found_by']['hcas'].get(m, 0)} HCAs)" for m, n in s["found_by"]["hosts"].items())
        )
    for reason, n in s["unattributed_reasons"].items():
        console.print(f"unattributed: {n} HCAs: {reason}", markup=False)
    if s["gpu_models"]:
        console.print("GPU models: " + ", ".join(f"{m} x{n}" for m, n in s["gpu_models"].items()))


@export_app.command("slurm")
def export_slurm(
    file: Annotated[Path, typer.Argument(help="Fabric JSON.")],
    block: Annotated[bool, typer.Option("--block", help="The block plugin (one block per scalable unit).")] = False,
    yaml: Annotated[bool, typer.Option("--yaml", help="With --block: Slurm's topology.yaml form.")] = False,
    nvlink: Annotated[
        bool, typer.Option("--nvlink", help="With --block: one block per multi-node NVLink domain, as Topograph.")
    ] = False,
) -> None:
    """Slurm topology.conf (tree plugin) on stdout; --block for the block plugin."""
    fabric = jsonio.load(file)
    if block:
        try:
            text = topology_block(fabric, "yaml" if yaml else "conf", "nvlink" if nvlink else "su")
        except ValueError as e:
            raise InputError(str(e), source=str(file)) from e
        typer.echo(text, nl=False)
    else:
        typer.echo(topology_conf(fabric), nl=False)


@export_app.command("ibnetdiscover")
def export_ibnetdiscover(file: Annotated[Path, typer.Argument(help="Fabric JSON.")]) -> None:
    """The fabric as `ibnetdiscover` prints it (ibsim reads it as a fabric to simulate)."""
    typer.echo(to_ibnetdiscover(jsonio.load(file)), nl=False)


@export_app.command("labels")
def export_labels(
    file: Annotated[Path, typer.Argument(help="Fabric JSON.")],
    style: Annotated[
        str,
        typer.Option(
            "--style",
            help="nvidia: network.topology.nvidia.com/{leaf,spine,core,accelerator}; nvidia-tiers; "
            "topograph: fabric.topograph.run/tier-N (Topograph 1.0).",
        ),
    ] = "nvidia",
    kubectl: Annotated[bool, typer.Option("--kubectl", help="`kubectl label node` commands instead of JSON.")] = False,
) -> None:
    """NVIDIA Topograph's Kubernetes node labels for every host, as a JSON List of nodes (or kubectl commands)."""
    if style not in LABEL_STYLES:
        raise typer.BadParameter(
            f"unknown style {style!r}; choose one of {', '.join(LABEL_STYLES)}", param_hint="--style"
        )
    fabric = jsonio.load(file)
    typer.echo((node_labels_kubectl if kubectl else node_labels_json)(fabric, style), nl=False)


@export_app.command("json")
def export_json(file: Annotated[Path, typer.Argument(help="Fabric JSON.")]) -> None:
    """The fabric's JSON, re-derived and pretty-printed, on stdout."""
    typer.echo(json.dumps(jsonio.to_dict(jsonio.load(file)), indent=1))


def _picture(output: Path) -> Path:
    if output.suffix.lower() not in (".svg", ".png"):
        raise InputError("the picture must end in .svg or .png", source="-o")
    return output_file(output, "-o")


@app.command("draw")
def draw(
    file: Annotated[Path, typer.Argument(help="Fabric JSON.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="fabric.svg or fabric.png", callback=_picture)],
) -> None:
    """Draw the fabric: tiers, switches, hosts, links coloured by rail."""
    # matplotlib costs ~0.5 s to import: only the command that draws pays for it, not every `gpupool` call
    from gpupool.fabric.export.draw import draw as draw_fabric  # noqa: PLC0415

    draw_fabric(jsonio.load(file), output)
    _err.print(f"wrote {output}")


@export_app.command("nccl")
def export_nccl(
    file: Annotated[Path, typer.Argument(help="Fabric JSON.")],
    host: Annotated[str, typer.Argument(help="Host name.")],
    gpus: Annotated[str, typer.Option("--gpus", help="GPU indices, e.g. 0,3 (default: all).")] = "",
) -> None:
    """NCCL settings (NCCL_IB_HCA: the rail HCAs of those GPUs) as shell assignments."""
    fabric = jsonio.load(file)
    require_gpus(fabric, str(file), ["fabric export nccl"])
    if not fabric.has_host(host):
        raise InputError(f"no host {host!r} in the fabric", source=str(file))
    count = len(fabric.host(host).gpus)
    if count == 0:
        raise InputError(f"host {host} has no GPUs in the fabric (gpupool fabric merge adds them)", source=str(file))
    try:
        chosen = [int(g) for g in gpus.split(",")] if gpus else list(range(count))
    except ValueError as e:
        raise typer.BadParameter(f"not a list of GPU indices: {gpus!r}", param_hint="--gpus") from e
    bad = [g for g in chosen if not 0 <= g < count]
    if bad:
        raise typer.BadParameter(f"host {host} has GPUs 0-{count - 1}; got {bad}", param_hint="--gpus")
    for key, value in nccl_topology_env(fabric, host, chosen).items():
        typer.echo(f"{key}={value}")
