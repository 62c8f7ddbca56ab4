// Package promsignal reads the fault signals of a Prometheus that scrapes dcgm-exporter: it
// parses an instant query's answer, tells which series show a new fault (a new XID, a count that
// grew, a level that appeared), and names the device a series is about. It makes no calls.
package promsignal

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Sample is one series of an instant query's answer.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Answer is an instant query's answer.
type Answer struct {
	Samples []Sample
	// Partial: the answer says it may miss series: VictoriaMetrics' isPartial, or warnings (Thanos
	// and Prometheus' agents warn when a store or a remote did not answer). A series missing from
	// it has not gone.
	Partial  bool
	Warnings []string
}

// Parse reads the body of Prometheus' /api/v1/query answer: a vector of samples. An answer that
// is not a success, not a vector, or whose values do not parse is an error; NaN and infinite
// values are kept (the tracker refuses them, per series).
func Parse(body []byte) ([]Sample, error) {
	a, err := ParseAnswer(body)
	return a.Samples, err
}

// ParseAnswer is Parse, saying whether the answer is partial.
func ParseAnswer(body []byte) (Answer, error) {
	var a struct {
		Status    string   `json:"status"`
		ErrorType string   `json:"errorType"`
		Error     string   `json:"error"`
		Warnings  []string `json:"warnings"`
		IsPartial bool     `json:"isPartial"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string  `json:"metric"`
				Value  [2]json.RawMessage `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return Answer{}, fmt.Errorf("the answer is not Prometheus' JSON: %w", err)
	}
	if a.Status != "success" {
		return Answer{}, fmt.Errorf("prometheus answered %s: %s: %s", a.Status, a.ErrorType, a.Error)
	}
	if a.Data.ResultType != "vector" {
		return Answer{}, fmt.Errorf("the query returns a %s, not an instant vector", a.Data.ResultType)
	}
	out := make([]Sample, 0, len(a.Data.Result))
	for _, r := range a.Data.Result {
		raw := r.Value[1]
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return Answer{}, fmt.Errorf("a sample's value %s is not a string", raw)
		}
		v, err := strconv.ParseFloat(string(raw[1:len(raw)-1]), 64)
		if err != nil {
			return Answer{}, fmt.Errorf("a sample's value %s: %w", raw, err)
		}
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return Answer{Samples: out, Partial: a.IsPartial || len(a.Warnings) > 0, Warnings: a.Warnings}, nil
}

// Query is the query DeviceWarden asks for a signal: the policy's, aggregated by the labels that
// name a GPU (and the signal's code label, and the XID's), so Prometheus answers one series per
// GPU, without the labels of its user and its exporter.
func Query(q, codeLabel string) string {
	by := LabelDRADriver + ", " + LabelDRAPool + ", " + LabelDRADevice + ", " + LabelUUID + ", " + LabelHostname + ", " + LabelIndex + ", " +
		LabelMIG + ", err_code, err_msg"
	if codeLabel != "" {
		by += ", " + codeLabel
	}
	return "max by (" + by + ") (" + q + ")"
}

// finite says whether a sample's value is a number a fault can be read from.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
