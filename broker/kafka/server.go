package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/bufpool"
	"github.com/keel-dev/keel/internal/connlimit"
	"github.com/keel-dev/keel/tlsauth"
)

// handshakeTimeout bounds a TLS handshake, and in plaintext the wait for
// a connection's first request: every Kafka client sends one at once.
const handshakeTimeout = 10 * time.Second

// Server is a running Kafka listener.
type Server struct {
	cfg Config
	log *slog.Logger
	lis net.Listener
	// limit admits each accepted connection (cfg.Conns): the listener's
	// descriptors are bounded, and strangers never hold them all.
	limit *connlimit.Limiter
	pids  *producerIDs
	met   *serverMetrics
	// rules caches the topics' produce rules read from one image
	// (topicrules.go).
	rules rulesHolder
	// quotas measure clients against their quotas (throttle.go); nil
	// charges nothing.
	quotas *quotas
	authz  *prometheus.CounterVec
	// produceBudget and otherBudget: the request bytes every connection
	// shares (QueuedMaxRequestBytes each), one for produce requests and one
	// for the others, so that fetches waiting for records (which hold
	// their bytes until answered) never hold back a produce.
	produceBudget, otherBudget *budget
	// tlsConfig serves TLS (cfg.TLS), asking for a client certificate
	// only if SASL is offered (saslTLS); saslSecret derives the decoy
	// salts of unknown SCRAM users.
	tlsConfig  *tls.Config
	saslSecret []byte
	// groups is the group coordinator (Config.Groups); nil serves no
	// groups. offsets creates __consumer_offsets (coordinator.go).
	groups  Groups
	offsets offsetsTopic
	// unserved: the clients already logged asking for an API Keel does
	// not serve (unservedlog.go).
	unserved unservedSeen

	ctx    context.Context // ends at Close: every request's parent
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Serve serves the Kafka protocol on lis until Close; it takes lis over.
// It fails only on a config it cannot run with.
func Serve(lis net.Listener, cfg Config) (*Server, error) {
	switch {
	case cfg.Image == nil:
		return nil, errors.New("kafka listener: no metadata image source")
	case cfg.Backend == nil:
		return nil, errors.New("kafka listener: no data plane backend")
	case cfg.Controller == nil:
		return nil, errors.New("kafka listener: no controller client")
	case cfg.MaxRequestSize < 0, cfg.MaxBatchSize < 0, cfg.IdleTimeout < 0, cfg.FetchMaxWait < 0, cfg.MaxOtherRequestSize < 0,
		cfg.QueuedMaxRequestBytes < 0, cfg.ConnectionMaxRequestBytes < 0, cfg.OffsetsTopicPartitions < 0, cfg.OffsetsTopicReplicationFactor < 0:
		return nil, errors.New("kafka listener: negative limit")
	}
	if cfg.OffsetsTopicPartitions == 0 {
		cfg.OffsetsTopicPartitions = DefaultOffsetsTopicPartitions
	}
	if cfg.OffsetsTopicReplicationFactor == 0 {
		cfg.OffsetsTopicReplicationFactor = DefaultOffsetsTopicReplicationFactor
	}
	if cfg.MaxOtherRequestSize == 0 {
		cfg.MaxOtherRequestSize = DefaultMaxOtherRequestSize
	}
	if cfg.QueuedMaxRequestBytes == 0 {
		cfg.QueuedMaxRequestBytes = DefaultQueuedMaxRequestBytes
	}
	if cfg.ConnectionMaxRequestBytes == 0 {
		cfg.ConnectionMaxRequestBytes = DefaultConnectionMaxRequestBytes
	}
	if cfg.MaxRequestSize == 0 {
		cfg.MaxRequestSize = DefaultMaxRequestSize
	}
	if cfg.MaxBatchSize == 0 {
		cfg.MaxBatchSize = cfg.MaxRequestSize
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.FetchMaxWait == 0 {
		cfg.FetchMaxWait = DefaultFetchMaxWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SASL == "" {
		cfg.SASL = SASLOff
	}
	if _, err := ParseSASLMode(string(cfg.SASL)); err != nil {
		return nil, fmt.Errorf("kafka listener: %w", err)
	}
	secret, err := newSASLSecret()
	if err != nil {
		return nil, fmt.Errorf("kafka listener: %w", err)
	}
	met, err := newServerMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("kafka listener: metrics: %w", err)
	}
	var quotas *quotas
	if !cfg.noQuotas {
		if quotas, err = newQuotas(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("kafka listener: metrics: %w", err)
		}
	}
	authz, err := newAuthzMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("kafka listener: metrics: %w", err)
	}
	limit := connlimit.NewLimits(cfg.Conns, 2*handshakeTimeout, "the Kafka listener "+lis.Addr().String())
	limit.SetLogger(cfg.Logger)
	if cfg.Metrics != nil {
		for _, c := range limit.ListenerCollectors("kafka") {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("kafka listener: metrics: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		limit:         limit,
		met:           met,
		quotas:        quotas,
		authz:         authz,
		produceBudget: newBudget(cfg.QueuedMaxRequestBytes),
		otherBudget:   newBudget(cfg.QueuedMaxRequestBytes),
		cfg:           cfg,
		log:           cfg.Logger.With("component", "kafka", "broker_id", cfg.BrokerID),
		lis:           lis,
		ctx:           ctx,
		cancel:        cancel,
		conns:         map[net.Conn]struct{}{},
		saslSecret:    secret,
	}
	if cfg.TLS != nil {
		s.tlsConfig = cfg.TLS.Server(tlsauth.RoleController, tlsauth.RoleBroker, tlsauth.RoleAdmin, tlsauth.RoleUser)
		if cfg.SASL.on() {
			s.tlsConfig = saslTLS(s.tlsConfig)
		}
	}
	s.pids = newProducerIDs(ctx, cfg.Controller, s.log)
	if cfg.Groups != nil {
		s.groups = cfg.Groups(newGroupLog(cfg.Backend))
		if cfg.GroupElections != nil {
			cfg.GroupElections.attach(s.groups)
		}
	}
	s.produceBudget.onChange = met.budgetInUse("produce")
	s.otherBudget.onChange = met.budgetInUse("other")
	s.wg.Add(1)
	go s.accept()
	s.log.Info("kafka listener started", "listen", lis.Addr().String(), "tls", cfg.TLS != nil, "sasl", string(cfg.SASL))
	return s, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops accepting, closes every connection (a request in progress is
// abandoned) and waits for every goroutine the server started.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if s.cfg.GroupElections != nil {
		s.cfg.GroupElections.detach()
	}
	s.cancel()
	err := s.lis.Close()
	s.wg.Wait()
	s.pids.wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	if s.cfg.Ready != nil {
		select {
		case <-s.cfg.Ready:
		case <-s.ctx.Done():
			return
		}
		s.log.Info("kafka listener serving: the broker has caught up with the metadata log")
	}
	var delay time.Duration
	for {
		c, err := s.lis.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A temporary failure (out of descriptors): back off, as
			// net/http does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("kafka listener: accept failed; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		c, ok := s.limit.Admit(c)
		if !ok {
			continue // closed, counted and logged by the limiter
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// conn is one client connection: who it is, and where it writes.
type conn struct {
	net.Conn
	// principal is who the client is, in Kafka's form (User:NAME), as
	// authorization and the admin requests forwarded to the controller
	// name it (identify); host is its address, as ACLs name hosts.
	principal, host string
	// super: a super user, allowed everything.
	super bool
	w     *bufio.Writer
	// raw is the accepted connection, under TLS if any.
	raw  net.Conn
	sasl saslConn
	// mutedUntil: the connection's next request is not handled before
	// this (unix ns), while its client is throttled (throttle.go).
	mutedUntil atomic.Int64
}

func (s *Server) serveConn(raw net.Conn) {
	defer s.wg.Done()
	defer func() {
		raw.Close()
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
	}()
	// Nothing a client sends may stop the listener: a handler's panic
	// closes this connection only.
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("kafka listener: request handling panicked; connection closed", "remote", raw.RemoteAddr().String(), "panic", fmt.Sprint(r))
		}
	}()
	c := &conn{Conn: raw, raw: raw}
	verifiedCert := false
	if s.cfg.TLS == nil {
		s.identify(c, nil)
	} else {
		tc := tls.Server(raw, s.tlsConfig)
		_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.HandshakeContext(s.ctx); err != nil {
			s.log.Debug("kafka listener: TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
			return
		}
		_ = tc.SetDeadline(time.Time{})
		if chains := tc.ConnectionState().VerifiedChains; len(chains) > 0 {
			// The handshake admitted only these roles (tlsauth requireRole).
			id, err := tlsauth.ParseAnyIdentity(chains[0][0].Subject.CommonName)
			if err != nil {
				return
			}
			s.identify(c, &id)
			verifiedCert = true
			connlimit.Authenticated(raw)
		} else {
			// No certificate (SASL_SSL): a stranger with no rights until
			// its SASL login names it (startSASL requires one).
			s.identify(c, nil)
			c.super = false
		}
		c.Conn = tc
	}
	// A client without a certificate is a stranger until it authenticates
	// by SASL (which tells the limiter then).
	s.startSASL(c, verifiedCert)
	c.w = bufio.NewWriterSize(c.Conn, 64<<10)
	// Answers go out in the order of the requests, from one writer; the
	// reader goes on to the next request while an acks=all produce waits
	// for its batches to commit, or a fetch for data (pipelined), up to
	// maxPipelined answers.
	ctx, cancel := context.WithCancel(s.ctx)
	answers := make(chan *answer, maxPipelined)
	written := make(chan struct{})
	go func() {
		defer close(written)
		s.writeAnswers(c, answers)
	}()
	// drain: the connection closes after an answer that says so, and the
	// answers before it are written first. Any other end (closed, idle,
	// gone, refused) does not wait for the commits of the answers pending.
	drain := false
	defer func() {
		if !drain {
			cancel()
		}
		close(answers)
		<-written
		cancel()
	}()
	r := bufio.NewReaderSize(c.Conn, 64<<10)
	connBudget := newBudget(s.cfg.ConnectionMaxRequestBytes)
	// held: the bytes of the frame being read and handled, until its
	// answer takes them; given back on any other way out, a handler's
	// panic included.
	var held lease
	defer func() { held.release() }()
	var sizeBuf [4]byte
	// In plaintext the first request is the peer's handshake: it comes at
	// once, or the connection is a stranger's.
	first := s.cfg.TLS == nil
	for {
		wait := s.cfg.IdleTimeout
		if first {
			wait = min(wait, handshakeTimeout)
		}
		if c.saslPending() {
			wait = min(wait, time.Until(c.sasl.deadline))
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
			return // closed, idle, gone, or closed by the writer
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		if c.sasl.rawTokens {
			// After a SaslHandshake v0 the SASL tokens come bare, with
			// no request header (sasl.go).
			a, err := s.saslRawToken(c, r, size)
			if err != nil {
				s.log.Debug("kafka listener: SASL token refused; connection closed", "remote", raw.RemoteAddr().String(), "err", err)
				return
			}
			answers <- a
			if a.closeAfter {
				drain = true
				return
			}
			continue
		}
		// The API key, before the body is read: a request's limit and its
		// cost in memory depend on it (requestLimit, requestCost).
		key, err := peekKey(r, size)
		if err != nil {
			return
		}
		limit := s.requestLimit(key)
		if c.saslPending() {
			limit = min(limit, saslMaxReceiveSize)
		}
		if size < 8 || size > limit {
			s.log.Warn("kafka listener: request size out of bounds; connection closed", "remote", raw.RemoteAddr().String(),
				"request", kmsg.NameForKey(key), "size", size, "max", limit)
			return
		}
		// Back-pressure: the frame is not read until its bytes fit in the
		// connection's and the broker's budgets; they come back once its
		// answer is written (writeAnswers).
		if held, err = s.lease(ctx, connBudget, key, size); err != nil {
			return
		}
		pooled := newFrame(key, size)
		frame := *pooled
		// A large request may take a while to arrive, but not forever.
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		if _, err := io.ReadFull(r, frame); err != nil {
			bufpool.Put(pooled)
			return
		}
		arrived := time.Now()
		if first {
			if !c.saslPending() {
				connlimit.Authenticated(raw)
			}
			first = false
		}
		// A throttled client's request waits its turn; its handling time
		// starts after.
		started := arrived
		if waited, ok := c.awaitUnmuted(ctx); !ok {
			return
		} else if waited {
			started = time.Now()
		}
		a, err := s.handleFrame(ctx, c, frame)
		if a != nil {
			a.arrived = arrived
		}
		if err != nil {
			// Not given back: a refused request may have left goroutines
			// holding slices of its frame.
			level := slog.LevelWarn
			if errors.Is(err, errNotServed) {
				level = slog.LevelDebug // logged once per client (noteUnserved)
			}
			s.log.Log(ctx, level, "kafka listener: request refused; connection closed", "remote", raw.RemoteAddr().String(), "err", err)
			return
		}
		a.lease, held = held, lease{}
		if pooledKey(key) {
			a.frame = pooled
		}
		a.quota = s.chargeRequest(c, a, len(frame), started)
		answers <- a
		if a.closeAfter {
			drain = true
			return
		}
	}
}

// maxPipelined bounds the answers a connection holds that are not written
// yet: Kafka's clients keep at most five produce requests in flight.
const maxPipelined = 8

// answer is one request's answer, ready once ready is closed (at once,
// but for an acks=all produce, when its batches have committed, and for a
// fetch that waits, when its wait ends).
type answer struct {
	h        header
	flexible bool // a flexible response header
	resp     kmsg.Response
	// closeAfter: close the connection once this is written (or instead,
	// if resp is nil).
	closeAfter bool
	ready      chan struct{}
	// arrived: when the request's frame was read, for its duration.
	arrived time.Time
	// lease: the request's bytes in the budgets, given back once the
	// answer is written (or dropped).
	lease lease
	// raw, when resp is nil: a bare SASL token, written with its size
	// only (after a SaslHandshake v0).
	raw []byte
	// quota: what the request owes its client's quotas; nil when no quota
	// is set.
	quota *quotaCharge
	// frame: the request's frame when it goes back to the pool
	// (frames.go), which the request and its answer may alias; given
	// back once the answer is written or dropped.
	frame *[]byte
	// release, when set, gives back the buffers resp aliases (a fetch's
	// records), once it is written or dropped.
	release func()
}

// readyNow is a closed channel, for the answers that are complete.
var readyNow = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// writeAnswers writes each answer in turn, once it is ready. A failed
// write closes the connection, which ends the reader.
func (s *Server) writeAnswers(c *conn, answers <-chan *answer) {
	failed := false
	for a := range answers {
		<-a.ready
		s.writeAnswer(c, a, &failed)
		// Written or dropped, and its handler done with it (ready): no
		// slice of the frame or of its records is used any more.
		if a.release != nil {
			a.release()
		}
		bufpool.Put(a.frame)
	}
}

// writeAnswer writes a (unless an earlier write failed), gives its lease
// back, and closes the connection when a write fails or a says so.
func (s *Server) writeAnswer(c *conn, a *answer, failed *bool) {
	if *failed {
		a.lease.release()
		return
	}
	if a.quota != nil {
		// An acks=0 produce has no answer, but mutes all the same.
		s.settleQuota(c, a)
	}
	if a.resp != nil {
		if err := s.write(c, a.h, a.flexible, a.resp); err != nil {
			a.lease.release()
			*failed = true
			_ = c.Close()
			return
		}
		s.met.request(a.h.key, a.arrived)
	} else if a.raw != nil && writeRaw(c, a.raw, s.cfg.IdleTimeout) != nil {
		*failed = true
		_ = c.Close()
		return
	}
	a.lease.release()
	if a.closeAfter {
		*failed = true
		_ = c.Close()
	}
}

// header is a request header (v1, or v2 for flexible requests).
type header struct {
	key, version int16
	correlation  int32
	clientID     *string
}

// handleFrame parses one request and answers it. An error closes the
// connection, as Kafka closes it on a request it cannot parse or does not
// serve.
func (s *Server) handleFrame(ctx context.Context, c *conn, frame []byte) (*answer, error) {
	rd := kbin.Reader{Src: frame}
	h := header{key: rd.Int16(), version: rd.Int16(), correlation: rd.Int32(), clientID: rd.NullableString()}
	if !rd.Ok() {
		return nil, errors.New("truncated request header")
	}
	if h.key == apiVersionsKey && h.version > versions[apiVersionsKey].max {
		// KIP-511: a client newer than this broker learns its range from
		// a v0 answer, whatever its request's body.
		return &answer{h: h, resp: unsupportedApiVersions(), ready: readyNow}, nil
	}
	vr, ok := versions[h.key]
	if !ok || !s.serves(h.key) {
		// An API Keel does not serve: its error response, if kmsg reads
		// the request (unserved.go).
		req, resp, err := unservedResponse(h.key, h.version, rd.Src)
		if err != nil {
			s.noteUnserved(c, h, "connection closed: "+err.Error())
			return nil, fmt.Errorf("%w: %v", errNotServed, err)
		}
		s.noteUnserved(c, h, "UNSUPPORTED_VERSION: "+unservedMessage(h.key))
		a := &answer{h: h, flexible: req.IsFlexible(), resp: resp, ready: readyNow}
		if handled, err := s.saslGate(c, a, req); handled {
			return a, err
		}
		return a, nil
	}
	if h.version < vr.min || h.version > vr.max {
		err := fmt.Errorf("%s v%d is not served (%d-%d)", kmsg.NameForKey(h.key), h.version, vr.min, vr.max)
		s.noteUnserved(c, h, "connection closed: "+err.Error())
		return nil, fmt.Errorf("%w: %v", errNotServed, err)
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	body := rd.Src
	if req.IsFlexible() {
		rd.Src = body
		if !skipTags(&rd) {
			return nil, errors.New("malformed request header tags")
		}
		body = rd.Src
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s v%d does not parse: %v", kmsg.NameForKey(h.key), h.version, err)
	}
	a := &answer{h: h, flexible: req.IsFlexible() && h.key != apiVersionsKey, ready: readyNow}
	if handled, err := s.saslGate(c, a, req); handled {
		return a, err
	}
	if pr, ok := req.(*kmsg.ProduceRequest); ok {
		// acks=0 produce that failed: closing is how Kafka tells such a
		// client to refresh its metadata.
		a.resp, a.closeAfter, a.ready = s.produce(ctx, c, pr)
		return a, nil
	}
	if fr, ok := req.(*kmsg.FetchRequest); ok {
		// A fetch that waits for data waits off the reader, which reads
		// on: a client that closes its connection is noticed at once, and
		// the close (ctx) ends the wait.
		s.capFetch(c, h, fr)
		a.resp, a.ready, a.release = s.fetch(ctx, c, fr)
		return a, nil
	}
	if dr, ok := req.(*kmsg.DeleteRecordsRequest); ok {
		a.resp, a.ready = s.deleteRecords(ctx, c, dr)
		return a, nil
	}
	if s.handleGroup(ctx, c, a, req) {
		return a, nil
	}
	a.resp = s.handle(ctx, c, req)
	return a, nil
}

// skipTags skips a tagged-field section.
func skipTags(rd *kbin.Reader) bool {
	n := rd.Uvarint()
	for i := uint32(0); i < n && rd.Ok(); i++ {
		rd.Uvarint() // tag
		size := rd.Uvarint()
		if int(size) > len(rd.Src) {
			return false
		}
		rd.Span(int(size))
	}
	return rd.Ok()
}

// write sends one response: size, correlation id, header tags for flexible
// responses (never ApiVersions'), body. It is encoded into a pooled buffer
// of about its size (answerSize), given back once written: a fetch's
// records are copied once, from their read buffer into it, and a buffer
// larger than the connection's writer goes to the socket without a copy.
func (s *Server) write(c *conn, h header, flexibleHeader bool, resp kmsg.Response) error {
	pooled := bufpool.Get(answerSize(resp))
	defer func() { bufpool.Put(pooled) }()
	buf := binary.BigEndian.AppendUint32((*pooled)[:4], uint32(h.correlation))
	if flexibleHeader {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	// Outgrown (answerSize guessed short): the larger buffer goes back
	// instead, if it is a pool's size.
	*pooled = buf
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.IdleTimeout))
	if _, err := c.w.Write(buf); err != nil {
		return err
	}
	return c.w.Flush()
}

// handle answers one parsed request other than a produce, a fetch or a
// DeleteRecords.
func (s *Server) handle(ctx context.Context, c *conn, req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return s.apiVersions(r)
	case *kmsg.MetadataRequest:
		return s.metadata(ctx, c, r)
	case *kmsg.DescribeClusterRequest:
		return s.describeCluster(c, r)
	case *kmsg.ListOffsetsRequest:
		return s.listOffsets(ctx, c, r)
	case *kmsg.OffsetForLeaderEpochRequest:
		return s.offsetForLeaderEpoch(ctx, c, r)
	case *kmsg.InitProducerIDRequest:
		return s.initProducerID(ctx, c, r)
	case *kmsg.CreateTopicsRequest:
		return s.createTopics(ctx, c, r)
	case *kmsg.DeleteTopicsRequest:
		return s.deleteTopics(ctx, c, r)
	case *kmsg.CreatePartitionsRequest:
		return s.createPartitions(ctx, c, r)
	case *kmsg.DescribeConfigsRequest:
		return s.describeConfigs(c, r)
	case *kmsg.AlterConfigsRequest:
		return s.legacyAlterConfigs(ctx, c, r)
	case *kmsg.IncrementalAlterConfigsRequest:
		return s.incrementalAlterConfigs(ctx, c, r)
	case *kmsg.DescribeLogDirsRequest:
		return s.describeLogDirs(c, r)
	case *kmsg.DescribeProducersRequest:
		return s.describeProducers(c, r)
	case *kmsg.ElectLeadersRequest:
		return s.electLeaders(ctx, c, r)
	case *kmsg.AlterPartitionAssignmentsRequest:
		return s.alterPartitionReassignments(ctx, c, r)
	case *kmsg.ListPartitionReassignmentsRequest:
		return s.listPartitionReassignments(ctx, c, r)
	case *kmsg.DescribeQuorumRequest:
		return s.describeQuorum(ctx, c, r)
	case *kmsg.UpdateFeaturesRequest:
		return s.updateFeatures(ctx, c, r)
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		return s.describeUserScramCredentials(c, r)
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		return s.alterUserScramCredentials(ctx, c, r)
	case *kmsg.DescribeClientQuotasRequest:
		return s.describeClientQuotas(c, r)
	case *kmsg.AlterClientQuotasRequest:
		return s.alterClientQuotas(ctx, c, r)
	case *kmsg.CreateACLsRequest:
		return s.createACLs(ctx, c, r)
	case *kmsg.DescribeACLsRequest:
		return s.describeACLs(c, r)
	case *kmsg.DeleteACLsRequest:
		return s.deleteACLs(ctx, c, r)
	}
	// versions lists only the keys above.
	panic(fmt.Sprintf("no handler for %s", kmsg.NameForKey(req.Key())))
}
