package app

import (
	"fmt"
	"testing"

	"go.temporal.io/sdk/client"
)

// Requests to the embedded server (loopback) go uncompressed unless asked; elsewhere gzip.
func TestGrpcCompression(t *testing.T) {
	none, gzip := &client.GrpcCompressionNone{}, &client.GrpcCompressionGzip{}
	for _, tc := range []struct {
		mode, address string
		want          client.GrpcCompression
	}{
		{"auto", "127.0.0.1:7233", none},
		{"", "localhost:7233", none},
		{"auto", "[::1]:7233", none},
		{"auto", "127.0.0.2:7233", none},
		{"auto", "temporal-frontend.temporal:7233", gzip},
		{"auto", "10.0.0.7:7233", gzip},
		{"gzip", "127.0.0.1:7233", gzip},
		{"none", "temporal-frontend.temporal:7233", none},
	} {
		got, err := grpcCompression(tc.mode, tc.address)
		if err != nil || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", tc.want) {
			t.Errorf("grpcCompression(%q, %q) = %T, %v; want %T", tc.mode, tc.address, got, err, tc.want)
		}
	}
	if _, err := grpcCompression("zstd", "127.0.0.1:7233"); err == nil {
		t.Error("an unknown compression was accepted")
	}
}
