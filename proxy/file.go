package proxy

import (
	"github.com/sluice-proxy/sluice/fault"
)

// Answers with a file body (Response.File).
const (
	// smallFile is the largest file body read into the write of the
	// response head.
	smallFile = 16 << 10
	// fileChunk is the most of a file body one sendfile call sends, so
	// that the send timeout bounds each part of a large file, not the
	// whole of it: a client that stalls is cut off as it would be
	// reading any other response.
	fileChunk = 512 << 10
	// fileBuf is the buffer a file body is copied through where sendfile
	// cannot go (TLS, HTTP/2).
	fileBuf = 32 << 10
)

// appendFile appends the whole of a small file body to b, reporting
// whether the file held all of it.
func appendFile(b []byte, fb *FileBody) ([]byte, bool) {
	n := len(b)
	b = append(b, make([]byte, fb.Size)...)
	got, err := fb.File.ReadAt(b[n:], fb.Offset)
	if int64(got) < fb.Size {
		_ = err // io.EOF: the file was cut short since it was opened
		return b[:n], false
	}
	return b, true
}

// copyFile writes the body of a file answer by copying it, through
// write, in pieces of up to fileBuf bytes. A file that yields less than its
// size fails with a *fileError.
func copyFile(fb *FileBody, write func([]byte) error) error {
	bp := getBuf()
	defer putBuf(bp)
	if cap(*bp) < fileBuf {
		*bp = make([]byte, 0, fileBuf)
	}
	buf := (*bp)[:fileBuf]
	off, left := fb.Offset, fb.Size
	for left > 0 {
		n, err := fb.File.ReadAt(buf[:min(left, int64(len(buf)))], off)
		if n > 0 {
			if err := write(buf[:n]); err != nil {
				return err
			}
			off += int64(n)
			left -= int64(n)
		}
		if left > 0 && err != nil {
			return &fileError{err}
		}
	}
	return nil
}

// fileError is a file answer's file failing to give its body whole, as
// opposed to the client failing to take it.
type fileError struct{ err error }

func (e *fileError) Error() string {
	if e.err == nil {
		return "the file ended before its length"
	}
	return "reading the file: " + e.err.Error()
}

func (e *fileError) Unwrap() error { return e.err }

// fileFailed ends a file answer whose file could not be read whole:
// cut short since it was opened, or failing. Bytes may have gone out, so
// the client's connection is reset (as any response that cannot be
// finished is), never left with a short body that looks whole.
func (s *Session) fileFailed(err error) {
	s.Err = &fault.Error{Kind: fault.Internal, Source: fault.Internally,
		Context: "the response's file ended before its length (changed since it was opened?)", Cause: err}
	s.abort()
	s.srv.ErrorLog.Error("answer aborted", "client", s.Client, "target", string(s.Request.Target()), "error", s.Err.Error())
}
