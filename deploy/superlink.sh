#!/usr/bin/env bash
# Start the SuperLink with TLS and SuperNode authentication, on loopback (runs in the foreground).
#
#   deploy/superlink.sh --credentials DIR [--host 127.0.0.1] [--port 9093] [--database FILE]
#                       [-- more flower-superlink flags]
#
#   --credentials DIR  ca.crt, server.pem and server.key from `deploy/credentials.py tls`
#   --host HOST        address to listen on (default 127.0.0.1; a loopback address only, unless
#                      FEDACG_OPEN_CONTROL_API=1, see below)
#   --port PORT        its one HTTPS port (default 9093): the operator's `flwr` connection
#                      (deploy/add-connection.sh NAME 127.0.0.1:9093 ca.crt)
#   --database FILE    keep registered nodes and runs in FILE across restarts (default: memory)
#
# Flower serves the Fleet API (SuperNodes), the Control API (`flwr run/ls/log/stop`, SuperNode
# registration: no login in the open-source SuperLink) and the Runtime API (the ServerApp) on
# this one port, so it listens on loopback only: the operator uses `flwr` on this machine (or
# through `ssh -L 9093:127.0.0.1:9093`), and SuperNodes reach the Fleet API through
# deploy/fleet-proxy.sh, which forwards /v1/fleet/ and /health and nothing else
# (docs/security.md). FEDACG_OPEN_CONTROL_API=1 (environment) lets --host be another address:
# then anyone who reaches the port can register nodes and submit runs (an admin network only).
# Only SuperNodes whose public key was registered (deploy/register-supernodes.sh) are let in.
# The ServerApp runs in a subprocess here, so the app's Python dependencies must be installed on
# this machine; Flower's per-run `uv sync` of them is turned off.
set -euo pipefail
. "$(dirname "$0")/checks.sh"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
# Settings are options: a variable of an option's name (or the older SUPERLINK_DATABASE) in the
# environment would be ignored, so it is refused.
for var in CREDENTIALS HOST PORT DATABASE SUPERLINK_DATABASE; do
    value=$(printenv "$var" || true)
    [ -n "$value" ] || continue
    [ "$var" != HOST ] || [ "$value" != "$(hostname)" ] || continue  # tcsh exports HOST
    echo "refusing $var=$value from the environment: this script takes its settings as options" >&2
    echo "(--$(echo "$var" | tr 'A-Z_' 'a-z-' | sed 's/^superlink-//') ...); unset $var (env -u $var deploy/superlink.sh ...)" >&2
    exit 2
done
creds="" host=127.0.0.1 port=9093 db=()
while [ $# -gt 0 ]; do
    case "$1" in --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;; esac  # --option=value
    case "$1" in
        --credentials) creds=${2:?--credentials needs a folder}; shift 2 ;;
        --host) host=${2:?--host needs an address}; shift 2 ;;
        --port) port=${2:?--port needs a port}; shift 2 ;;
        --database) db=(--database "${2:?--database needs a file}"); shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$creds" ] || usage
if ! is_host "$host"; then
    echo "--host $host: not a host name or address: give the address to listen on (default" >&2
    echo "127.0.0.1)" >&2
    exit 2
fi
if ! is_loopback "$host" && [ "${FEDACG_OPEN_CONTROL_API:-0}" != 1 ]; then
    echo "refusing --host $host: the SuperLink's port also serves the Control API, which has no" >&2
    echo "login. Keep it on 127.0.0.1 and let SuperNodes in through deploy/fleet-proxy.sh," >&2
    echo "or set FEDACG_OPEN_CONTROL_API=1 on an admin-only network (docs/security.md)." >&2
    exit 2
fi
is_port "$port" || { echo "--port $port: not a port (a whole number 1-65535)" >&2; exit 2; }
for f in ca.crt server.pem server.key; do
    [ -r "$creds/$f" ] || { echo "missing $creds/$f (make it with deploy/credentials.py tls)" >&2; exit 2; }
done
# a taken port: named here with the fix, not left to Flower's bare "address already in use"
probe=$host
case "$host" in 0.0.0.0) probe=127.0.0.1 ;; ::) probe=::1 ;; esac
if (exec 3<>"/dev/tcp/$probe/$port") 2>/dev/null; then
    echo "--port $port: something listens on $host:$port already (another SuperLink? see who:" >&2
    echo "ss -ltnp 'sport = :$port'). Stop it, or give --port another port (and the fleet" >&2
    echo "proxy's --superlink and the flwr connection the same one)" >&2
    exit 2
fi
exec flower-superlink \
    --ssl-ca-certfile "$creds/ca.crt" --ssl-certfile "$creds/server.pem" --ssl-keyfile "$creds/server.key" \
    --enable-supernode-auth \
    --disable-runtime-dependency-installation \
    --host "$host" --port "$port" \
    ${db[@]+"${db[@]}"} "$@"  # (an empty array under set -u: bash 3.2, macOS)
