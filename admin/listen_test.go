package admin

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestListenStop: the admin listener serves until stop, and stop closes
// the connections open on it and ends its goroutines (TestMain checks
// that none is left).
func TestListenStop(t *testing.T) {
	bound, stop, err := (&Server{}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", bound.String())
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "GET /live HTTP/1.1\r\nHost: admin\r\n\r\n")
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /live: %d", resp.StatusCode)
	}
	stop() // the kept-alive connection is open still
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read after stop: %v, want EOF (the connection closed)", err)
	}
}
