package h1

import "strconv"

// AppendRequest appends r's head in wire form: the request line with
// HTTP/1.1 (a proxy forwards with its own version, RFC 9110 §6.2), the fields
// in order with their spelling, and the empty line.
func AppendRequest(dst []byte, r *Request) []byte {
	dst = append(dst, r.method...)
	dst = append(dst, ' ')
	dst = append(dst, r.Target()...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	dst = r.Header.AppendTo(dst)
	return append(dst, '\r', '\n')
}

// AppendResponse appends r's head in wire form with HTTP/1.1 as the version.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = appendStatus(dst, r.Status)
	dst = append(dst, ' ')
	dst = append(dst, r.Reason()...)
	dst = append(dst, '\r', '\n')
	dst = r.Header.AppendTo(dst)
	return append(dst, '\r', '\n')
}

func appendStatus(dst []byte, code int) []byte {
	if code >= 100 && code <= 999 {
		return append(dst, byte('0'+code/100), byte('0'+code/10%10), byte('0'+code%10))
	}
	return strconv.AppendInt(dst, int64(code), 10)
}

// StatusText returns the reason phrase of code: every status RFC 9110
// §15 defines, with the phrase it gives, and those of RFC 6585 (428, 429,
// 431, 511), RFC 7725 (451), RFC 8297 (103) and RFC 8470 (425); "" for
// any other code, and for 306 and 418, which RFC 9110 reserves unused.
// sluice writes it in the status lines it makes itself (its answers, an
// HTTP/2 upstream's response to an HTTP/1.1 client); a response relayed
// from an HTTP/1.1 upstream keeps the upstream's own phrase
// (Response.Reason), whatever it is.
func StatusText(code int) string {
	if code < 100 || code > 599 {
		return ""
	}
	return statusText[code]
}

var statusText = [600]string{
	100: "Continue",
	101: "Switching Protocols",
	103: "Early Hints",

	200: "OK",
	201: "Created",
	202: "Accepted",
	203: "Non-Authoritative Information",
	204: "No Content",
	205: "Reset Content",
	206: "Partial Content",

	300: "Multiple Choices",
	301: "Moved Permanently",
	302: "Found",
	303: "See Other",
	304: "Not Modified",
	305: "Use Proxy",
	307: "Temporary Redirect",
	308: "Permanent Redirect",

	400: "Bad Request",
	401: "Unauthorized",
	402: "Payment Required",
	403: "Forbidden",
	404: "Not Found",
	405: "Method Not Allowed",
	406: "Not Acceptable",
	407: "Proxy Authentication Required",
	408: "Request Timeout",
	409: "Conflict",
	410: "Gone",
	411: "Length Required",
	412: "Precondition Failed",
	413: "Content Too Large",
	414: "URI Too Long",
	415: "Unsupported Media Type",
	416: "Range Not Satisfiable",
	417: "Expectation Failed",
	421: "Misdirected Request",
	422: "Unprocessable Content",
	425: "Too Early",
	426: "Upgrade Required",
	428: "Precondition Required",
	429: "Too Many Requests",
	431: "Request Header Fields Too Large",
	451: "Unavailable For Legal Reasons",

	500: "Internal Server Error",
	501: "Not Implemented",
	502: "Bad Gateway",
	503: "Service Unavailable",
	504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
	511: "Network Authentication Required",
}
