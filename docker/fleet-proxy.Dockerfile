# Fleet proxy image: Debian's nginx-light running deploy/fleet-proxy.sh, the SuperNodes' only way
# to the SuperLink (it forwards /v1/fleet/ and /health, answers 403 to the Control and Runtime
# APIs; docs/security.md). apt uses the sources configured in the base image.
# Build context: the repository root (see /.dockerignore); credentials are mounted, never copied.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --no-create-home --home-dir /nonexistent --uid 49999 --user-group fleet-proxy \
    && chown fleet-proxy /var/log/nginx
COPY deploy/fleet-proxy.sh /usr/local/bin/fleet-proxy.sh
# its checks of the values it writes into nginx.conf (sourced from beside it)
COPY deploy/checks.sh /usr/local/bin/checks.sh
# the same uid as Flower's images, which the private credential files belong to
USER 49999
ENTRYPOINT ["bash", "/usr/local/bin/fleet-proxy.sh"]
