package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// idleDialers bounds how many connections are being opened at once,
// so that the proxy's accept queue does not overflow.
const idleDialers = 200

// idleSet is a set of open client connections, each of which has sent
// one GET and read its response.
type idleSet struct {
	conns  []net.Conn
	failed int   // connections that could not be opened or got no 200
	first  error // the first failure, for the report
}

// openIdle opens n keep-alive connections to 127.0.0.1:port; each sends
// GET /small, reads the whole response and then stays open and idle. With
// cfg, each is a TLS connection, through its handshake.
func openIdle(port, n int, cfg *tls.Config) *idleSet {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	req := []byte("GET /small HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: bench-compare\r\n\r\n")
	var (
		mu  sync.Mutex
		set idleSet
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, idleDialers)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := openOne(addr, req, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				set.failed++
				if set.first == nil {
					set.first = err
				}
				return
			}
			set.conns = append(set.conns, c)
		}()
	}
	wg.Wait()
	return &set
}

func openOne(addr string, req []byte, cfg *tls.Config) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 1024), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err == nil && resp.Close {
		err = errors.New("the proxy closes the connection after the response")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// closedByPeer counts the connections that the proxy has closed: a read
// that does not time out within a short wait means EOF or an error.
func (s *idleSet) closedByPeer() int {
	var (
		mu     sync.Mutex
		closed int
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(300 * time.Millisecond)
	for _, c := range s.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			var b [1]byte
			_, err := c.Read(b[:])
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			mu.Lock()
			closed++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return closed
}

func (s *idleSet) close() {
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}
