"""Certificates of the local control plane: one CA, the API server's serving certificate, client
certificates for the admin and the components, and the service-account signing key."""
from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=365)
# Names a client inside the cluster would use for the API server, and loopback for us.
API_NAMES = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
             "localhost"]
API_IPS = ["127.0.0.1", "10.96.0.1"]  # 10.96.0.1: the `kubernetes` Service in the service range


def files(folder: Path, stem: str) -> tuple[Path, Path]:
    """(certificate, key) paths of the certificate named `stem`: where `issue` writes it."""
    return folder / f"{stem}.crt", folder / f"{stem}.key"


def service_account_files(folder: Path) -> tuple[Path, Path]:
    """(private, public) paths of the service-account signing key."""
    return folder / "sa.key", folder / "sa.pub"


def _write_key(path: Path, key) -> None:
    """Readable by its owner from the first byte (no window between write and chmod), and never
    through a symlink planted at its name."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, 0o600)  # a file that was there before keeps no wider mode
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID))


RENEW_BEFORE = datetime.timedelta(days=30)  # a certificate this close to its end is made anew at the next start


def lasting(cert: x509.Certificate) -> bool:
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc) > RENEW_BEFORE


class Authority:
    """The cluster's CA: signs every other certificate. A CA near its end is replaced, and every
    certificate it signed with it."""

    def __init__(self, folder: Path, name: str = "pytorchjob-kit-local-ca"):
        self.folder = folder
        self.cert_path, self.key_path = folder / "ca.crt", folder / "ca.key"
        if self.cert_path.exists():
            self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
            self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            if lasting(self.cert):
                return
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.chmod(0o700)  # keys and the CA: nobody else on the machine lists or reads them
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = _name(name)
        self.cert = (_builder(name, name, self.key.public_key())
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        _write_key(self.key_path, self.key)
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def signed(self, cert: x509.Certificate) -> bool:
        """Whether `cert` is this CA's and lasts beyond the renewal window: else it is made anew."""
        return lasting(cert) and cert.issuer == self.cert.subject and _signed_by(cert, self.cert)

    def issue(self, stem: str, cn: str, org: str | None = None, server: bool = False,
              names: list[str] = API_NAMES, ips: list[str] = API_IPS, also_client: bool = False) -> tuple[Path, Path]:
        """(certificate, key) files named <stem>.crt and <stem>.key; kept when they already exist.
        A server certificate is for `names` and `ips` (the API server's unless told); `also_client`:
        it is presented as a client too (etcd's gateway dials its own TLS port with it)."""
        crt, key_path = files(self.folder, stem)
        if crt.exists() and key_path.exists() and self.signed(x509.load_pem_x509_certificate(crt.read_bytes())):
            return crt, key_path
        key = ec.generate_private_key(ec.SECP256R1())
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server and also_client:
            usage.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (_builder(_name(cn, org), self.cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if server:
            sans = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        _write_key(key_path, key)
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return crt, key_path


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    except InvalidSignature:
        return False
    return True


def service_account_key(folder: Path) -> tuple[Path, Path]:
    """(private, public) RSA key files the API server signs and checks service-account tokens with."""
    private, public = service_account_files(folder)
    if not private.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(private, key)
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
