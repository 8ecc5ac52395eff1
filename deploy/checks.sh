# The checks of the deploy scripts' option values (sourced by superlink.sh and supernode.sh):
# each is a test (status 0 = good); the script names the option and the fix. Character classes
# are written out, so that no locale lets other digits or letters through.
_digit='[0123456789]'
_alnum='[abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789]'
_label="$_alnum([-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789]{0,61}$_alnum)?"

# a whole number written plainly: 0 or no leading zero, at most 9 digits (no sign, no space)
is_count() { [[ $1 =~ ^(0|[123456789]$_digit{0,8})$ ]]; }

# a TCP port: a whole number 1-65535
is_port() { [[ $1 =~ ^[123456789]$_digit{0,4}$ ]] && [ "$1" -le 65535 ]; }

# a dotted IPv4 address: four numbers 0-255, written plainly
is_ipv4() {
    local IFS=. part parts
    [[ $1 =~ ^$_digit{1,3}(\.$_digit{1,3}){3}$ ]] || return 1
    read -r -a parts <<< "$1"
    for part in "${parts[@]}"; do
        [[ $part =~ ^(0|[123456789]$_digit*)$ ]] && [ "$part" -le 255 ] || return 1
    done
}

# an IPv6 address (without brackets): hex digits and colons, at least two, and '::' at most
# once (an IPv4 tail, ::ffff:1.2.3.4, allowed)
is_ipv6() {
    [[ $1 =~ ^[0123456789abcdefABCDEF:.]{2,45}$ ]] && [[ $1 == *:*:* ]] &&
        [[ $1 != *::*::* && $1 != *:::* ]] || return 1
    case "$1" in *.*) is_ipv4 "${1##*:}" ;; esac
}

# a host name (RFC 1123: dot-separated labels of letters, digits and inner '-', 253 characters
# at most; not all digits, which would be an IPv4 address) or an IPv4 or IPv6 address
is_host() {
    is_ipv4 "$1" || is_ipv6 "$1" && return 0
    [ "${#1}" -le 253 ] && [[ $1 =~ ^$_label(\.$_label)*$ ]] && [[ ! $1 =~ ^[0123456789.]+$ ]]
}

# loopback only: 127.0.0.0/8, ::1 or localhost (a name that merely starts with 127. is not)
is_loopback() {
    [ "$1" = localhost ] || [ "$1" = ::1 ] || { is_ipv4 "$1" && [[ $1 == 127.* ]]; }
}

# HOST:PORT: a host name or IPv4 address and a port, or [IPv6]:PORT (the brackets required);
# sets hp_host (an IPv6 address without its brackets) and hp_port
is_host_port() {
    hp_host="" hp_port=""
    case "$1" in
        \[*\]:*) hp_host=${1%]:*}; hp_host=${hp_host#[}; hp_port=${1##*]:}
                 is_ipv6 "$hp_host" || return 1 ;;
        *:*:*) return 1 ;;  # an IPv6 address needs its brackets
        *:*) hp_host=${1%:*}; hp_port=${1##*:} ;;
        *) return 1 ;;
    esac
    is_host "$hp_host" && is_port "$hp_port"
}

# a path that may stand in a generated config file as it is (nginx.conf): absolute, its parts
# letters, digits, '.', '_', '-' and '+' only (no space, quote, ';', '{', '$', '#': nothing a
# config format reads as syntax), none of them '.' or '..'
_pathchar='[-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+]'
is_plain_path() {
    [ "${#1}" -le 1024 ] && [[ $1 =~ ^(/$_pathchar+)+$ ]] &&
        [[ /$1/ != */./* && /$1/ != */../* ]]
}

# the Python that the Flower command $1 runs with (the python3 beside it, as in a virtual
# environment), else python3 on PATH: printed where flwr and tomli_w are installed (deploy/
# configs.py writes and checks the configs with them); status 1 where they are not. Looked up,
# not imported: importing flwr costs about a second of CPU at every script start.
flwr_python() {
    local cmd py has='import importlib.util as u, sys
sys.exit(not (u.find_spec("flwr") and u.find_spec("tomli_w")))'
    cmd=$(command -v "$1" 2>/dev/null) || cmd=""
    for py in ${cmd:+"${cmd%/*}/python3"} python3; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c "$has" 2>/dev/null; then
            printf '%s\n' "$py"
            return 0
        fi
    done
    return 1
}
