package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	apiv1 "github.com/moatdev/moat/api/v1"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/moatdev/moat/internal/errdefs"
)

// PullOptions tune Pull.
type PullOptions struct {
	// Insecure allows a plain-HTTP registry (loopback and RFC 1918 registries use HTTP
	// anyway).
	Insecure bool
	// Platform is "os/arch[/variant]"; default linux/amd64.
	Platform string
}

// Import makes template tmplName from an image archive on the daemon's host: a docker-archive
// (`docker save`) or an OCI image layout packed as a tar. The image's layers are flattened
// into one layer (layers/img-<config digest>; an image unpacked before is reused) and its config's
// Env, User and WorkingDir become the template's defaults. An existing template of that name
// is replaced. Bad archives give ErrInvalidArgument; a missing file ErrNotFound.
func (s *Store) Import(ctx context.Context, tmplName, tarPath string, progress func(string)) (TemplateInfo, error) {
	progress = orNop(progress)
	if err := s.checkNewName(tmplName); err != nil {
		return TemplateInfo{}, err
	}
	if err := s.roomForLayer("template " + tmplName); err != nil {
		return TemplateInfo{}, err
	}
	kind, err := archiveKind(tarPath)
	if err != nil {
		return TemplateInfo{}, err
	}
	var img v1.Image
	switch kind {
	case "docker":
		progress("reading docker-archive " + tarPath)
		img, err = tarball.ImageFromPath(tarPath, nil)
		if err != nil {
			return TemplateInfo{}, fmt.Errorf("reading docker-archive %s: %v: %w", tarPath, err, errdefs.ErrInvalidArgument)
		}
	case "oci":
		progress("unpacking OCI layout " + tarPath)
		tmp, dir, done, err := s.newTemp("oci")
		if err != nil {
			return TemplateInfo{}, err
		}
		defer done()
		if err := s.unpackLayout(ctx, tarPath, tmp); err != nil {
			return TemplateInfo{}, err
		}
		if img, err = imageFromLayout(dir, defaultPlatform); err != nil {
			return TemplateInfo{}, err
		}
	}
	return s.flattenImage(ctx, tmplName, img, "import "+tarPath, progress)
}

// Pull makes template tmplName from an image in a registry (anonymous access). See Import for
// what is kept. Unknown images give ErrNotFound, unreachable registries ErrUnavailable.
func (s *Store) Pull(ctx context.Context, tmplName, ref string, progress func(string), opts PullOptions) (TemplateInfo, error) {
	progress = orNop(progress)
	if err := s.checkNewName(tmplName); err != nil {
		return TemplateInfo{}, err
	}
	if err := s.roomForLayer("template " + tmplName); err != nil {
		return TemplateInfo{}, err
	}
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("image reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	plat := defaultPlatform
	if opts.Platform != "" {
		p, err := v1.ParsePlatform(opts.Platform)
		if err != nil {
			return TemplateInfo{}, fmt.Errorf("platform %q: %v: %w", opts.Platform, err, errdefs.ErrInvalidArgument)
		}
		plat = *p
	}
	progress("resolving " + r.String())
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(plat), remote.WithAuth(authn.Anonymous))
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("pulling %s: %w", ref, classifyRegistryError(err))
	}
	d, err := img.Digest()
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("pulling %s: %w", ref, err)
	}
	return s.flattenImage(ctx, tmplName, img, "pull "+r.Context().String()+"@"+d.String(), progress)
}

// classifyRegistryError wraps a registry error with its class: unknown repositories and
// tags (and anonymous access denied, which registries also answer for those) ErrNotFound,
// network failures and 5xx ErrUnavailable.
func classifyRegistryError(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode,
				transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
			}
		}
		switch {
		case terr.StatusCode == http.StatusNotFound || terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
		case terr.StatusCode >= 500 || terr.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
		}
		return err
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
	}
	return err
}

var defaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

func orNop(f func(string)) func(string) {
	if f == nil {
		return func(string) {}
	}
	return f
}

// checkNewName validates a template name that is about to be written.
func (s *Store) checkNewName(name string) error {
	if err := apiv1.ValidTemplateName(name); err != nil {
		return err
	}
	if name == HostTemplate {
		return fmt.Errorf("template %s is built in: %w", name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// flattenImage extracts img's flattened file system into layers/img-<digest> (reusing it if
// present) and writes the manifest of template tmplName.
func (s *Store) flattenImage(ctx context.Context, tmplName string, img v1.Image, source string, progress func(string)) (TemplateInfo, error) {
	// The config digest names the content: the config lists every layer's uncompressed
	// digest. (The manifest digest of a docker-archive would mean compressing each layer.)
	digest, err := img.ConfigName()
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("image config digest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("image config: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	id := "img-" + digest.Hex
	s.mark(id) // until the manifest refers to it, Cleanup must not collect it
	defer s.unmark(id)
	if _, err := s.layers.Lstat(id); err == nil {
		progress("image " + digest.String() + " is already unpacked")
	} else {
		layers, err := img.Layers()
		if err != nil {
			return TemplateInfo{}, fmt.Errorf("image layers: %w", err)
		}
		progress(fmt.Sprintf("unpacking image %s (%d layers)", digest, len(layers)))
		tmp, _, done, err := s.newTemp("img")
		if err != nil {
			return TemplateInfo{}, err
		}
		defer done()
		root, err := s.layers.OpenRoot(tmp)
		if err != nil {
			return TemplateInfo{}, err
		}
		defer root.Close()
		rc := mutate.Extract(img)
		start := time.Now()
		st, err := extractTar(ctx, rc, root, extractOptions{Progress: func(st extractStats) {
			progress(fmt.Sprintf("unpacked %d files, %d MiB", st.Files, st.Bytes>>20))
		}})
		rc.Close()
		if err != nil {
			return TemplateInfo{}, fmt.Errorf("unpacking image %s: %w", digest, err)
		}
		progress(fmt.Sprintf("unpacked %d files, %d directories, %d symlinks, %d MiB in %s",
			st.Files, st.Dirs, st.Symlinks, st.Bytes>>20, time.Since(start).Round(time.Millisecond)))
		if st.Skipped > 0 {
			s.log.Info("skipped special files in image", "image", digest.String(), "count", st.Skipped)
		}
		if err := s.commitLayer(tmp, id); err != nil {
			return TemplateInfo{}, err
		}
	}
	m := &manifest{
		Name:    tmplName,
		Parts:   []manifestPart{{Target: "/", Layers: []string{id}}},
		Env:     cfg.Config.Env,
		User:    cfg.Config.User,
		Workdir: cfg.Config.WorkingDir,
		Source:  source,
		Created: time.Now().UTC(),
	}
	info, err := s.writeManifest(m)
	if err != nil {
		return TemplateInfo{}, err
	}
	progress("template " + tmplName + " is ready")
	return info, nil
}

// archiveKind tells a docker-archive ("docker": has manifest.json) from an OCI layout tar
// ("oci": has oci-layout and index.json).
func archiveKind(p string) (string, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("image archive %s: %w", p, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("image archive %s is not a regular file: %w", p, errdefs.ErrInvalidArgument)
	}
	tr := tar.NewReader(f)
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("image archive %s: %v: %w", p, err, errdefs.ErrInvalidArgument)
		}
		seen[strings.TrimPrefix(hdr.Name, "./")] = true
	}
	switch {
	case seen["manifest.json"]:
		return "docker", nil
	case seen["oci-layout"] && seen["index.json"]:
		return "oci", nil
	}
	return "", fmt.Errorf("%s is neither a docker-archive nor an OCI layout: %w", p, errdefs.ErrInvalidArgument)
}

// unpackLayout extracts the OCI layout tar at p into layers/<tmp>. Links are refused: a
// layout needs none, and a blob that is a symlink could make the layout reader read a host
// file.
func (s *Store) unpackLayout(ctx context.Context, p, tmp string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := s.layers.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	rc := refuseLinks(tar.NewReader(f))
	defer rc.Close()
	if _, err := extractTar(ctx, rc, root, extractOptions{}); err != nil {
		return fmt.Errorf("unpacking OCI layout %s: %w", p, err)
	}
	return nil
}

// refuseLinks re-emits the tar stream of tr, failing at the first symlink or hard link.
// Closing the result stops the copying.
func refuseLinks(tr *tar.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				pw.CloseWithError(tw.Close())
				return
			}
			if err == nil && (hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink) {
				err = fmt.Errorf("OCI layout entry %q is a link: %w", hdr.Name, errdefs.ErrInvalidArgument)
			}
			if err == nil {
				err = tw.WriteHeader(hdr)
			}
			if err == nil {
				_, err = io.Copy(tw, tr)
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// imageFromLayout picks the image for plat from the OCI layout at dir (descending into
// nested indexes); an index with a single platform-less image yields that image.
func imageFromLayout(dir string, plat v1.Platform) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading OCI layout: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	img, err := pickImage(idx, plat, 0)
	if err != nil {
		return nil, err
	}
	if img == nil {
		return nil, fmt.Errorf("OCI layout has no image for %s: %w", plat.String(), errdefs.ErrNotFound)
	}
	return img, nil
}

func pickImage(idx v1.ImageIndex, plat v1.Platform, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, fmt.Errorf("OCI index nested too deeply: %w", errdefs.ErrInvalidArgument)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading OCI index: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var candidates []v1.Descriptor
	for _, d := range im.Manifests {
		if d.Platform != nil && !d.Platform.Satisfies(plat) {
			continue
		}
		candidates = append(candidates, d)
	}
	for _, d := range candidates {
		switch {
		case d.MediaType.IsImage():
			return idx.Image(d.Digest)
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("reading nested OCI index: %v: %w", err, errdefs.ErrInvalidArgument)
			}
			img, err := pickImage(child, plat, depth+1)
			if err != nil || img != nil {
				return img, err
			}
		}
	}
	return nil, nil
}

// ImageTemplateName is the template name an image reference is pulled as, when none is
// given (moat template pull, a Dockerfile's FROM): registry:5000/library/alpine:3.20 →
// alpine-3.20. Pure.
func ImageTemplateName(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	last, _, _ = strings.Cut(last, "@")
	last = strings.ReplaceAll(strings.ToLower(last), ":", "-")
	var b strings.Builder
	for _, r := range last {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	return strings.TrimLeft(b.String(), ".-_")
}
