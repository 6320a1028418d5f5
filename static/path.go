package static

import "strings"

// Limits of a file name taken from a request: no file system has longer
// names, so a longer request names no file.
const (
	maxName    = 4096 // bytes of the whole name under the root
	maxElement = 255  // bytes of one element
)

// fileName maps the part of a request path after the route's prefix
// (raw, as on the wire: percent-encoded) to a file's name under the root.
// It decodes percent-escapes once, and the name it returns is relative
// and slash-separated, with no empty, "." or ".." element, no NUL or other
// control byte, no backslash, and no element longer than 255 bytes: it
// cannot leave the root by its own means (symbolic links are the root's
// to refuse: os.Root). "" names the root itself. dir reports that the
// path ended in "/", asking for a directory.
//
// A path it will not map is refused with status: 400 for one no browser
// sends (a bad percent-escape, a control byte, a ".." element: clients
// resolve those before sending, RFC 3986 §5.2.4), 404 for a name that
// is not served (an encoded "/", a backslash, a hidden element when
// hidden is false, too long).
func fileName(p []byte, hidden bool) (name string, dir bool, status int) {
	if len(p) > 3*maxName {
		return "", false, 404
	}
	var b strings.Builder
	b.Grow(len(p))
	dir = len(p) == 0 || p[len(p)-1] == '/'
	for len(p) > 0 {
		// One element, up to the next literal "/".
		var elem [maxElement]byte
		n := 0
		for len(p) > 0 && p[0] != '/' {
			c := p[0]
			p = p[1:]
			if c == '%' {
				if len(p) < 2 || unhex(p[0]) < 0 || unhex(p[1]) < 0 {
					return "", false, 400
				}
				c = byte(unhex(p[0])<<4 | unhex(p[1]))
				p = p[2:]
				if c == '/' {
					// An encoded "/" is part of a name, and no file's
					// name holds one.
					return "", false, 404
				}
			}
			switch {
			case c < 0x20 || c == 0x7f:
				return "", false, 400
			case c == '\\':
				// A separator on Windows; refused everywhere, so that a
				// name means the same on every system.
				return "", false, 404
			case n == maxElement:
				return "", false, 404
			}
			elem[n] = c
			n++
		}
		if len(p) > 0 {
			p = p[1:] // the "/"
		}
		e := elem[:n]
		switch {
		case n == 0, n == 1 && e[0] == '.':
			continue // "//" and "/./" name the directory they are in
		case n == 2 && e[0] == '.' && e[1] == '.':
			return "", false, 400
		case e[0] == '.' && !hidden && string(e) != ".well-known":
			return "", false, 404
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.Write(e)
		if b.Len() > maxName {
			return "", false, 404
		}
	}
	return b.String(), dir, 0
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
