package chart

// Chart is a titled row of panels over one legend. Its zero sizes mean
// the defaults: 960 pixels wide, panels 360 high.
type Chart struct {
	Title, Subtitle string
	Width           float64
	PanelHeight     float64
	Panels          []Panel
	// MarkLabel is the legend's text for the ring on marked points; no
	// legend entry without it.
	MarkLabel string
	// Notes are small lines under the legend (definitions, the command).
	Notes []string
}

// Panel is one plot. Panels share the chart's width in proportion to
// their Span (zero means 1).
type Panel struct {
	Title  string
	Span   float64
	X, Y   Axis
	Series []Series
	// Lines are horizontal reference lines, such as an SLO.
	Lines []Line
}

// Axis describes one dimension of a panel.
type Axis struct {
	Label string
	// Log draws the axis on a log scale, with 1-2-5 ticks (decades over
	// a wide range); values at or below zero are not drawn.
	Log bool
	// FromZero widens a linear axis to include zero.
	FromZero bool
	// Format writes tick labels; nil means FormatNumber.
	Format func(float64) string
}

// Series is one line of a panel. A series with the same Name in several
// panels gets one legend entry.
type Series struct {
	Name   string
	Points []Point
	// Color is an SVG color; empty means Color(i) for the series' index
	// in its panel.
	Color string
	// Dash is an SVG stroke-dasharray, such as "6,3"; empty draws solid.
	Dash string
	// Width is the stroke width in pixels; zero means 2.
	Width float64
	// Marks are indices of points to ring, such as the knee.
	Marks []int
}

// Point is one data point; Label, if any, is written beside it.
type Point struct {
	X, Y  float64
	Label string
}

// Line is a horizontal reference line at Y with a label at its right end.
type Line struct {
	Y     float64
	Label string
}

// Color returns the i-th color of the chart's palette, cycling: the
// Okabe–Ito set, distinguishable with color-vision deficiencies, minus its
// yellow (too light on white).
func Color(i int) string {
	palette := [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}
	return palette[i%len(palette)]
}
