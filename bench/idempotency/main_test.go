package main

import (
	"bufio"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		in := append([]float64(nil), tt.xs...)
		med, lo, hi := stats(tt.xs)
		if med != tt.med || lo != tt.lo || hi != tt.hi {
			t.Errorf("stats(%v) = %v %v %v, want %v %v %v", in, med, lo, hi, tt.med, tt.lo, tt.hi)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Errorf("stats sorted its argument: %v", tt.xs)
			}
		}
	}
}

func TestReadHead(t *testing.T) {
	for _, tt := range []struct {
		in             string
		status, length int
	}{
		{"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 12\r\n\r\n", 201, 12},
		{"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\r\n", 503, 0},
		{"POST /local/orders HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 60\r\n\r\n", 0, 60},
	} {
		status, length, err := readHead(bufio.NewReader(strings.NewReader(tt.in)))
		if err != nil || status != tt.status || length != tt.length {
			t.Errorf("readHead(%q) = %d %d %v, want %d %d", tt.in, status, length, err, tt.status, tt.length)
		}
	}
	if _, _, err := readHead(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n"))); err == nil {
		t.Error("a head cut short: no error")
	}
}
