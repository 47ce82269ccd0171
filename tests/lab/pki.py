"""Certificates for the lab's control plane: one CA, the API server's serving cert,
an admin client cert (system:masters) shared by the components, the kwok kubelet
serving cert and the service-account key pair. Loopback names only."""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path, data, mode=0o600):
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name, organization=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _issue(ca_key, ca_cert, key, subject, usages, dns=(), ips=()):
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + _VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False))
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def ensure_pki(directory):
    """Creates the lab PKI in ``directory`` unless it exists; returns the file paths."""
    os.makedirs(directory, exist_ok=True)
    paths = dict((name, os.path.join(directory, name)) for name in (
        "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key",
        "kwok.crt", "kwok.key", "sa.key", "sa.pub"))
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    ca_key = _key()
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    ca_cert = (x509.CertificateBuilder().subject_name(_name("gpuplatform-lab-ca")).issuer_name(_name("gpuplatform-lab-ca"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + _VALIDITY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    _write(paths["ca.key"], _key_pem(ca_key))
    _write(paths["ca.crt"], ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    server = ExtendedKeyUsageOID.SERVER_AUTH
    client = ExtendedKeyUsageOID.CLIENT_AUTH
    for name, subject, usages, dns, ips in (
        ("apiserver", _name("kube-apiserver"), [server],
         ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"), ("127.0.0.1", "10.96.0.1")),
        ("admin", _name("lab-admin", "system:masters"), [client], (), ()),
        ("kwok", _name("kwok-kubelet"), [server], ("localhost",), ("127.0.0.1",)),
    ):
        key = _key()
        cert = _issue(ca_key, ca_cert, key, subject, usages, dns, ips)
        _write(paths[name + ".key"], _key_pem(key))
        _write(paths[name + ".crt"], cert.public_bytes(serialization.Encoding.PEM), 0o644)
    sa_key = _key()
    _write(paths["sa.key"], _key_pem(sa_key))
    public = sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write(paths["sa.pub"], public, 0o644)
    return paths
