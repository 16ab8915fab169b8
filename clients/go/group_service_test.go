package jobwire_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/clients/go"
	pb "github.com/jobwire/jobwire/clients/go/gen/jobwire/v1"
	"github.com/jobwire/jobwire/clients/go/jobwiretest"
)

// TestGroupServiceWrappers: ListGroups, GetGroup, UpdateGroupConfig, PauseGroup and
// ResumeGroup against the server, and the group counts of QueueStats.
func TestGroupServiceWrappers(t *testing.T) {
	srv := jobwiretest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	const q = "groups"
	for i, g := range []string{"big", "big", "big", "small"} {
		if _, err := c.Enqueue(ctx, q, "n", []byte("x"), jobwire.JobID(string(rune('a'+i))), jobwire.GroupKey(g)); err != nil {
			t.Fatal(err)
		}
	}
	groups, waiting, err := c.ListGroups(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if waiting != 2 || len(groups) != 2 || groups[0].GetGroupKey() != "big" || groups[0].GetWaiting() != 3 || groups[1].GetWaiting() != 1 {
		t.Fatalf("ListGroups: %v (groups_waiting %d)", groups, waiting)
	}
	st, err := c.QueueStats(ctx, q)
	if err != nil || st.GetGroupsWaiting() != 2 || len(st.GetTopGroups()) != 2 || st.GetTopGroups()[0].GetGroupKey() != "big" {
		t.Fatalf("QueueStats groups: %d %v (err %v)", st.GetGroupsWaiting(), st.GetTopGroups(), err)
	}
	weight, maxActive := uint32(3), uint32(2)
	cfg, err := c.UpdateGroupConfig(ctx, q, "big", &pb.GroupConfig{Weight: &weight, MaxActive: &maxActive}, "weight", "max_active")
	if err != nil || cfg.GetWeight() != 3 || cfg.GetMaxActive() != 2 {
		t.Fatalf("UpdateGroupConfig: %v, %v", cfg, err)
	}
	until, err := c.PauseGroup(ctx, q, "small", 0)
	if err != nil || time.Until(until) < 24*time.Hour {
		t.Fatalf("PauseGroup until resumed: %v, %v", until, err)
	}
	g, err := c.GetGroup(ctx, q, "small")
	if err != nil || g.GetPausedUntil() == nil || g.GetWaiting() != 1 {
		t.Fatalf("GetGroup of a paused group: %v, %v", g, err)
	}
	g, err = c.GetGroup(ctx, q, "big")
	if err != nil || g.GetConfig().GetWeight() != 3 || g.GetWaiting() != 3 {
		t.Fatalf("GetGroup: %v, %v", g, err)
	}
	if err := c.ResumeGroup(ctx, q, "small"); err != nil {
		t.Fatal(err)
	}
	if g, err := c.GetGroup(ctx, q, "small"); err != nil || g.GetPausedUntil() != nil {
		t.Fatalf("GetGroup after ResumeGroup: %v, %v", g, err)
	}
	until, err = c.PauseGroup(ctx, q, "small", time.Minute)
	if err != nil || time.Until(until) > time.Minute+5*time.Second || time.Until(until) < 50*time.Second {
		t.Fatalf("PauseGroup for a minute: until %v, %v", until, err)
	}
}
