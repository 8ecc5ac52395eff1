#!/usr/bin/env bash
# Start the SuperLink with TLS and SuperNode authentication (runs in the foreground).
#
#   deploy/superlink.sh CREDENTIALS_DIR [HOST] [PORT] [extra flower-superlink flags...]
#
# CREDENTIALS_DIR holds ca.crt, server.pem and server.key from `deploy/credentials.py tls`.
# HOST defaults to 0.0.0.0 (every interface: SuperNodes on other machines connect here),
# PORT to 9092: one HTTPS port serves the Fleet API (SuperNodes), the Control API (`flwr`) and
# the Runtime API (the ServerApp). Only SuperNodes whose public key was registered
# (deploy/register-supernodes.sh) are let in. The ServerApp runs in a subprocess on this machine,
# so the app's Python dependencies must be installed here; Flower's per-run `uv sync` of them is
# turned off. Set SUPERLINK_DATABASE=/path/state.db to keep registered nodes and runs across
# restarts (default: in memory).
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,13p' "$0" >&2
    exit 2
fi
creds=$1
host=${2:-0.0.0.0}
port=${3:-9092}
shift $(( $# < 3 ? $# : 3 ))
for f in ca.crt server.pem server.key; do
    [ -r "$creds/$f" ] || { echo "missing $creds/$f (make it with deploy/credentials.py tls)" >&2; exit 2; }
done
db=()
if [ -n "${SUPERLINK_DATABASE:-}" ]; then
    db=(--database "$SUPERLINK_DATABASE")
fi
exec flower-superlink \
    --ssl-ca-certfile "$creds/ca.crt" --ssl-certfile "$creds/server.pem" --ssl-keyfile "$creds/server.key" \
    --enable-supernode-auth \
    --disable-runtime-dependency-installation \
    --host "$host" --port "$port" \
    "${db[@]}" "$@"
