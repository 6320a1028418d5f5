package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/internal/tlstest"
)

// fileAnswer answers every request with a file: the request's path names
// one of files; "?off=N&n=M" takes a part; "?status=N" another status.
type fileAnswer struct {
	dir string
	// truncate, when set, halves the file once its size was taken (a
	// file that changed since it was opened).
	truncate bool
	// asUpstream makes the answers stand in for an upstream's
	// (Response.AsUpstream: a disk store's copy, say), relayed as one.
	asUpstream bool
}

func (h *fileAnswer) UpstreamPeer(*Session) (*Peer, error) { return nil, nil }

func (h *fileAnswer) RequestFilter(s *Session) *Response {
	path := string(s.Request.Path())
	f, err := os.Open(filepath.Join(h.dir, filepath.Base(path)))
	if err != nil {
		return Text(404, "no such file\n")
	}
	st, _ := f.Stat()
	r := &Response{Status: 200, File: &FileBody{File: f, Size: st.Size()}, AsUpstream: h.asUpstream}
	var off, n int64
	var status int
	q := string(s.Request.Target()[len(path):])
	if _, err := fmt.Sscanf(q, "?off=%d&n=%d", &off, &n); err == nil {
		r.Status, r.File.Offset, r.File.Size = 206, off, n
	}
	if _, err := fmt.Sscanf(q, "?status=%d", &status); err == nil {
		r.Status = status
	}
	if h.truncate {
		os.Truncate(f.Name(), st.Size()/2)
	}
	r.Header.Add("Content-Type", "application/octet-stream")
	return r
}

// TestFileAnswers checks the answers with a file body (Response.File) on
// every way sluice writes to a client: small ones in the head's write,
// large ones with sendfile over plain TCP, copied over TLS and HTTP/2;
// parts of a file; HEAD; a 304, which has no Content-Length. Answers that
// stand in for an upstream's (a disk store's copies) go the same ways.
func TestFileAnswers(t *testing.T) {
	for _, asUpstream := range []bool{false, true} {
		t.Run(fmt.Sprintf("asUpstream=%v", asUpstream), func(t *testing.T) { testFileAnswers(t, asUpstream) })
	}
}

func testFileAnswers(t *testing.T, asUpstream bool) {
	dir := t.TempDir()
	small := bytes.Repeat([]byte("0123456789abcdef"), 100)      // 1600 bytes
	large := bytes.Repeat([]byte("sluice serves files\n"), 1e5) // 2 MB, past a chunk
	tlstest.WriteFile(t, filepath.Join(dir, "small"), small)
	tlstest.WriteFile(t, filepath.Join(dir, "large"), large)
	tlstest.WriteFile(t, filepath.Join(dir, "empty"), nil)
	h := &fileAnswer{dir: dir, asUpstream: asUpstream}

	plain := start(t, h)
	ca := tlstest.NewCA(t, "test CA")
	leaf := ca.Server(t, "localhost")
	overTLS, _ := startH2(t, h, ListenerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{*leaf.TLS}}})
	h2hs, h2client := startH2(t, h, h2c())
	clients := []struct {
		name string
		get  func(t *testing.T, method, target string) (*http.Response, []byte)
	}{
		{"HTTP/1.1", func(t *testing.T, method, target string) (*http.Response, []byte) {
			return rawDo(t, plain.addr, method, target)
		}},
		{"HTTP/1.1 over TLS", func(t *testing.T, method, target string) (*http.Response, []byte) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}}
			defer tr.CloseIdleConnections()
			return clientDo(t, &http.Client{Transport: tr}, method, "https://"+overTLS.addr+target)
		}},
		{"HTTP/2 over TLS", func(t *testing.T, method, target string) (*http.Response, []byte) {
			tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}}
			defer tr.CloseIdleConnections()
			return clientDo(t, &http.Client{Transport: tr}, method, "https://"+overTLS.addr+target)
		}},
		{"HTTP/2", func(t *testing.T, method, target string) (*http.Response, []byte) {
			return clientDo(t, h2client, method, "http://"+h2hs.addr+target)
		}},
	}
	tests := []struct {
		method, target string
		status         int
		want           []byte
		length         string
	}{
		{"GET", "/small", 200, small, "1600"},
		{"GET", "/large", 200, large, fmt.Sprint(len(large))},
		{"GET", "/empty", 200, nil, "0"},
		{"GET", "/large?off=1000000&n=600000", 206, large[1000000:1600000], "600000"},
		{"GET", "/small?off=10&n=5", 206, small[10:15], "5"},
		{"GET", fmt.Sprintf("/large?off=7&n=%d", smallFile), 206, large[7 : 7+smallFile], fmt.Sprint(smallFile)},
		{"GET", fmt.Sprintf("/large?off=7&n=%d", smallFile+1), 206, large[7 : 7+smallFile+1], fmt.Sprint(smallFile + 1)},
		{"HEAD", "/large", 200, nil, fmt.Sprint(len(large))},
		{"GET", "/large?status=304", 304, nil, ""},
	}
	for _, cl := range clients {
		for _, tt := range tests {
			t.Run(cl.name+" "+tt.method+" "+tt.target, func(t *testing.T) {
				resp, body := cl.get(t, tt.method, tt.target)
				if resp.StatusCode != tt.status || !bytes.Equal(body, tt.want) {
					t.Fatalf("%d with %d bytes, want %d with %d", resp.StatusCode, len(body), tt.status, len(tt.want))
				}
				if tt.method == "HEAD" && asUpstream {
					return // an upstream's HEAD answer has the Content-Length it came with: none here
				}
				if cl := resp.Header.Get("Content-Length"); cl != tt.length {
					t.Errorf("Content-Length %q, want %q", cl, tt.length)
				}
			})
		}
	}
	// The access log counts the bytes that went out: the large file's
	// body and its head.
	if !strings.Contains(plain.access.String(), "bytes_out=2000") {
		t.Errorf("no bytes_out=2000xxx in the access log:\n%s", plain.access)
	}
}

// TestFileAnswerTruncated checks that a file that yields less than the
// length its answer announced resets the client's connection: a short
// body never looks whole.
func TestFileAnswerTruncated(t *testing.T) {
	for _, tt := range []struct {
		size       int
		asUpstream bool
		line       string
	}{
		{1000, false, "answer aborted"},
		{2 << 20, false, "answer aborted"},
		{1000, true, "the file ended before its length"},
		{2 << 20, true, "the file ended before its length"},
	} {
		size := tt.size
		t.Run(fmt.Sprintf("%d asUpstream=%v", size, tt.asUpstream), func(t *testing.T) {
			dir := t.TempDir()
			tlstest.WriteFile(t, filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), size))
			hs := start(t, &fileAnswer{dir: dir, truncate: true, asUpstream: tt.asUpstream})
			nc, err := net.Dial("tcp", hs.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(nc, "GET /f HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(resp.Body)
				if err == nil {
					t.Fatalf("%d with %d bytes read whole; want a cut", resp.StatusCode, len(b))
				}
			}
			if !strings.Contains(hs.errors.String(), tt.line) {
				t.Errorf("no line about the aborted answer:\n%s", hs.errors)
			}
		})
	}
}

// rawDo sends one request on a new connection and reads the answer.
func rawDo(t *testing.T, addr, method, target string) (*http.Response, []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(nc, "%s %s HTTP/1.1\r\nHost: h\r\n\r\n", method, target)
	req, _ := http.NewRequest(method, target, nil)
	resp, err := http.ReadResponse(bufio.NewReader(nc), req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func clientDo(t *testing.T, c *http.Client, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
