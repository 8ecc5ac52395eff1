# SuperExec image with the app's Python dependencies: runs the ServerApp (next to the SuperLink)
# or a node's ClientApp processes (next to its SuperNode). The app's code is not baked in: each
# run ships it as a FAB. Build context: the repository root (see /.dockerignore).
#   PIP_EXTRA_ARGS="--extra-index-url <PyTorch CPU wheel index>"  -> CPU-only torch (see PyTorch's install page)
ARG BASE_IMAGE=flwr/superexec:1.41.0
FROM ${BASE_IMAGE}
ARG PIP_EXTRA_ARGS=""
# ~/fedacg-gc-runs (ServerApp outputs, a volume) and ~/.cache/fedacg-gc (ClientApp partition
# caches) are made by the image's user, so that a fresh named volume is writable by it.
COPY pyproject.toml docker/app_requirements.py /tmp/fedacg-gc/
RUN python /tmp/fedacg-gc/app_requirements.py /tmp/fedacg-gc/pyproject.toml > /tmp/fedacg-gc-requirements.txt \
    && pip install --no-cache-dir ${PIP_EXTRA_ARGS} -r /tmp/fedacg-gc-requirements.txt \
    && mkdir -p "$HOME/fedacg-gc-runs" "$HOME/.cache/fedacg-gc"
ENTRYPOINT ["flower-superexec"]
