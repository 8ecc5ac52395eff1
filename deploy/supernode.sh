#!/usr/bin/env bash
# Start one SuperNode (runs in the foreground).
#
#   deploy/supernode.sh --superlink ADDR:PORT --ca CA_CERT --key PRIVATE_KEY
#                       [--data-path DIR] [--client-id I] [--num-clients N]
#                       [--cache-dir DIR] [--runtime-port 9094] [--node-config "KEY=VALUE ..."]
#                       [-- more flower-supernode flags]
#
#   --superlink ADDR:PORT  the fleet proxy (deploy/fleet-proxy.sh), e.g. 192.168.1.10:9092: a
#                      name or IP in the SuperLink certificate's SANs
#   --ca CA_CERT       ca.crt (verifies the SuperLink's certificate)
#   --key PRIVATE_KEY  this node's EC private key; its .pub must be registered with the SuperLink
#   --data-path DIR    the node's own data (a run with client-data='own'; docs/deployment.md)
#   --client-id I, --num-clients N   the node's client id among N (0-based). With --data-path
#                      both may be left out (the server gives the node a free slot among the
#                      run config's num-clients), not --num-clients alone; without
#                      it they are required and also choose the node's partition of the run's
#                      dataset (client-data='partitions': demos, rehearsals)
#   --cache-dir DIR    where the node keeps its prepared data (default ~/.cache/fedacg-gc/
#                      partitions; 'off' = none)
#   --runtime-port P   local port of the node's Runtime API, 127.0.0.1 only (default 9094;
#                      give every SuperNode on one machine its own)
#   --node-config "..." more node config, KEY=VALUE pairs (not the keys of the options above)
#
# Each message starts a fresh ClientApp process; it reads the node's prepared data from the
# cache (feddata/disk_cache.py). The app's Python dependencies must be installed here. On a small
# machine running several nodes, export OMP_NUM_THREADS=1 first.
set -euo pipefail
. "$(dirname "$0")/checks.sh"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
# Settings are options: a variable of an option's name (or the older NODE_CONFIG_EXTRA) in the
# environment would be ignored, so it is refused.
for var in SUPERLINK CA KEY DATA_PATH CLIENT_ID NUM_CLIENTS CACHE_DIR RUNTIME_PORT NODE_CONFIG \
           NODE_CONFIG_EXTRA; do
    value=$(printenv "$var" || true)
    [ -n "$value" ] || continue
    echo "refusing $var=$value from the environment: this script takes its settings as options" >&2
    echo "(--$(echo "$var" | tr 'A-Z_' 'a-z-' | sed 's/-extra$//') ...); unset $var (env -u $var deploy/supernode.sh ...)" >&2
    exit 2
done
superlink="" ca="" key="" data="" cid="" n="" cache="" port=9094 extra=""
while [ $# -gt 0 ]; do
    case "$1" in --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;; esac  # --option=value
    case "$1" in
        --superlink) superlink=${2:?--superlink needs ADDRESS:PORT}; shift 2 ;;
        --ca) ca=${2:?--ca needs a file}; shift 2 ;;
        --key) key=${2:?--key needs a file}; shift 2 ;;
        --data-path) data=${2:?--data-path needs a folder}; shift 2 ;;
        --client-id) cid=${2:?--client-id needs a number}; shift 2 ;;
        --num-clients) n=${2:?--num-clients needs a number}; shift 2 ;;
        --cache-dir) cache=${2:?--cache-dir needs a folder}; shift 2 ;;
        --runtime-port) port=${2:?--runtime-port needs a port}; shift 2 ;;
        --node-config) extra=${2?--node-config needs KEY=VALUE pairs}; shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$superlink" ] && [ -n "$ca" ] && [ -n "$key" ] || usage
if ! is_host_port "$superlink"; then
    echo "--superlink $superlink: give HOST:PORT, a host name or address and a port 1-65535" >&2
    echo "(e.g. 192.168.1.10:9092, fleet.example.org:9092, [fd00::1]:9092)" >&2
    exit 2
fi
for pair in "client-id:$cid" "num-clients:$n"; do
    value=${pair#*:}
    [ -z "$value" ] || is_count "$value" || {
        echo "--${pair%%:*} $value: not a whole number (0, 1, 2, ... written plainly, nothing else" >&2
        echo "after it): give the number alone" >&2
        exit 2
    }
done
if [ -n "$n" ] && [ "$n" -lt 1 ]; then
    echo "--num-clients 0: a federation has at least one client; give the number of clients" >&2
    exit 2
fi
if [ -n "$cid" ] && [ -n "$n" ] && [ "$cid" -ge "$n" ]; then
    echo "--client-id $cid of --num-clients $n: client ids are 0 .. $((n - 1)); give one of them" >&2
    exit 2
fi
is_port "$port" || { echo "--runtime-port $port: not a port (a whole number 1-65535)" >&2; exit 2; }
[ -f "$ca" ] && [ -r "$ca" ] || { echo "cannot read CA certificate $ca (give the ca.crt file)" >&2; exit 2; }
[ -f "$key" ] && [ -r "$key" ] || { echo "cannot read private key $key (give this node's key file)" >&2; exit 2; }
if [ -z "$data" ] && { [ -z "$cid" ] || [ -z "$n" ]; }; then
    echo "without --data-path the node trains on partition --client-id of --num-clients of the" >&2
    echo "run's dataset: give both (or --data-path, the node's own data)" >&2
    exit 2
fi
if [ -n "$data" ] && [ -z "$cid" ] && [ -n "$n" ]; then
    echo "--num-clients without --client-id: a node with --data-path and no client id gets a" >&2
    echo "free slot from the server among the run config's num-clients; give --client-id too," >&2
    echo "or leave --num-clients out" >&2
    exit 2
fi
# The node config: written by deploy/configs.py (each value by tomli_w) and read back with
# Flower's own parser; --node-config may not set the options' keys, as Flower reads it
if ! python=$(flwr_python flower-supernode); then
    echo "no Python with flwr found (beside flower-supernode, or python3 on PATH): activate" >&2
    echo "the environment Flower is installed in, then run this again" >&2
    exit 2
fi
config=$("$python" "$(dirname "$0")/configs.py" node-config ${cid:+"--client-id=$cid"} \
         ${n:+"--num-clients=$n"} ${data:+"--data-path=$data"} ${cache:+"--cache-dir=$cache"} \
         "--extra=$extra")
exec flower-supernode \
    --superlink "$superlink" --root-certificates "$ca" \
    --auth-supernode-private-key "$key" \
    --node-config "$config" \
    --host 127.0.0.1 --port "$port" \
    "$@"
