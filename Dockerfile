# recap-proxy in a container: `docker build -t recap-proxy .`, then see compose.example.yaml.
# The store lives on the /data volume; ST's data folder is mounted read-only at /st-data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY adapters ./adapters
COPY templates ./templates
COPY tests ./tests
RUN pip install . \
    && useradd --create-home --uid 10001 recap \
    && mkdir -p /data /st-data \
    && chown recap:recap /data

USER recap
# Inside a container the proxy listens on every interface (publish the port on loopback
# only); that needs an access key (RECAP_PROXY_SERVER__ACCESS_KEY), which `serve` asks for.
ENV RECAP_PROXY_SERVER__HOST=0.0.0.0 \
    RECAP_PROXY_STORE__PATH=/data/recap-proxy.sqlite3 \
    RECAP_PROXY_SILLYTAVERN__DATA_DIR=/st-data
VOLUME ["/data"]
EXPOSE 8765

HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 CMD \
    python -c "import os, urllib.request; r = urllib.request.Request('http://127.0.0.1:8765/health', headers={'X-Recap-Key': os.environ.get('RECAP_PROXY_SERVER__ACCESS_KEY', '')}); urllib.request.urlopen(r, timeout=8)"

CMD ["recap-proxy", "serve"]
