package jobwire

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
)

// Thin wrappers of GroupService: the groups (job group keys: tenants, customers) of a queue.

// ListGroups lists queue's groups that have waiting or active jobs, most waiting jobs first,
// following every page (1000 groups per call), and how many groups have waiting jobs.
func (c *Client) ListGroups(ctx context.Context, queue string) (groups []*pb.GroupStats, groupsWaiting uint64, err error) {
	token := ""
	for {
		resp, err := c.Groups.ListGroups(ctx, &pb.ListGroupsRequest{Queue: queue, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, 0, err
		}
		groups = append(groups, resp.GetGroups()...)
		groupsWaiting = resp.GetGroupsWaiting()
		token = resp.GetNextPageToken()
		if token == "" {
			return groups, groupsWaiting, nil
		}
	}
}

// GetGroup reads one group's counts, config and pause (a group with no jobs and no config
// of its own reads as empty with the queue's defaults).
func (c *Client) GetGroup(ctx context.Context, queue, groupKey string) (*pb.GroupStats, error) {
	resp, err := c.Groups.GetGroup(ctx, &pb.GetGroupRequest{Queue: queue, GroupKey: groupKey})
	return resp.GetGroup(), err
}

// UpdateGroupConfig changes the fields of cfg named in paths (weight, max_active,
// rate_limit; AIP-134: a named field left unset goes back to the queue's default); no
// paths: every field. Returns the group's new config.
func (c *Client) UpdateGroupConfig(ctx context.Context, queue, groupKey string, cfg *pb.GroupConfig, paths ...string) (*pb.GroupConfig, error) {
	req := &pb.UpdateGroupConfigRequest{Queue: queue, GroupKey: groupKey, Config: cfg}
	if len(paths) > 0 {
		req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	}
	resp, err := c.Groups.UpdateGroupConfig(ctx, req)
	return resp.GetConfig(), err
}

// PauseGroup stops leasing the group's jobs on every replica for d (1 ms to 365 days; 0:
// until [Client.ResumeGroup]); enqueues are still accepted and the other groups go on.
// Returns until when it is paused.
func (c *Client) PauseGroup(ctx context.Context, queue, groupKey string, d time.Duration) (time.Time, error) {
	req := &pb.PauseGroupRequest{Queue: queue, GroupKey: groupKey}
	if d > 0 {
		req.Duration = durationpb.New(d)
	}
	resp, err := c.Groups.PauseGroup(ctx, req)
	if err != nil {
		return time.Time{}, err
	}
	return resp.GetPausedUntil().AsTime(), nil
}

// ResumeGroup resumes leasing a paused group (paused by PauseGroup or by a worker's
// [RateLimitedGroup]).
func (c *Client) ResumeGroup(ctx context.Context, queue, groupKey string) error {
	_, err := c.Groups.ResumeGroup(ctx, &pb.ResumeGroupRequest{Queue: queue, GroupKey: groupKey})
	return err
}
