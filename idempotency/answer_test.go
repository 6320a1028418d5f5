package idempotency

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

// sample is an answer with everything a kept answer may hold: a reason,
// fields in a mixed case and order, a repeated field, a body, trailers.
func sample() *Answer {
	a := &Answer{Status: 201, Reason: "Created Here", Body: []byte("{\"id\":42}\n")}
	a.Header.Add("content-TYPE", "application/json")
	a.Header.Add("Set-Cookie", "a=1")
	a.Header.Add("X-Order", "42")
	a.Header.Add("Set-Cookie", "b=2")
	a.Header.Add("X-Empty", "")
	a.Trailer.Add("Grpc-Status", "0")
	a.Trailer.Add("x-checksum", "abc")
	return a
}

func TestAnswerEncoding(t *testing.T) {
	for _, a := range []*Answer{sample(), {Status: 204}, {Status: 999, Body: []byte{0, 1, 2}}} {
		enc := a.Encode(nil)
		got, err := DecodeAnswer(enc)
		if err != nil {
			t.Fatalf("DecodeAnswer(Encode(%+v)): %v", a, err)
		}
		if got.Status != a.Status || got.Reason != a.Reason || !bytes.Equal(got.Body, a.Body) ||
			got.Header.String() != a.Header.String() || got.Trailer.String() != a.Trailer.String() {
			t.Errorf("round trip: got %d %q %q %q %q, want %d %q %q %q %q", got.Status, got.Reason, got.Header.String(), got.Body, got.Trailer.String(),
				a.Status, a.Reason, a.Header.String(), a.Body, a.Trailer.String())
		}
		if n := a.size(); n < len(enc) {
			t.Errorf("size() = %d, below the encoding's %d bytes", n, len(enc))
		}
	}
	enc := sample().Encode(nil)
	for _, bad := range [][]byte{
		nil, []byte("SI"), []byte("XX\x01"), []byte("SI\x02"),
		enc[:len(enc)-1],                                            // cut short
		append(append([]byte{}, enc...), 0),                         // a byte too many
		append([]byte("SI\x01"), 0x63),                              // status 99
		append([]byte("SI\x01\xc8\x01\x00\xff\xff\xff\xff\x0f"), 0), // 4G fields
	} {
		if a, err := DecodeAnswer(bad); err == nil {
			t.Errorf("DecodeAnswer(%q) = %+v, want an error", bad, a)
		}
	}
}

// TestEndToEndFields checks that a kept answer leaves out the hop-by-hop
// fields, those Connection names included, and keeps the others as they
// were.
func TestEndToEndFields(t *testing.T) {
	var src, dst h1.Header
	for _, f := range [][2]string{
		{"Content-Type", "text/plain"}, {"Connection", "keep-alive, X-Hop"}, {"X-Hop", "1"},
		{"Keep-Alive", "timeout=5"}, {"transfer-encoding", "chunked"}, {"X-End", "2"},
		{"Upgrade", "h2c"}, {"TE", "trailers"}, {"Proxy-Connection", "close"}, {"Content-Length", "5"},
	} {
		src.Add(f[0], f[1])
	}
	enc, size := appendEndToEnd(nil, &src)
	d := decoder{b: enc}
	d.fields(&dst)
	if d.bad || len(d.b) != 0 {
		t.Fatalf("the fields' encoding %q does not decode", enc)
	}
	if got, want := dst.String(), "Content-Type: text/plain\r\nX-End: 2\r\nContent-Length: 5\r\n"; got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
	if a := (&Answer{Header: dst}); size != a.size()-(&Answer{}).size() {
		t.Errorf("the fields add %d to the size, want %d", size, a.size()-(&Answer{}).size())
	}
	// 200 fields: their count takes two bytes, and they move to make room.
	var many, want h1.Header
	for i := range 200 {
		many.Add("X-"+strconv.Itoa(i), strconv.Itoa(i))
		want.Add("X-"+strconv.Itoa(i), strconv.Itoa(i))
		if i%50 == 0 {
			many.Add("Keep-Alive", "timeout=5")
		}
	}
	enc, _ = appendEndToEnd([]byte("prefix"), &many)
	if w := appendFields([]byte("prefix"), &want); !bytes.Equal(enc, w) {
		t.Errorf("200 fields written as\n%q\nwant\n%q", enc, w)
	}
}

var proxyStatusForm = regexp.MustCompile(`^sluice; error=[a-z_]+; details="(?:[ !#-\[\]-~]|\\["\\])*"$`)

// TestProblems checks the layer's own answers: status, a problem+json
// body that parses with its members, Proxy-Status in RFC 9209's form.
func TestProblems(t *testing.T) {
	for _, p := range []*problem{problemMissing, problemInvalid, problemInFlight, problemNotKept, problemMismatch, problemUnknown, problemStore} {
		a := p.answer(`what "happened" \ here`)
		if a.Status != p.status {
			t.Errorf("%s: status %d", p.name, a.Status)
		}
		var body struct {
			Type, Title, Detail string
			Status              int
		}
		if err := json.Unmarshal(a.Body, &body); err != nil {
			t.Fatalf("%s: body %q: %v", p.name, a.Body, err)
		}
		if body.Type != ProblemBase+p.name || body.Title != p.title || body.Status != p.status || body.Detail != `what "happened" \ here` {
			t.Errorf("%s: body %+v", p.name, body)
		}
		if ct := string(a.Header.Get("Content-Type")); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", p.name, ct)
		}
		ps := string(a.Header.Get("Proxy-Status"))
		if !proxyStatusForm.MatchString(ps) || !strings.Contains(ps, "error="+p.errorType+";") {
			t.Errorf("%s: Proxy-Status %q", p.name, ps)
		}
		if ra := string(a.Header.Get("Retry-After")); ra != p.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", p.name, ra, p.retryAfter)
		}
	}
	if got := sfString("a\"b\\c\x00\xffd"); got != `"a\"b\\cd"` {
		t.Errorf("sfString = %s", got)
	}
	if got := jsonString("a\"b\\c\x01"); got != `"a\"b\\c\u0001"` {
		t.Errorf("jsonString = %s", got)
	}
}
