#!/bin/sh
# Register SuperNode public keys with a SuperLink that runs with --enable-supernode-auth.
#
#   deploy/register-supernodes.sh CONNECTION KEY.pub [KEY.pub ...]     (positional arguments)
#
# CONNECTION is a [superlink.<name>] entry of $FLWR_HOME/config.toml (deploy/add-connection.sh),
# the SuperLink's own port (127.0.0.1:9093 on its machine), not the fleet proxy's.
# Each key is registered under its file name (supernode-0.pub -> supernode-0). A key that is
# already registered is reported and skipped, so the script can be re-run.
set -eu
if [ $# -lt 2 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2
fi
conn=$1
shift
for pub in "$@"; do
    name=$(basename "$pub" .pub)
    if out=$(flwr supernode register "$pub" "$conn" --name "$name" 2>&1); then
        echo "$out" | grep -i "registered" || echo "$out"
    elif echo "$out" | grep -q "already in use"; then
        echo "$name: already registered"
    else
        echo "$out" >&2
        exit 1
    fi
done
