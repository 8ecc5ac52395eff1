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
