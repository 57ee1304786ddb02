package chart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Layout, in pixels.
const (
	defaultWidth       = 960
	defaultPanelHeight = 360
	headerHeight       = 52 // title and subtitle
	panelGap           = 16
	marginLeft         = 62 // y tick labels and the axis title
	marginRight        = 14
	marginTop          = 22 // the panel's title
	marginBottom       = 42 // x tick labels and the axis title
	legendRow          = 18
	noteRow            = 14
	charWidth          = 6.2 // mean width of an 11 px sans-serif glyph, to lay out text
	labelSize          = 9   // point labels
	noteSize           = 10  // notes under the legend
)

// WriteSVG writes the chart as a standalone SVG document.
func (c Chart) WriteSVG(w io.Writer) error {
	width := c.Width
	if width <= 0 {
		width = defaultWidth
	}
	ph := c.PanelHeight
	if ph <= 0 {
		ph = defaultPanelHeight
	}
	items := c.legendItems()
	rows := legendRows(items, width-2*panelGap)
	var notes []string
	for _, n := range c.Notes {
		notes = append(notes, wrap(n, int((width-2*panelGap)/(charWidth*noteSize/11)))...)
	}
	height := headerHeight + ph + panelGap + float64(len(rows))*legendRow + float64(len(notes))*noteRow + panelGap

	b := &svgWriter{w: bufio.NewWriter(w)}
	b.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %[1]s %[2]s" font-family="Helvetica,Arial,sans-serif" font-size="11">`+"\n", num(width), num(height))
	b.printf(`<rect width="100%%" height="100%%" fill="#fff"/>` + "\n")
	b.text(panelGap, 22, c.Title, `font-size="15" font-weight="bold"`)
	b.text(panelGap, 40, c.Subtitle, `fill="#555"`)

	var span float64
	for _, p := range c.Panels {
		span += p.spanOr1()
	}
	x := float64(panelGap)
	avail := width - panelGap*float64(len(c.Panels)+1)
	for _, p := range c.Panels {
		pw := avail * p.spanOr1() / span
		b.panel(p, x, headerHeight, pw, ph)
		x += pw + panelGap
	}

	y := headerHeight + ph + panelGap
	for _, row := range rows {
		b.legendRow(row, panelGap, y)
		y += legendRow
	}
	for _, n := range notes {
		b.text(panelGap, y+noteRow/2, n, fmt.Sprintf(`font-size="%d" fill="#555"`, noteSize))
		y += noteRow
	}
	b.printf("</svg>\n")
	if b.err != nil {
		return fmt.Errorf("write svg: %w", b.err)
	}
	if err := b.w.Flush(); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}

func (p Panel) spanOr1() float64 {
	if p.Span > 0 {
		return p.Span
	}
	return 1
}

// svgWriter writes elements and keeps the first error.
type svgWriter struct {
	w   *bufio.Writer
	err error
}

func (b *svgWriter) printf(format string, args ...any) {
	if b.err == nil {
		_, b.err = fmt.Fprintf(b.w, format, args...)
	}
}

// text writes a text element at x, y with extra attributes; nothing for
// empty text.
func (b *svgWriter) text(x, y float64, s, attrs string) {
	if s == "" {
		return
	}
	if attrs != "" {
		attrs = " " + attrs
	}
	b.printf(`<text x="%s" y="%s"%s>%s</text>`+"\n", num(x), num(y), attrs, escape(s))
}

// box is a label's extent, for keeping point labels apart.
type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlaps(o box) bool {
	return a.x0 < o.x1 && o.x0 < a.x1 && a.y0 < o.y1 && o.y0 < a.y1
}

// panel draws p in the box at (x, y) of size w × h.
func (b *svgWriter) panel(p Panel, x, y, w, h float64) {
	left, top := x+marginLeft, y+marginTop
	right, bottom := x+w-marginRight, y+h-marginBottom
	var xs, ys []float64
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xs, ys = append(xs, pt.X), append(ys, pt.Y)
		}
	}
	for _, l := range p.Lines {
		ys = append(ys, l.Y)
	}
	sx := newScale(xs, p.X.Log, p.X.FromZero, left, right)
	sy := newScale(ys, p.Y.Log, p.Y.FromZero, bottom, top)

	b.printf("<g>\n")
	b.text(left, y+14, p.Title, `font-weight="bold"`)
	// Grid and ticks.
	b.printf(`<g stroke="#e6e6e6">`)
	for _, t := range sx.ticks {
		px, _ := sx.pos(t)
		b.printf(`<line x1="%[1]s" y1="%[2]s" x2="%[1]s" y2="%[3]s"/>`, num(px), num(top), num(bottom))
	}
	for _, t := range sy.ticks {
		py, _ := sy.pos(t)
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%[2]s"/>`, num(left), num(py), num(right))
	}
	b.printf("</g>\n")
	b.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#888"/>`+"\n",
		num(left), num(top), num(right-left), num(bottom-top))
	b.printf(`<g fill="#333" text-anchor="middle">`)
	for _, t := range sx.ticks {
		px, _ := sx.pos(t)
		b.text(px, bottom+14, p.X.format(t), "")
	}
	b.printf("</g>\n")
	b.printf(`<g fill="#333" text-anchor="end">`)
	for _, t := range sy.ticks {
		py, _ := sy.pos(t)
		b.text(left-5, py+4, p.Y.format(t), "")
	}
	b.printf("</g>\n")
	b.text((left+right)/2, bottom+32, p.X.Label, `text-anchor="middle"`)
	if p.Y.Label != "" {
		cx, cy := x+12, (top+bottom)/2
		b.printf(`<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %[1]s %[2]s)">%s</text>`+"\n",
			num(cx), num(cy), escape(p.Y.Label))
	}

	var placed []box
	for _, l := range p.Lines {
		py, ok := sy.pos(l.Y)
		if !ok {
			continue
		}
		b.printf(`<line x1="%s" y1="%s" x2="%s" y2="%[2]s" stroke="#777" stroke-dasharray="4,3"/>`+"\n", num(left), num(py), num(right))
		lw := float64(len(l.Label)) * charWidth * labelSize / 11
		b.text(right-3, py-3, l.Label, fmt.Sprintf(`font-size="%d" fill="#555" text-anchor="end"`, labelSize))
		placed = append(placed, box{right - 3 - lw, py - 3 - labelSize, right - 3, py - 3})
	}

	// Lines, points and rings first, then the point labels, so labels
	// can keep clear of every point.
	pxs := make([][][2]float64, len(p.Series)) // per series, per point; -1 where not drawable
	for i, s := range p.Series {
		color := s.colorOr(i)
		sw := s.Width
		if sw <= 0 {
			sw = 2
		}
		var d strings.Builder
		for _, pt := range s.Points {
			px, okx := sx.pos(pt.X)
			py, oky := sy.pos(pt.Y)
			if !okx || !oky {
				pxs[i] = append(pxs[i], [2]float64{-1, -1})
				continue
			}
			cmd := "L"
			if d.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s", cmd, num(px), num(py))
			pxs[i] = append(pxs[i], [2]float64{px, py})
			placed = append(placed, box{px - 3, py - 3, px + 3, py + 3})
		}
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, escape(s.Dash))
		}
		// Every series is one path, even with no drawable point.
		b.printf(`<path d="%s" fill="none" stroke="%s" stroke-width="%s"%s stroke-linejoin="round"/>`+"\n",
			d.String(), escape(color), num(sw), dash)
		b.printf(`<g fill="%s">`, escape(color))
		for _, pt := range pxs[i] {
			if pt[0] >= 0 {
				b.printf(`<circle cx="%s" cy="%s" r="2.5"/>`, num(pt[0]), num(pt[1]))
			}
		}
		b.printf("</g>\n")
		for _, m := range s.Marks {
			if m >= 0 && m < len(pxs[i]) && pxs[i][m][0] >= 0 {
				b.printf(`<circle cx="%s" cy="%s" r="6.5" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n",
					num(pxs[i][m][0]), num(pxs[i][m][1]), escape(color))
			}
		}
	}
	// A point's label goes beside it, in the first of four places that
	// collides with no point and no earlier label; a label with no free
	// place is left out, and so is one that repeats the label of a point
	// nearby (two series through the same place).
	type labelled struct {
		x, y float64
		text string
	}
	var done []labelled
	repeats := func(x, y float64, text string) bool {
		for _, l := range done {
			if l.text == text && (l.x-x)*(l.x-x)+(l.y-y)*(l.y-y) < 16*16 {
				return true
			}
		}
		return false
	}
	for i, s := range p.Series {
		b.printf(`<g font-size="%d" fill="%s">`, labelSize, escape(s.colorOr(i)))
		for j, pt := range s.Points {
			if pt.Label == "" || pxs[i][j][0] < 0 {
				continue
			}
			lw := float64(len(pt.Label)) * charWidth * labelSize / 11
			px, py := pxs[i][j][0], pxs[i][j][1]
			if repeats(px, py, pt.Label) {
				continue
			}
			done = append(done, labelled{px, py, pt.Label})
			for _, o := range [][2]float64{{5, -5}, {5, labelSize + 4}, {-5 - lw, -5}, {-5 - lw, labelSize + 4}} {
				bx := box{px + o[0], py + o[1] - labelSize + 1, px + o[0] + lw, py + o[1] + 1}
				if bx.x0 < left || bx.x1 > right || bx.y0 < top || bx.y1 > bottom || collides(bx, placed) {
					continue
				}
				placed = append(placed, bx)
				b.text(bx.x0, py+o[1], pt.Label, "")
				break
			}
		}
		b.printf("</g>\n")
	}
	b.printf("</g>\n")
}

// wrap breaks s at spaces into lines of at most n bytes (a longer word
// gets a line of its own).
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > n {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

func collides(a box, placed []box) bool {
	for _, o := range placed {
		if a.overlaps(o) {
			return true
		}
	}
	return false
}

func (a Axis) format(v float64) string {
	if a.Format != nil {
		return a.Format(v)
	}
	return FormatNumber(v)
}

func (s Series) colorOr(i int) string {
	if s.Color != "" {
		return s.Color
	}
	return Color(i)
}

// legendItem is one entry of the legend: a series' line sample, or the
// ring of marked points (mark).
type legendItem struct {
	name, color, dash string
	width             float64
	mark              bool
}

// legendItems lists the series by name in their first panel's order, then
// the mark's entry.
func (c Chart) legendItems() []legendItem {
	var items []legendItem
	seen := map[string]bool{}
	marks := false
	for _, p := range c.Panels {
		for i, s := range p.Series {
			marks = marks || len(s.Marks) > 0
			if seen[s.Name] || s.Name == "" {
				continue
			}
			seen[s.Name] = true
			w := s.Width
			if w <= 0 {
				w = 2
			}
			items = append(items, legendItem{name: s.Name, color: s.colorOr(i), dash: s.Dash, width: w})
		}
	}
	if marks && c.MarkLabel != "" {
		items = append(items, legendItem{name: c.MarkLabel, color: "#333", mark: true})
	}
	return items
}

// legendItemWidth is an entry's width: the sample, its text and a gap.
func legendItemWidth(it legendItem) float64 {
	return 30 + float64(len(it.name))*charWidth + 18
}

// legendRows wraps the legend's entries into rows of at most width.
func legendRows(items []legendItem, width float64) [][]legendItem {
	var rows [][]legendItem
	var row []legendItem
	used := 0.0
	for _, it := range items {
		iw := legendItemWidth(it)
		if len(row) > 0 && used+iw > width {
			rows = append(rows, row)
			row, used = nil, 0
		}
		row = append(row, it)
		used += iw
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

func (b *svgWriter) legendRow(row []legendItem, x, y float64) {
	for _, it := range row {
		cy := y + legendRow/2
		if it.mark {
			b.printf(`<circle cx="%s" cy="%s" r="6.5" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", num(x+12), num(cy), it.color)
		} else {
			dash := ""
			if it.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, escape(it.dash))
			}
			b.printf(`<line x1="%[1]s" y1="%[2]s" x2="%[3]s" y2="%[2]s" stroke="%[4]s" stroke-width="%[5]s"%[6]s/>`+"\n",
				num(x), num(cy), num(x+24), escape(it.color), num(it.width), dash)
		}
		b.text(x+30, cy+4, it.name, "")
		x += legendItemWidth(it)
	}
}

// num writes a pixel coordinate with one decimal at most.
func num(v float64) string {
	return strconv.FormatFloat(float64(int64(v*10+0.5*sign(v)))/10, 'f', -1, 64)
}

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}

// escape escapes s for XML text and attribute values.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
