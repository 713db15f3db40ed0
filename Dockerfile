# specwatch server image (the agent runs on the GPU hosts as a systemd service: deploy/systemd/).
#   docker build -t specwatch .          docker run -p 8000:8000 -v specwatch:/var/lib/specwatch specwatch
#   docker run --rm -v specwatch:/var/lib/specwatch specwatch user add me --role admin   # the first admin
# The image listens on the network, so it requires sign-in (SPECWATCH_AUTH=token; auth=none would refuse to
# start on 0.0.0.0): docs/security.md.
# Two stages: the wheel is built from the source tree, then installed alone into a slim runtime image, so
# the image holds exactly what `pip install 'specwatch[server]'` would (the bare package is the agent).
FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build
COPY . .
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    SPECWATCH_HOST=0.0.0.0 \
    SPECWATCH_AUTH=token \
    SPECWATCH_PORT=8000 \
    SPECWATCH_DATA_DIR=/var/lib/specwatch
COPY --from=build /dist/*.whl /tmp/
RUN pip install "$(echo /tmp/*.whl)[server]" && rm /tmp/*.whl \
    && useradd --system --uid 10001 --home-dir /var/lib/specwatch --create-home specwatch
USER specwatch
WORKDIR /var/lib/specwatch
VOLUME ["/var/lib/specwatch"]
EXPOSE 8000
# /healthz answers 503 when the database is unreachable; python is the one HTTP client the slim image has
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('SPECWATCH_PORT', '8000')}/healthz\", timeout=4)"]
ENTRYPOINT ["specwatch"]
CMD ["serve"]
