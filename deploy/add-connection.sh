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
# `flwr run . lab --stream`. The file is read back with tomllib before it is replaced; a name
# that is taken, or that is not letters, digits, - and _, is refused (docs/security.md).
set -eu
if [ $# -ne 3 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2
fi
name=$1 address=$2 ca=$3
here=$(dirname "$0")
# ADDRESS by the deploy scripts' one grammar (checks.sh); the file by deploy/configs.py: its
# block written by tomli_w, the result read back with tomllib before it replaces the file
if ! bash -c '. "$1"; is_host_port "$2"' _ "$here/checks.sh" "$address"; then
    echo "ADDRESS $address: give HOST:PORT, a host name or address and a port 1-65535" >&2
    echo "(e.g. 127.0.0.1:9093, [::1]:9093)" >&2
    exit 2
fi
if ! python=$(bash -c '. "$1"; flwr_python flwr' _ "$here/checks.sh"); then
    echo "no Python with flwr found (beside the flwr command, or python3 on PATH): activate" >&2
    echo "the environment Flower is installed in, then run this again" >&2
    exit 2
fi
exec "$python" "$here/configs.py" connection "$name" "$address" "$ca"
