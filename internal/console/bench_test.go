package console

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// BenchmarkFleetPage10k serves the fleet page of 1,250 nodes x 8 devices (10,000), 5% of them
// out (quarantined, in review, retired), from a warm cache: the time a viewer waits.
func BenchmarkFleetPage10k(b *testing.B) {
	var nodes fakeCluster
	f := &fakeFleet{}
	out := []devicemsg.State{devicemsg.Quarantined, devicemsg.Recovering, devicemsg.Retired, devicemsg.Restricted}
	for n := range 1250 {
		node := Node{Name: fmt.Sprintf("gpu-node-%04d", n), Pool: fmt.Sprintf("pool-%d", n%10)}
		for d := range 8 {
			id := device.ID{Driver: "gpu.example.com", Pool: node.Name, Device: fmt.Sprintf("gpu-%d", d)}
			node.Devices = append(node.Devices, id)
			if (n*8+d)%20 == 0 {
				f.devices = append(f.devices, Device{ID: id, State: out[(n+d)%len(out)], Node: node.Name, Forms: 1, Since: time.Now()})
			}
		}
		nodes = append(nodes, node)
	}
	s := &Server{Cache: &Cache{Fleet: f, Cluster: nodes, Refresh: time.Hour}}
	h, err := s.Handler()
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	get := func() int64 {
		resp, err := client.Get(srv.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return n
	}
	size := get() // warm
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		get()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(size), "bytes/page")
	b.ReportMetric(float64(quantile(lat, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(quantile(lat, 99).Microseconds())/1000, "p99-ms")
}
