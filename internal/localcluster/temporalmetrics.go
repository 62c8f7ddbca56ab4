package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Actions is the server's `action` counter by its action_type label, summed over namespaces: the
// operations Temporal Cloud bills (workflows started, signals, updates, queries, the commands a
// workflow task completes with, activity retries), as the server counts them.
func (t *PGTemporal) Actions(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the Temporal server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the Temporal server's metrics: %s", resp.Status)
	}
	return counterBy(resp.Body, "action", "action_type")
}

// counterBy adds up the samples of the named counter (name or name_total) in a Prometheus text
// exposition by the value of one label ("" for samples without it); a counter never seen gives
// an empty map.
func counterBy(r io.Reader, name, label string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		metric, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			metric, rest = line[:i], line[i:]
		}
		if metric != name && metric != name+"_total" {
			continue
		}
		key := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("metrics line %q: labels not closed", line)
			}
			key = labelValue(rest[1:end], label)
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[key] += v
	}
	return out, sc.Err()
}

// labelValue is the value of label in a sample's label list (`a="x",b="y"`), or "".
func labelValue(labels, label string) string {
	for labels != "" {
		eq := strings.Index(labels, `="`)
		if eq < 0 {
			return ""
		}
		name := strings.TrimLeft(labels[:eq], ", ")
		v, err := strconv.QuotedPrefix(labels[eq+1:])
		if err != nil {
			return ""
		}
		if name == label {
			s, _ := strconv.Unquote(v)
			return s
		}
		labels = labels[eq+1+len(v):]
	}
	return ""
}
