package testkit

// LineOp is one step of an alignment of two lists of lines: a line both
// have (' '), one only the first has ('-') or one only the second has
// ('+'). A and B are the line's position in each list (for '-' and '+',
// where it would go in the other).
type LineOp struct {
	Kind byte
	Line string
	A, B int
}

// AlignLines aligns a and b on a longest common subsequence of lines,
// preferring a removal to an addition where both would do, for the diffs
// tests print. The common head and tail are matched without the table, so
// long listings that differ in a few lines stay cheap.
func AlignLines(a, b []string) []LineOp {
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ops := make([]LineOp, 0, len(a)+len(b)-head-tail)
	for i := range head {
		ops = append(ops, LineOp{' ', a[i], i, i})
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	// lcs[i][j] is the length of the LCS of ma[i:] and mb[j:].
	lcs := make([][]int, len(ma)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(mb)+1)
	}
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			ops = append(ops, LineOp{' ', ma[i], head + i, head + j})
			i, j = i+1, j+1
		case j < len(mb) && (i == len(ma) || lcs[i][j+1] > lcs[i+1][j]):
			ops = append(ops, LineOp{'+', mb[j], head + i, head + j})
			j++
		default:
			ops = append(ops, LineOp{'-', ma[i], head + i, head + j})
			i++
		}
	}
	for k := tail; k > 0; k-- {
		ops = append(ops, LineOp{' ', a[len(a)-k], len(a) - k, len(b) - k})
	}
	return ops
}
