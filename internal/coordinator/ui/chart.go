package ui

import (
	"fmt"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// chart is a small inline SVG line chart of the last hour, drawn by the
// template from these precomputed coordinates (a 300×80 view box).
type chart struct {
	Line   string // polyline points
	Area   string // polygon points: the line closed to the bottom
	Last   string // the newest value, with its unit
	Max    string // the top of the scale
	Points int
}

const chartW, chartH = 300.0, 80.0

// makeChart scales samples over the hour before the newest one; top is
// the scale's maximum (100 for percent, the machine's memory), raised to
// the largest value if that is higher.
func makeChart(samples []api.UsageSample, value func(api.UsageSample) float64, top float64, unit string) chart {
	c := chart{Points: len(samples)}
	if len(samples) == 0 {
		return c
	}
	for _, s := range samples {
		top = max(top, value(s))
	}
	if top <= 0 {
		top = 1
	}
	end := samples[len(samples)-1].At
	var line []string
	for _, s := range samples {
		age := end.Sub(s.At).Minutes()
		x := chartW - age/60*chartW
		y := chartH - value(s)/top*(chartH-4) - 2
		line = append(line, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	if len(line) == 1 { // one sample: a short stroke at "now", not an invisible point
		y := strings.SplitN(line[0], ",", 2)[1]
		line = []string{fmt.Sprintf("%.0f,%s", chartW-4, y), fmt.Sprintf("%.0f,%s", chartW, y)}
	}
	c.Line = strings.Join(line, " ")
	first := strings.SplitN(line[0], ",", 2)[0]
	lastX := strings.SplitN(line[len(line)-1], ",", 2)[0]
	c.Area = fmt.Sprintf("%s,%.0f %s %s,%.0f", first, chartH, c.Line, lastX, chartH)
	c.Last = fmt.Sprintf("%.0f%s", value(samples[len(samples)-1]), unit)
	c.Max = fmt.Sprintf("%.0f%s", top, unit)
	return c
}
