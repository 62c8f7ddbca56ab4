//go:build image

package imagecheck

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ociArchive is an OCI image layout in a tar file, read into memory by path.
type ociArchive map[string][]byte

func readArchive(t *testing.T, path string) ociArchive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open the image archive (make image builds it): %v", err)
	}
	defer f.Close()
	out := ociArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = data
	}
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

func (a ociArchive) blob(t *testing.T, d descriptor, into any) []byte {
	t.Helper()
	data, ok := a["blobs/"+strings.Replace(d.Digest, ":", "/", 1)]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	if into != nil {
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatalf("blob %s: %v", d.Digest, err)
		}
	}
	return data
}

// TestImage: the image runs /devicewarden as a non-root user, carries CA certificates, and its
// binary is the static lean build of this version.
func TestImage(t *testing.T) {
	path, version := os.Getenv("DEVICEWARDEN_IMAGE"), os.Getenv("DEVICEWARDEN_VERSION")
	if path == "" || version == "" {
		t.Fatal("DEVICEWARDEN_IMAGE and DEVICEWARDEN_VERSION must be set (make image-check sets them)")
	}
	a := readArchive(t, path)
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(a["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	a.blob(t, index.Manifests[0], &manifest)
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
		}
		OS, Architecture string
	}
	a.blob(t, manifest.Config, &config)
	if config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != "/devicewarden" ||
		len(config.Config.Cmd) == 0 || config.Config.Cmd[0] != "run" || config.OS != "linux" {
		t.Fatalf("image config = %+v", config)
	}
	files := map[string][]byte{}
	for _, l := range manifest.Layers {
		var r io.Reader = strings.NewReader(string(a.blob(t, l, nil)))
		if strings.HasSuffix(l.MediaType, "gzip") {
			gz, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = gz
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimPrefix(h.Name, "./")] = data
		}
	}
	if len(files["/etc/ssl/certs/ca-certificates.crt"]) == 0 {
		t.Error("no CA certificates in the image")
	}
	bin := files["/devicewarden"]
	if len(bin) == 0 {
		t.Fatalf("no /devicewarden in the image; files: %d", len(files))
	}
	exe := filepath.Join(t.TempDir(), "devicewarden")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	var info struct{ Version, Flavour string }
	if err := json.Unmarshal(out, &info); err != nil || info.Version != version || info.Flavour != "lean" {
		t.Fatalf("the image's binary reports %s (%v), want version %s of the lean build", out, err, version)
	}
	// The lean build says so when asked for what only the full build has.
	msg, err := exec.Command(exe, "dev").CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "not in this build") {
		t.Errorf("the image's binary runs dev: %v %s", err, msg)
	}
	if strings.Contains(string(bin[:4096]), "/lib64/ld-linux") {
		t.Error("the binary is dynamically linked: it cannot run on scratch")
	}
}
