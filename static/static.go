// Package static serves files from a directory: a phase (a
// proxy.RequestFilter) of a route that answers the requests it matches
// itself, instead of an upstream, as nginx's alias does.
//
// The request path after the route's prefix names a file under the root
// (/static/ + css/site.css → ROOT/css/site.css), percent-decoded once.
// Files are opened through an os.Root (on Linux, a name with directories
// by one openat2 with RESOLVE_BENEATH), which refuses any name or symbolic
// link that would leave the directory, after fileName has refused "..",
// encoded "/", backslashes and NUL on its own. What is served:
//
//   - GET and HEAD; other methods get 405 with Allow.
//   - Regular files only; a directory's path ending in "/" serves its
//     index file when it has one, and 404 otherwise (no listings); a
//     directory's path without the "/" is redirected (301) to it when the
//     index exists, as nginx does.
//   - Hidden names (an element starting with ".") get 404, except
//     ".well-known", unless Options.Hidden: a forgotten .git or .env
//     under the root is not published.
//   - ETag (strong: modification time and size) and Last-Modified, with
//     the conditional fields of RFC 9110 §13 (304, 412).
//   - One byte range (206, or 416 when unsatisfiable); several ranges
//     get the whole file, 200 (byteRange says why).
//   - A precompressed sibling, name.br or name.gz, when the client's
//     Accept-Encoding takes it, for requests without Range; every answer
//     for a file carries Vary: Accept-Encoding.
//   - A content type from a built-in table of web types, then the mime
//     package's, with X-Content-Type-Options: nosniff.
//
// The access log line of each request the phase answers ends with
// static=WHAT: hit, br or gzip (the file, or its sibling, whole),
// partial, not_modified, precondition_failed, unsatisfiable, redirect,
// not_found, forbidden, unavailable (out of file descriptors: 503),
// refused (a path it will not map) or method.
package static

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Options configure a Files.
type Options struct {
	// Root is the directory served; it must exist.
	Root string
	// Prefix is the part of the request path that stands for Root: the
	// route's path prefix. A path that does not start with it (a phase
	// before this one rewrote it) is mapped whole.
	Prefix string
	// Index is the file served for a directory's path; "" serves none.
	Index string
	// Hidden serves names starting with "."; by default they get 404,
	// except ".well-known".
	Hidden bool
	// CacheControl, when set, is the Cache-Control field of the answers
	// with a file (200, 206, 304): "max-age=31536000, immutable" for
	// files whose names change with their content, say; "" sends none.
	CacheControl string
}

// Files serves the files under one directory. It is safe for concurrent
// use; it holds the directory open (an os.Root) until Close, or until it
// is garbage collected.
type Files struct {
	root         *os.Root
	beneath      *beneath // one openat2 for a name with directories (Linux)
	prefix       string
	index        string
	hidden       bool
	cacheControl string
}

// New opens the directory o.Root for serving.
func New(o Options) (*Files, error) {
	if o.Index != "" && (path.Base(o.Index) != o.Index || o.Index[0] == '.') {
		return nil, fmt.Errorf("static: index %q must be a file name, without a directory", o.Index)
	}
	root, err := os.OpenRoot(o.Root)
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	return &Files{root: root, beneath: newBeneath(o.Root), prefix: o.Prefix, index: o.Index, hidden: o.Hidden,
		cacheControl: o.CacheControl}, nil
}

// Close closes the directory; requests served after it get 404.
func (f *Files) Close() error {
	f.beneath.close()
	return f.root.Close()
}

// RequestFilter answers every request: with a file, or with why not.
func (f *Files) RequestFilter(s *proxy.Session) *proxy.Response {
	method := s.Request.Method()
	if method != "GET" && method != "HEAD" {
		r := refusal(s, 405, "method")
		r.Header.Add("Allow", "GET, HEAD")
		return r
	}
	p := s.Request.Path()
	if len(p) >= len(f.prefix) && string(p[:len(f.prefix)]) == f.prefix {
		p = p[len(f.prefix):]
	}
	name, dir, status := fileName(p, f.hidden)
	if status != 0 {
		return refusal(s, status, "refused")
	}
	file, fi, status := f.open(name)
	if status != 0 {
		return refusal(s, status, "")
	}
	if fi.IsDir() {
		file.Close()
		if f.index == "" {
			return refusal(s, 404, "")
		}
		name = path.Join(name, f.index)
		if file, fi, status = f.open(name); status != 0 || fi.IsDir() {
			if status == 0 {
				file.Close()
			}
			return refusal(s, 404, "")
		}
		if !dir {
			file.Close()
			return redirect(s)
		}
	} else if dir {
		// A file's name with a "/" after it, as a file system says:
		// not a directory.
		file.Close()
		return refusal(s, 404, "")
	}
	return f.serve(s, name, file, fi)
}

// open opens the file called name under the root, without waiting on
// anything but the disk, and refuses what is not a regular file or a
// directory (a FIFO, a device, a socket).
func (f *Files) open(name string) (*os.File, fs.FileInfo, int) {
	if name == "" {
		name = "."
	}
	var file *os.File
	var err error
	handled := false
	if strings.IndexByte(name, '/') >= 0 {
		file, err, handled = f.beneath.open(name)
	}
	if !handled {
		file, err = f.root.OpenFile(name, os.O_RDONLY|openFlag, 0)
	}
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrPermission):
			return nil, nil, 403
		case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
			// Out of descriptors: the file may well be there.
			return nil, nil, 503
		}
		// Not there, not a directory on the way, or a symbolic link out
		// of the root (os.Root refuses it).
		return nil, nil, 404
	}
	fi, err := file.Stat()
	if err != nil || !(fi.Mode().IsRegular() || fi.IsDir()) {
		file.Close()
		return nil, nil, 404
	}
	return file, fi, 0
}

// serve answers with the regular file called name, open as file.
func (f *Files) serve(s *proxy.Session, name string, file *os.File, fi fs.FileInfo) *proxy.Response {
	h := &s.Request.Header
	get := s.Request.Method() == "GET"
	rangeField := h.Get("Range")
	hasRange := get && h.Has("Range")
	coding := ""
	if !hasRange {
		// A range of a compressed sibling is a range of other bytes
		// than the client's earlier parts of the file may be: ranges are
		// always of the file itself.
		file, fi, coding = f.sibling(name, file, fi, accepted(h))
	}
	// The tag and the date are made in the session's scratch buffer:
	// the header copies them.
	b := appendETag(s.Scratch(), fi, coding)
	tag := b[:len(b):len(b)]
	mod := fi.ModTime().UTC()
	b = mod.AppendFormat(b, httpDate)
	lastModified := b[len(tag):]
	defer s.KeepScratch(b)
	r := &proxy.Response{Status: 200}
	r.Header.Grow(11, 320)
	// An origin server sends Date (RFC 9110 §6.6.1): caches reckon a
	// file's age and freshness from it and Last-Modified.
	r.Header.Add("Date", now())
	r.Header.AddBytes([]byte("ETag"), tag)
	r.Header.AddBytes([]byte("Last-Modified"), lastModified)
	r.Header.Add("Vary", "Accept-Encoding")
	if f.cacheControl != "" {
		r.Header.Add("Cache-Control", f.cacheControl)
	}
	switch preconditions(h, tag, mod) {
	case notModified:
		file.Close()
		r.Status = 304
		s.Note("static", "not_modified")
		return r
	case failed:
		file.Close()
		return refusal(s, 412, "precondition_failed")
	}
	r.Header.Add("Content-Type", ContentType(name))
	r.Header.Add("X-Content-Type-Options", "nosniff")
	if coding != "" {
		r.Header.Add("Content-Encoding", coding)
	}
	r.Header.Add("Accept-Ranges", "bytes")
	size := fi.Size()
	r.File = &proxy.FileBody{File: file, Size: size}
	if hasRange && ifRange(h, tag, mod) {
		off, n, sp := byteRange(rangeField, size)
		switch sp {
		case part:
			r.Status, r.File.Offset, r.File.Size = 206, off, n
			r.Header.Add("Content-Range", "bytes "+strconv.FormatInt(off, 10)+"-"+
				strconv.FormatInt(off+n-1, 10)+"/"+strconv.FormatInt(size, 10))
			s.Note("static", "partial")
			return r
		case unsatisfiable:
			file.Close()
			r := refusal(s, 416, "unsatisfiable")
			r.Header.Add("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
			return r
		}
	}
	if coding == "" {
		s.Note("static", "hit")
	} else {
		s.Note("static", coding)
	}
	return r
}

// sibling returns the precompressed sibling of the file called name that
// the client accepts (q, from accepted), preferring the coding it weighs
// highest, br on a tie; or the file itself, with coding "". The file not
// served is closed.
func (f *Files) sibling(name string, file *os.File, fi fs.FileInfo, q [len(codings)]int) (*os.File, fs.FileInfo, string) {
	order := [len(codings)]int{0, 1}
	if q[1] > q[0] {
		order = [len(codings)]int{1, 0}
	}
	for _, j := range order {
		if q[j] <= 0 {
			continue
		}
		sf, sfi, status := f.open(name + codings[j].suffix)
		if status != 0 {
			continue
		}
		if sfi.IsDir() {
			sf.Close()
			continue
		}
		file.Close()
		return sf, sfi, codings[j].name
	}
	return file, fi, ""
}

// redirect sends a directory's path without its "/" to the path with it,
// keeping the query.
func redirect(s *proxy.Session) *proxy.Response {
	t := s.Request.Target()
	p := s.Request.Path()
	loc := make([]byte, 0, len(t)+1)
	loc = append(loc, p...)
	loc = append(loc, '/')
	loc = append(loc, t[len(p):]...)
	r := proxy.Text(301, "301 Moved Permanently\n")
	r.Header.AddBytes([]byte("Location"), loc)
	s.Note("static", "redirect")
	return r
}

// refusal is a short plain-text answer with status, noted in the access
// log as what (or as the status's own word when what is "").
func refusal(s *proxy.Session, status int, what string) *proxy.Response {
	if what == "" {
		switch status {
		case 403:
			what = "forbidden"
		case 503:
			what = "unavailable"
		default:
			what = "not_found"
		}
	}
	s.Note("static", what)
	r := proxy.Text(status, strconv.Itoa(status)+" "+h1.StatusText(status)+"\n")
	r.Header.Add("X-Content-Type-Options", "nosniff")
	switch status {
	case 400:
		// The request, not the file system, is wrong: say so as a
		// proxy does (RFC 9209).
		r.Header.Add("Proxy-Status", `sluice; error=http_request_error; details="the path names no file that can be served"`)
	case 503:
		r.Header.Add("Proxy-Status", `sluice; error=proxy_internal_error; details="out of file descriptors"`)
		r.Header.Add("Retry-After", "1")
	}
	return r
}
