"""The process runtime (`rollbook simcluster --run-image IMAGE=COMMAND`): a pod whose image matches runs
as a child process with its env, volumes, in-cluster config, probes, restarts, exit codes and logs; a
Service's endpoints reach it (admission webhooks included); every way simcluster ends stops the child."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from services.simcluster import SimCluster, SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import wait_until

# simcluster's process runtime gives the pods of every simcluster the same loopback addresses (127.77.0.x):
# two at once would collide on their ports; scripts/test's `--dist loadscope` runs a module's tests in one
# pytest-xdist worker, one after the other.
pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).with_name("podprocess.py")
RUN_IMAGE = f"podtest:*={sys.executable} {PROGRAM}"


def pod(name: str, args: list[str], **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "podtest:1", "args": args}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [container], **spec},
    }


def serve(port: int = 8080, *extra: str) -> list[str]:
    return ["serve", "--host=0.0.0.0", f"--port={port}", *extra]


def status_of(p: client.V1Pod) -> client.V1ContainerStatus | None:
    return (p.status.container_statuses or [None])[0]


def ready(p: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_pod_runs_as_a_process_with_its_env_volumes_and_in_cluster_config(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await make_simcluster(SimConfig(run_images=(RUN_IMAGE,)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_secret(
            "default", {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret", "URL": "db://x"}}
        )
        await core.create_namespaced_config_map(
            "default", {"metadata": {"name": "cfg"}, "data": {"MODE": "all"}}
        )
        manifest = pod(
            "app",
            serve(8080),
            container={
                "env": [
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "KEY_FILE", "value": "/etc/creds/password"},
                    {"name": "SA_DIR", "value": "/var/run/secrets/kubernetes.io/serviceaccount"},
                    {"name": "GREETING", "value": "mode $(MODE)"},
                ],
                "envFrom": [{"configMapRef": {"name": "cfg"}}],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds", "readOnly": True}],
            },
            volumes=[{"name": "creds", "secret": {"secretName": "creds"}}],
        )
        await core.create_namespaced_pod("default", manifest)
        running = await wait_until(lambda: core.read_namespaced_pod("app", "default"), ready, within=30)
        ip = running.status.pod_ip
        assert ip.startswith("127.77.")
        assert status_of(running).container_id.startswith("process://")

        env = await get_json(f"http://{ip}:8080/env")
        assert env["PASSWORD"] == "s3cret" and env["POD"] == "app" and env["MODE"] == "all"
        assert env["GREETING"] == "mode all"
        assert env["KEY_FILE"] != "/etc/creds/password"  # mapped into the pod's own directory
        assert (await get_json(f"http://{ip}:8080/read?env=KEY_FILE"))["content"] == "s3cret"
        own = await get_json(f"http://{ip}:8080/self")  # the in-cluster config, over HTTPS, with the CA
        assert own["metadata"]["uid"] == running.metadata.uid

        # A Service selecting it lists it as a ready endpoint; kubectl logs shows what it printed.
        await core.create_namespaced_service(
            "default",
            {
                "metadata": {"name": "app"},
                "spec": {"selector": {"app": "app"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )
        discovery = client.DiscoveryV1Api(api)

        async def addresses() -> list[str]:
            slices = (
                await discovery.list_namespaced_endpoint_slice(
                    "default", label_selector="kubernetes.io/service-name=app"
                )
            ).items
            return [a for s in slices for e in s.endpoints or [] for a in e.addresses]

        await wait_until(addresses, lambda found: found == [ip], within=10)
        log = await core.read_namespaced_pod_log("app", "default")
        assert "listening on" in log and "GET /env" in log


async def test_exit_codes_restarts_and_a_failing_liveness_probe(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(run_images=(RUN_IMAGE,)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("default", pod("once", ["exit", "3"], restartPolicy="Never"))
        await core.create_namespaced_pod("default", pod("again", ["exit", "0"], restartPolicy="Always"))
        sick = pod(
            "sick",
            serve(8080),
            container={
                "env": [{"name": "SICK", "value": "1"}],
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080},
                    "periodSeconds": 1,
                    "failureThreshold": 2,
                },
            },
        )
        await core.create_namespaced_pod("default", sick)

        failed = await wait_until(
            lambda: core.read_namespaced_pod("once", "default"),
            lambda p: p.status.phase == "Failed",
            within=20,
        )
        assert status_of(failed).state.terminated.exit_code == 3
        assert "exiting with 3" in await core.read_namespaced_pod_log("once", "default")

        again = await wait_until(
            lambda: core.read_namespaced_pod("again", "default"),
            lambda p: status_of(p) is not None and status_of(p).restart_count >= 1,
            within=20,
        )
        assert status_of(again).last_state.terminated.exit_code == 0

        restarted = await wait_until(
            lambda: core.read_namespaced_pod("sick", "default"),
            lambda p: status_of(p) is not None and status_of(p).restart_count >= 1,
            within=30,
        )
        assert status_of(restarted).last_state.terminated.exit_code == 128 + signal.SIGTERM
        events = (
            await core.list_namespaced_event("default", field_selector="involvedObject.name=sick")
        ).items
        assert any("failed liveness probe" in (e.message or "") for e in events)


async def test_an_admission_webhook_is_called_through_its_services_endpoints(
    make_simcluster: MakeSimCluster, tmp_path: Path
) -> None:
    from services.webhook.tls import generate_self_signed

    certificate = generate_self_signed(tmp_path, ("guard.default.svc",))
    sim = await make_simcluster(SimConfig(run_images=(RUN_IMAGE,)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        files = {"tls.crt": certificate.cert_file.read_bytes(), "tls.key": certificate.key_file.read_bytes()}
        await core.create_namespaced_secret(
            "default",
            {
                "metadata": {"name": "guard-tls"},
                "data": {k: base64.b64encode(v).decode() for k, v in files.items()},
            },
        )
        args = serve(8443, "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--deny=forbidden-")
        guard = pod(
            "guard",
            args,
            container={
                "ports": [{"name": "https", "containerPort": 8443}],
                "readinessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "tls", "mountPath": "/tls"}],
            },
            volumes=[{"name": "tls", "secret": {"secretName": "guard-tls"}}],
        )
        await core.create_namespaced_pod("default", guard)
        await core.create_namespaced_service(
            "default",
            {
                "metadata": {"name": "guard"},
                "spec": {"selector": {"app": "guard"}, "ports": [{"port": 443, "targetPort": "https"}]},
            },
        )
        await wait_until(lambda: core.read_namespaced_pod("guard", "default"), ready, within=30)
        webhook = {
            "metadata": {"name": "guard"},
            "webhooks": [
                {
                    "name": "guard.example.com",
                    "clientConfig": {
                        "service": {
                            "namespace": "default",
                            "name": "guard",
                            "path": "/validate",
                            "port": 443,
                        },
                        "caBundle": base64.b64encode(certificate.ca_bundle).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                }
            ],
        }
        await client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(webhook)

        async def refused() -> str:
            try:
                await core.create_namespaced_config_map("default", {"metadata": {"name": "forbidden-1"}})
            except client.ApiException as error:
                return str(error.body)
            return "created"

        # The EndpointSlice lists the pod once it is ready; until then the call has no endpoint.
        body = await wait_until(refused, lambda text: "refused by the pod's webhook" in text, within=15)
        assert "forbidden-1" in body
        await core.create_namespaced_config_map("default", {"metadata": {"name": "allowed"}})


async def _pids_of_running_pod(kubeconfig: Path) -> int:
    from kubernetes_asyncio import config

    async with await config.new_client_from_config(config_file=str(kubeconfig)) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("default", pod("app", serve(8080)))
        running = await wait_until(
            lambda: core.read_namespaced_pod("app", "default"),
            lambda p: status_of(p) is not None and (status_of(p).container_id or "").startswith("process://"),
            within=30,
        )
        return int(status_of(running).container_id.removeprefix("process://"))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
async def test_every_way_simcluster_ends_stops_its_children(tmp_path: Path, signum: int) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    env["ROLLBOOK_DATA_DIR"] = str(tmp_path / "data")
    simcluster = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "simcluster", "--instant", "--kubeconfig", str(kubeconfig),
        "--run-image", RUN_IMAGE,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert simcluster.stdout is not None
        while b"kubeconfig:" not in await asyncio.wait_for(simcluster.stdout.readline(), 60):
            pass
        pid = await _pids_of_running_pod(kubeconfig)
        assert not gone(pid)
        simcluster.send_signal(signum)
        await asyncio.wait_for(simcluster.wait(), 30)
        await wait_until(lambda: asyncio.sleep(0, gone(pid)), bool, within=10)
    finally:
        if simcluster.returncode is None:
            simcluster.kill()
            await simcluster.wait()


async def test_leaving_simcluster_on_an_exception_stops_its_children() -> None:
    pid = 0
    with pytest.raises(RuntimeError, match="the test's own failure"):
        async with SimCluster(SimConfig(run_images=(RUN_IMAGE,))) as sim:
            pid = await _pids_of_running_pod(sim.kubeconfig_path)
            raise RuntimeError("the test's own failure")
    assert pid and gone(pid)


async def test_a_malformed_run_image_is_one_line_of_error() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "simcluster", "--run-image", "rollbook:*",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 2 and not out
    assert err.decode().splitlines() == [
        "rollbook: --run-image 'rollbook:*': expected IMAGE=COMMAND, e.g. 'rollbook:*=env'"
    ]
