package fault

import (
	"crypto/tls"
	"errors"
	"net"
	"reflect"
	"strconv"
)

// classifyHandshake classifies a failed TLS handshake with the upstream.
// Every outcome is a connect failure: nothing of the request was written.
func classifyHandshake(err error) Kind {
	var certErr *tls.CertificateVerificationError
	switch {
	case LocalExhaustion(err):
		return Exhausted
	case isTimeout(err):
		return ConnectTimeout
	case errors.As(err, &certErr):
		return TLSCertificate
	case isAlert(err):
		return TLSAlert
	}
	return TLSHandshake
}

// Alert returns the TLS alert the upstream sent, when err reports one.
//
// crypto/tls reports a received alert as a *net.OpError whose Op is
// "remote error" and whose Err is its unexported alert type, a uint8; it
// wraps a tls.AlertError only on QUIC connections. Alert accepts both, and
// nothing else: a close_notify is reported as io.EOF, not here.
func Alert(err error) (uint8, bool) {
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return uint8(ae), true
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return 0, false
	}
	v := reflect.ValueOf(op.Err)
	if v.Kind() != reflect.Uint8 || v.Type().PkgPath() != "crypto/tls" {
		return 0, false
	}
	return uint8(v.Uint()), true
}

func isAlert(err error) bool {
	_, ok := Alert(err)
	return ok
}

// refusesHandshake reports whether alert a is one a TLS server sends only
// to refuse a handshake (RFC 8446 §6.2): a verdict on certificates, on the
// negotiation, or on the client's Finished. A server cannot send one after
// it has taken application data on the connection, which is what makes a
// TLSAlert on the first read of a new connection proof that the request
// was never passed on.
func refusesHandshake(a uint8) bool {
	switch a {
	case 40, // handshake_failure
		42, 43, 44, 45, 46, // bad, unsupported, revoked, expired, unknown certificate
		48,       // unknown_ca
		49,       // access_denied
		51,       // decrypt_error: a signature or Finished that does not verify
		70,       // protocol_version
		71,       // insufficient_security
		109, 110, // missing_extension, unsupported_extension
		112, // unrecognized_name
		115, // unknown_psk_identity
		116, // certificate_required
		120: // no_application_protocol
		return true
	}
	return false
}

// AlertName returns the description of TLS alert a in the IANA TLS Alerts
// registry ("certificate_required"), which RFC 9209's tls_alert_received
// carries as alert-message; "" for an alert the registry does not name.
func AlertName(a uint8) string {
	return alertNames[a]
}

var alertNames = map[uint8]string{
	0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac",
	21: "decryption_failed", 22: "record_overflow", 30: "decompression_failure",
	40: "handshake_failure", 41: "no_certificate", 42: "bad_certificate",
	43: "unsupported_certificate", 44: "certificate_revoked", 45: "certificate_expired",
	46: "certificate_unknown", 47: "illegal_parameter", 48: "unknown_ca",
	49: "access_denied", 50: "decode_error", 51: "decrypt_error",
	52: "too_many_cids_requested", 60: "export_restriction", 70: "protocol_version",
	71: "insufficient_security", 80: "internal_error", 86: "inappropriate_fallback",
	90: "user_canceled", 100: "no_renegotiation", 109: "missing_extension",
	110: "unsupported_extension", 111: "certificate_unobtainable", 112: "unrecognized_name",
	113: "bad_certificate_status_response", 114: "bad_certificate_hash_value",
	115: "unknown_psk_identity", 116: "certificate_required", 117: "general_error",
	120: "no_application_protocol", 121: "ech_required",
}

// ProxyStatusParams returns the parameters RFC 9209 defines for the error
// type of e, to follow it in a Proxy-Status field ("" when it has none):
// for tls_alert_received, the alert's id and registry name
// (`alert-id=116; alert-message="certificate_required"`).
func (e *Error) ProxyStatusParams() string {
	if e.Kind != TLSAlert {
		return ""
	}
	a, ok := Alert(e.Cause)
	if !ok {
		return ""
	}
	p := "alert-id=" + strconv.Itoa(int(a))
	if name := AlertName(a); name != "" {
		p += `; alert-message="` + name + `"`
	}
	return p
}
