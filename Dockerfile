# Worker image for docker-compose.yml (the no-Docker path is `make demo`).
# The base pinned to an exact Python and Debian release (the interpreter the tests run on);
# the libraries come from requirements.lock (exact versions, hashes checked).
FROM python:3.11.7-slim-bookworm
# WEB_HOST 0.0.0.0 inside the container only: what the host exposes is decided where the
# port is published (docker-compose.yml binds it to 127.0.0.1 unless WEB_BIND says otherwise).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WEB_HOST=0.0.0.0 \
    WORKER_DATA_DIR=/data
WORKDIR /app
# The locked dependencies first: a layer that changes only with the lock.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY streams ./streams
COPY db ./db
# The worker runs as an unprivileged user; /data (RocksDB tables) is its only writable place.
RUN pip install --no-deps --no-build-isolation . \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin reminders \
    && mkdir -p /data \
    && chown reminders:reminders /data
USER reminders
EXPOSE 6066
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('WEB_PORT', '6066'), timeout=3)"]
CMD ["streams", "worker"]
