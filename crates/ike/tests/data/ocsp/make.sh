#!/bin/sh
# Regenerates the OCSP test fixtures of crates/ike/src/auth/ocsp_tests.rs with OpenSSL 3:
# CAs, client certificates, and real `openssl ocsp` requests and responses, answered offline
# from `openssl ca`'s index. Run it from anywhere; it writes into its own directory, replacing
# what is there. Every key is a throwaway lab key (see README.md).
set -eu
cd "$(dirname "$0")"

rm -rf newcerts ./*.pem ./*.key ./*.der ./*.csr index*.txt* serial* ./*.old
mkdir newcerts
touch index.txt index-rsa.txt
echo 1000 > serial
echo 2000 > serial-rsa

ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
self_signed() { # key out subject
    openssl req -config openssl.cnf -new -x509 -key "$1" -out "$2" -subj "$3" \
        -days 3650 -sha256 -extensions v3_ca
}
issue() { # ca-section name subject extensions
    ec_key "$2.key"
    openssl req -config openssl.cnf -new -key "$2.key" -subj "$3" -out "$2.csr"
    openssl ca -config openssl.cnf -name "$1" -batch -notext -in "$2.csr" -out "$2.pem" \
        -extensions "$4"
    rm "$2.csr"
}

# The CA whose clients are asked about, and a second one that has no say about them.
ec_key ca.key
self_signed ca.key ca.pem "/O=gate64 test/CN=gate64 OCSP test CA"
ec_key other-ca.key
self_signed other-ca.key other-ca.pem "/O=gate64 test/CN=gate64 OCSP other CA"

issue CA_ec good "/O=gate64 test/CN=good client" client
issue CA_ec revoked "/O=gate64 test/CN=revoked client" client
issue CA_ec responder "/O=gate64 test/CN=gate64 OCSP responder" responder
openssl ca -config openssl.cnf -name CA_ec -revoke revoked.pem -crl_reason keyCompromise

# An RSA-2048 CA and a client of it: RSA PKCS#1 v1.5 (SHA-256) response signatures.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca-rsa.key
self_signed ca-rsa.key ca-rsa.pem "/O=gate64 test/CN=gate64 OCSP test RSA CA"
issue CA_rsa good-rsa "/O=gate64 test/CN=good RSA-CA client" client

# Requests: SHA-1 CertIDs (openssl's default), and one with a SHA-256 CertID.
for c in good revoked; do
    openssl ocsp -issuer ca.pem -cert "$c.pem" -no_nonce -reqout "req-$c.der"
done
openssl ocsp -issuer ca.pem -sha256 -cert good.pem -no_nonce -reqout req-good-sha256.der
openssl ocsp -issuer ca-rsa.pem -cert good-rsa.pem -no_nonce -reqout req-good-rsa.der

respond() { # index ca signer key request response [options]
    idx=$1 ca=$2 signer=$3 key=$4 req=$5 resp=$6
    shift 6
    openssl ocsp -index "$idx" -CA "$ca" -rsigner "$signer" -rkey "$key" -reqin "$req" \
        -respout "$resp" "$@"
}
respond index.txt ca.pem ca.pem ca.key req-good.der resp-good.der -ndays 3650
respond index.txt ca.pem ca.pem ca.key req-revoked.der resp-revoked.der -ndays 3650
respond index.txt ca.pem ca.pem ca.key req-good-sha256.der resp-good-sha256.der -ndays 3650
respond index.txt ca.pem responder.pem responder.key req-good.der resp-good-delegated.der \
    -ndays 3650
respond index.txt ca.pem other-ca.pem other-ca.key req-good.der resp-good-other-ca.der \
    -ndays 3650
respond index.txt ca.pem ca.pem ca.key req-good.der resp-good-short.der -nmin 1
# Neither -ndays nor -nmin: no nextUpdate.
respond index.txt ca.pem ca.pem ca.key req-good.der resp-good-no-next.der
respond index-rsa.txt ca-rsa.pem ca-rsa.pem ca-rsa.key req-good-rsa.der resp-good-rsa.der \
    -ndays 3650

# DER copies of the certificates the tests include.
for c in ca ca-rsa other-ca good good-rsa revoked responder; do
    openssl x509 -in "$c.pem" -outform DER -out "$c.der"
done
rm -rf newcerts ./*.old
