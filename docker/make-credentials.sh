#!/usr/bin/env bash
# Credentials of the compose demo: CA + SuperLink certificate (SANs: superlink, fleet-proxy,
# localhost, 127.0.0.1 and any extra ones given; the fleet proxy presents it to the SuperNodes), one EC key pair per SuperNode and the SuperExec secret.
#
#   docker/make-credentials.sh [NUM_NODES=2] [EXTRA_SAN ...]      e.g. docker/make-credentials.sh 5 IP:192.168.1.10
#
# Writes $CREDENTIALS_DIR (default docker/credentials). Existing files are kept, so adding nodes
# later (a larger NUM_NODES) only makes the new keys. Private files are mode 600 from the
# start. The containers run as uid 49999 (the user of Flower's images): run as root, the
# private files are given to that uid; run as another user they stay yours (600) and the script
# prints the one `sudo chown` that lets the containers read them. They are never made
# readable by other users.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=${1:-2}
shift $(( $# > 0 ? 1 : 0 ))
out=${CREDENTIALS_DIR:-$here/credentials}
python=${PYTHON:-python3}
mkdir -p "$out"
if [ ! -e "$out/server.pem" ]; then
    sans=(--san DNS:superlink --san DNS:fleet-proxy)
    for san in "$@"; do sans+=(--san "$san"); done
    "$python" "$here/../deploy/credentials.py" tls --out "$out" "${sans[@]}"
fi
for ((i = 0; i < nodes; i++)); do
    [ -e "$out/supernode-$i" ] || "$python" "$here/../deploy/credentials.py" node-key --out "$out" "supernode-$i"
done
if [ ! -e "$out/superexec.secret" ]; then
    (umask 077; "$python" -c "import secrets; print(secrets.token_urlsafe(32), end='')" > "$out/superexec.secret")
    echo "wrote $out/superexec.secret"
fi
private=("$out/server.key" "$out/superexec.secret")
for ((i = 0; i < nodes; i++)); do private+=("$out/supernode-$i"); done
chmod 600 "${private[@]}"
if [ "$(id -u)" = 0 ]; then
    chown 49999:49999 "${private[@]}"
else
    echo "not root: the private files are yours with mode 600; before 'docker compose up', let"
    echo "the containers (uid 49999) read them with:"
    echo "  sudo chown 49999:49999 ${private[*]}"
fi
echo "credentials for $nodes SuperNodes in $out (ca.key stays here: it is mounted nowhere)"
