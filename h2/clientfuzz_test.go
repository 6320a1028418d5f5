package h2

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// clientFuzzSeeds returns server frame sequences that reach each part of
// the client's read side; streams 1 (GET) and 3 (POST) are open.
func clientFuzzSeeds() [][]byte {
	var seeds [][]byte
	add := func(write func(fr *http2.Framer, block func(kv ...string) []byte)) {
		var buf bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		fr.AllowIllegalWrites = true
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		block := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i < len(kv); i += 2 {
				enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return append([]byte(nil), hb.Bytes()...)
		}
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
		write(fr, block)
		seeds = append(seeds, buf.Bytes())
	}
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteSettingsAck()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":status", "200", "content-length", "5"), EndHeaders: true})
		fr.WriteDataPadded(1, false, []byte("he"), []byte{0, 0, 0})
		fr.WriteData(1, true, []byte("llo"))
		fr.WriteWindowUpdate(0, 1000)
		fr.WriteWindowUpdate(3, 1000)
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		b := block(":status", "200", "x-long", "0123456789012345678901234567890123456789")
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "100"), EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:10]})
		fr.WriteContinuation(3, false, b[10:20])
		fr.WriteContinuation(3, true, b[20:])
		fr.WriteData(3, false, []byte("body"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block("grpc-status", "0"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WritePing(false, [8]byte{1})
		fr.WritePriority(1, http2.PriorityParam{StreamDep: 3})
		fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		fr.WriteData(1, true, []byte("late"))
		fr.WriteRawFrame(0x42, 0, 0, []byte("unknown"))
		fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
		fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "204"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":status", "200", "Connection", "close"), EndHeaders: true})
		fr.WritePushPromise(http2.PushPromiseParam{StreamID: 3, PromiseID: 2, BlockFragment: block(":method", "GET"), EndHeaders: true})
		fr.WriteWindowUpdate(1, 0)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteGoAway(0, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "103", "link", "</a>"), EndHeaders: true})
		fr.WriteData(3, false, make([]byte, 200))
	})
	return seeds
}

// FuzzClientConn feeds arbitrary bytes, as the server's side after the
// preface exchange, to a ClientConn over net.Pipe with two streams open, one
// of them sending a body. The client must not panic, and every stream and
// the connection must end once the server side is gone.
func FuzzClientConn(f *testing.F) {
	for _, s := range clientFuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		cn, sn := net.Pipe()
		go io.Copy(io.Discard, sn)
		cc := NewClientConn(cn, &ClientSettings{WriteTimeout: time.Second, MaxHeaderList: 4096})
		var wg sync.WaitGroup
		for _, post := range []bool{false, true} {
			method := "GET"
			if post {
				method = "POST"
			}
			cs, err := cc.OpenStream(request(method, "/"), !post)
			if err != nil {
				t.Fatalf("OpenStream before any input: %v", err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if post {
					go func() {
						cs.Write(make([]byte, 300))
						cs.WriteTrailers([]hpack.HeaderField{{Name: "x-t", Value: "1"}})
					}()
				}
				readResponse(cs)
				<-cs.Done()
			}()
		}
		sn.Write(in)
		sn.Close()
		<-cc.Done()
		wg.Wait()
	})
}
