package main

import (
	"errors"
	"io/fs"
	"reflect"
	"testing"
)

// udpBufferCaps names the caps below what QUIC asks for, and only those.
func TestUDPBufferCaps(t *testing.T) {
	for _, tt := range []struct {
		name       string
		rmem, wmem string // "" for a file that cannot be read
		want       []udpBufferCap
	}{
		{"both low (Linux's default)", "212992\n", "212992\n", []udpBufferCap{{"net.core.rmem_max", 212992}, {"net.core.wmem_max", 212992}}},
		{"receive low", "212992\n", "7500000\n", []udpBufferCap{{"net.core.rmem_max", 212992}}},
		{"both raised", "7500000\n", "7500000\n", nil},
		{"exactly enough", "7340032", "7340032", nil},
		{"no /proc/sys", "", "", nil},
		{"unparsable", "lots\n", "1\n", []udpBufferCap{{"net.core.wmem_max", 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"/proc/sys/net/core/rmem_max": tt.rmem, "/proc/sys/net/core/wmem_max": tt.wmem}
			got := udpBufferCaps(func(name string) ([]byte, error) {
				if files[name] == "" {
					return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("no such file")}
				}
				return []byte(files[name]), nil
			})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
