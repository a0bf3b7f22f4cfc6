package rules

import "testing"

// TestProbabilityText checks the texts against what iptables-save (1.8.9,
// both backends) printed for kube-proxy's "%0.10f" probabilities.
func TestProbabilityText(t *testing.T) {
	tests := []struct {
		n    int
		want string // iptables-save's text for kube-proxy's 1/n
	}{
		{2, "0.50000000000"},      // written 0.5000000000
		{3, "0.33333333349"},      // written 0.3333333333
		{4, "0.25000000000"},      // written 0.2500000000
		{7, "0.14285714272"},      // written 0.1428571429
		{10, "0.10000000009"},     // written 0.1000000000
		{100, "0.00999999978"},    // written 0.0100000000
		{1000, "0.00100000016"},   // written 0.0010000000
		{100000, "0.00001000008"}, // written 0.0000100000
	}
	p := newProbabilities()
	for _, tt := range tests {
		if got := probabilityText(tt.n); got != tt.want {
			t.Errorf("probabilityText(%d) = %s, want %s", tt.n, got, tt.want)
		}
		if got := p.of(tt.n); got != tt.want {
			t.Errorf("precomputed probability for %d = %s, want %s", tt.n, got, tt.want)
		}
	}
}
