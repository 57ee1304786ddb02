package report

import (
	"fmt"
	"io"
	"strings"
)

const (
	tableWidth = 50
	labelWidth = 40
)

// tableWriter writes aligned rows and keeps the first error.
type tableWriter struct {
	w   io.Writer
	err error
}

func (t *tableWriter) printf(format string, args ...any) {
	if t.err != nil {
		return
	}
	if _, err := fmt.Fprintf(t.w, format, args...); err != nil {
		t.err = fmt.Errorf("write report table: %w", err)
	}
}

// rule writes a title centred in a line of c.
func (t *tableWriter) rule(title string, c byte) {
	title = " " + title + " "
	pad := max(tableWidth-len(title), 2)
	t.printf("%s%s%s\n", fill(c, pad/2), title, fill(c, pad-pad/2))
}

func (t *tableWriter) int(label string, v int64) { t.printf("%-*s%d\n", labelWidth, label, v) }

func (t *tableWriter) float(label string, v float64) {
	t.printf("%-*s%.2f\n", labelWidth, label, v)
}

func (t *tableWriter) dist(title, short string, d Dist) {
	t.rule(title, '-')
	t.float("Mean "+short+" (ms):", d.Mean)
	t.float("Median "+short+" (ms):", d.P50)
	t.float("P90 "+short+" (ms):", d.P90)
	t.float("P99 "+short+" (ms):", d.P99)
}

func fill(c byte, n int) string { return strings.Repeat(string(c), n) }
