package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
)

// addAnswerFields adds the fields of src to dst, but Content-Length and
// Connection (and Transfer-Encoding): those are sluice's to set.
func addAnswerFields(dst, src *h1.Header) {
	for i := 0; i < src.Len(); i++ {
		n := src.Name(i)
		if h1.EqualFold(n, "Content-Length") || h1.EqualFold(n, "Connection") || h1.EqualFold(n, "Transfer-Encoding") {
			continue
		}
		dst.AddBytes(n, src.Value(i))
	}
}

// answer writes a response sluice makes itself. keep says whether the
// connection may carry another request afterwards.
func (s *Session) answer(r *Response, keep bool) {
	defer r.close()
	s.keepAlive = keep && s.keepAlive && !s.srv.Draining()
	s.ownAnswer = true
	status := r.Status
	if status < 100 || status > 999 {
		status = 500
	}
	if s.grpc && status != 200 && !r.Header.Has("Grpc-Status") {
		// A phase's refusal (a rate limit's 429, say) of a gRPC call.
		r, status = grpcAnswer(r, status), 200
	}
	// A 204 or 304 has no body, and no Content-Length: a 204 must not
	// have one, and a 304's would have to be the length of the 200's
	// body (RFC 9110 §8.6).
	bodiless := status == 204 || status == 304
	sendBody := !bodiless && s.Request.Method() != "HEAD"
	resp := &s.resp
	resp.Reset()
	resp.Status, resp.Minor = status, 1
	if r.Reason != "" && status == r.Status {
		resp.SetReason(r.Reason)
	} else {
		resp.SetReason(h1.StatusText(status))
	}
	addAnswerFields(&resp.Header, &r.Header)
	if hk := s.hooks; hk != nil && hk.answerFilter != nil {
		// The hook changes a copy: r may be shared by many requests.
		hk.answerFilter.AnswerFilter(s, resp)
		resp.Status = status
		for _, name := range [...]string{"Content-Length", "Connection", "Transfer-Encoding"} {
			if resp.Header.Has(name) {
				resp.Header.Del(name)
			}
		}
	}
	addAnswerFields(&resp.Header, &s.extra)
	if s.assignRequestID(false); s.reqID != nil && !r.Header.Has(RequestIDHeader) {
		resp.Header.AddBytes(requestIDName, s.reqID)
	}
	size := r.bodySize()
	if r.Trailers.Len() > 0 && sendBody {
		size = -1 // framed, for the trailers to follow
	}
	if !bodiless && size >= 0 {
		var n [20]byte
		resp.Header.AddBytes(contentLength, strconv.AppendInt(n[:0], size, 10))
	}
	down := s.down
	down.respond(resp, outBody{length: size, none: !sendBody})
	if sendBody && (r.Stream != nil || r.Trailers.Len() > 0) {
		s.Status = status
		s.streamAnswer(r)
		return
	}
	fileLeft := false
	switch {
	case !sendBody:
	case r.File == nil:
		down.buffer(r.Body)
	case r.File.Size <= smallFile:
		// A small file goes in the head's send: one write, one packet,
		// rather than a write and a sendfile.
		bp := getBuf()
		b, ok := appendFile((*bp)[:0], r.File)
		down.buffer(b)
		*bp = b[:0]
		putBuf(bp)
		if !ok {
			s.fileFailed(nil)
			return
		}
	default:
		fileLeft = true
	}
	s.Status = status
	if !fileLeft {
		if err := down.send(nil, true, nil); err != nil {
			s.keepAlive = false
		}
		return
	}
	// The head goes with the file (sendFile).
	if err := down.sendFile(r.File); err != nil {
		var fe *fileError
		if errors.As(err, &fe) {
			s.fileFailed(fe.err)
		} else {
			s.clientGone(err)
		}
		return
	}
	if err := down.send(nil, true, nil); err != nil {
		s.clientGone(err)
	}
}

var contentLength = []byte("Content-Length")

// streamAnswer sends the body of an answer whose head the downstream holds,
// piece by piece as it is read (a Stream, or any body with trailers), then
// its trailers.
func (s *Session) streamAnswer(r *Response) {
	body := &s.local.rbody
	body.r = r
	body.start(false)
	for !body.done() {
		seg, err := body.next()
		switch {
		case err == io.EOF:
			if werr := s.down.send(seg, true, &r.Trailers); werr != nil {
				s.clientGone(werr)
			}
			return
		case err != nil:
			s.fileFailed(err)
			return
		}
		if werr := s.down.send(seg, false, nil); werr != nil {
			s.clientGone(werr)
			return
		}
	}
	if err := s.down.send(nil, true, &r.Trailers); err != nil {
		s.clientGone(err)
	}
}

// answerError answers a request that failed for good, through the
// FailToProxy hook when there is one. A client that is gone gets nothing.
func (s *Session) answerError(e *fault.Error) {
	s.Err = e
	if e.Kind == fault.ClientClosed {
		s.keepAlive = false
		return
	}
	var r *Response
	if h := s.hooks; h != nil && h.failToProxy != nil {
		r = h.failToProxy.FailToProxy(s, e)
	}
	if r == nil {
		r = s.errorResponse(e)
	}
	// After an error the request body may be unread: only a request
	// that was read whole leaves the connection usable.
	keep := e.Source != fault.Downstream && s.body.complete()
	if r.AsUpstream {
		// A stored response, say, instead of the error.
		s.keepAlive = s.keepAlive && keep
		s.serveLocal(r)
	} else {
		s.answer(r, keep)
	}
	if e.Source != fault.Downstream && len(s.Attempts) == 0 {
		s.logf(slog.LevelInfo, "request not proxied", e, nil)
	}
	// A client's fault is reported by finish.
}

// answerBadRequest answers a request that broke HTTP/1.1: with the status
// the violation calls for, then the connection closes, because the bytes
// after a malformed request cannot be trusted to start the next one.
func (s *Session) answerBadRequest(err error) {
	status := h1.StatusOf(err)
	if status == 0 {
		status = 400
	}
	e := &fault.Error{Kind: fault.BadRequest, Source: fault.Downstream, Status: status,
		Context: "reading the request", Cause: err}
	if s.Start.IsZero() {
		// A head that did not parse never reached serve.
		s.Start = clock.Now()
	}
	s.Err = e
	s.headFault = true
	s.keepAlive = false
	s.answer(s.errorResponse(e), false)
	s.finish() // which reports the fault
}

// ErrorResponse returns the answer sluice gives for e when it answers a
// request itself: e's status (e.Answer()), a Proxy-Status field (RFC 9209)
// naming e's type and the tries made, and a short text body; to a gRPC
// client, the gRPC status that status maps to. A RequestFilter that refuses
// a request may hand it back (for an error of Kind fault.Denied, say), so
// that the answer reads as sluice's own do. It does not make e the
// request's Err.
func (s *Session) ErrorResponse(e *fault.Error) *Response { return s.errorResponse(e) }

// errorResponse is the default answer for e: its status, a Proxy-Status
// field (RFC 9209) naming the error and the tries made, and a short body.
func (s *Session) errorResponse(e *fault.Error) *Response {
	status := e.Answer()
	r := &Response{Status: status}
	var ps strings.Builder
	ps.WriteString("sluice; error=")
	ps.WriteString(e.ProxyStatus())
	if p := e.ProxyStatusParams(); p != "" {
		ps.WriteString("; ")
		ps.WriteString(p)
	}
	if n := len(s.Attempts); n > 0 {
		ps.WriteString(`; details="`)
		ps.WriteString(strconv.Itoa(n))
		if n == 1 {
			ps.WriteString(" try: ")
		} else {
			ps.WriteString(" tries: ")
		}
		ps.WriteString(upstreamList(s.Attempts, attemptStatus))
		ps.WriteString(`"`)
	}
	if isGRPC(&s.Request.Header) {
		// A gRPC client reads its call's outcome from grpc-status, not
		// from the HTTP status (as Envoy answers them): 200, and the
		// status the HTTP one maps to, in a trailers-only answer.
		r.Status = 200
		r.Header.Add("Content-Type", "application/grpc")
		code := grpcCode(status)
		if e.Kind.Timeout() && !s.deadline.IsZero() && !clock.Now().Before(s.deadline) {
			code = 4 // DEADLINE_EXCEEDED: the call's own grpc-timeout passed
		}
		r.Header.Add("Grpc-Status", strconv.Itoa(code))
		r.Header.Add("Grpc-Message", grpcMessage(ps.String()))
		r.Header.Add("Proxy-Status", ps.String())
		return r
	}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("Proxy-Status", ps.String())
	body := strconv.Itoa(status) + " " + h1.StatusText(status) + " (" + e.ProxyStatus() + ")\n"
	r.Body = []byte(body)
	return r
}

// parseGRPCTimeout reads a grpc-timeout value: at most 8 digits and a
// unit, H, M, S, m (milliseconds), u or n.
func parseGRPCTimeout(v []byte) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, ok := h1.ParseDecimal(v[:len(v)-1])
	if !ok {
		return 0, false
	}
	var u time.Duration
	switch v[len(v)-1] {
	case 'H':
		u = time.Hour
	case 'M':
		u = time.Minute
	case 'S':
		u = time.Second
	case 'm':
		u = time.Millisecond
	case 'u':
		u = time.Microsecond
	case 'n':
		u = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(math.MaxInt64/u) {
		return 0, false // longer than any call: no deadline
	}
	return time.Duration(n) * u, true
}

// isGRPC reports whether a request is a gRPC call (its Content-Type is
// application/grpc, or application/grpc+proto and the like).
func isGRPC(h *h1.Header) bool {
	ct := h.Get("Content-Type")
	const grpc = "application/grpc"
	return len(ct) >= len(grpc) && h1.EqualFold(ct[:len(grpc)], grpc) && (len(ct) == len(grpc) || ct[len(grpc)] == '+' || ct[len(grpc)] == ';')
}

// grpcAnswer is r as a gRPC client reads an answer, as Envoy answers
// gRPC calls itself: HTTP 200 and a trailers-only response whose
// grpc-status is what status maps to, with r's Proxy-Status (or else the
// first line of its body) as grpc-message; r's other fields are kept
// (Retry-After, RateLimit...), its body is not.
func grpcAnswer(r *Response, status int) *Response {
	msg := string(r.Header.Get("Proxy-Status"))
	if msg == "" {
		line, _, _ := strings.Cut(string(r.Body), "\n")
		msg = strings.TrimSpace(line)
	}
	g := &Response{Status: 200}
	for i := 0; i < r.Header.Len(); i++ {
		if n := r.Header.Name(i); !h1.EqualFold(n, "Content-Type") {
			g.Header.AddBytes(n, r.Header.Value(i))
		}
	}
	g.Header.Add("Content-Type", "application/grpc")
	g.Header.Add("Grpc-Status", strconv.Itoa(grpcCode(status)))
	g.Header.Add("Grpc-Message", grpcMessage(msg))
	return g
}

// grpcCode maps the HTTP status of an answer sluice makes to the gRPC
// status a client gets (gRPC's own table: doc/http-grpc-status-mapping).
func grpcCode(status int) int {
	switch status {
	case 400:
		return 13 // INTERNAL
	case 401:
		return 16 // UNAUTHENTICATED
	case 403:
		return 7 // PERMISSION_DENIED
	case 404:
		return 12 // UNIMPLEMENTED
	case 429, 502, 503, 504:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// grpcMessage percent-encodes s as grpc-message wants (bytes outside
// printable ASCII, and '%').
func grpcMessage(s string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			if b == nil {
				b = append(b, s[:i]...)
			}
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		if b != nil {
			b = append(b, c)
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

// logTry writes the line for a failed try: a warning when another try
// follows, an error when it was the last. A try that failed because the
// client did (gone, stalled or broken mid-body) is not the upstream's
// failure: it is reported as a client fault, by finish.
func (s *Session) logTry(a *Attempt, final bool) {
	if a.Err.Source == fault.Downstream {
		return
	}
	level := slog.LevelWarn
	msg := "upstream try failed; retrying"
	if final {
		level = slog.LevelError
		msg = "upstream try failed; giving up"
	}
	if a.Err.Kind == fault.Exhausted {
		// Out of descriptors or ports, every request fails alike: a few
		// lines a second say so, each with the count of those left out
		// before it (sluice_local_exhaustion_total counts them all).
		ok, left, report := s.srv.exhausted.take(clock.Now())
		if !ok {
			if report > 0 {
				// If no line follows within the second, one says how
				// many were left out.
				srv := s.srv
				time.AfterFunc(report, func() {
					if n := srv.exhausted.flush(); n > 0 {
						srv.ErrorLog.Error("upstream tries failed for want of descriptors or ports, left out of the log",
							"suppressed", n)
					}
				})
			}
			return
		}
		if left > 0 {
			s.logf(level, msg, a.Err, a, slog.Int("suppressed", left))
			return
		}
	}
	s.logf(level, msg, a.Err, a)
}

func (s *Session) logf(level slog.Level, msg string, e *fault.Error, a *Attempt, extra ...slog.Attr) {
	l := s.srv.ErrorLog
	if !l.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("client", s.Client),
		slog.String("method", s.Request.Method()),
		slog.String("target", string(s.Request.Target())),
	}
	if a != nil {
		attrs = append(attrs,
			slog.Int("try", len(s.Attempts)),
			slog.String("peer", attemptAddr(a)),
			slog.Bool("reused", a.Reused),
			slog.Duration("idle", a.IdleAge),
			slog.Int("served", a.Served),
			slog.Bool("stale_resend", a.StaleResend),
			slog.Int64("wrote", a.Wrote),
			slog.Int64("read", a.Read),
		)
	}
	if e != nil {
		attrs = append(attrs, slog.String("error", e.Error()))
		if e.Why != "" {
			attrs = append(attrs, slog.String("decision", e.Why))
		}
	}
	attrs = append(attrs, extra...)
	l.LogAttrs(context.Background(), level, msg, attrs...)
}

// logAccess writes the default access log line. It hands the record to
// the handler itself, as Logger.LogAttrs would, without the caller's
// program counter: finding it costs more than the rest of the line, and
// the source of every access log line is this function.
//
// The line costs three allocations whatever it holds: the texts taken
// from the request (target, host, user agent, referer, id) and the
// duration's become one string, which every attribute slices; the
// attributes go to the record in one call, which grows its list once;
// and the handler's own.
func (s *Session) logAccess() {
	l := s.srv.AccessLog
	ctx := context.Background()
	if !l.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var arr [512]byte
	b := arr[:0]
	b = append(b, s.Request.Target()...)
	target := len(b)
	b = append(b, s.Request.Header.Get("Host")...)
	host := len(b)
	b = append(b, s.Request.Header.Get("User-Agent")...)
	ua := len(b)
	b = append(b, s.Request.Header.Get("Referer")...)
	referer := len(b)
	b = append(b, s.reqID...)
	id := len(b)
	b = appendSeconds(b, time.Since(s.Start))
	text := string(b)

	var attrs [28]slog.Attr
	a := attrs[:0]
	a = append(a, slog.String("client", s.Client))
	if s.Peer != s.Client {
		a = append(a, slog.String("peer", s.Peer))
	}
	a = append(a, slog.String("method", s.Request.Method()))
	if host > target {
		a = append(a, slog.String("host", text[target:host]))
	}
	a = append(a,
		slog.String("target", text[:target]),
		slog.Int("status", s.Status),
		slog.Int64("bytes_in", s.BytesIn),
		slog.Int64("bytes_out", s.BytesOut),
		slog.String("duration", text[id:]),
	)
	if p := s.protocol(); p != "" {
		a = append(a, slog.String("protocol", p))
	}
	if id > referer {
		a = append(a, slog.String("request_id", text[referer:id]))
	}
	if s.route != "" {
		a = append(a, slog.String("route", s.route))
	}
	if n := len(s.Attempts); n > 0 {
		last := &s.Attempts[n-1]
		if last.Peer != nil && last.Peer.Upstream != "" {
			a = append(a, slog.String("upstream_name", last.Peer.Upstream))
		}
		a = append(a,
			slog.String("upstream", upstreamList(s.Attempts, attemptAddr)),
			slog.String("upstream_status", upstreamList(s.Attempts, attemptStatus)),
			slog.Bool("reused", last.Reused),
			slog.Int("tries", n),
		)
		stale := 0
		for i := range s.Attempts {
			if s.Attempts[i].StaleResend {
				stale++
			}
		}
		if stale > 0 {
			// Resends after a pooled connection turned out dead: they
			// count as tries (nginx gives those back, and was measured
			// sending one GET four times).
			a = append(a, slog.Int("stale_resends", stale))
		}
	}
	if s.Err != nil {
		a = append(a, slog.String("error", s.Err.Kind.String()))
	}
	if s.Aborted {
		a = append(a, slog.Bool("aborted", true))
	}
	if st := s.TLS; st != nil {
		// The name the client asked for, which may not be its Host.
		a = append(a, slog.String("tls", TLSVersion(st.Version)), slog.String("sni", st.ServerName))
	}
	if ua > host {
		a = append(a, slog.String("user_agent", text[host:ua]))
	}
	if referer > ua {
		a = append(a, slog.String("referer", text[ua:referer]))
	}
	a = append(a, s.notes...)
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(a...)
	l.Handler().Handle(ctx, r)
}

// protocol names the request's protocol for the access log; "" for a
// head that did not parse.
func (s *Session) protocol() string {
	switch {
	case s.http3:
		return "HTTP/3"
	case s.Stream != 0:
		return "HTTP/2"
	case s.Request.Method() == "":
		return ""
	case s.Request.Minor == 0:
		return "HTTP/1.0"
	}
	return "HTTP/1.1"
}

// appendSeconds appends d in seconds with six decimals (microseconds),
// as nginx writes $request_time (with three): 0.004213.
func appendSeconds(b []byte, d time.Duration) []byte {
	us := max(int64(d/time.Microsecond), 0)
	b = strconv.AppendInt(b, us/1e6, 10)
	frac := us % 1e6
	b = append(b, '.')
	for div := int64(1e5); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}
