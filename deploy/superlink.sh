#!/usr/bin/env bash
# Start the SuperLink with TLS and SuperNode authentication, on loopback (runs in the foreground).
#
#   deploy/superlink.sh CREDENTIALS_DIR [HOST=127.0.0.1] [PORT=9093] [extra flower-superlink flags...]
#
# CREDENTIALS_DIR holds ca.crt, server.pem and server.key from `deploy/credentials.py tls`.
# Flower serves the Fleet API (SuperNodes), the Control API (`flwr run/ls/log/stop`, SuperNode
# registration: no login in the open-source SuperLink) and the Runtime API (the ServerApp) on
# this one HTTPS port, so it listens on 127.0.0.1 only: the operator uses `flwr` on this machine
# (or through `ssh -L`), and SuperNodes reach the Fleet API only through deploy/fleet-proxy.sh,
# which forwards /v1/fleet/ and /health and nothing else (docs/security.md). A HOST that is not
# a loopback address is refused unless FEDACG_OPEN_CONTROL_API=1 (then anyone who reaches the
# port can register nodes and submit runs: an admin network only).
# Only SuperNodes whose public key was registered (deploy/register-supernodes.sh) are let in. The
# ServerApp runs in a subprocess on this machine, so the app's Python dependencies must be
# installed here; Flower's per-run `uv sync` of them is turned off. Set
# SUPERLINK_DATABASE=/path/state.db to keep registered nodes and runs across restarts.
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
creds=$1
host=${2:-127.0.0.1}
port=${3:-9093}
shift $(( $# < 3 ? $# : 3 ))
case "$host" in
    127.*|localhost|::1) ;;
    *)
        if [ "${FEDACG_OPEN_CONTROL_API:-0}" != 1 ]; then
            echo "refusing HOST $host: the SuperLink's port also serves the Control API, which has no" >&2
            echo "login. Keep it on 127.0.0.1 and let SuperNodes in through deploy/fleet-proxy.sh," >&2
            echo "or set FEDACG_OPEN_CONTROL_API=1 on an admin-only network (docs/security.md)." >&2
            exit 2
        fi ;;
esac
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
