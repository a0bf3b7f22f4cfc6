package nftables

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// nftErrorLine matches the location nft gives a failed command of a file
// read from standard input: "/dev/stdin:12:1-30: Error: …".
var nftErrorLine = regexp.MustCompile(`(?m)^(?:/dev/stdin|-):(\d+):\d+(?:-\d+)?: Error: (.*)$`)

// txError wraps a failed transaction's error with the line of the
// transaction nft blamed, so the log names the offending command.
func txError(err error, tx *knftables.Transaction) (line string, wrapped error) {
	m := nftErrorLine.FindStringSubmatch(err.Error())
	if m == nil {
		return "", fmt.Errorf("nft transaction of %d operations failed: %w", tx.NumOperations(), err)
	}
	n, convErr := strconv.Atoi(m[1])
	lines := strings.Split(tx.String(), "\n")
	if convErr != nil || n < 1 || n > len(lines) {
		return "", fmt.Errorf("nft transaction failed at line %s: %w", m[1], err)
	}
	return lines[n-1], fmt.Errorf("nft transaction failed at line %d (%s): %s: %w", n, lines[n-1], m[2], err)
}
