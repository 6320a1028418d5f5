package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The relay carries what bench/compare sends: keep-alive GETs, a POST with
// a body, a large response, and Connection: close.
func TestRelay(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	big := strings.Repeat("y", 1<<20)
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/big":
			// The relay knows only Content-Length framing.
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			io.WriteString(w, big)
		default:
			io.WriteString(w, r.Method+" "+string(body))
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := &relay{upstream: up.Addr().String(), idle: make(chan *upConn, 4)}
	defer func() {
		// The relay's pooled upstream connections end with the test.
		for len(r.idle) > 0 {
			(<-r.idle).nc.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct{ req, want string }{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET "},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "POST hello"},
		{"GET /big HTTP/1.1\r\nHost: a\r\n\r\n", big},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "GET "},
	} {
		if _, err := io.WriteString(c, tc.req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != tc.want {
			t.Fatalf("%q: %d bytes %.20q, %v; want %.20q", tc.req, len(body), body, err, tc.want)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close the relay kept the connection: %v", err)
	}
}
