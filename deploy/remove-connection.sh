#!/bin/sh
# Remove a SuperLink connection that deploy/add-connection.sh added (from $FLWR_HOME/config.toml,
# default ~/.flwr/config.toml): its [superlink.NAME] block and the blank line before it, nothing
# else of the file.
#
#   deploy/remove-connection.sh NAME          (one positional argument)
#
# NAME     the connection's name, as given to add-connection.sh (e.g. lab)
#
# A connection that is not there, or that is the file's default (`default = "NAME"`), is refused
# with the fix; the file is rewritten in place (its owner and mode stay).
set -eu
if [ $# -ne 1 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2
fi
name=$1
case "$name" in
    ''|*[!A-Za-z0-9_-]*)
        echo "connection name '$name': letters, digits, - and _ only (as flwr names them)" >&2
        exit 2 ;;
esac
config=${FLWR_HOME:-$HOME/.flwr}/config.toml
if [ -L "$config" ]; then  # (it is rewritten in place below: never through a link)
    echo "$config is a link (to $(readlink "$config")): put the file itself in its place" >&2
    exit 2
fi
if [ ! -f "$config" ] || ! grep -q "^\[superlink\.$name\]\$" "$config"; then
    echo "$config has no connection '$name' (its connections: the [superlink.<name>] blocks)" >&2
    exit 1
fi
if grep -q "^default *= *\"$name\"" "$config"; then
    echo "'$name' is the default connection of $config: make another the default first" >&2
    echo "(default = \"local\" under [superlink]), then remove it" >&2
    exit 1
fi
tmp=$(mktemp "$config.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# the block: its header to the next header; one blank line before it (add-connection.sh's)
awk -v header="[superlink.$name]" '
    skip && /^[ \t]*\[/ { skip = 0 }
    skip && /^[ \t]*$/ { blanks++; next }  # (a blank before the next block)
    skip { blanks = 0; next }
    $0 == header {
        skip = 1
        if (blanks > 0) blanks--
        for (; blanks > 0; blanks--) print ""
        next
    }
    /^[ \t]*$/ { blanks++; next }
    { for (; blanks > 0; blanks--) print ""; print }
    END { for (; blanks > 0; blanks--) print "" }
' "$config" > "$tmp"
cat "$tmp" > "$config"
echo "removed [superlink.$name] from $config"
