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

// StatusText returns the reason phrase for the codes a proxy produces itself,
// and "" for others.
func StatusText(code int) string {
	switch code {
	case 100:
		return "Continue"
	case 101:
		return "Switching Protocols"
	case 200:
		return "OK"
	case 204:
		return "No Content"
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 413:
		return "Content Too Large"
	case 414:
		return "URI Too Long"
	case 417:
		return "Expectation Failed"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return ""
}
