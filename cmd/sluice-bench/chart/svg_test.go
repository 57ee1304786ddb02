package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// elements parses doc as XML and counts its elements by name, failing the
// test on a syntax error.
func elements(t *testing.T, doc []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return counts
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
}

func testChart() Chart {
	pts := func(ys ...float64) []Point {
		var out []Point
		for i, y := range ys {
			out = append(out, Point{X: float64(10 * (i + 1)), Y: y, Label: FormatNumber(0.3 + 0.2*float64(i))})
		}
		return out
	}
	return Chart{
		Title:    "Latency <&> throughput",
		Subtitle: "two panels",
		Panels: []Panel{
			{
				Title: "p99 TTFT", Span: 2,
				X: Axis{Label: "req/s", FromZero: true},
				Y: Axis{Label: "ms", Log: true},
				Series: []Series{
					{Name: "a", Points: pts(100, 150, 900), Marks: []int{1}},
					{Name: "b & c", Points: pts(120, 200, 5000), Dash: "7,4"},
					{Name: "empty", Points: pts(0, -1)}, // nothing drawable on a log axis
				},
				Lines: []Line{{Y: 500, Label: "SLO 500 ms"}},
			},
			{
				Title: "goodput",
				X:     Axis{Label: "load"},
				Y:     Axis{Label: "req/s", FromZero: true},
				Series: []Series{
					{Name: "a", Points: pts(9, 8, 1)},
					{Name: "b & c", Points: pts(9, 7, 0), Dash: "7,4"},
				},
			},
		},
		MarkLabel: "knee",
		Notes:     []string{strings.Repeat("a long note that must wrap ", 12)},
	}
}

func TestWriteSVG(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, testChart().WriteSVG(&buf))
	doc := buf.Bytes()

	counts := elements(t, doc)
	assert.Equal(t, 1, counts["svg"])
	assert.Equal(t, 5, counts["path"], "one path per series and panel, even for a series with no drawable point, and no other path")
	svg := string(doc)
	assert.Contains(t, svg, "Latency &lt;&amp;&gt; throughput", "text is escaped")
	assert.Contains(t, svg, ">b &amp; c</text>", "the legend names each series once")
	assert.Equal(t, 1, strings.Count(svg, ">b &amp; c</text>"))
	assert.Contains(t, svg, `stroke-dasharray="7,4"`)
	assert.Contains(t, svg, `r="6.5" fill="none"`, "the marked point is ringed")
	assert.Contains(t, svg, ">SLO 500 ms</text>")
	assert.Contains(t, svg, ">1000</text>", "log ticks")
	assert.NotContains(t, svg, "<script")
	assert.NotContains(t, svg, "href")
	assert.Less(t, len(doc), 12_000, "the chart stays small")

	var again bytes.Buffer
	require.NoError(t, testChart().WriteSVG(&again))
	assert.Equal(t, doc, again.Bytes(), "output is deterministic")
}

func TestWrap(t *testing.T) {
	assert.Equal(t, []string{"ab cd", "ef"}, wrap("ab cd ef", 5))
	assert.Equal(t, []string{"abcdefgh", "ij"}, wrap("abcdefgh ij", 5), "a long word gets its own line")
	assert.Nil(t, wrap("  ", 5))
}

func TestColorCycles(t *testing.T) {
	assert.Equal(t, Color(0), Color(7))
	assert.NotEqual(t, Color(0), Color(1))
}
