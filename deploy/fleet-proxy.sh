#!/usr/bin/env bash
# The SuperNodes' way in: an HTTPS reverse proxy (nginx) that forwards only the Fleet API and
# the health check to the SuperLink on loopback (runs in the foreground).
#
#   deploy/fleet-proxy.sh --credentials DIR [--listen 0.0.0.0:9092] [--superlink 9093]
#                         [--run-dir DIR]
#
#   --credentials DIR  the SuperLink's ca.crt, server.pem and server.key (credentials.py tls)
#   --listen ADDR:PORT where the SuperNodes connect (default 0.0.0.0:9092; open it in the
#                      firewall; the certificate must name that address: credentials.py tls
#                      --san); they are started with deploy/supernode.sh --superlink <A>:9092
#   --superlink PORT   the loopback port of deploy/superlink.sh (default 9093), or HOST:PORT of
#                      a SuperLink only the proxy can reach (the compose demo: superlink:9093;
#                      the certificate must name HOST)
#   --run-dir DIR      folder for nginx's config, pid and access log (default: a new temp
#                      folder, removed when nginx stops: Ctrl-C, SIGTERM; a --run-dir is left).
#                      Your own folder, not a link, that no one else may write (made private
#                      when missing; never chmodded or chowned); nginx's buffers go to a new
#                      temp folder of this script's, removed when nginx stops
#
# Forwarded: /v1/fleet/... (SuperNodes, still authenticated by their keys at the SuperLink) and
# /health. Everything else - the Control API (/v1/control/: run submission, `flwr ls`, SuperNode
# registration) and the Runtime API (/v1/runtime/) - is answered 403 here. TLS is terminated with
# the SuperLink's own certificate and the upstream connection is verified against ca.crt.
# Each value written into nginx.conf is checked against a strict grammar (host, port, plain
# path) first; a value that is not is refused with the fix, nothing is pasted as it is.
# Needs nginx (Debian/Ubuntu: apt-get install nginx-light). docs/security.md says why.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
# Settings are options: a variable of an option's name (or the older PROXY_RUN_DIR) in the
# environment would be ignored, so it is refused.
for var in CREDENTIALS LISTEN SUPERLINK RUN_DIR PROXY_RUN_DIR; do
    value=$(printenv "$var" || true)
    [ -n "$value" ] || continue
    echo "refusing $var=$value from the environment: this script takes its settings as options" >&2
    echo "(--$(echo "$var" | tr 'A-Z_' 'a-z-' | sed 's/^proxy-//') ...); unset $var (env -u $var deploy/fleet-proxy.sh ...)" >&2
    exit 2
done
creds="" listen=0.0.0.0:9092 upstream=9093 run=""
while [ $# -gt 0 ]; do
    case "$1" in --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;; esac  # --option=value
    case "$1" in
        --credentials) creds=${2:?--credentials needs a folder}; shift 2 ;;
        --listen) listen=${2:?--listen needs ADDRESS:PORT}; shift 2 ;;
        --superlink) upstream=${2:?--superlink needs a port or HOST:PORT}; shift 2 ;;
        --run-dir) run=${2:?--run-dir needs a folder}; shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$creds" ] || usage
. "$(dirname "$0")/checks.sh"
# Every value written into nginx.conf is checked against a strict grammar first (host, port,
# path): a value with a ';', '{', a space or a newline would add directives (docs/security.md).
fail() { printf '%s\n' "$@" >&2; exit 2; }
if ! is_host_port "$listen"; then
    fail "--listen $listen: give ADDRESS:PORT, an address or host name and a port 1-65535" \
         "(e.g. 0.0.0.0:9092, 192.168.1.10:9092, [::]:9092)"
fi
listen_port=$hp_port
if is_port "$upstream"; then
    upstream_host=127.0.0.1 upstream_port=$upstream
elif is_host_port "$upstream"; then
    upstream_host=$hp_host upstream_port=$hp_port
else
    fail "--superlink $upstream: give the SuperLink's loopback port (e.g. 9093) or HOST:PORT" \
         "(e.g. superlink:9093, [fd00::1]:9093)"
fi
if is_loopback "$upstream_host" && [ "$listen_port" = "$upstream_port" ]; then
    fail "--listen $listen: port $listen_port is the SuperLink's own (--superlink), which serves" \
         "the Control API: give the proxy a port of its own (default 9092)"
fi
upstream_url=$upstream_host
! is_ipv6 "$upstream_host" || upstream_url="[$upstream_host]"
# the name the SuperLink's certificate is checked for (it names localhost, not 127.0.0.1, as DNS)
ssl_name=$upstream_host
! is_loopback "$upstream_host" || ssl_name=localhost
absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
[ -d "$creds" ] || fail "--credentials $creds: no such folder (make it with deploy/credentials.py tls)"
creds=$(cd -P -- "$(absolute "$creds")" && pwd -P) || fail "--credentials: cannot enter $creds"
plain="letters, digits, '.', '_', '-', '+' and '/' only"
is_plain_path "$creds" || fail "--credentials $creds: nginx.conf takes a path of $plain:" \
    "move the credentials to such a folder"
for f in ca.crt server.pem server.key; do
    [ -f "$creds/$f" ] && [ -r "$creds/$f" ] ||
        fail "missing $creds/$f (make it with deploy/credentials.py tls)"
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || fail "nginx not found: apt-get install nginx-light"
root=""
[ "$(id -u)" != 0 ] || root=1
tmp=${TMPDIR:-/tmp}
own_run="" work=""  # the folders this script made: removed when nginx stops (or this script)
trap 'rm -rf -- ${own_run:+"$own_run"} ${work:+"$work"}' EXIT
made_here() {  # a new folder of this script's in TMPDIR
    local made
    made=$(mktemp -d "$tmp/fleet-proxy.XXXXXX" 2>/dev/null) ||
        fail "cannot make a folder in $tmp (TMPDIR): give --run-dir, or a TMPDIR you may write"
    (cd -P -- "$(absolute "$made")" && pwd -P)  # (its real path: nginx.conf names it)
}
if [ -z "$run" ]; then
    own_run=$(made_here)
    run=$own_run
else
    # the folder is the user's, checked: this user's own, not a link, no one else may write it,
    # no link at the names written here (nginx, as root, would write through it); never chowned
    # or chmodded, so a private folder stays private
    while [ "$run" != / ] && [ "${run%/}" != "$run" ]; do run=${run%/}; done
    run=$(absolute "$run")
    [ ! -L "$run" ] || fail "--run-dir $run is a link (to $(readlink -- "$run")): what is" \
        "written there would land elsewhere; give the folder itself, or a new one"
    if [ ! -e "$run" ]; then
        mkdir -m 700 -- "$run" 2>/dev/null || fail "--run-dir $run cannot be made: give a" \
            "folder (or a new name in one) you may write"
    fi
    [ -d "$run" ] || fail "--run-dir $run is not a folder: give a folder, or a new name"
    [ -O "$run" ] || fail "--run-dir $run belongs to another user: give a folder of your own" \
        "(or a new name: it is made, private)"
    case $(ls -ld -- "$run") in
        ?????w*|????????w*)
            fail "--run-dir $run may be written by its group or others: anyone could put a link" \
                 "there that nginx would write through. Make it private (chmod 700 $run)," \
                 "or give a new name (it is made, private)" ;;
    esac
    run=$(cd -P -- "$run" && pwd -P)
    for f in nginx.conf nginx.pid access.log; do
        if [ -L "$run/$f" ] || { [ -e "$run/$f" ] && [ ! -f "$run/$f" ]; }; then
            fail "--run-dir $run: $f there is a link or not a file: nginx would write through" \
                 "it. Remove $run/$f, or give another folder"
        fi
    done
    work=$(made_here)
fi
buffers=${work:-$run}  # nginx makes its buffer folders there (as root: for its workers' user)
for folder in "$run" "$buffers"; do
    is_plain_path "$folder" || fail "folder $folder: nginx.conf takes a path of $plain:" \
        "give --run-dir such a folder (or a TMPDIR of such a path)"
done
user_line=""
if [ -n "$root" ]; then  # nginx's workers drop root; they reach their buffers in our folder
    user_line="user nobody nogroup;"
    chmod 711 "$buffers"
fi
upstream_block="proxy_pass https://$upstream_url:$upstream_port;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_ssl_trusted_certificate $creds/ca.crt;
            proxy_ssl_verify on;
            proxy_ssl_name $ssl_name;"
conf=$(mktemp "$run/.nginx.conf.XXXXXX") || fail "cannot write in $run: give a folder you may write"
cat > "$conf" <<CONF
# generated by deploy/fleet-proxy.sh
$user_line
worker_processes 1;
pid $run/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log $run/access.log;
    client_body_temp_path $buffers/body;
    proxy_temp_path $buffers/proxy;
    fastcgi_temp_path $buffers/fastcgi;
    uwsgi_temp_path $buffers/uwsgi;
    scgi_temp_path $buffers/scgi;
    server_tokens off;
    server {
        listen $listen ssl;
        ssl_certificate $creds/server.pem;
        ssl_certificate_key $creds/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        client_max_body_size 0;          # model updates: Flower chunks them, no limit here
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_read_timeout 3600s;
        proxy_send_timeout 3600s;
        # nginx matches the normalized path ('..', '//' and %-escapes resolved first)
        location /v1/fleet/ {
            $upstream_block
        }
        location = /health {
            $upstream_block
        }
        location / {
            default_type text/plain;
            return 403 "only the Fleet API is served here\n";
        }
    }
}
CONF
mv -f -- "$conf" "$run/nginx.conf"  # (a rename: never written through what was there)
echo "fleet proxy: https://$listen -> $upstream_url:$upstream_port (/v1/fleet/, /health); config $run/nginx.conf"
# nginx as a child, so that the folders made here can be removed when it stops: Ctrl-C (the
# terminal's SIGINT reaches both) or a signal to this script, which is passed on to nginx
"$nginx" -c "$run/nginx.conf" -p "$run" -g "daemon off;" &
nginx_pid=$!
trap 'kill -TERM "$nginx_pid" 2>/dev/null || true' INT TERM HUP
status=0
while :; do
    wait "$nginx_pid" && status=0 || status=$?
    kill -0 "$nginx_pid" 2>/dev/null || break  # (a signal ends `wait` early: wait again)
done
exit "$status"  # (the EXIT trap removes this script's folders)
