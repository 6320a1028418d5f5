// Package corpus makes the sample bodies that the compression tests and
// benchmark compress: the same bytes every run, so that their figures
// compare.
package corpus

import (
	"bytes"
	"fmt"
	"math/rand/v2"
)

// JSON returns about size bytes of JSON (a little more: the last record is
// whole), records with numbers, names and tags, as an API's list answer
// is.
func JSON(size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "beta", "gamma", "delta", "sluice", "proxy", "zstd", "brotli", "gzip", "route"}
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"%s-%d","score":%.4f,"tags":["%s","%s"],"active":%v}`,
			i, words[r.IntN(len(words))], r.IntN(100000), r.Float64()*1000,
			words[r.IntN(len(words))], words[r.IntN(len(words))], r.IntN(2) == 0)
	}
	b.WriteString("]")
	return b.Bytes()
}
