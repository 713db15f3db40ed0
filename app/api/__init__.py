"""The HTTP side apart from ingest and the dashboard: the read API, /healthz, /metrics, /docs, the OpenAPI
description, and the request-body kit (gzip, size caps) the routes share."""
