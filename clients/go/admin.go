package jobwire

import (
	"context"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Thin wrappers of DeadLetterService, QueueService and JobService.ListJobs. The full request messages are in the
// generated package (the Dead and Queues fields of Client call them directly).

// ListDeadLetters lists a queue's dead jobs, oldest death first: every page (100 jobs per
// call) until the server says there are no more. filter may be nil (all).
func (c *Client) ListDeadLetters(ctx context.Context, queue string, filter *pb.DeadLetterFilter) ([]*pb.Job, error) {
	var out []*pb.Job
	token := ""
	for {
		resp, err := c.Dead.ListDeadLetters(ctx, &pb.ListDeadLettersRequest{
			Queue: queue, PageSize: 100, PageToken: token, Filter: filter,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetDeadLetters()...)
		token = resp.GetNextPageToken()
		if token == "" {
			return out, nil
		}
	}
}

// ListJobs reads one page of a queue's jobs in state (WAITING, DELAYED, ACTIVE, COMPLETED or
// DEAD), in that state's order: waiting in lease order, delayed by due time, active by lease
// deadline, completed by finish time, dead by death time. Jobs come without their payload
// (GetJob has it). pageSize 0 is the server's default (100); pass the response's
// NextPageToken for the next page, until it is empty. filter may be nil (all).
func (c *Client) ListJobs(ctx context.Context, queue string, state pb.JobState, pageSize int32, pageToken string, filter *pb.ListJobsFilter) (*pb.ListJobsResponse, error) {
	return c.Jobs.ListJobs(ctx, &pb.ListJobsRequest{
		Queue: queue, State: state, PageSize: pageSize, PageToken: pageToken, Filter: filter,
	})
}

// GetDeadLetter reads one dead job.
func (c *Client) GetDeadLetter(ctx context.Context, queue, jobID string) (*pb.Job, error) {
	resp, err := c.Dead.GetDeadLetter(ctx, &pb.GetDeadLetterRequest{Queue: queue, JobId: jobID})
	return resp.GetDeadLetter(), err
}

// ReplayDeadLetters moves dead jobs back to waiting with a fresh attempt budget: the jobIDs,
// or, when jobIDs is empty, every dead job matching filter. Idempotent: ids no longer dead
// are skipped and reported.
func (c *Client) ReplayDeadLetters(ctx context.Context, queue string, jobIDs []string, filter *pb.DeadLetterFilter) (*pb.ReplayDeadLettersResponse, error) {
	return c.Dead.ReplayDeadLetters(ctx, &pb.ReplayDeadLettersRequest{Queue: queue, JobIds: jobIDs, Filter: filter})
}

// DeleteDeadLetters removes dead jobs for good: the jobIDs, or every match of filter.
func (c *Client) DeleteDeadLetters(ctx context.Context, queue string, jobIDs []string, filter *pb.DeadLetterFilter) (*pb.DeleteDeadLettersResponse, error) {
	return c.Dead.DeleteDeadLetters(ctx, &pb.DeleteDeadLettersRequest{Queue: queue, JobIds: jobIDs, Filter: filter})
}

// ListQueues lists every queue with its stats, sorted by name.
func (c *Client) ListQueues(ctx context.Context) ([]*pb.QueueStats, error) {
	resp, err := c.Queues.ListQueues(ctx, &pb.ListQueuesRequest{})
	return resp.GetQueues(), err
}

// ListWorkers lists every replica's worker streams (replica, stream id, worker id, queues,
// free credits, held leases, connected since, last heard); queue non-empty: only the streams
// that lease from it. Other replicas' streams are up to one report interval (5 s) old.
func (c *Client) ListWorkers(ctx context.Context, queue string) (*pb.ListWorkersResponse, error) {
	return c.Queues.ListWorkers(ctx, &pb.ListWorkersRequest{Queue: queue})
}

// QueueStats reads a queue's counts per state (cancelled and expired included), ages, limits,
// whether it is paused, and its groups with waiting jobs (groups_waiting, top_groups).
func (c *Client) QueueStats(ctx context.Context, queue string) (*pb.QueueStats, error) {
	resp, err := c.Queues.GetQueueStats(ctx, &pb.GetQueueStatsRequest{Queue: queue})
	return resp.GetStats(), err
}

// PauseQueue stops leasing from the queue on every replica; enqueues are still accepted.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	_, err := c.Queues.PauseQueue(ctx, &pb.PauseQueueRequest{Queue: queue})
	return err
}

// ResumeQueue resumes leasing.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	_, err := c.Queues.ResumeQueue(ctx, &pb.ResumeQueueRequest{Queue: queue})
	return err
}

// QueueConfig reads a queue's config (defaults, retention, limits).
func (c *Client) QueueConfig(ctx context.Context, queue string) (*pb.QueueConfig, error) {
	resp, err := c.Queues.GetQueueConfig(ctx, &pb.GetQueueConfigRequest{Queue: queue})
	return resp.GetConfig(), err
}

// UpdateQueueConfig changes the fields of cfg named in paths (default_max_attempts,
// default_backoff, default_timeout, retention, rate_limit, max_active, group_max_active,
// group_rate_limit, cancel_grace, dead_letter_expired; AIP-134: a named field left unset is
// reset); no paths: every field set in cfg. Returns the new config.
func (c *Client) UpdateQueueConfig(ctx context.Context, queue string, cfg *pb.QueueConfig, paths ...string) (*pb.QueueConfig, error) {
	req := &pb.UpdateQueueConfigRequest{Queue: queue, Config: cfg}
	if len(paths) > 0 {
		req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	}
	resp, err := c.Queues.UpdateQueueConfig(ctx, req)
	return resp.GetConfig(), err
}

// PurgeQueue deletes the queue's waiting and delayed jobs (and its completed and dead ones
// when asked); returns how many were deleted.
func (c *Client) PurgeQueue(ctx context.Context, queue string, includeCompleted, includeDead bool) (uint64, error) {
	resp, err := c.Queues.PurgeQueue(ctx, &pb.PurgeQueueRequest{Queue: queue, IncludeCompleted: includeCompleted, IncludeDead: includeDead})
	return resp.GetDeleted(), err
}

// DeleteQueue deletes the queue and every job in it (leased ones only with force).
func (c *Client) DeleteQueue(ctx context.Context, queue string, force bool) (*pb.DeleteQueueResponse, error) {
	return c.Queues.DeleteQueue(ctx, &pb.DeleteQueueRequest{Queue: queue, Force: force})
}
