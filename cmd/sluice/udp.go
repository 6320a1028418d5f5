package main

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
)

// quicBuffer is the UDP socket buffer size quic-go asks the kernel for
// (its DesiredReceiveBufferSize and DesiredSendBufferSize): what a QUIC
// server needs not to drop packets in a burst.
const quicBuffer = 7 << 20

var udpWarnOnce sync.Once

// warnUDPBuffers logs, once, when the kernel caps UDP socket buffers
// below what QUIC asks for (net.core.rmem_max, net.core.wmem_max): HTTP/3
// then drops packets under load, and the sysctls say how to raise them.
// quic-go's own line about it is left out (QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING):
// this one says it in the log's format. Where /proc/sys is not there (not
// Linux), it says nothing.
func warnUDPBuffers(log *slog.Logger) {
	udpWarnOnce.Do(func() {
		os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
		if os.Geteuid() == 0 {
			return // quic-go forces the size past the caps (SO_RCVBUFFORCE)
		}
		for _, name := range []string{"rmem_max", "wmem_max"} {
			b, err := os.ReadFile("/proc/sys/net/core/" + name)
			if err != nil {
				return
			}
			n, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil && n < quicBuffer {
				log.Warn("HTTP/3: the kernel caps UDP socket buffers below what QUIC asks for; packets may be dropped under load",
					"sysctl", "net.core."+name, "value", n, "want", quicBuffer,
					"fix", "sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000")
			}
		}
	})
}
