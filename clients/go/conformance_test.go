package jobwire_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// scenario is one entry of clients/conformance/scenarios.json.
type scenario struct {
	ID     string         `json:"id"`
	What   string         `json:"what"`
	Server []string       `json:"server"`
	Params map[string]any `json:"params"`
}

// conformance maps each scenario id to its test; an id of the file without an entry here
// fails TestConformance, so a new scenario breaks this suite until it is implemented.
var conformance = map[string]func(t *testing.T, sc scenario){
	"concurrency_never_exceeded":    concurrencyNeverExceeded,
	"long_handler_not_redelivered":  longHandlerNotRedelivered,
	"non_retryable_dead_letters":    nonRetryableDeadLetters,
	"retry_after_honoured":          retryAfterHonoured,
	"rate_limited_uses_no_attempt":  rateLimitedUsesNoAttempt,
	"sigterm_drains":                sigtermDrains,
	"shutdown_hands_back_uncharged": shutdownHandsBackUncharged,
	"server_restart_mid_run":        serverRestartMidRun,
	"stream_killed_by_network":      streamKilledByNetwork,

	"cancel_reaches_running_handler":   cancelReachesRunningHandler,
	"checkpoint_resumes_next_attempt":  checkpointResumesNextAttempt,
	"result_attached_at_ack":           resultAttachedAtAck,
	"cancel_delete_expire_from_client": cancelDeleteExpireFromClient,
	"group_key_and_pause_group":        groupKeyAndPauseGroup,

	"unreplicated_enqueue_exists_once": unreplicatedEnqueueExistsOnce,
}

func loadScenarios(t *testing.T) []scenario {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "conformance", "scenarios.json"))
	if err != nil {
		t.Fatalf("read the shared scenario file: %v", err)
	}
	var f struct {
		Scenarios []scenario `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse scenarios.json: %v", err)
	}
	if len(f.Scenarios) == 0 {
		t.Fatal("scenarios.json lists no scenario")
	}
	return f.Scenarios
}

// TestConformance runs every scenario of clients/conformance/scenarios.json against a real
// jobwire server (its own per scenario, with the scenario's flags).
func TestConformance(t *testing.T) {
	for _, sc := range loadScenarios(t) {
		run, ok := conformance[sc.ID]
		if !ok {
			t.Errorf("scenario %q has no Go test (clients/go/conformance_test.go)", sc.ID)
			continue
		}
		t.Run(sc.ID, func(t *testing.T) {
			t.Logf("%s", sc.What)
			run(t, sc)
		})
	}
}

// ms reads a number parameter (milliseconds or a count).
func (sc scenario) ms(name string) float64 {
	v, ok := sc.Params[name].(float64)
	if !ok {
		panic("scenario " + sc.ID + " has no number param " + name)
	}
	return v
}

// str reads a string parameter.
func (sc scenario) str(name string) string {
	v, ok := sc.Params[name].(string)
	if !ok {
		panic("scenario " + sc.ID + " has no string param " + name)
	}
	return v
}
