package console

import (
	"fmt"
	"time"
)

// chart is one bar chart of the trends page, drawn as SVG by the template.
type chart struct {
	ID, Title, Note string
	// Top is the largest value, the height of the chart.
	Top  string
	Bars []bar
}

type bar struct {
	X, Y, H int
	Label   string
	Value   string
	// Tick: the day's date is written under its bar (every fifth day and the last).
	Tick bool
}

const chartHeight = 120

// barChart draws values (one per day) scaled to their largest.
func barChart(id, title, note string, days []day, value func(day) float64, format func(float64) string) chart {
	c := chart{ID: id, Title: title, Note: note}
	top := 0.0
	for _, d := range days {
		top = max(top, value(d))
	}
	for i, d := range days {
		v := value(d)
		h := 0
		if top > 0 {
			h = int(v / top * chartHeight)
		}
		c.Bars = append(c.Bars, bar{X: i * 22, Y: chartHeight - h, H: h, Label: d.Date, Value: format(v), Tick: i%5 == 0 || i == len(days)-1})
	}
	c.Top = format(top)
	return c
}

func charts(t trends) []chart {
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	return []chart{
		barChart("quarantines", "Quarantines per day", "", t.Days, func(d day) float64 { return float64(d.Quarantines) }, count),
		barChart("p50", "Time back in service, p50 (releases of the day)", "", t.Days, func(d day) float64 { return d.P50.Seconds() }, seconds),
		barChart("p90", "Time back in service, p90", "", t.Days, func(d day) float64 { return d.P90.Seconds() }, seconds),
		barChart("first-probe", "Releases whose first review passed (a proxy for false quarantines)", "share of the day's releases",
			t.Days, func(d day) float64 {
				if d.Releases == 0 {
					return 0
				}
				return float64(d.FirstPassed) / float64(d.Releases) * 100
			}, func(v float64) string { return fmt.Sprintf("%.0f%%", v) }),
		barChart("device-hours", "Out-of-service device-hours", "", t.Days, func(d day) float64 { return d.DeviceHours }, func(v float64) string { return fmt.Sprintf("%.1f h", v) }),
	}
}

func seconds(v float64) string { return (time.Duration(v) * time.Second).String() }
