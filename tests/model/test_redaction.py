"""The redaction policy, table by table: what of an object is recorded (docs/events.md, "Redaction")."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.model.redaction import (
    DIGEST_PATTERN,
    LAST_APPLIED_ANNOTATION,
    MARK,
    RedactionPolicy,
    contains_digest,
    digest_map,
    is_digest,
    parse_patterns,
    restore,
)
from services.model.revision_hash import template_fnv

KEY = b"k" * 32
POLICY = RedactionPolicy(KEY)
CANARY = "s3cr3t-Canary-9"


def _container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nginx",
        "env": [
            {"name": "PLAIN", "value": CANARY},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        ],
        "envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "settings"}}],
    }


def _pod_spec() -> dict[str, Any]:
    return {
        "containers": [_container("app")],
        "initContainers": [_container("init")],
        "ephemeralContainers": [_container("debug")],
    }


def _text(value: Any) -> str:
    return json.dumps(value)


@pytest.mark.parametrize("kind", ["containers", "initContainers", "ephemeralContainers"])
@pytest.mark.parametrize(
    ("where", "build"),
    [
        ("pod", lambda spec: {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
        (
            "cloneset template",
            lambda spec: {
                "kind": "CloneSet",
                "metadata": {"name": "c"},
                "spec": {"template": {"spec": spec}},
            },
        ),
        ("sidecarset", lambda spec: {"kind": "SidecarSet", "metadata": {"name": "s"}, "spec": spec}),
    ],
)
def test_every_literal_env_value_of_every_container_kind_is_digested(
    where: str, build: Any, kind: str
) -> None:
    obj = build(_pod_spec())
    recorded = POLICY.redact_object(obj["kind"], obj)
    assert recorded is not None
    assert CANARY not in _text(recorded), where
    spec = recorded["spec"] if where != "cloneset template" else recorded["spec"]["template"]["spec"]
    [container] = spec[kind]
    plain, referenced = container["env"]
    assert is_digest(plain["value"]) and plain["name"] == "PLAIN"
    # references name a secret, they do not hold it: kept as they are
    assert referenced == {
        "name": "FROM_SECRET",
        "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
    }
    assert container["envFrom"] == [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "settings"}}]
    assert container["image"] == "nginx"


def test_the_last_applied_annotation_and_deny_listed_keys_keep_their_key_and_lose_their_value() -> None:
    obj = {
        "kind": "CloneSet",
        "metadata": {
            "name": "c",
            "annotations": {
                LAST_APPLIED_ANNOTATION: json.dumps({"env": [{"name": "A", "value": CANARY}]}),
                "example.com/api-token": CANARY,
                "example.com/Db-Password": CANARY,
                "example.com/owner": "team-a",
            },
            "labels": {"app": "web", "example.com/license-key": CANARY},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "web", "example.com/license-key": CANARY}},
            "template": {"metadata": {"labels": {"example.com/license-key": CANARY}}, "spec": {}},
        },
    }
    recorded = POLICY.redact_object("CloneSet", obj)
    assert recorded is not None and CANARY not in _text(recorded)
    annotations = recorded["metadata"]["annotations"]
    assert set(annotations) == set(obj["metadata"]["annotations"])
    assert is_digest(annotations[LAST_APPLIED_ANNOTATION])
    assert is_digest(annotations["example.com/api-token"])
    assert is_digest(annotations["example.com/Db-Password"])  # case-insensitive
    assert annotations["example.com/owner"] == "team-a"
    assert recorded["metadata"]["labels"]["app"] == "web"
    # a deny-listed label is digested alike in the selector and the template, so the selector still matches
    digest = recorded["metadata"]["labels"]["example.com/license-key"]
    assert recorded["spec"]["selector"]["matchLabels"]["example.com/license-key"] == digest
    assert recorded["spec"]["template"]["metadata"]["labels"]["example.com/license-key"] == digest


@pytest.mark.parametrize(
    ("patterns", "name", "denied"),
    [
        ("*TOKEN*", "GITHUB_TOKEN", True),
        ("*TOKEN*", "github_token", True),
        ("*TOKEN*", "tokenizer", True),
        ("*KEY*", "example.com/owner", False),
        ("db-*", "DB-HOST", True),
        ("db-*", "mydb-host", False),
        ("", "anything", False),
    ],
)
def test_deny_list_patterns_are_case_insensitive_globs(patterns: str, name: str, denied: bool) -> None:
    assert RedactionPolicy(KEY, parse_patterns(patterns)).denied(name) is denied


def test_digests_are_stable_keyed_and_detect_every_change() -> None:
    assert POLICY.digest("a") == POLICY.digest("a")
    assert POLICY.digest("a") != POLICY.digest("b")
    assert POLICY.digest("a") != RedactionPolicy(b"x" * 32).digest("a")  # another installation, other digests
    assert DIGEST_PATTERN.fullmatch(POLICY.digest(""))  # even an empty value
    # a short value cannot be looked up without the key: not a plain hash of it
    import hashlib

    assert hashlib.sha256(b"a").hexdigest() not in POLICY.digest("a")


def test_redacting_twice_changes_nothing_and_the_real_template_hash_is_kept() -> None:
    obj = {"kind": "CloneSet", "metadata": {"name": "c"}, "spec": {"template": {"spec": _pod_spec()}}}
    once = POLICY.redact_object("CloneSet", copy.deepcopy(obj))
    assert once is not None
    assert POLICY.redact_object("CloneSet", once) == once
    assert once[MARK]["templateFnv"] == template_fnv(obj["spec"]["template"])
    assert once[MARK]["policy"] == POLICY.policy_id
    assert obj["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == CANARY  # input untouched


def test_secrets_are_never_recorded_and_configmap_data_only_as_digests() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "db"}, "data": {"password": "c2VjcmV0"}}
    assert POLICY.redact_object("Secret", secret) is None
    config = {
        "kind": "ConfigMap",
        "metadata": {"name": "s"},
        "data": {"a": CANARY},
        "binaryData": {"b": "AAE="},
    }
    recorded = POLICY.redact_object("ConfigMap", config)
    assert recorded is not None and CANARY not in _text(recorded)
    assert set(recorded["data"]) == {"a"} and is_digest(recorded["data"]["a"])
    assert is_digest(recorded["binaryData"]["b"])


def test_the_grace_annotation_keeps_its_shape_with_env_values_and_metadata_digested() -> None:
    import base64

    metadata_patch = {"metadata": {"annotations": {"x-token": CANARY}}}
    meta = base64.b64encode(json.dumps(metadata_patch, separators=(",", ":")).encode()).decode()  # as planned
    grace = json.dumps(
        {
            "revision": "r-1",
            "metaDataPatch": meta,
            "graceSeconds": 3,
            "rollbookContainerPatch": {
                "containers": [{"name": "app", "env": [{"name": "A", "value": CANARY}]}]
            },
        },
        separators=(",", ":"),
    )
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"apps.kruise.io/inplace-update-grace": grace}},
    }
    recorded = POLICY.redact_object("Pod", pod)
    assert recorded is not None
    recorded_grace = recorded["metadata"]["annotations"]["apps.kruise.io/inplace-update-grace"]
    assert CANARY not in recorded_grace
    decoded = json.loads(recorded_grace)
    assert decoded["revision"] == "r-1" and decoded["graceSeconds"] == 3
    assert CANARY not in base64.b64decode(decoded["metaDataPatch"]).decode()
    assert contains_digest(recorded_grace)
    # and the real values come back from the real object
    restored, missing = restore(recorded, digest_map(POLICY, [pod]))
    assert missing == [] and restored["metadata"] == pod["metadata"]


def test_restore_brings_back_every_value_from_the_real_source_and_names_what_it_cannot() -> None:
    real = {"metadata": {"labels": {"example.com/license-key": CANARY}}, "spec": _pod_spec()}
    recorded = POLICY.redact_value(real)
    restored, missing = restore(recorded, digest_map(POLICY, [real]))
    assert restored == real and missing == []
    moved_on = copy.deepcopy(real)
    moved_on["spec"]["containers"][0]["env"][0]["value"] = "another value"
    _, missing = restore(recorded, digest_map(POLICY, [moved_on["spec"]["containers"][0]]))
    assert missing and all(is_digest(d) for d in missing)


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        RedactionPolicy(b"short")


def test_scrub_replaces_every_restored_value_in_an_error_text() -> None:
    from services.model.redaction import scrub

    digests = {POLICY.digest(CANARY): CANARY, POLICY.digest("ab"): "ab", POLICY.digest('q"x'): 'q"x'}
    quoted = json.dumps({"v": 'q"x'})  # the value JSON-escaped inside a message
    text = f'Invalid value: "{CANARY}": bad; env "ab" and {quoted}; about'
    scrubbed = scrub(text, digests)
    assert CANARY not in scrubbed and '"ab"' not in scrubbed and 'q\\"x' not in scrubbed
    assert "about" in scrubbed  # a short value is replaced only where quoted
    assert POLICY.digest(CANARY) in scrubbed
