"""The OpenAPI description says what the server really answers (checked by schemathesis in CI,
tests/system/reliability/test_fuzz_api.py): the statuses every operation can give besides its own (400 unparsable
body, 401/403 access, 404 for an unknown id, 409 conflicts, 421 Host check, 503 database unavailable or its disk
full) with their ``{"detail": "..."}`` body, and the range of the ids in paths (32-bit columns), so a
schema-valid request is never one the database must refuse."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

INT32_MAX = 2**31 - 1
ERROR = {
    "title": "Error",
    "type": "object",
    "properties": {"detail": {"type": "string", "title": "Detail"}},
    "required": ["detail"],
}
REF = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
COMMON = {
    "400": "the body is not valid JSON",
    "401": "authentication required (auth=token/proxy)",
    "403": "a change made without the admin role, or from another site",
    "421": "a Host name this server does not answer for",
    "503": "database unavailable or its disk full; retry later",
}


def _document(schema: dict[str, Any]) -> dict[str, Any]:
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses: dict[str, Any] = op["responses"]
            extra = dict(COMMON)
            if "{" in path:
                extra["404"] = "no such object"
            if method in ("post", "put", "patch", "delete"):
                extra["409"] = "conflicts with the current state (already revoked, name taken)"
            for code, why in extra.items():
                if code not in responses or not responses[code].get("content"):
                    responses[code] = {
                        "description": responses.get(code, {}).get("description") or why,
                        **REF,
                    }
            for param in op.get("parameters", []):
                s = param.get("schema", {})
                if param.get("in") == "path" and s.get("type") == "integer":
                    s.setdefault("minimum", 0)
                    s.setdefault("maximum", INT32_MAX)
    return schema


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
