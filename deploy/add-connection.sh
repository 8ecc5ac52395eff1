#!/bin/sh
# Add a SuperLink connection for `flwr` (in $FLWR_HOME/config.toml, default ~/.flwr/config.toml).
#
#   deploy/add-connection.sh NAME ADDRESS CA_CERT
#
# e.g. deploy/add-connection.sh lab 192.168.1.10:9092 ~/fedacg-credentials/ca.crt, then
# `flwr run . lab --stream`. ADDRESS must match a SAN of the SuperLink's certificate.
set -eu
if [ $# -ne 3 ]; then
    sed -n '2,7p' "$0" >&2
    exit 2
fi
name=$1 address=$2
ca=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")  # flwr needs an absolute path
[ -r "$ca" ] || { echo "cannot read CA certificate $3" >&2; exit 2; }
home=${FLWR_HOME:-$HOME/.flwr}
mkdir -p "$home"
config=$home/config.toml
if [ ! -s "$config" ]; then
    printf '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n' > "$config"
fi
if grep -q "^\[superlink\.$name\]" "$config"; then
    echo "$config already has a connection '$name'; edit or remove it first" >&2
    exit 1
fi
printf '\n[superlink.%s]\naddress = "%s"\nroot-certificates = "%s"\n' "$name" "$address" "$ca" >> "$config"
echo "added [superlink.$name] ($address) to $config"
