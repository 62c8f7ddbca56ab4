package temporalserver

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

type uiServer struct {
	srv *uiserver.Server
	url string
}

func startUI(addr, frontend, namespace string) (*uiServer, error) {
	host, port, err := resolveAddr(addr)
	if err != nil {
		return nil, err
	}
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: frontend,
		Host:                host,
		Port:                port,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		// Nothing may reach the internet: no news or version checks.
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
		CORS:               uiconfig.CORS{CookieInsecure: true},
		HideLogs:           true,
	}
	srv := uiserver.NewServer(uioptions.WithConfigProvider(cfg))
	errc := make(chan error, 1)
	go func() { errc <- srv.Start() }()
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("ui server exited: %w", err)
		default:
		}
		resp, err := http.Get(url + "/")
		if err == nil {
			resp.Body.Close()
			return &uiServer{srv: srv, url: url}, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Stop()
	return nil, fmt.Errorf("ui server did not answer on %s", url)
}

func (u *uiServer) stop() { u.srv.Stop() }
