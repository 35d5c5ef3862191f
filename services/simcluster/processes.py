"""The process runtime (``rollbook simcluster --run-image IMAGE=COMMAND``): a pod with a container whose
image matches IMAGE (an fnmatch pattern) runs that container as a child process of simcluster, instead of
simulating it. What a container runtime would give the process, and how it is mapped onto this machine:

- **argv**: COMMAND's words, then the container's ``command`` and ``args`` (``$(VAR)`` expanded from its
  env, as the kubelet does). COMMAND stands for the image: ``env PATH=$PWD/.venv/bin:/usr/bin:/bin`` runs
  the image's programs from a virtualenv. The process runs in simcluster's working directory.
- **env**: PATH, HOME, LANG, TZ and LC_* from simcluster's own environment (the image's), the Kubernetes
  service variables of the in-cluster config, HOSTNAME, then ``envFrom`` and ``env`` with ``valueFrom``
  (Secrets, ConfigMaps, the downward API). A missing Secret or key is ``CreateContainerConfigError``.
- **volumes** (Secret, ConfigMap, projected with the ServiceAccount token, downward API, emptyDir) are
  written to the pod's private directory; a missing Secret or ConfigMap keeps the container in
  ``ContainerCreating``. The process cannot see ``/etc/...``: **every env value and argument that is a
  path under a ``volumeMount`` (whole, or after the first ``=`` as in ``--tls-cert=/tls/tls.crt``) is
  rewritten to that file's place in the pod's directory**, and ``0.0.0.0`` to the pod's IP.
- **network**: each such pod gets its own loopback address (``127.77.x.y``, its ``podIP``); containers
  listen on their declared ``containerPort``s there, so a Service's EndpointSlices, probes and the API
  server's webhook calls reach them as on a cluster, and pods never collide on a port.
- **in-cluster config**: ``KUBERNETES_SERVICE_HOST``/``PORT`` name simcluster's HTTPS listener; the
  projected token volume holds a token of the pod's ServiceAccount and ``ca.crt`` the CA of that
  listener (``kube-root-ca.crt``).
- **probes** (startup, readiness, liveness: httpGet, tcpSocket, exec) run against the process with their
  periods and thresholds; a failed liveness probe restarts it. ``restartPolicy`` decides restarts (with the
  kubelet's doubling back-off); exit codes go to ``containerStatuses``; stdout and stderr are ``kubectl
  logs``.
- Deleting the pod sends SIGTERM to the process group, SIGKILL after the grace period. simcluster stops
  every child on every way out: close(), an ``atexit`` hook, and ``PR_SET_PDEATHSIG`` on Linux for a
  simcluster killed outright.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import fnmatch
import os
import re
import shlex
import shutil
import signal
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from .pod_runtimes import ContainerRuntime, PodRuntime
from .resources import CONFIGMAPS, PODS, SECRETS
from .store import Key, Obj, Store, now_iso

if TYPE_CHECKING:
    from .kubelet import Kubelet

__all__ = ["ApiEndpoint", "ProcessRuntime", "RunImage", "parse_run_image"]

INHERITED_ENV = ("PATH", "HOME", "LANG", "TZ")
LOOPBACK_PREFIX = "127.77"
STOP_WAIT_SECONDS = 5.0  # how long close() waits after SIGTERM before SIGKILL


@dataclass(frozen=True)
class RunImage:
    pattern: str  # fnmatch pattern on the container's image
    command: tuple[str, ...]  # words put before the container's command and args


def parse_run_image(text: str) -> RunImage:
    """``IMAGE=COMMAND``; ValueError with a clear message otherwise."""
    pattern, sep, command = text.partition("=")
    if not sep or not pattern.strip():
        raise ValueError(f"--run-image {text!r}: expected IMAGE=COMMAND, e.g. 'rollbook:*=env'")
    try:
        words = tuple(shlex.split(command))
    except ValueError as error:
        raise ValueError(f"--run-image {text!r}: {error}") from error
    return RunImage(pattern.strip(), words)


@dataclass
class ApiEndpoint:
    """simcluster's HTTPS listener, which the in-cluster config of a process points at."""

    host: str
    port: int
    ca_pem: str


class ConfigError(Exception):
    """The container cannot be configured yet (missing Secret, ConfigMap or key)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Child:
    process: asyncio.subprocess.Process
    log: Path


@dataclass
class ProcessPodState:
    root: Path
    mounts: dict[str, list[tuple[str, Path]]] = field(default_factory=dict)  # container -> mounts
    children: dict[str, Child] = field(default_factory=dict)
    stopping: bool = False


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The child gets SIGKILL when simcluster dies without cleaning up (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class ProcessRuntime:
    def __init__(
        self,
        store: Store,
        run_images: tuple[RunImage, ...],
        workdir: Path,
        token_for: Callable[[str, str], str],
    ) -> None:
        self.store = store
        self.run_images = run_images
        self.workdir = workdir
        self.token_for = token_for
        self.api: ApiEndpoint | None = None  # set once simcluster listens
        self.pods: dict[Key, ProcessPodState] = {}
        self._pids: set[int] = set()
        self._ip_next = 0
        self._free_ips: list[str] = []
        self._session: aiohttp.ClientSession | None = None
        atexit.register(self.kill_all_now)

    # ---- what runs here ---------------------------------------------------------------------------

    def command_for(self, image: str) -> tuple[str, ...] | None:
        for run_image in self.run_images:
            if fnmatch.fnmatchcase(image, run_image.pattern):
                return run_image.command
        return None

    def runs(self, pod: Obj) -> bool:
        return any(
            self.command_for(str(c.get("image", ""))) is not None
            for c in (pod.get("spec") or {}).get("containers") or []
        )

    def take_ip(self) -> str:
        if self._free_ips:
            return self._free_ips.pop(0)
        self._ip_next += 1
        return f"{LOOPBACK_PREFIX}.{self._ip_next // 250}.{self._ip_next % 250 + 1}"

    def release_ip(self, ip: str) -> None:
        if ip.startswith(LOOPBACK_PREFIX + "."):
            self._free_ips.append(ip)

    def log_of(self, namespace: str, name: str, container: str) -> str | None:
        state = self.pods.get((namespace, name))
        child = state.children.get(container) if state else None
        if child is None or not child.log.exists():
            return None
        return child.log.read_text(errors="replace")

    # ---- stopping -------------------------------------------------------------------------------------

    def kill_all_now(self) -> None:
        """SIGKILL every child's process group: the last resort at interpreter exit."""
        for pid in list(self._pids):
            _kill_group(pid, signal.SIGKILL)
        self._pids.clear()

    async def close(self) -> None:
        """SIGTERM every child, SIGKILL what still runs after STOP_WAIT_SECONDS."""
        children = [c for state in self.pods.values() for c in state.children.values()]
        for state in self.pods.values():
            state.stopping = True
        await asyncio.gather(*(self._stop(c, STOP_WAIT_SECONDS) for c in children), return_exceptions=True)
        self.kill_all_now()
        if self._session is not None:
            await self._session.close()
        atexit.unregister(self.kill_all_now)

    async def _stop(self, child: Child, grace: float) -> None:
        process = child.process
        if process.returncode is not None:
            return
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), max(grace, 0.1))
        except TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)
            await process.wait()
        finally:
            self._pids.discard(process.pid)

    # ---- a pod ----------------------------------------------------------------------------------------

    async def run_pod(self, kubelet: Kubelet, key: Key, runtime: PodRuntime) -> None:
        pod = kubelet._current(key, runtime)
        if pod is None:
            return
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{key[0]}_{key[1]}_{runtime.uid[:8]}")
        state = ProcessPodState(root=self.workdir / safe)
        self.pods[key] = state
        tasks: list[asyncio.Task[None]] = []
        try:
            for container in (pod.get("spec") or {}).get("containers") or []:
                rt = ContainerRuntime(
                    name=container["name"], image=container.get("image", ""), fingerprint=""
                )
                runtime.containers[rt.name] = rt
                if self.command_for(rt.image) is None:  # simulated: running and ready at once
                    rt.running, rt.ready, rt.started_at = True, True, now_iso()
                    rt.container_id = f"simulated://{runtime.uid}/{rt.name}"
                    continue
                tasks.append(asyncio.create_task(self._supervise(kubelet, key, runtime, state, container)))
            kubelet._write_status(key, runtime)
            while True:
                runtime.wake.clear()
                pod = kubelet._current(key, runtime)
                if pod is None:
                    break
                if pod["metadata"].get("deletionTimestamp"):
                    grace = pod["metadata"].get("deletionGracePeriodSeconds")
                    await self._terminate(kubelet, pod, state, 30.0 if grace is None else float(grace))
                    current = kubelet._current(key, runtime)
                    if current is not None:
                        kubelet.store.remove(PODS, current)
                    break
                await runtime.wake.wait()
        finally:
            state.stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(
                *(self._stop(c, 2.0) for c in state.children.values()), return_exceptions=True
            )
            if self.pods.get(key) is state:
                self.pods.pop(key)
            shutil.rmtree(state.root, ignore_errors=True)  # its Secrets' copies go with the pod
            self.release_ip(runtime.ip)

    async def _terminate(self, kubelet: Kubelet, pod: Obj, state: ProcessPodState, grace: float) -> None:
        state.stopping = True
        for name, child in state.children.items():
            if child.process.returncode is None:
                kubelet.events.emit(pod, "Killing", f"Stopping container {name}")
        await asyncio.gather(*(self._stop(c, grace) for c in state.children.values()), return_exceptions=True)

    async def _supervise(
        self, kubelet: Kubelet, key: Key, runtime: PodRuntime, state: ProcessPodState, container: Obj
    ) -> None:
        """Start the container's process, probe it, and restart it as ``restartPolicy`` says."""
        rt = runtime.containers[container["name"]]
        crashes = 0
        reported = ""
        while not state.stopping:
            pod = kubelet._current(key, runtime)
            if pod is None:
                return
            try:
                argv, env = self._prepare(pod, container, state, runtime.ip)
            except ConfigError as error:
                if str(error) != reported:  # once per new reason, not at every retry
                    rt.waiting_reason, reported = error.reason, str(error)
                    kubelet._write_status(key, runtime)
                    kubelet.events.emit(pod, "Failed", f"Error: {error}", warning=True)
                await asyncio.sleep(2.0)
                continue
            reported = ""
            log = state.root / "logs" / f"{rt.name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            try:
                with log.open("ab") as out:
                    process = await asyncio.create_subprocess_exec(
                        *argv,
                        env=env,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=out,
                        stderr=asyncio.subprocess.STDOUT,
                        start_new_session=True,  # its own process group: stopping it stops its children
                        preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
                    )
            except OSError as error:
                process = None
                message = f"failed to start {argv[0]!r}: {error}"
                with log.open("a") as out:
                    out.write(message + "\n")
                kubelet.events.emit(pod, "Failed", message, warning=True)
            started = time.monotonic()
            rt.started_at = now_iso()
            if process is not None:
                self._pids.add(process.pid)
                state.children[rt.name] = Child(process, log)
                rt.running, rt.ready, rt.waiting_reason = True, False, ""
                rt.container_id = f"process://{process.pid}"
                kubelet.events.emit(pod, "Started", f"Started container {rt.name} (pid {process.pid})")
                kubelet._write_status(key, runtime)
                probes = asyncio.create_task(self._probe(kubelet, key, runtime, container, rt, process))
                try:
                    code = await process.wait()
                finally:
                    probes.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await probes
                    self._pids.discard(process.pid)
                code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number
            else:
                code = 128
            if state.stopping or kubelet._current(key, runtime) is None:
                return
            exited = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": rt.started_at,
                "finishedAt": now_iso(),
                "containerID": rt.container_id,
            }
            policy = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
            rt.running, rt.ready = False, False
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                rt.terminated = exited
                kubelet._write_status(key, runtime)
                runtime.wake.set()
                return
            if time.monotonic() - started > 10 * max(kubelet.clock.timing.crash_backoff, 1.0):
                crashes = 0  # it ran a good while: the back-off starts over, as the kubelet's does
            rt.last_terminated = exited
            rt.restart_count += 1
            rt.waiting_reason = "CrashLoopBackOff" if code != 0 else "Completed"
            kubelet._write_status(key, runtime)
            kubelet.events.emit(
                pod,
                "BackOff",
                f"Back-off restarting failed container {rt.name} in pod {key[1]}",
                warning=True,
            )
            await asyncio.sleep(kubelet._crash_backoff(crashes))
            crashes += 1

    # ---- argv, env and volumes ------------------------------------------------------------------------

    def _prepare(
        self, pod: Obj, container: Obj, state: ProcessPodState, ip: str
    ) -> tuple[list[str], dict[str, str]]:
        mounts = self._write_volumes(pod, container, state)
        mounts.sort(key=lambda m: len(m[0]), reverse=True)  # the longest mountPath wins

        def mapped(value: str) -> str:
            head, sep, tail = value.partition("=")
            if sep and not value.startswith("/"):
                return head + sep + mapped(tail)
            if value == "0.0.0.0":
                return ip
            for mount_path, local in mounts:
                prefix = mount_path.rstrip("/")
                if value == prefix or value.startswith(prefix + "/"):
                    return str(local) + value[len(prefix) :]
            return value

        env: dict[str, str] = {
            k: v for k, v in os.environ.items() if k in INHERITED_ENV or k.startswith("LC_")
        }
        if self.api is not None:
            env["KUBERNETES_SERVICE_HOST"] = self.api.host
            env["KUBERNETES_SERVICE_PORT"] = str(self.api.port)
            env["KUBERNETES_SERVICE_PORT_HTTPS"] = str(self.api.port)
        env["HOSTNAME"] = pod["metadata"]["name"]
        declared = self._container_env(pod, container, ip)
        for name, value in declared.items():
            env[name] = mapped(value)
        words = [*(container.get("command") or []), *(container.get("args") or [])]
        argv = [mapped(_expand(str(w), declared)) for w in words]
        command = self.command_for(str(container.get("image", ""))) or ()
        argv = [*command, *argv]
        if not argv:
            raise ConfigError(
                "CreateContainerConfigError", "the container has no command (no image entrypoint)"
            )
        return argv, env

    def _container_env(self, pod: Obj, container: Obj, ip: str) -> dict[str, str]:
        namespace = pod["metadata"].get("namespace", "")
        out: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = str(source.get("prefix") or "")
            if "configMapRef" in source:
                ref = source["configMapRef"]
                data = self._data(CONFIGMAPS, namespace, ref.get("name", ""), bool(ref.get("optional")))
            else:
                ref = source.get("secretRef") or {}
                data = self._data(SECRETS, namespace, ref.get("name", ""), bool(ref.get("optional")))
            for k, v in (data or {}).items():
                out[prefix + k] = v.decode(errors="replace")
        for item in container.get("env") or []:
            name = str(item.get("name"))
            if "valueFrom" not in item:
                out[name] = _expand(str(item.get("value") or ""), out)
                continue
            value = self._value_from(pod, item["valueFrom"], namespace, ip)
            if value is not None:
                out[name] = value
        return out

    def _value_from(self, pod: Obj, source: Obj, namespace: str, ip: str) -> str | None:
        for kind, rt in (("secretKeyRef", SECRETS), ("configMapKeyRef", CONFIGMAPS)):
            if kind in source:
                ref = source[kind]
                optional = bool(ref.get("optional"))
                data = self._data(rt, namespace, ref.get("name", ""), optional)
                if data is None:
                    return None
                if ref.get("key") not in data:
                    if optional:
                        return None
                    raise ConfigError(
                        "CreateContainerConfigError",
                        f"couldn't find key {ref.get('key')} in {rt.kind} {namespace}/{ref.get('name')}",
                    )
                return data[ref["key"]].decode(errors="replace")
        if "fieldRef" in source:
            return _field(pod, str(source["fieldRef"].get("fieldPath", "")), ip)
        if "resourceFieldRef" in source:
            return "0"  # no resource limits on this machine
        return None

    def _data(self, rt: Any, namespace: str, name: str, optional: bool) -> dict[str, bytes] | None:
        obj = self._find(rt, namespace, name)
        if obj is None:
            if optional:
                return None
            raise ConfigError("CreateContainerConfigError", f'{rt.kind.lower()} "{name}" not found')
        out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()} if rt is CONFIGMAPS else {}
        if rt is SECRETS:
            out = {k: base64.b64decode(str(v)) for k, v in (obj.get("data") or {}).items()}
            out.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
        else:
            out.update({k: base64.b64decode(str(v)) for k, v in (obj.get("binaryData") or {}).items()})
        return out

    def _find(self, rt: Any, namespace: str, name: str) -> Obj | None:
        return self.store.find(rt, namespace, name)

    def _write_volumes(self, pod: Obj, container: Obj, state: ProcessPodState) -> list[tuple[str, Path]]:
        """Write the volumes the container mounts; (mountPath, local path) of each mount."""
        spec = pod.get("spec") or {}
        volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
        namespace = pod["metadata"].get("namespace", "")
        mounts: list[tuple[str, Path]] = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name"))
            if volume is None:
                continue
            directory = state.root / "volumes" / str(volume["name"])
            files = self._volume_files(pod, volume, namespace)
            if files is not None:
                _write_files(directory, files, volume)
            else:
                directory.mkdir(parents=True, exist_ok=True)  # emptyDir and the like
            local = directory / mount["subPath"] if mount.get("subPath") else directory
            mounts.append((str(mount.get("mountPath", "")), local))
        return mounts

    def _volume_files(
        self, pod: Obj, volume: Obj, namespace: str
    ) -> dict[str, tuple[bytes, int | None]] | None:
        """path -> (content, mode) for a volume with content; None for one that starts empty."""
        if "secret" in volume:
            src = volume["secret"]
            return self._items(SECRETS, namespace, src.get("secretName", ""), src, "ContainerCreating") or {}
        if "configMap" in volume:
            src = volume["configMap"]
            return self._items(CONFIGMAPS, namespace, src.get("name", ""), src, "ContainerCreating") or {}
        if "downwardAPI" in volume:
            return self._downward(pod, volume["downwardAPI"])
        if "projected" in volume:
            files: dict[str, tuple[bytes, int | None]] = {}
            for source in volume["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
                    try:
                        token = self.token_for(namespace, account)
                    except Exception as error:  # noqa: BLE001 - the account is gone: the mount waits
                        raise ConfigError("ContainerCreating", f"no token for {account}: {error}") from error
                    files[source["serviceAccountToken"].get("path", "token")] = (token.encode(), None)
                elif "secret" in source:
                    src = source["secret"]
                    files.update(
                        self._items(SECRETS, namespace, src.get("name", ""), src, "ContainerCreating") or {}
                    )
                elif "configMap" in source:
                    src = source["configMap"]
                    files.update(
                        self._items(CONFIGMAPS, namespace, src.get("name", ""), src, "ContainerCreating")
                        or {}
                    )
                elif "downwardAPI" in source:
                    files.update(self._downward(pod, source["downwardAPI"]))
            return files
        return None

    def _items(
        self, rt: Any, namespace: str, name: str, src: Obj, reason: str
    ) -> dict[str, tuple[bytes, int | None]] | None:
        try:
            data = self._data(rt, namespace, name, bool(src.get("optional")))
        except ConfigError as error:
            raise ConfigError(reason, f"MountVolume.SetUp failed: {error}") from error
        if data is None:
            return None
        if not src.get("items"):
            return {k: (v, None) for k, v in data.items()}
        out: dict[str, tuple[bytes, int | None]] = {}
        for item in src["items"]:
            if item.get("key") in data:
                out[str(item.get("path") or item["key"])] = (data[item["key"]], item.get("mode"))
            elif not src.get("optional"):
                raise ConfigError(reason, f"MountVolume.SetUp failed: key {item.get('key')} not in {name}")
        return out

    def _downward(self, pod: Obj, src: Obj) -> dict[str, tuple[bytes, int | None]]:
        status = pod.get("status") or {}
        return {
            str(item.get("path")): (
                _field(
                    pod, str((item.get("fieldRef") or {}).get("fieldPath", "")), status.get("podIP", "")
                ).encode(),
                item.get("mode"),
            )
            for item in src.get("items") or []
            if "fieldRef" in item
        }

    # ---- probes -----------------------------------------------------------------------------------------

    async def _probe(
        self,
        kubelet: Kubelet,
        key: Key,
        runtime: PodRuntime,
        container: Obj,
        rt: ContainerRuntime,
        process: asyncio.subprocess.Process,
    ) -> None:
        """Startup first (liveness and readiness wait for it), then readiness and liveness side by side."""
        startup = container.get("startupProbe")
        if startup and not await self._until(startup, container, runtime.ip, want=True):
            await self._unhealthy(kubelet, key, runtime, rt, process, "Startup")
            return
        readiness, liveness = container.get("readinessProbe"), container.get("livenessProbe")
        if not readiness:
            rt.ready = True
            kubelet._write_status(key, runtime)
        jobs = []
        if readiness:
            jobs.append(self._readiness(kubelet, key, runtime, container, rt, readiness))
        if liveness:
            jobs.append(self._liveness(kubelet, key, runtime, container, rt, process, liveness))
        if jobs:
            await asyncio.gather(*jobs)

    async def _until(self, probe: Obj, container: Obj, ip: str, *, want: bool) -> bool:
        """Probe until it succeeds (``want``) ``successThreshold`` times; False after
        ``failureThreshold`` consecutive failures."""
        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        failures = 0
        while True:
            if await self._check(probe, container, ip) == want:
                return True
            failures += 1
            if failures >= int(probe.get("failureThreshold") or 3):
                return False
            await asyncio.sleep(float(probe.get("periodSeconds") or 10))

    async def _readiness(
        self,
        kubelet: Kubelet,
        key: Key,
        runtime: PodRuntime,
        container: Obj,
        rt: ContainerRuntime,
        probe: Obj,
    ) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        successes = failures = 0
        while True:
            if await self._check(probe, container, runtime.ip):
                successes, failures = successes + 1, 0
                if not rt.ready and successes >= int(probe.get("successThreshold") or 1):
                    rt.ready = True
                    kubelet._write_status(key, runtime)
            else:
                successes, failures = 0, failures + 1
                if rt.ready and failures >= int(probe.get("failureThreshold") or 3):
                    rt.ready = False
                    kubelet._write_status(key, runtime)
            await asyncio.sleep(float(probe.get("periodSeconds") or 10))

    async def _liveness(
        self,
        kubelet: Kubelet,
        key: Key,
        runtime: PodRuntime,
        container: Obj,
        rt: ContainerRuntime,
        process: asyncio.subprocess.Process,
        probe: Obj,
    ) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        failures = 0
        while True:
            failures = 0 if await self._check(probe, container, runtime.ip) else failures + 1
            if failures >= int(probe.get("failureThreshold") or 3):
                await self._unhealthy(kubelet, key, runtime, rt, process, "Liveness")
                return
            await asyncio.sleep(float(probe.get("periodSeconds") or 10))

    async def _unhealthy(
        self,
        kubelet: Kubelet,
        key: Key,
        runtime: PodRuntime,
        rt: ContainerRuntime,
        process: asyncio.subprocess.Process,
        which: str,
    ) -> None:
        """A failed liveness (or startup) probe: the container is killed and restarted."""
        pod = kubelet._current(key, runtime)
        if pod is not None:
            kubelet.events.emit(
                pod,
                "Killing",
                f"Container {rt.name} failed {which.lower()} probe, will be restarted",
                warning=True,
            )
        grace = float(((pod or {}).get("spec") or {}).get("terminationGracePeriodSeconds") or 30)
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), grace)
        except TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)

    async def _check(self, probe: Obj, container: Obj, ip: str) -> bool:
        timeout = float(probe.get("timeoutSeconds") or 1)
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                scheme = str(get.get("scheme") or "HTTP").lower()
                port = _port(get.get("port"), container)
                host = get.get("host") or ip
                url = f"{scheme}://{host}:{port}{get.get('path') or '/'}"
                headers = {h["name"]: h.get("value", "") for h in get.get("httpHeaders") or []}
                if self._session is None:
                    self._session = aiohttp.ClientSession()
                no_verify: ssl.SSLContext | bool = False  # the kubelet does not verify probe certificates
                async with self._session.get(
                    url, headers=headers, ssl=no_verify, timeout=aiohttp.ClientTimeout(total=timeout)
                ) as response:
                    return 200 <= response.status < 400
            if "tcpSocket" in probe or "grpc" in probe:
                target = probe.get("tcpSocket") or probe.get("grpc") or {}
                port = _port(target.get("port"), container)
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(target.get("host") or ip, port), timeout
                )
                writer.close()
                return True
            if "exec" in probe:
                command = [
                    *(self.command_for(str(container.get("image", ""))) or ()),
                    *probe["exec"].get("command", []),
                ]
                process = await asyncio.create_subprocess_exec(
                    *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
                )
                try:
                    return await asyncio.wait_for(process.wait(), timeout) == 0
                except TimeoutError:
                    process.kill()
                    await process.wait()
                    return False
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError):
            return False
        return True  # a probe without a handler counts as passing


def _port(port: Any, container: Obj) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"no port named {port!r}")


_FIELD_LABEL = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]$")


def _field(pod: Obj, path: str, ip: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    match = _FIELD_LABEL.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    return str(
        {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": spec.get("nodeName"),
            "spec.serviceAccountName": spec.get("serviceAccountName"),
            "status.podIP": ip or status.get("podIP"),
            "status.hostIP": status.get("hostIP"),
        }.get(path)
        or ""
    )


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined variable is replaced, ``$$`` escapes, the rest stays."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, value)


def _write_files(directory: Path, files: dict[str, tuple[bytes, int | None]], volume: Obj) -> None:
    source = (
        volume.get("secret")
        or volume.get("configMap")
        or volume.get("projected")
        or volume.get("downwardAPI")
        or {}
    )
    default_mode = source.get("defaultMode")
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, mode) in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(0o600)
        target.write_bytes(content)
        wanted = mode if mode is not None else default_mode
        # the owner always reads: the process runs as simcluster's user, not the pod's runAsUser
        target.chmod(((int(wanted) if wanted is not None else 0o644) | 0o400) & 0o777)
