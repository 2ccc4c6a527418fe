#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/seed-*. Run from fuzz/: python3 make_seeds.py"""
import ipaddress as ia
import os
import struct

SERVER_LL = "fe80::8000:f227:3fff:fdfe"  # server 192.0.2.1:3544 (brief §1.2)
CLIENT = "2001:0:c000:201:2c5a:f225:39cc:9bf5"  # client of 192.0.2.1 mapped at 198.51.100.10:3546
OTHER = "2001:0:c000:201:0:63bf:3fff:fdd2"  # client of 192.0.2.1 mapped at 192.0.2.45:40000


def csum(src, dst, nh, payload):
    s = ia.IPv6Address(src).packed + ia.IPv6Address(dst).packed
    s += struct.pack("!IxxxB", len(payload), nh) + payload
    if len(s) % 2:
        s += b"\0"
    t = sum(struct.unpack("!%dH" % (len(s) // 2), s))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF


def ip6(src, dst, nh, payload, hop=64):
    return (
        struct.pack("!IHBB", 0x60000000, len(payload), nh, hop)
        + ia.IPv6Address(src).packed
        + ia.IPv6Address(dst).packed
        + payload
    )


def icmp(src, dst, typ, body, hop=64):
    c = csum(src, dst, 58, bytes([typ, 0, 0, 0]) + body)
    return ip6(src, dst, 58, bytes([typ, 0]) + struct.pack("!H", c) + body, hop)


def origin(ip, port):
    return b"\0\0" + struct.pack("!H", ~port & 0xFFFF) + bytes(b ^ 0xFF for b in ia.IPv4Address(ip).packed)


# Miredo's RS: auth header (ID-len = AU-len = 0, nonce, confirmation 0), then 48 bytes of RS
# from fe80::ffff:ffff:ffff to ff02::2 (ICMPv6 checksum 0x7d37, brief §1.4).
AUTH = b"\x00\x01\x00\x00" + b"nonce-01" + b"\x00"
rs = AUTH + icmp("fe80::ffff:ffff:ffff", "ff02::2", 133, b"\0" * 4, hop=255)
assert len(rs) == 61 and rs[13 + 42 : 13 + 44] == b"\x7d\x37"
ra_body = (
    struct.pack("!BBHII", 0, 0, 0, 0, 2000)
    + bytes([3, 4, 64, 0x40])
    + b"\xff" * 8
    + b"\0" * 4
    + ia.IPv6Address("2001:0:c000:201::").packed
    + bytes([5, 1, 0, 0])
    + struct.pack("!I", 1280)
)
ra = AUTH + origin("198.51.100.10", 3546) + icmp(SERVER_LL, "fe80::ffff:ffff:ffff", 134, ra_body, 255)
assert len(ra) == 117

SEEDS = {
    "rs-miredo": rs,
    "ra-miredo": ra,
    "data-echo-corp": icmp(CLIENT, "2001:db8:100::1", 128, struct.pack("!HH", 7, 1) + b"nonce123"),
    "data-udp-corp": ip6(CLIENT, "2001:db8:100::5", 17, bytes.fromhex("1234003500100000") + b"payload!"),
    "tun-to-client": ip6("2001:db8:100::5", CLIENT, 17, bytes.fromhex("0035123400100000") + b"response"),
    "client-to-client": icmp(CLIENT, OTHER, 128, struct.pack("!HH", 1, 1)),
    "bubble": ip6(CLIENT, SERVER_LL, 59, b"", 255),
    "bubble-relayed": origin("192.0.2.1", 3544) + ip6(SERVER_LL, CLIENT, 59, b"", 255),
}
# teredo_server takes the remote IPv4 and port first.
REMOTE = ia.IPv4Address("198.51.100.10").packed + struct.pack("!H", 3546)

for target in ["teredo_packet", "teredo_server", "dataplane_teredo"]:
    os.makedirs(f"corpus/{target}", exist_ok=True)
    for name, data in SEEDS.items():
        with open(f"corpus/{target}/seed-{name}", "wb") as f:
            f.write(REMOTE + data if target == "teredo_server" else data)
os.makedirs("corpus/config_toml", exist_ok=True)
with open("../config/gate64.toml", "rb") as src, open("corpus/config_toml/seed-example", "wb") as f:
    f.write(src.read())

# dns64_handler: [len u16][query][len u16][first upstream answer][second upstream answer].
def dns_name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.strip(".").split(".")) + b"\0"


def dns_query(qname, qtype, edns=False):
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 1 if edns else 0)
    q += dns_name(qname) + struct.pack("!HH", qtype, 1)
    return q + (b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0) if edns else b"")


def dns_answer(qname, qtype, rrs=b"", an=0, ns=b"", nscount=0, rcode=0):
    h = struct.pack("!HHHHHH", 7, 0x8180 | rcode, 1, an, nscount, 0)
    return h + dns_name(qname) + struct.pack("!HH", qtype, 1) + rrs + ns


SOA_RDATA = dns_name("ns.x") + dns_name("h.x") + struct.pack("!IIIII", 1, 3600, 600, 86400, 300)
SOA_RR = b"\xc0\x0c" + struct.pack("!HHIH", 6, 1, 3600, len(SOA_RDATA)) + SOA_RDATA
A_RR = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 3600, 4) + bytes([10, 20, 0, 2])


def dns_frame(query, first=b"", second=b""):
    return struct.pack("!H", len(query)) + query + struct.pack("!H", len(first)) + first + second


PTR_NAME = "2.0.0.0.4.1.a.0" + ".0" * 12 + ".4.6.0.0.8.b.d.0.1.0.0.2.ip6.arpa"
DNS64_SEEDS = {
    "aaaa-synth": dns_frame(
        dns_query("app.corp.example", 28, True),
        dns_answer("app.corp.example", 28, ns=SOA_RR, nscount=1),
        dns_answer("app.corp.example", 1, A_RR, 1),
    ),
    "aaaa-nx": dns_frame(dns_query("nx.example", 28), dns_answer("nx.example", 28, rcode=3)),
    "a-plain": dns_frame(dns_query("app.corp.example", 1), dns_answer("app.corp.example", 1, A_RR, 1)),
    "ptr": dns_frame(dns_query(PTR_NAME, 12), dns_answer("2.0.20.10.in-addr.arpa", 12)),
    "ipv4only": dns_frame(dns_query("ipv4only.arpa", 28)),
}
os.makedirs("corpus/dns64_handler", exist_ok=True)
for name, data in DNS64_SEEDS.items():
    with open(f"corpus/dns64_handler/seed-{name}", "wb") as f:
        f.write(data)

# teredo_client: [nonce seed] then operations (see the target): 0 advance, 1 poll RS,
# 2 answer it through our server, 3 a datagram, 4 a datagram behind the RS's nonce,
# 5 encapsulate, 6 trailers, 7 invariants.
def chunk(b):
    return struct.pack("!H", len(b)) + b


MAPPED = ia.IPv4Address("198.51.100.10").packed + struct.pack("!H", 40000)
POLL = b"\x01\x00"
ANSWER = b"\x02" + MAPPED + b"\0\0"
CLIENT_SEEDS = {
    "qualify-refresh": b"\x07" + POLL + ANSWER + b"\x07" + b"\x00\x3c" + POLL + ANSWER + b"\x07",
    "retry-pause": b"\x07" + POLL + b"\x00\x08" + POLL + b"\x00\x08" + POLL + b"\x00\xc8\x00\x08" + POLL + ANSWER,
    "ra-by-nonce": b"\x07" + POLL + b"\x04\x00" + chunk(ra[13:]) + b"\x07",
    "data-bubble-encap": b"\x07" + POLL + ANSWER
    + b"\x03" + chunk(SEEDS["bubble"])
    + b"\x03" + chunk(SEEDS["tun-to-client"])
    + b"\x05" + chunk(SEEDS["data-udp-corp"]) + b"\x00",
    "trailers": b"\x00\x06" + chunk(b"\x01\x04abcd\x05\x02\x12\x34\x04\x04\x01\0\0\0\x03\x08\0\0" + MAPPED),
}
os.makedirs("corpus/teredo_client", exist_ok=True)
for name, data in CLIENT_SEEDS.items():
    with open(f"corpus/teredo_client/seed-{name}", "wb") as f:
        f.write(data)


# dataplane_full: operations [op][remote if op & 4: 5 bytes][len u16][packet]; op % 4: 0 Teredo,
# 1 IP-HTTPS, 2 TUN, 3 timers ([part][seconds]); op >> 4 advances the clock by 250 ms steps.
def udp6(src, dst, sport, dport, data=b"payload!"):
    return ip6(src, dst, 17, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)


def udp4(src, dst, sport, dport, data=b"reply!"):
    h = struct.pack("!BBHHHBBH", 0x45, 0, 28 + len(data), 0, 0, 64, 17, 0)
    h += ia.IPv4Address(src).packed + ia.IPv4Address(dst).packed
    t = sum(struct.unpack("!10H", h))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    h = h[:10] + struct.pack("!H", ~t & 0xFFFF) + h[12:]
    return h + struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


ALICE = "2001:db8:1:5::a"
BOB = "2001:db8:1:6::b"
V4HOST_64 = "2001:db8:64::a01:5"
TIMERS = b"\x33\x00\x05"
FULL_SEEDS = {
    "teredo-nat64-roundtrip": b"\x00" + chunk(udp6(CLIENT, V4HOST_64, 4000, 53))
    + b"\x02" + chunk(udp4("10.1.0.5", "192.0.2.100", 53, 1024)) + TIMERS,
    "iphttps-nat64": b"\x01" + chunk(udp6(ALICE, V4HOST_64, 4000, 80)) + TIMERS,
    "iphttps-to-iphttps": b"\x01" + chunk(udp6(ALICE, BOB, 1000, 2000)) + b"\x09" + chunk(udp6(ALICE, BOB, 1000, 2001)),
    "teredo-to-iphttps": b"\x00" + chunk(udp6(CLIENT, BOB, 1000, 2000)),
    "tun-to-iphttps-and-teredo": b"\x02" + chunk(udp6("2001:db8:100::5", BOB, 53, 1000))
    + b"\x02" + chunk(SEEDS["tun-to-client"]) + TIMERS,
    "rs-then-timers": b"\x00" + chunk(rs) + b"\x04" + MAPPED[:2] + MAPPED[3:] + chunk(rs) + TIMERS,
    "dns64-from-clients": b"\x00" + chunk(udp6(CLIENT, "2001:db8:100::1", 5353, 53))
    + b"\x01" + chunk(udp6(ALICE, "2001:db8:100::1", 5353, 53)),
    "echo-self-and-corp": b"\x00" + chunk(SEEDS["data-echo-corp"]) + b"\x00" + chunk(SEEDS["data-udp-corp"])
    + b"\x00" + chunk(SEEDS["client-to-client"]) + b"\x00" + chunk(SEEDS["bubble"]),
}
os.makedirs("corpus/dataplane_full", exist_ok=True)
for name, data in FULL_SEEDS.items():
    with open(f"corpus/dataplane_full/seed-{name}", "wb") as f:
        f.write(data)


# dns64_udp_batch: datagrams [flags][len u16][query], then on a miss [upstream id u16] and per
# ask [how][len u16][answer] (how 1: as read, so the ID must be the one asked; 2: fixed up).
def batch(query, *answers, flags=0, id=7):
    out = bytes([flags]) + chunk(query) + struct.pack("!H", id)
    for how, a in answers:
        out += bytes([how]) + chunk(a)
    return out


AAAA_Q = dns_query("app.corp.example", 28, True)
BATCH_SEEDS = {
    "synth-then-hit": batch(
        AAAA_Q,
        (1, dns_answer("app.corp.example", 28, ns=SOA_RR, nscount=1)),
        (1, dns_answer("app.corp.example", 1, A_RR, 1)),
    )
    + b"\x02" + chunk(AAAA_Q),
    "fixed-up-answers": batch(AAAA_Q, (2, dns_answer("x", 28)), (2, dns_answer("y", 1, A_RR, 1))),
    "a-plain": batch(dns_query("app.corp.example", 1), (1, dns_answer("app.corp.example", 1, A_RR, 1))),
    "nx-no-answer": batch(dns_query("nx.example", 28), (1, dns_answer("nx.example", 28, rcode=3)))
    + batch(dns_query("down.example", 28), (0, b"")),
    "ptr": batch(dns_query(PTR_NAME, 12), (2, dns_answer("2.0.20.10.in-addr.arpa", 12))),
    "truncated-and-ipv4only": b"\x01" + chunk(AAAA_Q) + batch(dns_query("ipv4only.arpa", 28)),
}
os.makedirs("corpus/dns64_udp_batch", exist_ok=True)
for name, data in BATCH_SEEDS.items():
    with open(f"corpus/dns64_udp_batch/seed-{name}", "wb") as f:
        f.write(data)

# ike_auth: `[selector][bytes]`, see fuzz_targets/ike_auth.rs. AlgorithmIdentifiers from
# RFC 7427 Appendix A; signatures are placeholders (keys are made at run time).
ECDSA_SHA256 = bytes.fromhex("300a06082a8648ce3d040302")
RSA_SHA256 = bytes.fromhex("300d06092a864886f70d01010b0500")
PSS_SHA256 = bytes.fromhex(
    "304106092a864886f70d01010a3034a00f300d06096086480165030402010500"
    "a11c301a06092a864886f70d010108300d06096086480165030402010500a203020120")
FAKE_ECDSA_DER = bytes.fromhex("3044022001" + "00" * 31 + "022001" + "00" * 31)
IKE_AUTH_SEEDS = {
    "method14-ecdsa": b"\x00\x0e\x00" + bytes([len(ECDSA_SHA256)]) + ECDSA_SHA256 + FAKE_ECDSA_DER,
    "method14-rsa": b"\x00\x0e\x02" + bytes([len(RSA_SHA256)]) + RSA_SHA256 + b"\x01" * 256,
    "method14-pss": b"\x00\x0e\x02" + bytes([len(PSS_SHA256)]) + PSS_SHA256 + b"\x01" * 256,
    "method9": b"\x00\x09\x00" + b"\x01" * 64,
    "method10": b"\x00\x0a\x01" + b"\x01" * 96,
    "method1": b"\x00\x01\x02" + b"\x01" * 256,
    "sign": b"\x01\x00\x02\x03\x04\xffoctets",
    "sign-p384-no-common-hash": b"\x01\x01\x02\xffoctets",
    "pem": b"\x02-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n",
    "leaf-and-intermediate": b"\x03\x30\x03\x02\x01\x00\xff\x30\x03\x02\x01\x00",
    "mutated-leaf": b"\x04\x00\x20\x01",
    "id-fqdn": b"\x05\x02\x00\x00\x00peer.fuzz",
    "id-ipv6": b"\x05\x05\x00\x00\x00" + bytes.fromhex("20010db8000000000000000000000001"),
    "hash-notify": b"\x05\x00\x02\x00\x03\x00\x04\x00\x01",
}
os.makedirs("corpus/ike_auth", exist_ok=True)
for name, data in IKE_AUTH_SEEDS.items():
    with open(f"corpus/ike_auth/seed-{name}", "wb") as f:
        f.write(data)

# IKEv2 (RFC 7296 §3): an IKE_SA_INIT request shaped like strongSwan's, a COOKIE reply, an
# INFORMATIONAL with an SK payload, and a fragment (RFC 7383).
def ike_payloads(items):
    out = b""
    for i, (kind, body, crit) in enumerate(items):
        nxt = items[i + 1][0] if i + 1 < len(items) else 0
        out += struct.pack("!BBH", nxt, 0x80 if crit else 0, 4 + len(body)) + body
    return out


def ike(spi_i, spi_r, exch, flags, mid, items, first_override=None):
    body = ike_payloads(items)
    first = items[0][0] if items else 0
    if first_override is not None:
        first = first_override
    return struct.pack("!QQBBBBII", spi_i, spi_r, first, 0x20, exch, flags, mid, 28 + len(body)) + body


def transform(last, ttype, tid, attrs=b""):
    return struct.pack("!BBHBBH", 0 if last else 3, 0, 8 + len(attrs), ttype, 0, tid) + attrs


def proposal(last, num, proto, spi, transforms):
    body = b"".join(transform(i + 1 == len(transforms), *t) for i, t in enumerate(transforms))
    return struct.pack("!BBHBBBB", 0 if last else 2, 0, 8 + len(spi) + len(body), num, proto, len(spi), len(transforms)) + spi + body


KEYLEN256 = struct.pack("!HH", 0x800E, 256)
sa = proposal(False, 1, 1, b"", [(1, 20, KEYLEN256), (2, 5), (4, 19)]) + proposal(True, 2, 1, b"", [(1, 20, KEYLEN256), (2, 5), (4, 31)])
notify = lambda kind, data=b"": struct.pack("!BBH", 0, 0, kind) + data
init = ike(0x1122334455667788, 0, 34, 0x08, 0, [
    (33, sa, False),
    (34, struct.pack("!HH", 19, 0) + bytes(range(64)), False),
    (40, bytes(range(32)), False),
    (41, notify(16388, bytes(20)), False),
    (41, notify(16389, bytes(20)), False),
    (41, notify(16430), False),
    (41, notify(16431, struct.pack("!HHH", 2, 3, 4)), False),
])
# The same with RFC 4739 MULTIPLE_AUTH_SUPPORTED (16404), which belongs in IKE_AUTH (§3.1): a
# misplaced one must change nothing.
init_multi_auth = ike(0x1122334455667799, 0, 34, 0x08, 0, [
    (33, sa, False),
    (34, struct.pack("!HH", 19, 0) + bytes(range(64)), False),
    (40, bytes(range(32)), False),
    (41, notify(16430), False),
    (41, notify(16404), False),
])
cookie = ike(0x1122334455667788, 0, 34, 0x20, 0, [(41, notify(16390, bytes(17)), False)])
sk = ike(1, 2, 37, 0x08, 2, [(46, bytes(8) + bytes(range(17)), False)], first_override=46)
skf = ike(1, 2, 35, 0x08, 1, [(53, struct.pack("!HH", 1, 3) + bytes(40), False)], first_override=53)
ts = struct.pack("!BBBB", 1, 0, 0, 0) + struct.pack("!BBHHH", 8, 0, 40, 0, 65535) + bytes(16) + b"\xff" * 16
cp = struct.pack("!BBBB", 1, 0, 0, 0) + struct.pack("!HH", 8, 0)
delete = struct.pack("!BBH", 3, 4, 1) + b"\x00\x00\x12\x34"
clear_auth = ike(1, 2, 35, 0x08, 1, [
    (35, struct.pack("!BBBB", 9, 0, 0, 0) + b"0\x00", False),
    (39, struct.pack("!BBBB", 14, 0, 0, 0) + bytes(20), False),
    (47, cp, False),
    (33, proposal(True, 1, 3, b"\x00\x00\x01\x00", [(1, 20, KEYLEN256), (5, 0)]), False),
    (44, ts, False),
    (45, ts, False),
    (42, delete, False),
])
os.makedirs("corpus/ike_message", exist_ok=True)
for name, data in [("init-strongswan", init), ("cookie", cookie), ("informational-sk", sk),
                   ("auth-fragment", skf), ("auth-clear-payloads", clear_auth)]:
    with open(f"corpus/ike_message/seed-{name}", "wb") as f:
        f.write(data)

# ike_mobike: a payload chain (first type, then payloads): UPDATE_SA_ADDRESSES and the two
# NAT detection hashes, and the same with a 19-octet hash (refused).
def notify_payload(nxt, kind, data):
    return struct.pack("!BBHBBH", nxt, 0, 8 + len(data), 0, 0, kind) + data
mobike_ok = bytes([41]) + notify_payload(41, 16400, b"") + \
    notify_payload(41, 16388, bytes(20)) + notify_payload(0, 16389, bytes(20))
mobike_short = bytes([41]) + notify_payload(41, 16400, b"") + notify_payload(0, 16388, bytes(19))
os.makedirs("corpus/ike_mobike", exist_ok=True)
for name, data in [("update-nat", mobike_ok), ("update-short-hash", mobike_short)]:
    with open(f"corpus/ike_mobike/seed-{name}", "wb") as f:
        f.write(data)

# ike_mid_sync: a payload chain holding IKEV2_MESSAGE_ID_SYNC (nonce, send, recv) alone,
# and one whose data is an octet short (refused).
mid_ok = bytes([41]) + notify_payload(0, 16422, bytes([1, 2, 3, 4]) + struct.pack("!II", 20, 7))
mid_short = bytes([41]) + notify_payload(0, 16422, bytes(11))
os.makedirs("corpus/ike_mid_sync", exist_ok=True)
for name, data in [("sync", mid_ok), ("sync-short", mid_short)]:
    with open(f"corpus/ike_mid_sync/seed-{name}", "wb") as f:
        f.write(data)

# ike_responder: programs of (2-byte length, flag byte, datagram).
prog = lambda *steps: b"".join(struct.pack("!HB", len(d), f) + d for f, d in steps)
os.makedirs("corpus/ike_responder", exist_ok=True)
for name, data in [("init-twice", prog((0, init), (0, init))),
                   ("init-then-sk", prog((2, init), (1, sk), (4, init))),
                   ("init-multiple-auth", prog((0, init_multi_auth), (0, sk)))]:
    with open(f"corpus/ike_responder/seed-{name}", "wb") as f:
        f.write(data)

# reassembly: programs of fragments to the IPsec endpoint (see fuzz_targets/reassembly.rs).
# op = kind | client << 2 | clock step << 5; a built fragment is [ident][offset << 3 | M, 2 bytes]
# [length choice | next header choice << 4] ([length, 2 bytes] when the choice is 8-15).
def frag(client, ident, offset, more, choice, length=None, kind=1):
    b = struct.pack("!BBHB", kind | client << 2, ident, (offset // 8) << 3 | more, choice)
    return b + (struct.pack("!H", length) if length is not None else b"")

honest = frag(0, 0, 0, 1, 0x24) + frag(0, 0, 1232, 0, 0x28, 200)
reordered = frag(1, 1, 1232, 0, 0x28, 200) + frag(1, 1, 0, 1, 0x24)
tiny = b"".join(frag(2, 2, i * 8, 1, 0x21) for i in range(32))
overlap = frag(3, 3, 0, 1, 0x24) + frag(3, 3, 1224, 0, 0x28, 600) + frag(3, 3, 0, 1, 0x24)
many = b"".join(frag(4, 0, i * 512, 1, 0x23) for i in range(66))
shares = b"".join(frag(c, i, 0, 1, 0x24) for c in range(7) for i in range(4)) + bytes([3, 200])
iphttps = frag(7, 0, 0, 1, 0x24) + bytes([3, 150]) + frag(7, 1, 1232, 0, 0x28, 100)
raw = bytes([2]) + struct.pack("!H", 12) + bytes([17, 0, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4])
os.makedirs("corpus/reassembly", exist_ok=True)
for name, data in [("honest", honest), ("reordered", reordered), ("tiny", tiny),
                   ("overlap", overlap), ("too-many", many), ("shares-then-tick", shares),
                   ("iphttps", iphttps), ("raw-header", raw)]:
    with open(f"corpus/reassembly/seed-{name}", "wb") as f:
        f.write(data)

# ike_cert_chain: real ECDSA P-256 certificates, made once into certs/ike_cert_chain/ (kept
# in git: the target embeds the root as its trust anchor and the others for its mutation
# case; rerunning this script keeps them, delete the folder to make new ones). Valid
# 2026-01-01 .. 2036-01-01; the target's clock is fixed inside that.
def ike_chain_certs(folder):
    import datetime as dt
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, key, issuer, issuer_key, ca):
        b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(dt.datetime(2026, 1, 1)).not_valid_after(dt.datetime(2036, 1, 1)))
        if ca:
            b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        else:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("client1.gate64.lab")]), critical=False)
        return b.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)

    key = lambda: ec.generate_private_key(ec.SECP256R1())
    root_key, issuing_key, leaf_key = key(), key(), key()
    certs = {
        "root": cert("gate64 fuzz root", root_key, "gate64 fuzz root", root_key, True),
        "issuing": cert("gate64 fuzz issuing CA", issuing_key, "gate64 fuzz root", root_key, True),
        "leaf": cert("client1.gate64.lab", leaf_key, "gate64 fuzz issuing CA", issuing_key, False),
    }
    # Self-issued certificates named like the issuing CA: the same-name flood.
    for i in range(3):
        k = key()
        certs[f"fake{i}"] = cert("gate64 fuzz issuing CA", k, "gate64 fuzz issuing CA", k, True)
    os.makedirs(folder, exist_ok=True)
    for n, der in certs.items():
        with open(f"{folder}/{n}.der", "wb") as f:
            f.write(der)


CHAIN_DIR = "certs/ike_cert_chain"
if not os.path.exists(f"{CHAIN_DIR}/leaf.der"):
    ike_chain_certs(CHAIN_DIR)
chain = {n: open(f"{CHAIN_DIR}/{n}.der", "rb").read()
         for n in ["root", "issuing", "leaf", "fake0", "fake1", "fake2"]}
# Selector 0: length-prefixed DER blobs (leaf first); selector 1: a built-in chain mutated by
# (certificate, offset, xor) quadruples (see fuzz_targets/ike_cert_chain.rs).
blobs = lambda *names: b"\x00" + b"".join(struct.pack("!H", len(chain[n])) + chain[n] for n in names)
os.makedirs("corpus/ike_cert_chain", exist_ok=True)
for name, data in [("leaf-issuing", blobs("leaf", "issuing")),
                   ("leaf-root-issuing", blobs("leaf", "root", "issuing")),
                   ("leaf-three-same-name", blobs("leaf", "fake0", "fake1", "fake2")),
                   ("mutate-leaf", b"\x01\x00" + bytes([0, 0, 0x40, 0x01])),
                   ("mutate-issuing", b"\x01\x01" + bytes([1, 0, 0x90, 0x80]))]:
    with open(f"corpus/ike_cert_chain/seed-{name}", "wb") as f:
        f.write(data)

# ike_ocsp_response: the real `openssl ocsp` responses committed as the unit tests' fixtures.
# Selector 0: a response as the body (about `good`); selector 1: a fixture, picked by index,
# mutated by (offset, xor) triples (see fuzz_targets/ike_ocsp_response.rs).
OCSP_DIR = "../crates/ike/tests/data/ocsp"
os.makedirs("corpus/ike_ocsp_response", exist_ok=True)
for name, data in [("good", b"\x00" + open(f"{OCSP_DIR}/resp-good.der", "rb").read()),
                   ("delegated", b"\x00" + open(f"{OCSP_DIR}/resp-good-delegated.der", "rb").read()),
                   ("mutate-good", b"\x01\x00" + bytes([0, 0x40, 0x01])),
                   ("mutate-delegated", b"\x01\x03" + bytes([1, 0x00, 0x80]))]:
    with open(f"corpus/ike_ocsp_response/seed-{name}", "wb") as f:
        f.write(data)
