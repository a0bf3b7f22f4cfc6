package rules

import (
	"strings"
)

// lineDiff lists the lines only in want ("-") and only in got ("+"), in
// order: enough to see what changed in a rule listing.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inWant, inGot := counts(w), counts(g)
	var sb strings.Builder
	for _, l := range w {
		if inGot[l] > 0 {
			inGot[l]--
			continue
		}
		sb.WriteString("- " + l + "\n")
	}
	for _, l := range g {
		if inWant[l] > 0 {
			inWant[l]--
			continue
		}
		sb.WriteString("+ " + l + "\n")
	}
	if sb.Len() == 0 {
		return "(same lines, different order)\n--- want\n" + want + "\n--- got\n" + got
	}
	return sb.String()
}

func counts(lines []string) map[string]int {
	m := map[string]int{}
	for _, l := range lines {
		m[l]++
	}
	return m
}
