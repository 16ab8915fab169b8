package jobwire

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// EnqueueOption sets an option of a job (see [JobID], [Delay], [Priority], [MaxAttempts],
// [Backoff], [Metadata], [Timeout], [ContentType], [GroupKey], [ExpireAt], [TTL]).
type EnqueueOption func(*pb.JobSpec)

// JobID sets the job's id, which is also its idempotency key: an Enqueue whose id exists
// returns the existing job with created = false and changes nothing. Any UTF-8 up to 256
// bytes. With an id, Enqueue retries UNAVAILABLE (it is idempotent).
func JobID(id string) EnqueueOption { return func(s *pb.JobSpec) { s.JobId = id } }

// Delay waits d (0 to 365 days) before the first attempt.
func Delay(d time.Duration) EnqueueOption {
	return func(s *pb.JobSpec) { s.Delay = durationpb.New(d) }
}

// Priority: higher runs first, -1000 to 1000; equal priorities run FIFO by ready time.
func Priority(p int32) EnqueueOption { return func(s *pb.JobSpec) { s.Priority = p } }

// MaxAttempts counts runs, not retries: 3 is one run plus up to two retries (1 to 1000;
// unset: the queue's default, else 1).
func MaxAttempts(n uint32) EnqueueOption { return func(s *pb.JobSpec) { s.MaxAttempts = &n } }

// Timeout limits each attempt (1 ms to 7 days); an attempt that runs longer fails with
// TIMED_OUT.
func Timeout(d time.Duration) EnqueueOption {
	return func(s *pb.JobSpec) { s.Timeout = durationpb.New(d) }
}

// Metadata adds string pairs (trace context, tenant, ...): at most 64 entries.
func Metadata(md map[string]string) EnqueueOption {
	return func(s *pb.JobSpec) {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		for k, v := range md {
			s.Metadata[k] = v
		}
	}
}

// GroupKey puts the job in a group (a tenant, a customer): 1-128 bytes of UTF-8 without
// control characters. Within a queue the groups with waiting jobs are leased round-robin
// (weighted), and each group may have its own concurrency and rate limit (see
// [Client.UpdateGroupConfig]); a worker's [RateLimitedGroup] pauses only the job's group.
// Unset: the queue's default group.
func GroupKey(key string) EnqueueOption { return func(s *pb.JobSpec) { s.GroupKey = key } }

// ExpireAt: a job not leased by t moves to EXPIRED (or to the dead-letter queue with reason
// EXPIRED when the queue's dead_letter_expired is set) and never runs. Give at most one of
// ExpireAt and [TTL].
func ExpireAt(t time.Time) EnqueueOption {
	return func(s *pb.JobSpec) { s.ExpireTime = timestamppb.New(t) }
}

// TTL is [ExpireAt] relative to the enqueue (1 ms to 365 days), measured by the server's
// clock.
func TTL(d time.Duration) EnqueueOption {
	return func(s *pb.JobSpec) { s.Ttl = durationpb.New(d) }
}

// ContentType sets the payload's MIME type (set to application/json for a payload that is
// not []byte).
func ContentType(ct string) EnqueueOption { return func(s *pb.JobSpec) { s.ContentType = ct } }

// BackoffPolicy is a job's retry backoff policy, computed by the server. Exponential waits
// Delay * 2^(n-1) after attempt n (BullMQ's "exponential"); otherwise every retry waits Delay
// ("fixed"). Jitter in [0, 1] draws the delay uniformly from [(1 - Jitter) * d, d] (1 is
// full jitter); MaxDelay caps every delay when > 0. Delay: 0 to 7 days.
type BackoffPolicy struct {
	Exponential bool
	Delay       time.Duration
	Jitter      float64
	MaxDelay    time.Duration
}

// Backoff sets the retry backoff (unset: retry at once, or the queue's default).
func Backoff(b BackoffPolicy) EnqueueOption {
	return func(s *pb.JobSpec) {
		kind := pb.BackoffKind_BACKOFF_KIND_FIXED
		if b.Exponential {
			kind = pb.BackoffKind_BACKOFF_KIND_EXPONENTIAL
		}
		s.Backoff = &pb.Backoff{Kind: kind, Delay: durationpb.New(b.Delay), Jitter: b.Jitter}
		if b.MaxDelay > 0 {
			s.Backoff.MaxDelay = durationpb.New(b.MaxDelay)
		}
	}
}

// NewJobSpec builds the JobSpec of Enqueue and EnqueueBatch. The payload is sent as is when
// it is []byte (or json.RawMessage), else JSON-encoded with content type application/json.
func NewJobSpec(queue, name string, payload any, opts ...EnqueueOption) (*pb.JobSpec, error) {
	spec := &pb.JobSpec{Queue: queue, Name: name}
	switch p := payload.(type) {
	case []byte:
		spec.Payload = p
	case json.RawMessage:
		spec.Payload, spec.ContentType = p, "application/json"
	case nil:
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("jobwire: encode payload of %q as JSON: %w", name, err)
		}
		spec.Payload, spec.ContentType = b, "application/json"
	}
	for _, o := range opts {
		o(spec)
	}
	return spec, nil
}

// Enqueued is the outcome of an Enqueue.
type Enqueued struct {
	// The job as stored (the existing one when Created is false).
	Job *pb.Job
	// False when the job id already existed: nothing was changed.
	Created bool
}

// Enqueue creates a job on queue. payload is []byte (sent as is) or any value (JSON). With a
// [JobID] the call is idempotent and UNAVAILABLE is retried with backoff (up to 5 tries);
// gRPC errors are returned as status errors (status.Code(err)). Without one the server
// chooses the id and the call is not repeated, except after NOT_REPLICATED
// (--redis-wait-replicas: the job was written on the Redis master): the retries carry the
// job id the error names ([NotReplicatedJobID]), so they find that job (Created stays true:
// this call created it); once the tries are spent the last error, which names the id, is
// returned.
func (c *Client) Enqueue(ctx context.Context, queue, name string, payload any, opts ...EnqueueOption) (*Enqueued, error) {
	spec, err := NewJobSpec(queue, name, payload, opts...)
	if err != nil {
		return nil, err
	}
	enqueue := func(s *pb.JobSpec, tries int) (resp *pb.EnqueueResponse, err error) {
		err = retryUnavailable(ctx, tries, func() error {
			var e error
			resp, e = c.Jobs.Enqueue(ctx, &pb.EnqueueRequest{Job: s})
			return e
		})
		return resp, err
	}
	tries := 1
	if spec.JobId != "" {
		tries = 5
	}
	resp, err := enqueue(spec, tries)
	if id := NotReplicatedJobID(err); id != "" && spec.JobId == "" {
		named := proto.Clone(spec).(*pb.JobSpec)
		named.JobId = id
		if resp, err = enqueue(named, 4); err == nil {
			resp.Created = true
		}
	}
	if err != nil {
		return nil, err
	}
	return &Enqueued{Job: resp.GetJob(), Created: resp.GetCreated()}, nil
}

// NotReplicatedJobID is the id of the job an Enqueue wrote on the Redis master though too few
// replicas acknowledged it (UNAVAILABLE with ErrorInfo reason NOT_REPLICATED and metadata
// job_id), or "" for any other error. Retrying with [JobID] set to it finds that job instead
// of creating another.
func NotReplicatedJobID(err error) string {
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.Unavailable {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "NOT_REPLICATED" {
			return info.GetMetadata()["job_id"]
		}
	}
	return ""
}

// BatchResult is the outcome of one item of EnqueueBatch, in request order: Job and Created,
// or Err (a status error with the item's code and message) when this item was refused.
type BatchResult struct {
	Job     *pb.Job
	Created bool
	Err     error
}

// EnqueueBatch creates up to 1000 jobs (possibly across queues; see [NewJobSpec]). Each item
// succeeds or fails on its own; the call fails only when nothing was written, so it is
// retried on UNAVAILABLE without duplicating a job.
func (c *Client) EnqueueBatch(ctx context.Context, specs []*pb.JobSpec) ([]BatchResult, error) {
	resp, err := c.Jobs.EnqueueBatch(ctx, &pb.EnqueueBatchRequest{Jobs: specs})
	if err != nil {
		return nil, err
	}
	out := make([]BatchResult, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		out[i] = BatchResult{Job: r.GetJob(), Created: r.GetCreated()}
		if e := r.GetError(); e != nil {
			msg := e.GetMessage()
			if e.GetField() != "" {
				msg = e.GetField() + ": " + msg
			}
			out[i].Err = status.Error(codes.Code(e.GetCode()), msg)
		}
	}
	return out, nil
}

// GetJob reads one job, with its error history.
func (c *Client) GetJob(ctx context.Context, queue, jobID string) (*pb.Job, error) {
	resp, err := c.Jobs.GetJob(ctx, &pb.GetJobRequest{Queue: queue, JobId: jobID})
	if err != nil {
		return nil, err
	}
	return resp.GetJob(), nil
}

// retryUnavailable runs call up to tries times while it fails with UNAVAILABLE, sleeping a
// full-jitter backoff (100 ms doubling, at most 2 s) in between.
func retryUnavailable(ctx context.Context, tries int, call func() error) error {
	b := backoff{base: 100 * time.Millisecond, max: 2 * time.Second}
	for i := 1; ; i++ {
		err := call()
		if err == nil || i >= tries || status.Code(err) != codes.Unavailable {
			return err
		}
		if !sleepCtx(ctx, b.next()) {
			return err
		}
	}
}
