#!/bin/sh
# Add a SuperLink connection for `flwr` (in $FLWR_HOME/config.toml, default ~/.flwr/config.toml).
#
#   deploy/add-connection.sh NAME ADDRESS CA_CERT          (three positional arguments)
#
# NAME     the connection's name, for `flwr run . NAME`, `flwr ls NAME`, ...
# ADDRESS  the SuperLink's own port, which serves the Control API: 127.0.0.1:9093 on the
#          SuperLink's machine (deploy/superlink.sh), or through `ssh -L 9093:127.0.0.1:9093
#          <host>`. Not the fleet proxy's port (9092): it answers `flwr` with 403 Forbidden.
#          It must match a SAN of the SuperLink's certificate (localhost and 127.0.0.1 always do).
# CA_CERT  the ca.crt that signed the SuperLink's certificate
#
# e.g. deploy/add-connection.sh lab 127.0.0.1:9093 ~/fedacg-credentials/ca.crt, then
# `flwr run . lab --stream`.
set -eu
if [ $# -ne 3 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
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
