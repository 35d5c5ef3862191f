"""deploy/: every overlay renders with `kubectl kustomize`, every object is valid against the Kubernetes
schemas (kubernetes-validate, strict: an unknown or misspelt field fails), and the workloads are what an
operator of a production cluster expects: probes, resources, a locked-down securityContext,
PodDisruptionBudgets, several replicas, metrics, connection URLs from a Secret, the migration Job."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from services.cli.services import SERVICES as ROLLBOOK_SERVICES
from services.infra.runtime import PORT_OFFSETS
from services.infra.settings import Settings
from services.model import labels as label_selectors
from services.model.management import MANAGE_LABEL, Selection
from tests.deploy.manifests import (
    DEPLOY,
    NAMESPACE,
    OVERLAYS,
    ROOT,
    SERVICES,
    Manifest,
    kubectl,
    named,
    of_kind,
    render,
)
from tests.test_compose import assert_real_rollbook_command

INSTALL_DOC = ROOT / "docs" / "install.md"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
KUBERNETES_VERSION = "1.30"  # the oldest Kubernetes release still maintained upstream when this was written
# Kinds of operators the install relies on; kubernetes-validate knows only Kubernetes' own.
THIRD_PARTY = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
MONITORING = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def test_every_rendered_object_is_valid() -> None:
    # Each distinct object once, whichever overlays render it (most are shared through deploy/base).
    distinct: dict[str, tuple[Manifest, list[str]]] = {}
    for overlay in OVERLAYS:
        unknown = THIRD_PARTY | (MONITORING if overlay == "monitoring" else set())
        kinds = {(m["apiVersion"], m["kind"]) for m in render(overlay)}
        assert unknown <= kinds, f"deploy/{overlay} lacks {unknown - kinds}"
        for manifest in render(overlay):
            key = (manifest["apiVersion"], manifest["kind"])
            if key in THIRD_PARTY | MONITORING:
                assert key in unknown, f"{key} in deploy/{overlay}"
                assert manifest["metadata"]["namespace"] == NAMESPACE and manifest.get("spec"), manifest
                continue
            text = json.dumps(manifest, sort_keys=True)
            distinct.setdefault(text, (manifest, []))[1].append(overlay)
    for manifest, overlays in distinct.values():
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{manifest['kind']} {manifest['metadata']['name']} in deploy/{overlays}: {error}")


def test_validation_would_catch_a_misspelt_field() -> None:
    deployment = named(render("standalone"), "Deployment", "rollbook-planner")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_standalone_overlay_installs_the_crds_and_the_openkruise_one_none() -> None:
    crds = {m["metadata"]["name"] for m in of_kind(render("standalone"), "CustomResourceDefinition")}
    assert crds == {"clonesets.apps.kruise.io", "sidecarsets.apps.kruise.io"}
    # Beside OpenKruise: nothing that could replace its CRDs, in any form.
    assert of_kind(render("with-openkruise"), "CustomResourceDefinition") == []
    assert not (DEPLOY / "with-openkruise" / "crds").exists()


def config(overlay: str) -> dict[str, str]:
    [config_map] = [
        m
        for m in of_kind(render(overlay), "ConfigMap")
        if m["metadata"]["name"].startswith("rollbook-config")
    ]
    data: dict[str, str] = config_map["data"]
    return data


@pytest.mark.parametrize(("overlay", "mode"), [("standalone", "all"), ("with-openkruise", "labelled")])
def test_each_overlay_manages_what_its_cluster_needs(overlay: str, mode: str) -> None:
    data = config(overlay)
    assert data["ROLLBOOK_MANAGE"] == mode
    # Every key is a real setting with a valid value: Settings parses them, and so does the selection.
    settings = Settings.from_env(data)
    Selection.parse(settings.manage, settings.manage_namespaces)
    assert settings.http_host == "0.0.0.0"


def deployment(name: str) -> Manifest:
    return named(render("standalone"), "Deployment", f"rollbook-{name}")


def container(name: str) -> dict[str, Any]:
    [only] = deployment(name)["spec"]["template"]["spec"]["containers"]
    return dict(only)


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_runs_locked_down_with_probes_and_resources(service: str) -> None:
    pod = deployment(service)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"rollbook-{service}"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    spec = container(service)
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["resources"]["requests"]["cpu"] and spec["resources"]["limits"]["memory"]
    assert spec["image"] == f"rollbook:{VERSION}"  # the image of this version unless an overlay says


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_has_two_replicas_a_pdb_and_scrape_annotations(service: str) -> None:
    manifests = render("standalone")
    workload = deployment(service)
    assert workload["spec"]["replicas"] >= 2  # leader election keeps the extra planner/watcher standing by
    budget = named(manifests, "PodDisruptionBudget", f"rollbook-{service}")
    assert budget["spec"]["selector"] == workload["spec"]["selector"]
    assert budget["spec"]["maxUnavailable"] == 1
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    ports = {p["containerPort"] for p in container(service)["ports"]}
    assert annotations["prometheus.io/scrape"] == "true" and int(annotations["prometheus.io/port"]) in ports


@pytest.mark.parametrize("service", ROLLBOOK_SERVICES)
def test_the_four_services_run_their_rollbook_command_on_their_port(service: str) -> None:
    spec = container(service)
    assert spec["command"] == ["rollbook", service]
    assert_real_rollbook_command(spec["command"])
    data = config("standalone")
    port = int(data["ROLLBOOK_HTTP_PORT"]) + PORT_OFFSETS[service]
    assert [p["containerPort"] for p in spec["ports"]] == [port]
    # The Leases live where the Role granting them is: the pod's own namespace.
    [lease_namespace] = [e for e in spec["env"] if e["name"] == "ROLLBOOK_LEADER_ELECTION_NAMESPACE"]
    assert lease_namespace["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # A Lease holder is named by its pod: a restarted container takes its own Lease back at once, and no
    # two live pods share a name.
    [instance] = [e for e in spec["env"] if e["name"] == "ROLLBOOK_INSTANCE"]
    assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize("service", SERVICES)
def test_connection_urls_come_from_the_secret(service: str) -> None:
    sources = container(service)["envFrom"]
    assert {"secretRef": {"name": "rollbook-connections"}} in sources
    assert any(s.get("configMapRef", {}).get("name", "").startswith("rollbook-config") for s in sources)
    # Nothing puts a URL in plain sight.
    assert not any(
        e["name"] in ("ROLLBOOK_DATABASE_URL", "ROLLBOOK_NATS_URL") for e in container(service).get("env", [])
    )


def test_the_webhook_serves_tls_and_registers_nothing_itself() -> None:
    spec = container("webhook")
    assert_real_rollbook_command(spec["command"])
    assert "--no-register" in spec["command"]
    assert spec["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    assert mounts["tls"]["readOnly"] is True
    manifests = render("standalone")
    service = named(manifests, "Service", "rollbook-webhook")
    certificate = named(manifests, "Certificate", "rollbook-webhook")
    assert f"rollbook-webhook.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in named(manifests, kind, "rollbook-sidecarset")["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]


def test_the_migration_job_runs_alembic_once_per_version() -> None:
    [job] = of_kind(render("standalone"), "Job")
    assert job["metadata"]["name"] == f"rollbook-migrate-{VERSION}"
    [spec] = job["spec"]["template"]["spec"]["containers"]
    assert spec["command"] == ["rollbook", "db", "upgrade", "--set-passwords"]
    assert {"secretRef": {"name": "rollbook-connections"}} in spec["envFrom"]
    # Only the migration has the owner's login (ROLLBOOK_DATABASE_OWNER_URL).
    assert {"secretRef": {"name": "rollbook-db-owner"}} in spec["envFrom"]
    for pod_spec in [container(s) for s in SERVICES] + [container("webhook")]:
        assert {"secretRef": {"name": "rollbook-db-owner"}} not in pod_spec["envFrom"]
    assert {"secretRef": {"name": "rollbook-db-reader"}} in container("auditor")["envFrom"]
    assert {"secretRef": {"name": "rollbook-db-webhook"}} in container("webhook")["envFrom"]
    # The image holds alembic.ini and migrations/ in the Job's working directory.
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    assert f"WORKDIR {spec['workingDir']}" in dockerfile
    copied = [shlex.split(line)[1:-1] for line in dockerfile if line.startswith("COPY ")]
    assert any("alembic.ini" in sources for sources in copied) and any("migrations" in s for s in copied)
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_image_runs_as_the_user_the_manifests_name() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for service in SERVICES:
        uid = deployment(service)["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        assert f"--uid {uid}" in dockerfile and f"USER {uid}" in dockerfile


def test_every_namespaced_object_is_in_rollbooks_namespace() -> None:
    for manifest in render("monitoring"):
        if manifest["kind"] in ("Namespace", "CustomResourceDefinition") or manifest["kind"].startswith(
            "Cluster"
        ):
            continue
        if manifest["kind"].endswith("WebhookConfiguration"):
            continue
        assert manifest["metadata"].get("namespace") == NAMESPACE, manifest["metadata"]


def test_every_file_in_deploy_is_part_of_an_overlay() -> None:
    rendered_files = set()
    for directory in DEPLOY.rglob("kustomization.yaml"):
        text = directory.read_text()
        for path in directory.parent.glob("*.yaml"):
            if path.name != "kustomization.yaml" and (
                f"- {path.name}" in text or f"path: {path.name}" in text
            ):
                rendered_files.add(path)
    every = {p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert every == rendered_files, sorted(str(p.relative_to(ROOT)) for p in every - rendered_files)


def test_the_overlay_in_docs_install_renders_with_the_image_it_names(tmp_path: Path) -> None:
    heredoc = r"cat > my-rollbook/kustomization.yaml <<'EOF'\n(.*?\n)EOF\n"
    block = re.search(heredoc, INSTALL_DOC.read_text(), re.S)
    assert block, "docs/install.md lost its example overlay"
    version = subprocess.run([kubectl(), "version", "--client"], capture_output=True, text=True).stdout
    found = re.search(r"Kustomize Version: v(\d+)", version)
    if not found or int(found.group(1)) < 4:
        pytest.skip("the example needs kubectl 1.21+ (kustomize v4+), as docs/install.md says")
    (tmp_path / "deploy").symlink_to(DEPLOY)
    (tmp_path / "my-rollbook").mkdir()
    (tmp_path / "my-rollbook" / "kustomization.yaml").write_text(block.group(1))
    result = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "my-rollbook")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    manifests = [m for m in yaml.safe_load_all(result.stdout) if m]
    images = {
        c["image"]
        for m in of_kind(manifests, "Deployment") + of_kind(manifests, "Job")
        for c in m["spec"]["template"]["spec"]["containers"]
    }
    # By digest: a tag can be moved to another image (docs/install.md, "Updating the pinned image").
    assert images == {"registry.example.com/rollbook@sha256:" + "0" * 64}
    [config_map] = of_kind(manifests, "ConfigMap")
    assert (
        config_map["data"]["ROLLBOOK_MANAGE"] == "all" and config_map["data"]["ROLLBOOK_LOG_LEVEL"] == "INFO"
    )


@pytest.mark.parametrize(("overlay", "mode"), [("standalone", "all"), ("with-openkruise", "labelled")])
def test_the_sidecarset_webhooks_are_sent_exactly_the_sidecarsets_rollbook_manages(
    overlay: str, mode: str
) -> None:
    selection = Selection.parse(mode)
    manifests = render(overlay)
    hooks = [
        hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in named(manifests, kind, "rollbook-sidecarset")["webhooks"]
        if hook["rules"][0]["resources"] == ["sidecarsets"]
    ]
    assert len(hooks) == 2
    for value in (None, "true", "false", "shadow", "yes"):
        labels = {"app": "x"} if value is None else {"app": "x", MANAGE_LABEL: value}
        sidecarset = {"kind": "SidecarSet", "metadata": {"name": "s", "labels": labels}}
        for hook in hooks:
            sent = label_selectors.matches(hook["objectSelector"], labels)
            assert sent == selection.manages(sidecarset), (overlay, hook["name"], value)


# What kustomize v2.0.3 (kubectl 1.20, Debian's kubernetes-client, which .ci/run installs on a machine
# without kubectl) understands; newer kustomize reads all of it too.
KUSTOMIZE_V2_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "bases",
    "images",
    "configMapGenerator",
    "patchesJson6902",
    "patchesStrategicMerge",
}


def test_the_kustomizations_stay_readable_by_kubectl_1_20() -> None:
    for path in DEPLOY.rglob("kustomization.yaml"):
        kustomization = yaml.safe_load(path.read_text())
        where = path.relative_to(ROOT)
        assert set(kustomization) <= KUSTOMIZE_V2_FIELDS, (where, set(kustomization) - KUSTOMIZE_V2_FIELDS)
        for resource in kustomization.get("resources") or []:
            assert (path.parent / resource).is_file(), f"{where}: directories go under bases: ({resource})"
        for base in kustomization.get("bases") or []:
            assert (path.parent / base / "kustomization.yaml").is_file(), (where, base)


def test_the_migration_job_sets_each_logins_password_from_its_secret() -> None:
    """`kubectl apply -k` yields working logins: the Job reads every duty's URL from the Secret that
    service reads, under the setting `rollbook db upgrade --set-passwords` takes it from."""
    from services.infra.settings import Settings

    [job] = of_kind(render("standalone"), "Job")
    [spec] = job["spec"]["template"]["spec"]["containers"]
    refs = {e["secretRef"]["name"] for e in spec["envFrom"]}
    # The writer's URL (rollbook-connections) and the reader's (rollbook-db-reader) under their own keys.
    assert {"rollbook-connections", "rollbook-db-reader"} <= refs
    [webhook] = [e for e in spec["env"] if e["name"] == "ROLLBOOK_DATABASE_WEBHOOK_URL"]
    # The very Secret and key the webhook Deployment connects with.
    assert webhook["valueFrom"]["secretKeyRef"] == {
        "name": "rollbook-db-webhook",
        "key": "ROLLBOOK_DATABASE_URL",
    }
    assert {"secretRef": {"name": "rollbook-db-webhook"}} in container("webhook")["envFrom"]
    fields = {f"ROLLBOOK_{name.upper()}" for name in Settings.__struct_fields__}
    assert {
        "ROLLBOOK_DATABASE_WEBHOOK_URL",
        "ROLLBOOK_DATABASE_READER_URL",
        "ROLLBOOK_DATABASE_URL",
    } <= fields


# The planner's and the watcher's resident memory at the peak of a 10,000-pod CloneSet's in-place rollout
# (docs/install.md, "Sizing"): the shipped limits must hold it.
MEASURED_PEAK_MIB_AT_10000_PODS = {"planner": 653, "watcher": 340}


def _mebibytes(quantity: str) -> float:
    found = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert found, f"a memory quantity in Mi or Gi, got {quantity!r}"
    return int(found.group(1)) * (1024 if found.group(2) == "Gi" else 1)


@pytest.mark.parametrize("service", sorted(MEASURED_PEAK_MIB_AT_10000_PODS))
def test_the_memory_limit_holds_what_10000_pods_take(service: str) -> None:
    deployment = named(render("standalone"), "Deployment", f"rollbook-{service}")
    limit = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert _mebibytes(limit) > MEASURED_PEAK_MIB_AT_10000_PODS[service], limit


def test_the_sizing_patch_in_docs_install_raises_only_the_planner_and_the_watcher(tmp_path: Path) -> None:
    section = INSTALL_DOC.read_text().partition("## Sizing")[2]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/install.md lost its sizing patch"
    (tmp_path / "deploy").symlink_to(DEPLOY)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "kustomization.yaml").write_text(
        "resources:\n  - ../deploy/standalone\n" + block.group(1)
    )
    result = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "mine")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    limits = {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
        for m in of_kind([m for m in yaml.safe_load_all(result.stdout) if m], "Deployment")
    }
    shipped = {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
        for m in of_kind(render("standalone"), "Deployment")
    }
    raised = {"rollbook-planner", "rollbook-watcher"}
    assert {name: limits[name] for name in raised} == {name: "2Gi" for name in raised}
    assert {n: v for n, v in limits.items() if n not in raised} == {
        n: v for n, v in shipped.items() if n not in raised
    }
