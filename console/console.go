// Package console serves Keel's built-in web console: a read-only page on
// each controller's metrics listener (/console/) that shows the quorum,
// the brokers, the topics and their partitions, the reassignments in
// progress and the feature level, refreshing itself.
//
// It exists so that an operator has something to look at without
// installing a UI: plain HTML, CSS and one script, embedded in the
// binary. The page reads JSON under /console/api/, built from the
// controller's own image through the admin API's read paths
// (server.LocalReads): a follower's page is that follower's view, and
// every answer says whose view it is and at which applied index, as the
// admin API's stale reads do. Who may see it is who may read metadata
// through the admin API (rpc.AuthorizeHTTP): with TLS, a controller,
// broker or admin certificate, never a probe's.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Source is the controller a console shows: server.LocalReads.
type Source interface {
	// DescribeQuorum is this node's view of the quorum.
	DescribeQuorum(ctx context.Context) (*keelpb.DescribeQuorumResponse, error)
	// StaleImage is this node's image and whose view it is; refused
	// when the image diverged from the quorum's.
	StaleImage(ctx context.Context) (*fsm.Image, *keelpb.ReadSource, error)
	// DescribeFeatures is every node's supported metadata.version levels;
	// only the active controller answers.
	DescribeFeatures(ctx context.Context) (*keelpb.DescribeFeaturesResponse, error)
}

// Path is where the console is served.
const Path = "/console/"

// readMethod is the admin API's read whose rule decides who sees the
// console: what it shows is what DescribeTopic and the other reads show.
var readMethod = keelpb.ControllerService_DescribeTopic_FullMethodName

const (
	// defaultLimit and maxLimit bound a page of topics or partitions: a
	// cluster of a million partitions is shown a page at a time.
	defaultLimit = 100
	maxLimit     = 1000
	// readTimeout bounds one answer: DescribeFeatures asks every voter.
	readTimeout = 10 * time.Second
)

//go:embed static
var static embed.FS

// Mode is what a listener's console answers before a controller is
// attached to it: the metrics listener starts before the node, so that a
// taken address fails first.
type Mode int

const (
	// IfAttached: 404 until attached. A broker's listener, never
	// attached, serves no console.
	IfAttached Mode = iota
	// Starting: 503 until attached; a controller's.
	Starting
	// Off: no console (keel controller --console=false); New is not
	// called.
	Off
)

// Console serves the console once a controller is attached.
type Console struct {
	mode  Mode
	src   atomic.Pointer[Source]
	scans scanCache
	files http.Handler
	log   *slog.Logger
	now   func() time.Time
}

// New returns a console with nothing attached yet, answering as mode says
// until then.
func New(mode Mode, log *slog.Logger) *Console {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &Console{mode: mode, files: http.StripPrefix(strings.TrimSuffix(Path, "/"), http.FileServerFS(sub)), log: log, now: time.Now}
}

// Attach makes the console show src.
func (c *Console) Attach(src Source) { c.src.Store(&src) }

// Attached reports whether Attach was called.
func (c *Console) Attached() bool { return c.src.Load() != nil }

// RootPattern is the pattern (http.ServeMux's) of exactly "/", which
// Redirect sends to the console: any other unknown path stays 404.
const RootPattern = "/{$}"

// Redirect sends a request to the console, when it is served.
func (c *Console) Redirect() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.mode == IfAttached && !c.Attached() {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, Path, http.StatusFound)
	})
}

// ServeHTTP answers a GET under Path, once the caller may read metadata.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Only this origin's own script, style and JSON; no inline script,
	// no framing. Every value the page shows is set as text.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	p := c.src.Load()
	if p == nil && c.mode == IfAttached {
		httpError(w, http.StatusNotFound, "no console on this listener: each controller serves its own")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, "the console is read-only: GET only")
		return
	}
	if err := checkHost(r); err != nil {
		httpError(w, http.StatusForbidden, err.Error())
		return
	}
	if err := rpc.AuthorizeHTTP(r, readMethod); err != nil {
		httpError(w, http.StatusForbidden, "the console shows what the admin API's reads show: "+err.Error())
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, Path)
	api, isAPI := strings.CutPrefix(rest, "api/")
	if !isAPI {
		// The page itself, its style and its script: they change only
		// with the binary, but a browser asks again each load.
		h.Set("Cache-Control", "no-cache")
		c.files.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	if p == nil {
		httpError(w, http.StatusServiceUnavailable, "the controller is starting")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	var v any
	var err error
	switch api {
	case "overview":
		v, err = c.overview(ctx, *p)
	case "topics":
		v, err = c.topics(ctx, *p, r)
	case "partitions":
		v, err = c.partitions(ctx, *p, r)
	case "features":
		v, err = (*p).DescribeFeatures(ctx)
		if err == nil {
			v = featuresOf(v.(*keelpb.DescribeFeaturesResponse))
		}
	default:
		httpError(w, http.StatusNotFound, fmt.Sprintf("no console API %q: overview, topics, partitions, features", api))
		return
	}
	if err != nil {
		var bad badRequest
		code := http.StatusServiceUnavailable
		if errors.As(err, &bad) {
			code = http.StatusBadRequest
		} else if errors.Is(err, errNotFound) {
			code = http.StatusNotFound
		}
		httpError(w, code, oneLine(err))
		return
	}
	h.Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		c.log.Debug("console: answer not sent", "path", r.URL.Path, "err", err)
	}
}

// checkHost refuses a plaintext request on a loopback listener whose Host
// names no loopback address: a web page a browser loaded from elsewhere
// may have a name of its own resolve to 127.0.0.1 (DNS rebinding) and read
// the console as its own origin. A loopback listener is only ever
// reached as localhost or a loopback address. With TLS the server's
// certificate names the hosts the browser may use.
func checkHost(r *http.Request) error {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if r.TLS != nil || !ok {
		return nil
	}
	tcp, ok := local.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return nil
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("the Host %q is no name of this loopback listener: open http://%s%s", r.Host, tcp, Path)
}

// httpError answers code with msg, one line of text.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "console: "+msg, code)
}

// oneLine is err's message; a gRPC status's without its code.
func oneLine(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// badRequest is a query the console cannot answer as asked.
type badRequest struct{ msg string }

func (b badRequest) Error() string { return b.msg }

var errNotFound = errors.New("not found")

func (c *Console) overview(ctx context.Context, src Source) (*overview, error) {
	img, rs, err := src.StaleImage(ctx)
	if err != nil {
		return nil, err
	}
	q, err := src.DescribeQuorum(ctx)
	if err != nil {
		return nil, err
	}
	return buildOverview(img, rs, q, c.scans.of(img), c.now()), nil
}

func (c *Console) topics(ctx context.Context, src Source, r *http.Request) (*topicPage, error) {
	offset, limit, err := pageOf(r)
	if err != nil {
		return nil, err
	}
	img, rs, err := src.StaleImage(ctx)
	if err != nil {
		return nil, err
	}
	q := topicQuery{match: r.URL.Query().Get("q"), unhealthy: r.URL.Query().Get("unhealthy") == "1", offset: offset, limit: limit}
	rows, total := listTopics(img, c.scans.of(img), q)
	return &topicPage{page: page{AsOf: c.now(), Source: sourceOf(rs), Total: total, Offset: offset, Limit: limit}, Topics: rows}, nil
}

func (c *Console) partitions(ctx context.Context, src Source, r *http.Request) (*partitionPage, error) {
	offset, limit, err := pageOf(r)
	if err != nil {
		return nil, err
	}
	name := r.URL.Query().Get("topic")
	if name == "" {
		return nil, badRequest{"partitions needs ?topic=NAME"}
	}
	img, rs, err := src.StaleImage(ctx)
	if err != nil {
		return nil, err
	}
	t, ok := img.Topic(name)
	if !ok {
		return nil, fmt.Errorf("%w: no topic %q in controller %d's image at index %d", errNotFound, name, rs.GetNodeId(), rs.GetAppliedIndex())
	}
	rows, total := listPartitions(img, t, r.URL.Query().Get("unhealthy") == "1", offset, limit)
	return &partitionPage{page: page{AsOf: c.now(), Source: sourceOf(rs), Total: total, Offset: offset, Limit: limit}, Topic: name, Partitions: rows}, nil
}

// pageOf reads ?offset= (default 0) and ?limit= (default 100, at most 1000).
func pageOf(r *http.Request) (offset, limit int, err error) {
	offset, limit = 0, defaultLimit
	q := r.URL.Query()
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return 0, 0, badRequest{fmt.Sprintf("offset %q: want a whole number, 0 or more", s)}
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxLimit {
			return 0, 0, badRequest{fmt.Sprintf("limit %q: want a whole number from 1 to %d", s, maxLimit)}
		}
	}
	return offset, limit, nil
}

// features is /console/api/features: DescribeFeatures' answer.
type features struct {
	MetadataVersion uint32        `json:"metadata_version"`
	Nodes           []featureNode `json:"nodes"`
}

type featureNode struct {
	Kind    string `json:"kind"`
	ID      int32  `json:"id"`
	Address string `json:"address"`
	Min     uint32 `json:"min_metadata_version"`
	Max     uint32 `json:"max_metadata_version"`
	Error   string `json:"error,omitempty"`
}

func featuresOf(f *keelpb.DescribeFeaturesResponse) *features {
	out := &features{MetadataVersion: f.GetMetadataVersion(), Nodes: []featureNode{}}
	for _, n := range f.GetNodes() {
		out.Nodes = append(out.Nodes, featureNode{Kind: n.GetKind(), ID: n.GetId(), Address: n.GetAddress(),
			Min: n.GetMinMetadataVersion(), Max: n.GetMaxMetadataVersion(), Error: n.GetError()})
	}
	return out
}
