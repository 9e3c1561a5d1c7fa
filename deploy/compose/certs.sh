#!/bin/sh
# A CA and the broker's PKCS#12 key store, made with keytool (the Kafka image has no openssl).
set -eu
cd "${TLS_DIR:-/tls}"
[ -f .complete ] && exit 0
P="${TLS_STORE_PASSWORD:-changeit}"
keytool -genkeypair -alias ca -dname "CN=reminders compose CA" -keyalg RSA -keysize 2048 -validity 3650 \
  -ext bc:c -keystore ca.p12 -storetype PKCS12 -storepass "$P"
keytool -exportcert -rfc -alias ca -keystore ca.p12 -storepass "$P" >ca.pem
keytool -genkeypair -alias broker -dname "CN=kafka" -keyalg RSA -keysize 2048 -validity 3650 \
  -keystore broker.p12 -storetype PKCS12 -storepass "$P"
keytool -certreq -alias broker -keystore broker.p12 -storepass "$P" \
  | keytool -gencert -alias ca -keystore ca.p12 -storepass "$P" -rfc -validity 3650 \
      -ext "SAN=DNS:kafka,DNS:kafka-2,DNS:kafka-3,DNS:localhost,IP:127.0.0.1" >broker.pem
keytool -importcert -noprompt -alias ca -file ca.pem -keystore broker.p12 -storepass "$P"
keytool -importcert -noprompt -alias broker -file broker.pem -keystore broker.p12 -storepass "$P"
chmod 644 ca.pem broker.p12
touch .complete
