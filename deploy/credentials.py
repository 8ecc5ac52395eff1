"""Make the credentials of a secured Flower deployment (TLS certificates and SuperNode keys).

    python deploy/credentials.py tls --out DIR --san IP:192.168.1.10 --san DNS:superlink.lan
        DIR/ca.crt       self-signed CA: give it to every SuperNode and to every `flwr` user
        DIR/ca.key       the CA's private key: keep it on the admin's machine only
        DIR/server.pem   the SuperLink's certificate, signed by the CA, with the given SANs
        DIR/server.key   the SuperLink's private key: stays on the SuperLink's machine
    python deploy/credentials.py node-key --out DIR supernode-0 supernode-1
        DIR/supernode-0      EC (P-384) private key in OpenSSH format: stays on that SuperNode
        DIR/supernode-0.pub  its public key: registered with `flwr supernode register`

The SuperLink's certificate must name every address the SuperNodes and `flwr` use to reach it
(`--san`, repeatable; `localhost` and 127.0.0.1 are always included). Flower's SuperNode
authentication takes EC keys (the same kind `ssh-keygen -t ecdsa -b 384` makes). Only the
`cryptography` package (a dependency of flwr) is needed, no openssl or ssh-keygen. Existing files
are kept unless `--force` is given, so a re-run never silently replaces a deployed key.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_SANS = ("DNS:localhost", "IP:127.0.0.1")


def parse_san(text: str) -> x509.GeneralName:
    kind, _, value = text.partition(":")
    if kind.upper() == "IP" and value:
        return x509.IPAddress(ipaddress.ip_address(value))
    if kind.upper() == "DNS" and value:
        return x509.DNSName(value)
    raise argparse.ArgumentTypeError(
        f"SAN '{text}' must look like IP:10.0.0.5 or DNS:superlink.lan")


def _write(path: Path, data: bytes, private: bool, force: bool) -> None:
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists (use --force to replace it)")
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # O_EXCL below: never write into a file someone else made
    # Private keys are created owner-only (0600) by the open call itself, so there is no moment
    # at which another user could read them; public files are 0644.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600 if private else 0o644)  # only widens 0644 files a umask narrowed
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedacg-gc deployment"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls(out: Path, sans: list[x509.GeneralName], days: int, force: bool) -> list[Path]:
    """A CA and a server certificate for `sans`; returns the files written."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("fedacg-gc CA")).issuer_name(_name("fedacg-gc CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP384R1())
    first_dns = next((s.value for s in sans if isinstance(s, x509.DNSName)), "superlink")
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(first_dns)).issuer_name(ca_cert.subject)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = {
        "ca.key": (_pem_key(ca_key), True),
        "ca.crt": (ca_cert.public_bytes(serialization.Encoding.PEM), False),
        "server.key": (_pem_key(server_key), True),
        "server.pem": (server_cert.public_bytes(serialization.Encoding.PEM), False),
    }
    if not force:
        for name in files:
            if (out / name).exists():
                raise FileExistsError(f"{out / name} exists (use --force to replace the TLS files)")
    for name, (data, private) in files.items():
        _write(out / name, data, private, force)
    return [out / n for n in files]


def make_node_key(out: Path, name: str, force: bool) -> list[Path]:
    """An EC key pair in OpenSSH format for SuperNode authentication."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    _write(out / name, private, True, force)
    _write(out / f"{name}.pub", public + f" {name}\n".encode(), False, force)
    return [out / name, out / f"{name}.pub"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tls = sub.add_parser("tls", help="CA + SuperLink server certificate")
    tls.add_argument("--san", action="append", type=parse_san, default=[],
                     help="address the SuperLink is reached at, "
                          "e.g. IP:192.168.1.10 or DNS:superlink.lan")
    tls.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    keys = sub.add_parser("node-key", help="one EC key pair per SuperNode")
    keys.add_argument("names", nargs="+", help="file names of the keys, e.g. supernode-0")
    for p in (tls, keys):
        p.add_argument("--out", type=Path, required=True, help="output folder (created)")
        p.add_argument("--force", action="store_true", help="replace existing files")
    args = ap.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file in the way, no permission: one message, no traceback
        print(f"error: --out {args.out} cannot be a folder ({err.strerror or err}): give a "
              "folder, or a new name, that you may write", file=sys.stderr)
        return 2
    try:
        if args.cmd == "tls":
            sans = [parse_san(s) for s in DEFAULT_SANS]
            sans += [s for s in args.san if s not in sans]
            written = make_tls(args.out, sans, args.days, args.force)
            print("SANs:", ", ".join(str(s.value) for s in sans))
        else:
            written = [f for name in args.names for f in make_node_key(args.out, name, args.force)]
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: cannot write in {args.out} ({err.strerror or err}): give a folder you may "
              "write", file=sys.stderr)
        return 2
    for path in written:
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
