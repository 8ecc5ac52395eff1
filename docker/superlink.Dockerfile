# SuperLink image: Flower's official SuperLink of the tested release. In process isolation the
# SuperLink runs no app code, so it needs none of the app's dependencies.
# Build context: the repository root (see /.dockerignore); credentials are mounted, never copied.
ARG BASE_IMAGE=flwr/superlink:1.41.0
FROM ${BASE_IMAGE}
# The SuperLink's database (registered SuperNodes, runs) lives in a volume mounted here; made by
# the image's user so that a fresh named volume is writable by it.
RUN mkdir -p /app/state
ENTRYPOINT ["flower-superlink"]
