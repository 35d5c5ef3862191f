"""`rollbook simcluster`: run the embedded cluster on 127.0.0.1 and write a kubeconfig for it."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer

from services.infra.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("simcluster")(simcluster)


def simcluster(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: pick a free one).")] = 0,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="Kubeconfig to write (default: <ROLLBOOK_DATA_DIR>/simcluster/kubeconfig)."),
    ] = None,
    nodes: Annotated[int, typer.Option(min=1, help="Number of simulated nodes.")] = 3,
    node_cpu: Annotated[str, typer.Option(help="CPU per node (cores, or millicores like 4000m).")] = "8",
    max_pods: Annotated[int, typer.Option(help="Pods per node.")] = 110,
    seed: Annotated[int, typer.Option(help="Seed for uids, generated names, timing jitter and faults.")] = 0,
    instant: Annotated[bool, typer.Option(help="Zero delays instead of realistic ones.")] = False,
    extended_inplace: Annotated[
        bool | None,
        typer.Option(
            help="Extended kubelet: env/volume changes in place (default: ROLLBOOK_EXTENDED_INPLACE)."
        ),
    ] = None,
    write_error_rate: Annotated[float, typer.Option(help="Share of writes failed with 500/429.")] = 0.0,
    lost_response_rate: Annotated[
        float,
        typer.Option(
            help="Share of writes that commit but whose answer is lost (500, 504 or a cut connection)."
        ),
    ] = 0.0,
    latency: Annotated[float, typer.Option(help="Seconds added to every API request.")] = 0.0,
    failing_image: Annotated[
        list[str] | None, typer.Option(help="Image pattern (e.g. '*:broken') whose pull fails; repeatable.")
    ] = None,
    crashing_image: Annotated[
        list[str] | None, typer.Option(help="Image pattern whose container keeps crashing; repeatable.")
    ] = None,
    auth: Annotated[
        bool, typer.Option(help="Bearer tokens and RBAC; the kubeconfig written is an administrator's.")
    ] = False,
    run_image: Annotated[
        list[str] | None,
        typer.Option(
            help="IMAGE=COMMAND: pods whose image matches IMAGE (a pattern such as 'rollbook:*') run as "
            "local processes, COMMAND's words before the container's command (docs/simcluster.md, "
            "'The process runtime'); repeatable."
        ),
    ] = None,
) -> None:
    """Start simcluster: a Kubernetes API server with simulated scheduler and kubelet, for laptops and CI."""
    import asyncio

    from services.simcluster import FaultConfig, NodeConfig, SimCluster, SimConfig, Timing
    from services.simcluster.processes import parse_run_image

    from .errors import CommandError

    try:
        run_images = tuple(parse_run_image(item) for item in run_image or ())
    except ValueError as error:
        raise CommandError(str(error), exit_code=2) from error

    settings = Settings.from_env()
    target = kubeconfig or settings.data_path / "simcluster" / "kubeconfig"
    cpu_millis = int(node_cpu[:-1]) if node_cpu.endswith("m") else int(float(node_cpu) * 1000)
    config = SimConfig(
        port=port,
        seed=seed,
        nodes=tuple(
            NodeConfig(f"sim-node-{i}", cpu_millis=cpu_millis, max_pods=max_pods) for i in range(nodes)
        ),
        timing=Timing() if instant else Timing.realistic(),
        extended_inplace=settings.extended_inplace if extended_inplace is None else extended_inplace,
        auth=auth,
        faults=FaultConfig(
            write_error_rate=write_error_rate,
            lost_response_rate=lost_response_rate,
            latency_seconds=latency,
            seed=seed,
        ),
        kubeconfig_path=str(target),
        failing_images=tuple(failing_image or ()),
        crashing_images=tuple(crashing_image or ()),
        run_images=run_images,
    )

    async def serve() -> None:
        async with SimCluster(config) as sim:
            mode = "extended in-place" if config.extended_inplace else "stock in-place"
            typer.echo(f"simcluster listening on {sim.url} ({nodes} nodes, {mode} kubelet)")
            typer.echo(f"kubeconfig: {sim.kubeconfig_path}")
            for item in run_images:
                typer.echo(f"  pods of images {item.pattern} run as processes: {' '.join(item.command)} ...")
            typer.echo(
                f"  export KUBECONFIG={sim.kubeconfig_path}   # ROLLBOOK_KUBECONFIG for rollbook services"
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await stop.wait()
        typer.echo("simcluster stopped")

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
