#!/usr/bin/env bash
# Start one SuperNode that trains on its own data (runs in the foreground).
#
#   deploy/supernode.sh SUPERLINK_ADDRESS CA_CERT PRIVATE_KEY PARTITION_ID NUM_PARTITIONS [RUNTIME_PORT] [extra flags...]
#
# SUPERLINK_ADDRESS  host:port of the SuperLink, a name or IP in its certificate's SANs
# CA_CERT            ca.crt (verifies the SuperLink's certificate)
# PRIVATE_KEY        this node's EC private key; its .pub must be registered with the SuperLink
# PARTITION_ID / NUM_PARTITIONS   the node's client id among N (0-based); with no data-path,
#                    also which share of the run's dataset it trains on
# NODE_CONFIG_EXTRA="data-path='/data/mine'"   the node's own data folder (docs/deployment.md)
# RUNTIME_PORT       local port of the node's Runtime API, 127.0.0.1 only (default 9094; give
#                    every SuperNode on one machine its own)
# NODE_CONFIG_EXTRA  (env) more node config, e.g. "cache-dir='/data/fedacg-cache'"
#
# Each message starts a fresh ClientApp process; it reads the node's prepared partition from the
# local cache (see feddata/disk_cache.py). The app's Python dependencies must be installed here.
# On a small machine running several nodes, export OMP_NUM_THREADS=1 first.
set -euo pipefail
if [ $# -lt 5 ]; then
    sed -n '2,18p' "$0" >&2
    exit 2
fi
superlink=$1 ca=$2 key=$3 pid=$4 nparts=$5
port=${6:-9094}
shift $(( $# < 6 ? $# : 6 ))
[ -r "$ca" ] || { echo "cannot read CA certificate $ca" >&2; exit 2; }
[ -r "$key" ] || { echo "cannot read private key $key" >&2; exit 2; }
exec flower-supernode \
    --superlink "$superlink" --root-certificates "$ca" \
    --auth-supernode-private-key "$key" \
    --node-config "partition-id=$pid num-partitions=$nparts${NODE_CONFIG_EXTRA:+ $NODE_CONFIG_EXTRA}" \
    --host 127.0.0.1 --port "$port" \
    "$@"
