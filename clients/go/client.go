package jobwire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Client is a connection to one jobwire server. It is safe for concurrent use; create one
// per process and share it (a [Worker] uses it too). Close it when done.
type Client struct {
	conn *grpc.ClientConn
	log  *slog.Logger
	// The generated stubs on the same connection, for what the wrappers leave out.
	Jobs   pb.JobServiceClient
	Worker pb.WorkerServiceClient
	Dead   pb.DeadLetterServiceClient
	Queues pb.QueueServiceClient
	Groups pb.GroupServiceClient
}

// TLS configures a TLS connection. Give the CA that signed the server's certificate as a
// PEM file (CAFile) or PEM bytes (CAPEM); both empty trusts the system's roots. CertFile
// and KeyFile add a client certificate (mTLS, a server started with --tls-client-ca).
// ServerName overrides the name the server's certificate must have (default: the host of
// the target).
type TLS struct {
	CAFile     string
	CAPEM      []byte
	CertFile   string
	KeyFile    string
	ServerName string
}

// Option configures [NewClient].
type Option func(*clientConfig)

type clientConfig struct {
	token     string
	tls       *TLS
	log       *slog.Logger
	dial      []grpc.DialOption
	keepalive Keepalive
}

// Keepalive is the connection's HTTP/2 keepalive ([WithKeepalive]): a PING after Interval
// without a frame from the server, the connection closed when it goes unanswered for Timeout
// (its calls and the worker's stream fail UNAVAILABLE; the worker reconnects). A frozen or
// vanished server is noticed within Interval + Timeout: 15 s with [DefaultKeepalive].
type Keepalive struct {
	// Time without a frame from the server before a PING; at least 10 s (grpc-go's floor).
	Interval time.Duration
	// How long a PING may go unanswered; at least 1 s.
	Timeout time.Duration
	// Also ping while no call or stream is open.
	WithoutCalls bool
}

// DefaultKeepalive: a PING after 10 s of silence, 5 s to answer it, also without calls.
var DefaultKeepalive = Keepalive{Interval: 10 * time.Second, Timeout: 5 * time.Second, WithoutCalls: true}

// WithKeepalive sets the connection's HTTP/2 keepalive (default [DefaultKeepalive]). The
// jobwire server answers PINGs without a rate limit; a proxy in between may allow fewer (a
// gRPC-based one answers PINGs more often than every 5 minutes with GOAWAY "too_many_pings").
func WithKeepalive(k Keepalive) Option { return func(c *clientConfig) { c.keepalive = k } }

// WithToken sends `authorization: Bearer <token>` with every call (a token from
// `jobwire token new`, checked against the server's --auth-file). Without TLS the token is
// sent only to a loopback target; anywhere else NewClient refuses, so a token cannot leak
// onto a network in clear text.
func WithToken(token string) Option { return func(c *clientConfig) { c.token = token } }

// WithTLS connects over TLS (see [TLS]).
func WithTLS(t TLS) Option { return func(c *clientConfig) { c.tls = &t } }

// WithLogger sets the logger of the client and of the workers built on it (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *clientConfig) { c.log = l } }

// WithDialOptions adds gRPC dial options (interceptors, a custom dialer, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *clientConfig) { c.dial = append(c.dial, opts...) }
}

// retryServiceConfig lets gRPC retry UNAVAILABLE for the calls that are idempotent: reads,
// EnqueueBatch (the server fails the call only when nothing was written), replay and delete
// of dead letters by id (a second run skips what is no longer dead), pause and resume (of
// queues and groups).
// Enqueue is retried by [Client.Enqueue] itself when it carries a job id; the worker retries
// its ExtendLease and settle calls itself, promptly.
const retryServiceConfig = `{
  "methodConfig": [{
    "name": [
      {"service": "jobwire.v1.JobService", "method": "GetJob"},
      {"service": "jobwire.v1.JobService", "method": "EnqueueBatch"},
      {"service": "jobwire.v1.DeadLetterService"},
      {"service": "jobwire.v1.QueueService", "method": "ListQueues"},
      {"service": "jobwire.v1.QueueService", "method": "GetQueueStats"},
      {"service": "jobwire.v1.QueueService", "method": "PauseQueue"},
      {"service": "jobwire.v1.QueueService", "method": "ResumeQueue"},
      {"service": "jobwire.v1.QueueService", "method": "GetQueueConfig"},
      {"service": "jobwire.v1.GroupService", "method": "ListGroups"},
      {"service": "jobwire.v1.GroupService", "method": "GetGroup"},
      {"service": "jobwire.v1.GroupService", "method": "PauseGroup"},
      {"service": "jobwire.v1.GroupService", "method": "ResumeGroup"}
    ],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.1s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// NewClient connects to the jobwire server at target (HOST:PORT, or any gRPC target such
// as dns:///jobwire:50051). The connection is made lazily; calls wait for it. HTTP/2
// keepalive ([WithKeepalive]; by default a PING after 10 s of silence, 5 s to answer)
// notices a frozen or vanished server, also under a stream that waits for leases.
func NewClient(target string, opts ...Option) (*Client, error) {
	cfg := clientConfig{log: slog.Default(), keepalive: DefaultKeepalive}
	for _, o := range opts {
		o(&cfg)
	}
	if k := cfg.keepalive; k.Interval < 10*time.Second || k.Timeout < time.Second {
		return nil, fmt.Errorf("jobwire: keepalive Interval must be at least 10s and Timeout at least 1s, got %s and %s", k.Interval, k.Timeout)
	}
	var transport credentials.TransportCredentials
	if cfg.tls != nil {
		tc, err := cfg.tls.config()
		if err != nil {
			return nil, err
		}
		transport = credentials.NewTLS(tc)
	} else {
		if cfg.token != "" && !isLoopback(target) {
			return nil, fmt.Errorf("jobwire: a token needs TLS (WithTLS) unless the target is loopback, got %q", target)
		}
		transport = insecure.NewCredentials()
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: cfg.keepalive.Interval, Timeout: cfg.keepalive.Timeout, PermitWithoutStream: cfg.keepalive.WithoutCalls,
		}),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
	}
	if cfg.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: cfg.token, tls: cfg.tls != nil}))
	}
	dial = append(dial, cfg.dial...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("jobwire: connect to %s: %w", target, err)
	}
	return &Client{
		conn:   conn,
		log:    cfg.log,
		Jobs:   pb.NewJobServiceClient(conn),
		Worker: pb.NewWorkerServiceClient(conn),
		Dead:   pb.NewDeadLetterServiceClient(conn),
		Queues: pb.NewQueueServiceClient(conn),
		Groups: pb.NewGroupServiceClient(conn),
	}, nil
}

// Conn is the underlying gRPC connection (for the health service, say).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection; calls in flight fail with CANCELED.
func (c *Client) Close() error { return c.conn.Close() }

func (t *TLS) config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	ca := t.CAPEM
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("jobwire: read CA file: %w", err)
		}
		ca = append(append([]byte{}, ca...), b...)
	}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("jobwire: no PEM certificate in the CA")
		}
		tc.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("jobwire: a client certificate needs both CertFile and KeyFile")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("jobwire: load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// bearer is the per-call credential `authorization: Bearer <token>`.
type bearer struct {
	token string
	tls   bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.tls }

// isLoopback says whether target names a loopback address (127.0.0.0/8, ::1, localhost).
func isLoopback(target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
