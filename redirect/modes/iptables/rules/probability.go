package rules

import (
	"math"
	"strconv"
)

// precomputedProbabilities is how many "1/n" probability texts a Builder
// computes up front (n = 2..precomputedProbabilities); larger services are
// rare and compute theirs when needed.
const precomputedProbabilities = 256

// probabilityText returns the --probability text of the statistic match
// that sends 1 of every n remaining connections to one endpoint, as
// iptables-save prints it back.
//
// kube-proxy writes 1/n with 10 decimals. iptables stores it as a 32-bit
// fraction of 2^31 (rounded to nearest) and prints that fraction with 11
// decimals, so "0.3333333333" reads back as "0.33333333349". Repeating both
// steps here gives the text a dump of kube-proxy's rules shows.
func probabilityText(n int) string {
	written, err := strconv.ParseFloat(strconv.FormatFloat(1/float64(n), 'f', 10, 64), 64)
	if err != nil {
		// FormatFloat's output always parses; keep the exact value if not.
		written = 1 / float64(n)
	}
	stored := math.Round(written * (1 << 31))
	return strconv.FormatFloat(stored/(1<<31), 'f', 11, 64)
}

// probabilities holds precomputed texts: index n is the text for 1/n.
type probabilities []string

func newProbabilities() probabilities {
	p := make(probabilities, precomputedProbabilities+1)
	for n := 2; n < len(p); n++ {
		p[n] = probabilityText(n)
	}
	return p
}

func (p probabilities) of(n int) string {
	if n >= 2 && n < len(p) {
		return p[n]
	}
	return probabilityText(n)
}
