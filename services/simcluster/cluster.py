"""`SimCluster`: the API server, scheduler, kubelet and garbage collector in one process.

async with SimCluster(SimConfig(extended_inplace=True)) as sc:
    await kubernetes_asyncio.config.load_kube_config(config_file=str(sc.kubeconfig_path))
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from aiohttp import web

from .admission import Admission
from .auth import Auth
from .controllers import ControllerManager, controller_manager
from .conversion import Conversions
from .crds import CrdController
from .faults import FaultConfig, Faults
from .gc import GarbageCollector
from .images import ImagePuller
from .kubeconfig import write_kubeconfig
from .kubelet import Kubelet
from .namespaces import NamespaceController
from .nodes import Clock, EventRecorder, NodeConfig, Nodes, Timing
from .plugins import ClusterIPs
from .processes import ApiEndpoint, ProcessRuntime, RunImage, parse_run_image
from .pvcs import PvcBinder
from .resources import NAMESPACES
from .routing import ServiceRouter
from .scheduler import Scheduler
from .server import ApiServer
from .store import Store
from .tls import serving_context


def default_nodes() -> tuple[NodeConfig, ...]:
    return tuple(NodeConfig(name=f"sim-node-{i}") for i in range(3))


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    seed: int = 0  # uids, generated names, timing jitter
    nodes: tuple[NodeConfig, ...] = field(default_factory=default_nodes)
    timing: Timing = field(default_factory=Timing)
    # Emulate the second seed's customised kubelet: container env/envFrom/volumeMounts and pod volumes may
    # change in place (the container restarts); probe changes apply without a restart.
    extended_inplace: bool = False
    faults: FaultConfig = field(default_factory=FaultConfig)
    namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public")
    history_window: int = 20_000  # watch events kept; older resourceVersions get 410 Gone
    bookmark_interval: float = 5.0  # seconds between BOOKMARKs on a quiet watch that asked for them
    kubeconfig_path: str | None = None  # where to write the kubeconfig; None: a temporary directory
    kubelet: bool = True  # run the simulated scheduler/kubelet/PVC binder
    kubelet_events: bool = (
        True  # record core/v1 Events (Scheduled, Pulling, Pulled, Created, Started, Killing)
    )
    max_events: int = 10_000  # oldest Events are deleted beyond this (real clusters expire them after 1 h)
    # Images (fnmatch patterns, e.g. "*:broken") whose pull fails: containers wait in ImagePullBackOff.
    failing_images: tuple[str, ...] = ()
    # Images whose container exits with an error shortly after starting: CrashLoopBackOff, restarts growing.
    crashing_images: tuple[str, ...] = ()
    # Resources the API server does not serve, by plural or plural.group (e.g. "sidecarsets" for a cluster
    # without the Kruise SidecarSet CRD): 404 on every path and absent from discovery. "pods/resize": a
    # cluster before in-place pod resize (Kubernetes < 1.33): no such subresource, no resources in status.
    disabled_resources: tuple[str, ...] = ()
    # Bearer tokens and RBAC (auth.py): the written kubeconfig is an administrator's; per-ServiceAccount
    # ones come from SimCluster.service_account_kubeconfig. Off: every request is allowed.
    auth: bool = False
    # Services whose traffic (admission and conversion webhooks) goes to a server of the caller's instead
    # of through the Service's endpoints: "namespace/name" -> base URL (https://127.0.0.1:port).
    service_urls: dict[str, str] = field(default_factory=dict)
    # kube-controller-manager's workload controllers (Deployment, ReplicaSet, Job, StatefulSet,
    # EndpointSlice, PodDisruptionBudget). None: run them when the kubelet runs.
    controllers: bool | None = None
    # The process runtime (processes.py): pods whose container image matches one of these run as local
    # child processes, reached through their own loopback address; simcluster then also serves HTTPS
    # for their in-cluster config. Items are RunImage or "IMAGE=COMMAND" strings.
    run_images: tuple[RunImage | str, ...] = ()


class SimCluster:
    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        cfg = self.config
        self.store = Store(
            history_window=cfg.history_window, seed=cfg.seed, extended_inplace=cfg.extended_inplace
        )
        self.faults = Faults(cfg.faults)
        self.router = ServiceRouter(self.store, cfg.service_urls)
        self.admission = Admission(self.store, self.router)
        self.conversions = Conversions(self.router)
        self.gc = GarbageCollector(self.store)
        self.namespace_controller = NamespaceController(self.store)
        # The simulated node agents, one job each (the API server alone when cfg.kubelet is False).
        self.nodes = Nodes(self.store, list(cfg.nodes))
        self.agents: list[Scheduler | Kubelet | PvcBinder] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.processes: ProcessRuntime | None = None
        self._tls: ssl.SSLContext | None = None
        if cfg.run_images and cfg.kubelet:
            self._tmp = tempfile.TemporaryDirectory(prefix="simcluster-")
            run_images = tuple(r if isinstance(r, RunImage) else parse_run_image(r) for r in cfg.run_images)
            self.processes = ProcessRuntime(
                self.store, run_images, Path(self._tmp.name) / "pods", self._token_for
            )
        if cfg.kubelet:
            clock = Clock(cfg.timing, cfg.seed)
            events = EventRecorder(self.store, cfg.kubelet_events, cfg.max_events)
            images = ImagePuller(cfg.timing, events, cfg.failing_images, cfg.crashing_images)
            self.agents = [
                Kubelet(
                    self.store,
                    self.nodes,
                    clock,
                    events,
                    images,
                    cfg.extended_inplace,
                    self.processes,
                    resize_pods="pods/resize" not in cfg.disabled_resources,
                ),
                Scheduler(self.store, self.nodes, clock, events),
                PvcBinder(self.store, clock),
            ]
        self.auth = Auth(self.store) if cfg.auth else None
        self.api = ApiServer(
            self.store,
            self.admission,
            self.faults,
            bookmark_interval=cfg.bookmark_interval,
            disabled_resources=cfg.disabled_resources,
            auth=self.auth,
        )
        if self.processes is not None:
            self.api.process_logs = self.processes.log_of
        self.store.create_hooks.append(ClusterIPs())
        self.controllers: ControllerManager | None = None
        if cfg.kubelet if cfg.controllers is None else cfg.controllers:
            self.controllers = controller_manager(self.store, self.api.admitted_create)
        self.crds = CrdController(self.store, self.api.serve, self.api.stop_serving, self.conversions)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.https_url = ""  # the HTTPS listener of the in-cluster config (with the process runtime)
        self.kubeconfig_path = Path()

    def _token_for(self, namespace: str, account: str) -> str:
        """The projected token of a pod's ServiceAccount (any token is accepted without auth)."""
        return self.auth.issue(namespace, account) if self.auth is not None else "simcluster"

    async def start(self) -> SimCluster:
        if self.processes is not None and self._tmp is not None:
            ca_pem, self._tls = serving_context(Path(self._tmp.name) / "tls")
            self.namespace_controller.root_ca = ca_pem
        for namespace in self.config.namespaces:
            self.store.create(
                NAMESPACES, "", {"metadata": {"name": namespace}, "status": {"phase": "Active"}}
            )
        if self.agents:
            self.nodes.register_nodes()
        if self.controllers is not None:
            self.controllers.start()
        self._runner = web.AppRunner(self.api.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        server = site._server  # the bound socket tells the real port when 0 was asked for
        port = server.sockets[0].getsockname()[1] if server is not None else self.config.port  # type: ignore[attr-defined]
        self.url = f"http://{self.config.host}:{port}"
        if self.processes is not None and self._tls is not None:
            secure = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._tls)
            await secure.start()
            bound = secure._server
            https_port = bound.sockets[0].getsockname()[1] if bound is not None else 0  # type: ignore[attr-defined]
            self.https_url = f"https://127.0.0.1:{https_port}"
            self.processes.api = ApiEndpoint("127.0.0.1", https_port, self.namespace_controller.root_ca)
        if self.config.kubeconfig_path is None:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="simcluster-")
            target = Path(self._tmp.name) / "kubeconfig"
        else:
            target = Path(self.config.kubeconfig_path)
        token = self.auth.admin_token if self.auth is not None else "simcluster"
        address, authority = self._server()
        self.kubeconfig_path = write_kubeconfig(target, address, token=token, ca_pem=authority)
        return self

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig authenticating as the ServiceAccount (which must exist), for a service run under
        its RBAC rules. Needs ``SimConfig(auth=True)``."""
        if self.auth is None:
            raise ValueError("service_account_kubeconfig needs SimConfig(auth=True)")
        token = self.auth.issue(namespace, name)
        address, authority = self._server()
        return write_kubeconfig(path, address, namespace=namespace, token=token, ca_pem=authority)

    def _server(self) -> tuple[str, str | None]:
        """Where kubeconfigs point: the HTTPS listener when there is one (kubectl sends a token over HTTPS
        only), with its CA; else plain HTTP."""
        if self.https_url:
            return self.https_url, self.namespace_controller.root_ca
        return self.url, None

    async def stop(self) -> None:
        try:
            await self._stop()
        finally:
            if self.processes is not None:  # the children go whatever failed above
                await self.processes.close()

    async def _stop(self) -> None:
        self.api.cut_watches()
        if self.controllers is not None:
            await self.controllers.close()
        for agent in self.agents:
            await agent.close()
        await self.gc.close()
        await self.namespace_controller.close()
        await self.admission.close()
        await self.conversions.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> SimCluster:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def route_service(self, namespace: str, name: str, base_url: str) -> None:
        """Send what is addressed to the Service namespace/name (an admission or conversion webhook) to
        base_url instead of through its endpoints."""
        self.router.service_urls[f"{namespace}/{name}"] = base_url

    # ---- test knobs --------------------------------------------------------------------------------

    def compact(self) -> None:
        """Drop the watch history: any resourceVersion before now gets 410 Gone."""
        self.store.compact()

    def cut_watches(self) -> None:
        """End every open watch stream, as a dropped connection would."""
        self.api.cut_watches()

    def set_faults(self, faults: FaultConfig) -> None:
        self.faults.configure(faults)

    def fail_readiness(self, namespace: str, name: str, failing: bool = True) -> None:
        """Make the pod's readiness probes fail (``failing``) or pass again: its containers keep running,
        ``containerStatuses[].ready`` and the ``ContainersReady``/``Ready`` conditions follow, as a real
        kubelet reports a probe. A ``KeyError`` for a pod no kubelet runs."""
        for agent in self.agents:
            if isinstance(agent, Kubelet) and agent.fail_readiness((namespace, name), failing):
                return
        raise KeyError(f"no kubelet runs pod {namespace}/{name}")
