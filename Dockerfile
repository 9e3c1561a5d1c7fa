# Worker image for docker-compose.yml and the Helm chart (the no-Docker path is `make demo`).
# The base pinned to an exact Python patch and Debian release (.ci/run tests on the same
# minor); the libraries come from requirements.lock (exact versions, hashes checked).
#
# Two stages: the build stage installs the lock and the service into a virtualenv with pip;
# the runtime stage copies only that virtualenv, and removes pip and setuptools from the
# base image, so nothing in the running image can install anything.
FROM python:3.13.16-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# --without-pip: the virtualenv gets no pip of its own; the base image's pip installs into it.
RUN python -m venv --without-pip /opt/venv
WORKDIR /src
# The locked dependencies first: a layer that changes only with the lock.
COPY requirements.lock ./
RUN pip --python /opt/venv/bin/python install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY streams ./streams
COPY db ./db
# The lock has the build backend (--all-build-deps); nothing is resolved here.
RUN pip --python /opt/venv/bin/python install --no-deps --no-build-isolation . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM python:3.13.16-slim-bookworm
# WEB_HOST 0.0.0.0 inside the container only: what the host exposes is decided where the
# port is published (docker-compose.yml binds it to 127.0.0.1 unless WEB_BIND says otherwise).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH \
    WEB_HOST=0.0.0.0 \
    WORKER_DATA_DIR=/data
# No installer in the runtime: the base image's pip goes, with its console scripts (3.12+
# images ship no setuptools or wheel); the service's virtualenv never had any.
RUN python -m pip uninstall -y -q pip \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin reminders \
    && mkdir -p /data /app \
    && chown reminders:reminders /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The worker runs as an unprivileged user; /data (RocksDB tables) is its only writable place.
USER reminders
EXPOSE 6066
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('WEB_PORT', '6066'), timeout=3)"]
CMD ["streams", "worker"]
