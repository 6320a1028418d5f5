// Package idempotency gives any upstream the semantics of the
// Idempotency-Key field (draft-ietf-httpapi-idempotency-key-header-07):
// a client that retries a POST with the same key gets the first
// request's answer again, and the upstream sees the request once, across
// every sluice that shares the store.
//
// A Layer (one per route) decides each request in Begin: pass it, forward
// it under a Claim, or answer it itself (a replay, 409, 422, 400, 502,
// 503). Layer.Phase puts it on the proxy's main line as a route phase,
// which forwards a claimed request, feeds the upstream's answer to the
// claim's Recorder as it is relayed, and ends the claim with what the
// main line knows of the tries (Keep, Release, Unknown). Records live in
// a Store: Local (this process) or Redis (a fleet).
//
// The answers the layer makes itself carry a Proxy-Status field (RFC
// 9209) naming sluice and one of these error types, and an RFC 9457
// problem (application/problem+json) whose type is ProblemBase followed
// by the name given:
//
//	status  error type            problem type name               when
//	400     http_request_error    idempotency-key-missing         no key, and one is required
//	400     http_request_error    idempotency-key-invalid         a key that is not 1..255 bytes of printable ASCII, or two keys
//	409     http_request_denied   idempotency-key-in-use          the first request with the key is running (Retry-After: 1)
//	409     http_request_denied   idempotency-answer-not-kept     its answer was larger than max_response: it cannot be replayed
//	422     http_request_denied   idempotency-key-reused          the key was used with another method, target or body
//	502     http_response_incomplete idempotency-outcome-unknown  the first request may have been processed and got no answer
//	503     proxy_internal_error  idempotency-store-unavailable   the store failed (on_store_error: deny; Retry-After: 1)
//
// http_request_error is RFC 9209's type for a request the intermediary
// finds invalid; http_request_denied, for one it refuses by its
// configuration or policy, without forwarding it (the key's rules);
// http_response_incomplete, for a response that did not come whole from
// the next hop: the retry is the same request as the first, whose
// response never came; proxy_internal_error, for a failure of the proxy's
// own (its store), as sluice's rate limits say.
//
// A replayed answer is the kept one, status, reason, fields in their
// order and spelling, body and trailers, with Idempotent-Replayed: true
// added; it has no Proxy-Status of the layer's (it is the upstream's
// answer, not an error).
package idempotency
