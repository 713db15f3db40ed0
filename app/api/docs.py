"""/docs: the interactive API reference, from the Swagger UI vendored in static/vendor (static/VENDORED.md).
FastAPI's own page loads it from a CDN and starts it with an inline script, which the CSP (app/access/security.py)
forbids; this page loads both from this server."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

SWAGGER_UI = "5.32.0"
PAGE = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specwatch · API</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/vendor/swagger-ui-{SWAGGER_UI}.css"></head>
<body><div id="swagger-ui"></div>
<script src="/static/vendor/swagger-ui-{SWAGGER_UI}-bundle.js"></script>
<script src="/static/apidocs.js"></script></body></html>"""


def install(app: FastAPI) -> None:
    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(PAGE)
