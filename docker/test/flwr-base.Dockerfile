# A stand-in for Flower's official images (flwr/superlink, flwr/supernode, flwr/superexec) where
# Docker Hub cannot be reached: the compose test builds it FROM a Debian image made with
# debootstrap + `docker import`, with the build context = a wheelhouse prepared on the host.
# Like Flower's images: flwr in the venv /python/venv, user `app` (uid 49999), HOME=WORKDIR=/app.
# pip is pointed at the wheelhouse, so the app's Dockerfiles install their dependencies offline.
ARG DEBIAN_IMAGE=fedacg-gc-test/debian-python:bookworm
FROM ${DEBIAN_IMAGE}
ARG FLWR_VERSION
COPY . /wheelhouse
RUN python3 -m venv /python/venv \
    && /python/venv/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse "flwr==${FLWR_VERSION}" \
    && useradd --no-create-home --home-dir /app -c "" --uid 49999 app \
    && mkdir -p /app \
    && chown -R app:app /app /python/venv
ENV PATH=/python/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONIOENCODING=UTF-8 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/wheelhouse \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
USER app
ENV HOME=/app
