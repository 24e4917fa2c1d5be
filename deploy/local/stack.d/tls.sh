# shellcheck shell=bash
# The stack's test certificate authority and server certificate, made once
# with openssl under $TRIBUTARY_HOME/tls and kept across restarts (clients
# pin ca.crt). The server certificate names 127.0.0.1 and localhost, so a
# client can use verify-full / a server name check against the stack.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

TLS_DIR=$TRIBUTARY_HOME/tls
TLS_CA=$TLS_DIR/ca.crt
TLS_CERT=$TLS_DIR/server.crt
TLS_KEY=$TLS_DIR/server.key

# tls_ensure makes the CA and the server certificate if either is missing.
# Test material only: the CA key stays beside it, and both live 10 years.
tls_ensure() {
	[[ -s $TLS_CA && -s $TLS_CERT && -s $TLS_KEY ]] && return 0
	mkdir -p "$TLS_DIR"
	chmod 755 "$TLS_DIR"
	(
		set -e
		umask 077
		cd "$TLS_DIR"
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Tributary stack test CA" \
			-keyout ca.key -out ca.crt 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -subj "/CN=$HOST" -keyout server.key -out server.csr 2>/dev/null
		printf 'subjectAltName=IP:%s,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$HOST" >server.ext
		openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
			-extfile server.ext -out server.crt 2>/dev/null
		rm -f server.csr server.ext
		chmod 644 ca.crt server.crt
	) || die "tls: openssl could not make the stack's certificates in $TLS_DIR"
	log "tls: made a test CA and a server certificate in $TLS_DIR"
}
