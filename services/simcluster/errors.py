"""Kubernetes API errors as `Status` objects, the way the API server reports them."""

from __future__ import annotations

from typing import Any

_REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the API answers with a `Status` body and the given HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON_BY_CODE.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(group: str, kind: str, name: str) -> dict[str, Any]:
    return {"name": name, "group": group, "kind": kind}


def not_found(group: str, plural: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, f'{qualified} "{name}" not found', "NotFound", _details(group, plural, name))


def already_exists(group: str, plural: str, name: str, being_deleted: bool = False) -> ApiError:
    """409 AlreadyExists; the registry prefixes "object is being deleted: " when the existing object
    has a deletionTimestamp (a namespace still terminating, a pod held by a finalizer)."""
    qualified = f"{plural}.{group}" if group else plural
    message = f'{qualified} "{name}" already exists'
    if being_deleted:
        message = f"object is being deleted: {message}"
    return ApiError(409, message, "AlreadyExists", _details(group, plural, name))


def forbidden(
    group: str, plural: str, name: str, reason: str, causes: list[dict[str, str]] | None = None
) -> ApiError:
    """403 as apimachinery's NewForbidden words it: `<resource> "<name>" is forbidden: <reason>`."""
    qualified = f"{plural}.{group}" if group else plural
    message = (
        f'{qualified} "{name}" is forbidden: {reason}' if name else f"{qualified} is forbidden: {reason}"
    )
    details = _details(group, plural, name)
    if causes:
        details["causes"] = causes
    return ApiError(403, message, "Forbidden", details)


def conflict(group: str, plural: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        _details(group, plural, name),
    )


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid. ``causes`` holds (field, reason type e.g. FieldValueInvalid, message). Several causes
    are listed in brackets, as apimachinery's NewInvalid aggregates them."""
    summary = ", ".join(f"{field}: {message}" for field, _, message in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"
    qualified = f"{kind}.{group}" if group else kind
    details = _details(group, kind, name)
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    return ApiError(422, f'{qualified} "{name}" is invalid: {summary}', "Invalid", details)


def gone(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
