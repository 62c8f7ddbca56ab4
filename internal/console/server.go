package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

//go:embed templates
var files embed.FS

// Server serves the pages. UIURL, when set, is the Temporal Web UI the pages link to.
type Server struct {
	Cache *Cache
	// Flows, when set, answers the migration and rollout pages.
	Flows     Flows
	Events    func(ctx context.Context, node string, id device.ID, holders []devicemsg.Reporter) ([]Event, error)
	UIURL     string
	Namespace string
	// PageRefresh is how often the fleet page reloads itself (0: never).
	PageRefresh time.Duration
	Logger      *slog.Logger

	tmpl  *template.Template
	flows answers
}

type page struct {
	Title, UI, At string
	Refresh       int
}

// Handler is the console's HTTP handler: the fleet page at /, a device at /device?id=.
func (s *Server) Handler() (http.Handler, error) {
	funcs := template.FuncMap{
		"lower":       func(s devicemsg.State) string { return strings.ToLower(string(s)) },
		"when":        func(t time.Time) string { return when(t) },
		"workflowURL": s.workflowURL,
	}
	t, err := template.New("").Funcs(funcs).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	s.tmpl = t
	css, err := files.ReadFile("templates/style.css")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fleet)
	mux.HandleFunc("GET /device", s.device)
	mux.HandleFunc("GET /trends", s.trends)
	mux.HandleFunc("GET /migration", s.flow("migration"))
	mux.HandleFunc("GET /rollout", s.flow("rollout"))
	mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(css)
	})
	return mux, nil
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func (s *Server) ui() string {
	if s.UIURL == "" {
		return ""
	}
	return strings.TrimSuffix(s.UIURL, "/") + "/namespaces/" + url.PathEscape(s.ns()) + "/workflows"
}

func (s *Server) ns() string {
	if s.Namespace == "" {
		return "default"
	}
	return s.Namespace
}

// workflowURL is a workflow's page in the Temporal UI.
func (s *Server) workflowURL(id string) string {
	if s.UIURL == "" {
		return ""
	}
	return s.ui() + "/" + url.PathEscape(id)
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Frame-Options", "DENY")
	if err := s.tmpl.ExecuteTemplate(w, name, data); err != nil && s.Logger != nil {
		s.Logger.Warn("console: render", "page", name, "error", err)
	}
}

func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	snap := s.Cache.Snapshot(r.Context())
	v := fleet(snap, filterOf(r.URL.Query()))
	var names []string
	for _, st := range states {
		names = append(names, string(st))
	}
	s.render(w, "fleet", map[string]any{
		"Page":   page{Title: "Fleet", UI: s.ui(), At: v.At, Refresh: int(s.PageRefresh / time.Second)},
		"View":   v,
		"States": names,
		"Expand": r.URL.Query().Get("expand") != "",
	})
}

func (s *Server) device(w http.ResponseWriter, r *http.Request) {
	id, err := device.ParseID(r.URL.Query().Get("id"))
	if err != nil {
		http.Error(w, "device: want ?id=driver/pool/device: "+err.Error(), http.StatusBadRequest)
		return
	}
	data := map[string]any{"Page": page{Title: id.String(), UI: s.ui(), At: when(time.Now())}, "WorkflowURL": s.workflowURL(id.WorkflowID())}
	st, err := s.Cache.State(r.Context(), id)
	switch {
	case err == nil:
		data["St"], data["Next"] = st, st.Next
	case strings.Contains(err.Error(), "not found"):
		// No workflow: DeviceWarden has nothing to do for the device.
		data["St"] = devicemsg.DeviceView{Device: id, State: devicemsg.Healthy}
		data["Next"] = "nothing: no report of this device asks for an action"
	default:
		data["Error"] = err.Error()
	}
	if s.Events != nil {
		node := st.Node
		if node == "" {
			node = s.nodeOf(r.Context(), id)
		}
		evs, err := s.Events(r.Context(), node, id, st.Reporters)
		if err != nil {
			data["Error"] = err.Error()
		}
		data["Events"] = evs
	}
	s.render(w, "device", data)
}

func (s *Server) trends(w http.ResponseWriter, r *http.Request) {
	data := map[string]any{"Page": page{Title: "Trends", UI: s.ui(), At: when(time.Now())}, "Days": TrendDays}
	t, err := s.Cache.Trends(r.Context())
	if err != nil {
		data["Error"] = err.Error()
	} else {
		data["T"], data["Charts"] = t, charts(t)
	}
	s.render(w, "trends", data)
}

// nodeOf finds the device's node in the inventory.
func (s *Server) nodeOf(ctx context.Context, id device.ID) string {
	for _, n := range s.Cache.Snapshot(ctx).Nodes {
		for _, d := range n.Devices {
			if d == id || slices.Contains(n.Forms[d], id) {
				return n.Name
			}
		}
	}
	return ""
}

// Serve serves the console on addr until ctx ends.
func (s *Server) Serve(ctx context.Context, addr string) error {
	h, err := s.Handler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if s.Logger != nil {
		s.Logger.Info("console serving", "address", "http://"+ln.Addr().String())
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
