"""The config files and strings the deploy scripts hand to Flower, made by their format's writer
and read back with Flower's own parser before they are used (docs/security.md#generated-configs):

    python deploy/configs.py connection NAME ADDRESS CA_CERT
        adds [superlink.NAME] to $FLWR_HOME/config.toml (default ~/.flwr/config.toml), written
        by tomli_w and read back with tomllib (deploy/add-connection.sh; ADDRESS is checked
        there, by checks.sh's is_host_port)
    python deploy/configs.py node-config [--client-id I] [--num-clients N] [--data-path DIR]
                                         [--cache-dir DIR] [--extra "KEY=VALUE ..."]
        prints the --node-config string of flower-supernode (deploy/supernode.sh): each value
        written by tomli_w, the whole read back with Flower's parser (flwr.common.config.
        parse_config_args); a value Flower would read otherwise, or an --extra that sets one of
        the options' keys, is refused

Bad input ends with one message naming the problem and the fix (exit status 2), never a
traceback. Needs the Python that Flower is installed in (tomli_w comes with it).
"""

from __future__ import annotations

import argparse
import copy
import errno
import os
import re
import stat
import sys
import tempfile
from pathlib import Path



# The deploy scripts stand alone (tests/test_layers.py): they run where the project is not
# installed, e.g. the compose demo's Flower image with deploy/ mounted. So the two file
# operations add-connection.sh needs are written here with the standard library: read at most a
# limit, never through a link; write all or nothing, never through a link.
class UnusableFile(OSError):
    """A file that cannot be used as it is; the message names it and the fix."""


def read_text_bounded(path: Path, limit: int) -> str:
    """`path`'s UTF-8 text (at most `limit` bytes), not through a link; FileNotFoundError where
    there is none, UnusableFile for a link, a non-file, a larger file or one not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnusableFile(f"{path} is a link: give the file itself") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnusableFile(f"{path} is not a regular file (a folder, a pipe): remove it")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnusableFile(f"{path} is larger than {limit} bytes: it is no config of connections")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnusableFile(f"{path} is not UTF-8 text (byte {err.start}): save it as UTF-8") \
            from None


def write_text_atomic(path: Path, text: str, mode: int) -> None:
    """`text` at `path` all or nothing: a new file beside it, renamed over it (a link there is
    replaced, never written through)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UnusableFile(f"cannot write {path} ({err.strerror}): check the folder") from None

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: Flower's own TOML reader
    import tomli as tomllib  # type: ignore[no-redef]

# a connection's name: a bare TOML key, as `flwr` and deploy/remove-connection.sh take it
CONNECTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
# the file add-connection.sh starts from where there is none (Flower's own default)
DEFAULT_CONFIG = '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
CONFIG_LIMIT = 1 << 20  # a config.toml of connections is a few KiB
# the node-config keys deploy/supernode.sh sets from its options: never from --node-config
OPTION_KEYS = {"data-path": "--data-path", "client-id": "--client-id",
               "num-clients": "--num-clients", "partition-id": "--client-id",
               "num-partitions": "--num-clients", "cache-dir": "--cache-dir"}


class Refused(Exception):
    """Bad input: the message names the problem and the fix."""


def toml_value(value) -> str:
    """`value` as TOML writes it (tomli_w): a string quoted and escaped, a number plain."""
    import tomli_w

    return tomli_w.dumps({"v": value}).partition(" = ")[2].rstrip("\n")


# --- config.toml (deploy/add-connection.sh) ---------------------------------------------------
def add_connection(home: Path, name: str, address: str, ca: str) -> Path:
    """[superlink.`name`] with `address` and the CA certificate `ca` added to home/config.toml:
    the file's own text kept, the new block written by tomli_w, the result read back with
    tomllib and compared with what was meant before it replaces the file (all or nothing)."""
    import tomli_w

    if not CONNECTION_NAME.match(name):
        raise Refused(f"connection name {name!r}: letters, digits, - and _ only, at most 64 "
                      "(e.g. lab): give such a name")
    ca_path = Path(os.path.abspath(ca))  # flwr resolves a relative one against FLWR_HOME
    if not ca_path.is_file() or not os.access(ca_path, os.R_OK):
        raise Refused(f"cannot read CA certificate {ca}: give the ca.crt that signed the "
                      "SuperLink's certificate (deploy/credentials.py tls)")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise Refused(f"cannot make {home} ({err.strerror}): set FLWR_HOME to a folder you may "
                      "write") from None
    if not home.is_dir():
        raise Refused(f"{home} is not a folder: remove it, or set FLWR_HOME to a folder")
    config = home / "config.toml"
    try:
        text = read_text_bounded(config, CONFIG_LIMIT)
    except FileNotFoundError:
        text = ""
    except UnusableFile as err:
        raise Refused(f"{err}") from None
    text = text if text.strip() else DEFAULT_CONFIG
    try:
        old = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:  # (too deep, too long)
        why = str(err) or type(err).__name__
        raise Refused(f"{config} is not valid TOML ({why}): flwr cannot read it either; fix "
                      "or remove it, then add the connection") from None
    links = old.get("superlink", {})
    if not isinstance(links, dict):
        raise Refused(f"{config}: 'superlink' is not a table of connections: fix the file")
    if name in links:
        raise Refused(f"{config} already has a connection '{name}'; edit or remove it first "
                      f"(deploy/remove-connection.sh {name})")
    entry = {"address": address, "root-certificates": str(ca_path)}
    new = text + ("" if text.endswith("\n") else "\n") + "\n"
    new += tomli_w.dumps({"superlink": {name: entry}})
    meant = copy.deepcopy(old)
    meant.setdefault("superlink", {})[name] = entry
    try:
        got = tomllib.loads(new)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):
        got = None
    if got != meant:
        raise Refused(f"{config}: [superlink.{name}] cannot be appended to it as it is (it "
                      "defines 'superlink' in another form): add it by hand, or remove the file")
    mode = config.stat().st_mode & 0o777 if config.exists() else 0o644
    try:
        write_text_atomic(config, new, mode)
    except UnusableFile as err:
        raise Refused(f"{err}") from None
    return config


# --- the node config (deploy/supernode.sh) -----------------------------------------------------
def flower_reads(text: str, what: str, fix: str) -> dict:
    """What flower-supernode reads from `--node-config text` (Flower's own parser); Refused
    naming `what` (the option that gave it) and the `fix` where Flower cannot read it."""
    import click
    from flwr.common.config import parse_config_args

    try:
        return parse_config_args([text] if text else None)
    except (click.ClickException, ValueError, OSError) as err:
        message = err.format_message() if isinstance(err, click.ClickException) else err
        raise Refused(f"{what}: Flower cannot read {text!r} ({message}); {fix}") from None


def node_config(options: dict, extra: str) -> str:
    """The --node-config string of `options` (the script's: key -> value) and the user's
    `extra` pairs, read back with Flower's parser as exactly these settings."""
    pairs = []
    for key, value in options.items():
        pair = f"{key}={toml_value(value)}"
        option, plain = f"--{key} {value!r}", "give a folder whose name has no '\"'"
        if flower_reads(pair, option, plain) != {key: value}:
            raise Refused(f"{option}: Flower's node-config parser would read it otherwise; "
                          f"{plain}")
        pairs.append(pair)
    extra = extra.strip()
    if extra.endswith(".toml"):
        raise Refused(f"--node-config {extra!r} ends in '.toml': Flower takes such a node "
                      "config for a TOML file's name, beside the options' pairs refused; give "
                      "KEY=VALUE pairs, a value ending in .toml quoted (key=\"a.toml\")")
    fix = ("give space-separated KEY=VALUE pairs, each value a TOML number, true/false or "
           "quoted string (e.g. 'key1=123 key2=\"text\"')")
    theirs = flower_reads(extra, "--node-config", fix) if extra else {}
    for key in theirs:
        if key in OPTION_KEYS:
            raise Refused(f"--node-config sets {key} (as Flower reads {extra!r}): give it with "
                          f"the option {OPTION_KEYS[key]} (--data-path, --client-id, "
                          "--num-clients, --cache-dir), one place for each setting")
    text = " ".join(pairs + ([extra] if extra else []))
    got = flower_reads(text, "--node-config beside the options", fix)
    if got != {**options, **theirs}:
        raise Refused(f"--node-config {extra!r}: beside the options Flower reads it otherwise "
                      f"({got!r}): {fix}")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    conn = sub.add_parser("connection")
    conn.add_argument("name")
    conn.add_argument("address")
    conn.add_argument("ca")
    node = sub.add_parser("node-config")
    node.add_argument("--client-id", type=int)
    node.add_argument("--num-clients", type=int)
    node.add_argument("--data-path")
    node.add_argument("--cache-dir")
    node.add_argument("--extra", default="")
    args = ap.parse_args(argv)
    try:
        for value in vars(args).values():
            if isinstance(value, str):
                try:
                    value.encode("utf-8")
                except UnicodeError:
                    raise Refused(f"{value!r} is not UTF-8 text: give it in UTF-8") from None
        if args.what == "connection":
            home = Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr")
            config = add_connection(home, args.name, args.address, args.ca)
            print(f"added [superlink.{args.name}] ({args.address}) to {config}")
        else:
            options = {key: value for key, value in (
                ("client-id", args.client_id), ("num-clients", args.num_clients),
                ("data-path", args.data_path), ("cache-dir", args.cache_dir))
                if value is not None}
            print(node_config(options, args.extra))
    except Refused as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
