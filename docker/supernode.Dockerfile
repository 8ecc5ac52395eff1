# SuperNode image: Flower's official SuperNode of the tested release. In process isolation the
# ClientApp runs in the node's SuperExec container (superexec.Dockerfile), not here.
# Build context: the repository root (see /.dockerignore); credentials are mounted, never copied.
ARG BASE_IMAGE=flwr/supernode:1.41.0
FROM ${BASE_IMAGE}
ENTRYPOINT ["flower-supernode"]
