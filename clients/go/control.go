package jobwire

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Job control from the producer's side: cancel, delete, progress outside a handler.

// CancelJob cancels a job. A WAITING or DELAYED job moves to CANCELLED at once; the holder
// of an ACTIVE one is told on its stream (its handler's context is cancelled with a
// [*CancelledError] cause) and the job ends CANCELLED when the worker settles it with a
// Fail, or when the queue's cancel_grace runs out (an Ack in between completes it). A job
// already finished is returned unchanged with cancelled = false, as is one whose cancel
// is already pending. reason (up to 1024 bytes) is recorded on the job and sent to the
// holder. NOT_FOUND for an unknown job. Safe to retry.
func (c *Client) CancelJob(ctx context.Context, queue, jobID, reason string) (job *pb.Job, cancelled bool, err error) {
	req := &pb.CancelJobRequest{Queue: queue, JobId: jobID, Reason: reason}
	var resp *pb.CancelJobResponse
	err = retryUnavailable(ctx, 5, func() error {
		var e error
		resp, e = c.Jobs.CancelJob(ctx, req)
		return e
	})
	if err != nil {
		return nil, false, err
	}
	return resp.GetJob(), resp.GetCancelled(), nil
}

// CancelledJobs counts what [Client.CancelJobs] did.
type CancelledJobs struct {
	// WAITING and DELAYED jobs moved to CANCELLED.
	Cancelled uint64
	// ACTIVE jobs whose holders were told (CANCELLED when they settle or after the queue's
	// cancel_grace).
	Signalled uint64
}

// CancelJobs cancels every WAITING, DELAYED and ACTIVE job of queue matching filter (every
// set field must match; at least one must be set), as [Client.CancelJob] does each: it
// calls CancelJobs page after page (up to 1000 jobs each) until the server says every
// match was reached, and returns the totals. On an error it returns what the earlier pages
// did with the error. See [Client.CancelJobsPage] for one call.
func (c *Client) CancelJobs(ctx context.Context, queue string, filter *pb.JobFilter, reason string) (CancelledJobs, error) {
	var total CancelledJobs
	req := &pb.CancelJobsRequest{Queue: queue, Filter: filter, Reason: reason}
	for {
		resp, err := c.CancelJobsPage(ctx, req)
		if err != nil {
			return total, err
		}
		total.Cancelled += resp.GetCancelled()
		total.Signalled += resp.GetSignalled()
		if resp.GetNextPageToken() == "" {
			return total, nil
		}
		if resp.GetNextPageToken() == req.PageToken {
			return total, errors.New("jobwire: CancelJobs: the server returned the same page token twice")
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// CancelJobsPage is one CancelJobs call (req.Limit jobs at most, 0: 1000): pass the
// response's NextPageToken in req.PageToken until it is empty. UNAVAILABLE is retried (a
// second run skips what is already cancelled).
func (c *Client) CancelJobsPage(ctx context.Context, req *pb.CancelJobsRequest) (*pb.CancelJobsResponse, error) {
	var resp *pb.CancelJobsResponse
	err := retryUnavailable(ctx, 5, func() error {
		var e error
		resp, e = c.Jobs.CancelJobs(ctx, req)
		return e
	})
	return resp, err
}

// DeleteJob deletes a job in any state but ACTIVE (FAILED_PRECONDITION: cancel it first),
// with its history, checkpoint and result, and returns the state it was in. Its id is free
// for a new Enqueue at once. NOT_FOUND for an unknown job.
func (c *Client) DeleteJob(ctx context.Context, queue, jobID string) (pb.JobState, error) {
	resp, err := c.Jobs.DeleteJob(ctx, &pb.DeleteJobRequest{Queue: queue, JobId: jobID})
	if err != nil {
		return pb.JobState_JOB_STATE_UNSPECIFIED, err
	}
	return resp.GetState(), nil
}

// Report is a progress report of a leased job: each field set is saved, each nil one keeps
// its last value.
type Report struct {
	// Percent done, 0 to 100.
	Progress *uint32
	// A short message shown with the progress (up to 256 bytes).
	Message *string
	// Bytes the next attempt receives (Job.Checkpoint), up to the server's checkpoint limit
	// (64 KiB by default: longer is RESOURCE_EXHAUSTED and nothing is saved). A non-nil
	// empty slice clears the checkpoint.
	Checkpoint []byte
}

func (r Report) request(queue, jobID, leaseToken string) *pb.ReportProgressRequest {
	req := &pb.ReportProgressRequest{Queue: queue, JobId: jobID, LeaseToken: leaseToken,
		Progress: r.Progress, Message: r.Message}
	if r.Checkpoint != nil {
		req.Checkpoint = r.Checkpoint
	}
	return req
}

// ReportProgress saves a leased job's progress and/or checkpoint with the unary call,
// fenced by its lease token (FAILED_PRECONDITION: the lease is lost). A handler run by a
// [Worker] uses [Job.Progress] and [Job.SaveCheckpoint] instead, which go on the stream.
func (c *Client) ReportProgress(ctx context.Context, queue, jobID, leaseToken string, r Report) error {
	if r.Progress == nil && r.Message == nil && r.Checkpoint == nil {
		return fmt.Errorf("jobwire: ReportProgress of %s/%s: nothing to report", queue, jobID)
	}
	_, err := c.Worker.ReportProgress(ctx, r.request(queue, jobID, leaseToken))
	return err
}
