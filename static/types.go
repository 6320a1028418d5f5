package static

import (
	"mime"
	"path"
	"strings"
)

// webTypes are the content types of the files a web site serves, so that
// they do not depend on the machine's /etc/mime.types (which
// mime.TypeByExtension reads, and which differs between systems, or is
// missing). Text types say their charset.
var webTypes = map[string]string{
	".html":        "text/html; charset=utf-8",
	".htm":         "text/html; charset=utf-8",
	".css":         "text/css; charset=utf-8",
	".js":          "text/javascript; charset=utf-8", // RFC 9239
	".mjs":         "text/javascript; charset=utf-8",
	".json":        "application/json",
	".map":         "application/json",
	".webmanifest": "application/manifest+json",
	".xml":         "text/xml; charset=utf-8",
	".txt":         "text/plain; charset=utf-8",
	".csv":         "text/csv; charset=utf-8",
	".md":          "text/markdown; charset=utf-8",
	".svg":         "image/svg+xml",
	".png":         "image/png",
	".apng":        "image/apng",
	".jpg":         "image/jpeg",
	".jpeg":        "image/jpeg",
	".gif":         "image/gif",
	".webp":        "image/webp",
	".avif":        "image/avif",
	".ico":         "image/x-icon",
	".woff":        "font/woff",
	".woff2":       "font/woff2",
	".ttf":         "font/ttf",
	".otf":         "font/otf",
	".wasm":        "application/wasm",
	".pdf":         "application/pdf",
	".mp4":         "video/mp4",
	".webm":        "video/webm",
	".mp3":         "audio/mpeg",
	".ogg":         "audio/ogg",
	".wav":         "audio/wav",
	".zip":         "application/zip",
	".gz":          "application/gzip",
}

// ContentType returns the type of the file called name, by its
// extension, ignoring case: a built-in table of the types a web site
// serves (text types with charset=utf-8), else mime.TypeByExtension, else
// application/octet-stream (which a browser will not render: nosniff goes
// with every answer of a static route).
func ContentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := webTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}
