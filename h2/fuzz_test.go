package h2

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fuzzSeeds returns frame sequences that reach each part of the read side:
// requests with bodies and trailers, header blocks in several frames,
// control frames, resets and errors.
func fuzzSeeds() [][]byte {
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
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
		write(fr, block)
		seeds = append(seeds, buf.Bytes())
	}
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(getReq...), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(append(postReq, "content-length", "5")...), EndHeaders: true})
		fr.WriteDataPadded(1, false, []byte("he"), []byte{0, 0, 0})
		fr.WriteData(1, true, []byte("llo"))
		fr.WriteWindowUpdate(0, 1000)
		fr.WriteWindowUpdate(1, 1000)
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		b := block(append(postReq, "te", "trailers", "x-long", "0123456789012345678901234567890123456789")...)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:10], Priority: http2.PriorityParam{StreamDep: 1, Weight: 9}})
		fr.WriteContinuation(3, false, b[10:20])
		fr.WriteContinuation(3, true, b[20:])
		fr.WriteData(3, false, []byte("body"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block("x-trailer", "v"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WritePing(false, [8]byte{1})
		fr.WritePriority(5, http2.PriorityParam{StreamDep: 3})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block(postReq...), EndHeaders: true})
		fr.WriteRSTStream(5, http2.ErrCodeCancel)
		fr.WriteData(5, true, []byte("late"))
		fr.WriteRawFrame(0x42, 0, 0, []byte("unknown"))
		fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: block(getReq...), EndStream: true, EndHeaders: true})
		fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	add(func(fr *http2.Framer, block func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":method", "CONNECT", ":authority", "h:1"), EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(append(getReq, "Upper", "x")...), EndStream: true, EndHeaders: true})
		fr.WriteWindowUpdate(1, 0)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
	})
	return seeds
}

// FuzzServeConn feeds arbitrary bytes after a valid preface to a Conn over
// net.Pipe, with a handler that reads the body and answers. The server must
// not panic, and Serve must return once the client is gone.
func FuzzServeConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		cn, sn := net.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- ServeConn(sn, []byte(http2.ClientPreface), &Settings{WriteTimeout: time.Second}, func(st *Stream) {
				body, _ := io.ReadAll(io.LimitReader(st, 1<<16))
				st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}}, body, false)
				st.WriteTrailers([]hpack.HeaderField{{Name: "x-n", Value: "1"}})
			})
		}()
		go io.Copy(io.Discard, cn)
		cn.Write(in)
		cn.Close()
		<-done
	})
}
