#!/usr/bin/python3
"""Capture real KMIP responses from a PyKMIP server into the TTLV corpus.

Usage (with a server from tests/integration/kmip_server.sh running):
    /usr/bin/python3 tests/fuzz/capture_kmip.py CERTDIR PORT OUTDIR

Drives PyKMIP's own client through the operations the kmip keystore uses
(DiscoverVersions, Create, Activate, Locate, Get Attributes, Encrypt,
Decrypt, Get, Revoke, Destroy, and failures) and writes every raw response
message, as read off the TLS socket, to OUTDIR/pykmip_<n>_<operation>.
Run by hand when the corpus needs refreshing; the files are committed.
"""
import os
import sys

from kmip.core import enums
from kmip.pie import client as pie_client
from kmip.services import kmip_protocol

certdir, port, outdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(outdir, exist_ok=True)
captured = []
_orig_read = kmip_protocol.KMIPProtocol.read


def _read(self):
    data = _orig_read(self)
    captured.append(bytes(data.buffer))
    return data


kmip_protocol.KMIPProtocol.read = _read


def save(label):
    for i, raw in enumerate(captured):
        name = "pykmip_%02d_%s" % (len(os.listdir(outdir)), label if i == 0 else "%s%d" % (label, i))
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(raw)
    del captured[:]


c = pie_client.ProxyKmipClient(
    hostname="127.0.0.1", port=port,
    cert=os.path.join(certdir, "client.pem"), key=os.path.join(certdir, "client.key"),
    ca=os.path.join(certdir, "ca.pem"), config_file="/dev/null",
    kmip_version=enums.KMIPVersion.KMIP_1_4)
c.open()
uid = c.create(enums.CryptographicAlgorithm.AES, 256, name="tde-capture-key")
save("create")
c.activate(uid)
save("activate")
c.locate(attributes=[c.attribute_factory.create_attribute(enums.AttributeType.NAME, "tde-capture-key")])
save("locate")
c.get_attributes(uid, ["State", "Name", "Cryptographic Algorithm"])
save("get_attributes")
params = {"cryptographic_algorithm": enums.CryptographicAlgorithm.AES,
          "block_cipher_mode": enums.BlockCipherMode.CBC,
          "padding_method": enums.PaddingMethod.PKCS5}
ct, iv = c.encrypt(b"\x11" * 32, uid=uid, cryptographic_parameters=params)
save("encrypt")
c.decrypt(ct, uid=uid, cryptographic_parameters=params, iv_counter_nonce=iv)
save("decrypt")
c.get(uid)
save("get")

# AES-GCM with associated data, as the kmip keystore wraps (KMIP 1.4
# payload fields; PyKMIP's high-level client has no AAD argument).
from kmip.core import attributes as kattrs
from kmip.core.messages import contents, messages
from kmip.core.messages.payloads import encrypt as penc, decrypt as pdec


def call(op, payload):
    item = messages.RequestBatchItem(operation=contents.Operation(op), request_payload=payload)
    req = c.proxy._build_request_message(None, [item])
    return c.proxy._send_and_receive_message(req).batch_items[0].response_payload


gcm = kattrs.CryptographicParameters(block_cipher_mode=enums.BlockCipherMode.GCM,
                                     cryptographic_algorithm=enums.CryptographicAlgorithm.AES,
                                     tag_length=16)
iv, aad = b"\x01" * 12, b"sqlite-tde v1 dek" + b"\x02" * 20
r = call(enums.Operation.ENCRYPT, penc.EncryptRequestPayload(
    unique_identifier=uid, cryptographic_parameters=gcm, data=b"\x11" * 32,
    iv_counter_nonce=iv, auth_additional_data=aad))
save("encrypt_gcm")
call(enums.Operation.DECRYPT, pdec.DecryptRequestPayload(
    unique_identifier=uid, cryptographic_parameters=gcm, data=r.data,
    iv_counter_nonce=iv, auth_additional_data=aad, auth_tag=r.auth_tag))
save("decrypt_gcm")
try:
    call(enums.Operation.DECRYPT, pdec.DecryptRequestPayload(
        unique_identifier=uid, cryptographic_parameters=gcm, data=r.data,
        iv_counter_nonce=iv, auth_additional_data=aad + b"x", auth_tag=r.auth_tag))
except Exception:
    pass
save("decrypt_gcm_badtag")
c.proxy.discover_versions(protocol_versions=[contents.ProtocolVersion(1, 4), contents.ProtocolVersion(1, 2)])
save("discover_versions")
try:
    c.get("no-such-object")
except Exception:
    pass
save("get_failure")
c.revoke(enums.RevocationReasonCode.KEY_COMPROMISE, uid)
save("revoke")
try:
    c.encrypt(b"\x11" * 32, uid=uid, cryptographic_parameters=params)
except Exception:
    pass
save("encrypt_revoked")
c.destroy(uid)
save("destroy")
c.close()
print("captured into", outdir)
