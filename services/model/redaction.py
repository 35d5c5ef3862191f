"""The redaction policy: what of a Kubernetes object may be recorded (stored, published, logged, served).

Pure functions; the installation's HMAC key is passed in (``services/infra/redaction_key.py`` reads it).
Applied by the watcher to every object before it is diffed, stored or published, so every later record
(revisions, pod actions, statuses, shadow trails) is built from redacted values only. docs/events.md,
"Redaction", lists field by field what is kept.

- Every literal ``env[].value`` of every container list (``containers``, ``initContainers``,
  ``ephemeralContainers``, wherever they appear: pods, templates, SidecarSet specs, in-place patches)
  becomes a keyed digest ``hmac-sha256:<64 hex>``. ``valueFrom`` and ``envFrom`` are references and stay.
- The ``kubectl.kubernetes.io/last-applied-configuration`` annotation, and every annotation, label (and
  ``matchLabels`` entry, so selectors still match) whose key matches a deny-list pattern, keep their key
  and get a digest for a value. Patterns are shell globs matched case-insensitively.
- Env values and template metadata inside the in-place grace annotation (JSON, base64) are digested alike.
- ConfigMap ``data`` / ``binaryData`` values become digests; a Secret is never recorded (``None``).

A digest is HMAC-SHA256 of the value under the installation key: equal values give equal digests (a
change is still seen, comparisons and equality of templates still hold), a value cannot be guessed back
without the key, however short. Redacting twice changes nothing (digests are left as they are).

A redacted object carries ``rollbookRedaction`` at its top level: the policy that redacted it and, for
what decisions need of the real values, the values themselves computed before redaction (a CloneSet's
``templateFnv``, from which its revision hash is finished: ``services/model/revision_hash.py``).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from services.model import sidecarset as ss
from services.model.revision_hash import data_fnv, template_fnv
from services.model.sidecarset.core import REDACTION_MARK as MARK  # top-level key of a redacted object

DIGEST_PREFIX = "hmac-sha256:"
DIGEST_PATTERN = re.compile(r"hmac-sha256:[0-9a-f]{64}")
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
# The in-place grace annotations (current and legacy key): JSON with a base64 metadata patch and, in the
# extended mode, the env part of the container patch.
GRACE_ANNOTATIONS = ("apps.kruise.io/inplace-update-grace", "inplace-update-grace")
DEFAULT_DENY = ("*TOKEN*", "*PASSWORD*", "*PASSWD*", "*SECRET*", "*KEY*", "*CREDENTIAL*")
CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
CLONESET_KIND = "CloneSet"
_DIGEST_CACHE = 4096  # values remembered with their digest (cleared when full)
_DIGEST_CACHE_TEXT = 1024  # ... only values up to this many characters
SIDECARSET_KIND = "SidecarSet"


def parse_patterns(text: str) -> tuple[str, ...]:
    """A comma-separated deny-list setting as patterns (blank entries dropped)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class RedactionPolicy:
    """The installation's policy: its HMAC key and the deny-list of annotation/label keys and env names."""

    key: bytes
    deny: tuple[str, ...] = DEFAULT_DENY
    _lowered: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _digests: dict[str, str] = field(init=False, repr=False, compare=False)
    _denied: dict[str, bool] = field(init=False, repr=False, compare=False)
    # Computed once: every recorded object names its policy (two hashes each time were 2% of the watcher).
    key_id: str = field(init=False, compare=False)
    policy_id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise ValueError("the redaction key must hold at least 16 bytes")
        object.__setattr__(self, "_lowered", tuple(p.lower() for p in self.deny))
        object.__setattr__(self, "_digests", {})
        object.__setattr__(self, "_denied", {})
        # key_id names the key without revealing it (HMAC of a fixed label, 8 bytes); policy_id,
        # ``v1/<key id>/<deny-list id>``, names the policy that redacted a record.
        key_id = hmac.new(self.key, b"rollbook redaction key id", hashlib.sha256).hexdigest()[:16]
        deny_id = hashlib.sha256("\n".join(self.deny).encode()).hexdigest()[:16]
        object.__setattr__(self, "key_id", key_id)
        object.__setattr__(self, "policy_id", f"v1/{key_id}/{deny_id}")

    # --- values -------------------------------------------------------------------------------------

    def digest(self, value: Any) -> str:
        """The keyed digest of a value (a digest already is left as it is)."""
        if isinstance(value, str) and is_digest(value):
            return value
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        return self._digest_text(text)

    def _digest_text(self, text: str) -> str:
        # The pods of a workload repeat their template's values: each is hashed once (bounded memo).
        cache = self._digests
        found = cache.get(text)
        if found is None:
            found = DIGEST_PREFIX + hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()
            if len(text) <= _DIGEST_CACHE_TEXT:
                if len(cache) >= _DIGEST_CACHE:
                    cache.clear()
                cache[text] = found
        return found

    def denied(self, name: str) -> bool:
        # Every observation of a pod names the same few label and annotation keys: each is matched against
        # the patterns once (bounded memo; fnmatch per key was about 8% of the watcher's CPU).
        cache = self._denied
        found = cache.get(name)
        if found is None:
            lowered = name.lower()
            found = any(fnmatch.fnmatchcase(lowered, pattern) for pattern in self._lowered)
            if len(cache) >= _DIGEST_CACHE:
                cache.clear()
            cache[name] = found
        return found

    # --- objects ------------------------------------------------------------------------------------

    def redact_object(self, kind: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object as it may be recorded; None for an object never recorded (a Secret). Computes what
        decisions need of the real values first (a CloneSet's template hash) and keeps it in ``MARK``."""
        if kind == "Secret" or obj.get("kind") == "Secret":
            return None
        existing = obj.get(MARK)
        mark: dict[str, Any] = dict(existing) if isinstance(existing, dict) else {}
        if kind == CLONESET_KIND and "templateFnv" not in mark:
            template = (obj.get("spec") or {}).get("template")
            if isinstance(template, dict):
                mark["templateFnv"] = template_fnv(template)
        if kind == SIDECARSET_KIND and "sidecarsetHash" not in mark:
            mark.update(_sidecarset_values(obj))
        # status is the API server's and the controllers' (no env values, annotations or labels); managed
        # fields name fields without their values: neither is walked.
        result = self.redact_value({k: v for k, v in obj.items() if k != "status"})
        if "status" in obj:
            result["status"] = obj["status"]
        if kind == "ConfigMap" or obj.get("kind") == "ConfigMap":
            for name in ("data", "binaryData"):
                data = result.get(name)
                if isinstance(data, dict):
                    result[name] = {k: self.digest(v) for k, v in data.items()}
        mark["policy"] = self.policy_id
        result[MARK] = mark
        return result

    def redact_value(self, value: Any) -> Any:
        """Any JSON value with the policy applied wherever containers, annotations or labels appear."""
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if k in CONTAINER_LISTS and isinstance(v, list):
                    out[k] = [self._container(c) for c in v]
                elif k == "managedFields":
                    out[k] = v
                elif k == "annotations" and isinstance(v, dict):
                    out[k] = self._annotations(v)
                elif k in ("labels", "matchLabels") and isinstance(v, dict):
                    out[k] = {
                        name: self.digest(text) if self.denied(name) else text for name, text in v.items()
                    }
                else:
                    out[k] = self.redact_value(v)
            return out
        if isinstance(value, list):
            return [self.redact_value(item) if isinstance(item, dict | list) else item for item in value]
        return value

    def _container(self, container: Any) -> Any:
        if not isinstance(container, dict):
            return self.redact_value(container)
        out: dict[str, Any] = {}
        for k, v in container.items():  # the container's own key order
            if k == "env" and isinstance(v, list):
                out[k] = [self._env(item) for item in v]
            elif isinstance(v, dict | list):
                out[k] = self.redact_value(v)
            else:
                out[k] = v
        return out

    def _env(self, item: Any) -> Any:
        if isinstance(item, dict) and "value" in item and item.get("value") is not None:
            return {**item, "value": self.digest(item["value"])}
        return item

    def _annotations(self, annotations: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in annotations.items():
            if name == LAST_APPLIED_ANNOTATION or self.denied(name):
                out[name] = self.digest(value)
            elif name in GRACE_ANNOTATIONS and isinstance(value, str):
                out[name] = self._grace(value)
            else:
                out[name] = value
        return out

    def _grace(self, value: str) -> str:
        """The grace annotation's env values and metadata patch redacted, in the planner's own JSON form;
        a value that is not the JSON it should be is digested whole."""
        return _map_grace(value, self.redact_value, self.digest)


def _sidecarset_values(obj: dict[str, Any]) -> dict[str, Any]:
    """What the planner needs of a SidecarSet's real spec: its two hashes (what the webhook writes on the
    pods) and the FNV of its revision data (the revision's name). Nothing for a spec the planner rejects."""
    try:
        parsed = ss.parse_sidecarset(obj)
    except ss.SidecarSetError:
        return {}
    return {
        "sidecarsetHash": parsed.hash,
        "sidecarsetHashWithoutImage": parsed.hash_without_image,
        "revisionFnv": data_fnv(ss.revision_data(parsed.spec)),
    }


def _map_grace(value: str, convert: Callable[[Any], Any], fallback: Callable[[str], str]) -> str:
    try:
        spec = json.loads(value)
    except ValueError:
        return fallback(value)
    if not isinstance(spec, dict):
        return fallback(value)
    result = dict(spec)
    patch = spec.get("metaDataPatch")
    if isinstance(patch, str):
        try:
            decoded = json.loads(base64.b64decode(patch, validate=True))
        except (ValueError, binascii.Error):
            return fallback(value)
        converted = json.dumps(convert(decoded), separators=(",", ":"), ensure_ascii=False)
        result["metaDataPatch"] = base64.b64encode(converted.encode()).decode()
    if "rollbookContainerPatch" in spec:
        result["rollbookContainerPatch"] = convert(spec["rollbookContainerPatch"])
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)


def _decoded_grace(value: str) -> dict[str, Any] | None:
    """A grace annotation with its metadata patch decoded (what ``_map_grace`` converts)."""
    try:
        spec = json.loads(value)
        if not isinstance(spec, dict):
            return None
        if isinstance(spec.get("metaDataPatch"), str):
            spec["metaDataPatch"] = json.loads(base64.b64decode(spec["metaDataPatch"], validate=True))
    except (ValueError, binascii.Error):
        return None
    return spec


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and DIGEST_PATTERN.fullmatch(value) is not None


def contains_digest(value: Any) -> bool:
    """Whether a JSON value holds a digest anywhere (in a string, or base64 inside a grace annotation)."""
    if isinstance(value, str):
        return DIGEST_PREFIX in value or _grace_holds_digest(value)
    if isinstance(value, dict):
        return any(contains_digest(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_digest(v) for v in value)
    return False


def _grace_holds_digest(value: str) -> bool:
    if '"metaDataPatch"' not in value:
        return False
    found = False

    def look(decoded: Any) -> Any:
        nonlocal found
        found = found or contains_digest(decoded)
        return decoded

    _map_grace(value, look, lambda text: text)
    return found


def digest_map(policy: RedactionPolicy, sources: Iterable[Any]) -> dict[str, str]:
    """digest -> real value for every value the policy digests in ``sources`` (real objects): what
    restores a recorded (redacted) body from the live objects it was built from."""
    found: dict[str, str] = {}

    def collect(real: Any, redacted: Any) -> None:
        if isinstance(real, dict) and isinstance(redacted, dict):
            for k, v in real.items():
                if k in GRACE_ANNOTATIONS and isinstance(v, str):
                    decoded = _decoded_grace(v)
                    if decoded is not None:
                        collect(decoded, policy.redact_value(decoded))
                    continue
                collect(v, redacted.get(k))
        elif isinstance(real, list) and isinstance(redacted, list):
            for a, b in zip(real, redacted, strict=False):
                collect(a, b)
        elif isinstance(real, str) and is_digest(redacted) and real != redacted:
            found[redacted] = real

    for source in sources:
        collect(source, policy.redact_value(source))
    return found


def restore(value: Any, digests: dict[str, str]) -> tuple[Any, list[str]]:
    """``value`` with every digest replaced by its real value (inside strings and grace annotations too),
    and the digests no source restored (the body cannot be written then)."""
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        digest = match.group(0)
        if digest in digests:
            return digests[digest]
        missing.append(digest)
        return digest

    def text(raw: str) -> str:
        return DIGEST_PATTERN.sub(one, raw) if DIGEST_PREFIX in raw else raw

    def walk(node: Any, key: str | None = None) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, str):
            if key in GRACE_ANNOTATIONS:
                return _map_grace(node, lambda decoded: walk(decoded), text)
            return text(node)
        return node

    return walk(value), missing


def scrub(text: str, digests: dict[str, str]) -> str:
    """``text`` (an API server's error, say) with every real value of ``digests`` (digest -> real value)
    replaced by its digest: a reason recorded or logged never repeats a value the trail holds as a digest.
    Values shorter than three characters are replaced only where quoted, so the text stays readable."""
    for digest, real in sorted(digests.items(), key=lambda item: -len(item[1])):
        if not real:
            continue
        forms = {real, json.dumps(real)[1:-1]}
        for form in forms:
            if len(form) >= 3:
                text = text.replace(form, digest)
            else:
                text = text.replace(f'"{form}"', f'"{digest}"').replace(f"'{form}'", f"'{digest}'")
    return text
