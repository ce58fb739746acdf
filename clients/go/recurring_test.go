package punctual_test

import (
	"encoding/json"
	"testing"
	"time"

	punctual "punctual/client"
)

// A schedule's life: created, its next occurrences, paused, resumed, listed, deleted.
func TestScheduleRoundTrip(t *testing.T) {
	c := punctual.New(open.URL)
	start := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	s := punctual.Every(time.Hour).WithPayload(map[string]int{"n": 1})
	s.StartAt = &start
	window := int64(60000)
	s.CatchUp = &punctual.CatchUp{Policy: "all", WindowMs: &window}
	put, err := c.PutSchedule(ctx(t), "go-sched", "hourly", s)
	if err != nil {
		t.Fatal(err)
	}
	if !put.Created || put.Key != "hourly" || put.Paused || put.Sequence != 0 || put.Version == 0 {
		t.Fatalf("created: %+v", put)
	}
	var def map[string]any
	if err := json.Unmarshal(put.Definition, &def); err != nil || def["every_ms"] != float64(3600000) {
		t.Fatalf("definition %s: %v", put.Definition, err)
	}
	again, err := c.PutSchedule(ctx(t), "go-sched", "hourly", s)
	if err != nil || again.Created {
		t.Fatalf("replaced: %+v %v", again, err)
	}

	got, err := c.GetSchedule(ctx(t), "go-sched", "hourly", punctual.ScheduleOptions{Next: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Next) != 3 {
		t.Fatalf("next 3: %+v", got.Next)
	}
	for i, o := range got.Next {
		if want := start.Add(time.Duration(i) * time.Hour); !o.At().Equal(want) {
			t.Errorf("occurrence %d at %v, want %v", i, o.At(), want)
		}
		if l, err := time.Parse(time.RFC3339, o.Local); err != nil || !l.Equal(o.At()) {
			t.Errorf("occurrence %d local %q: %v", i, o.Local, err)
		}
	}

	paused, err := c.PauseSchedule(ctx(t), "go-sched", "hourly")
	if err != nil || !paused.Paused {
		t.Fatalf("paused: %+v %v", paused, err)
	}
	page, err := c.ListSchedules(ctx(t), "go-sched", punctual.ScheduleListOptions{Limit: 10})
	if err != nil || len(page.Schedules) != 1 || !page.Schedules[0].Paused || page.Schedules[0].Key != "hourly" || page.Next != "" {
		t.Fatalf("listed: %+v %v", page, err)
	}
	resumed, err := c.ResumeSchedule(ctx(t), "go-sched", "hourly")
	if err != nil || resumed.Paused {
		t.Fatalf("resumed: %+v %v", resumed, err)
	}

	if err := c.DeleteSchedule(ctx(t), "go-sched", "hourly"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx(t), "go-sched", "hourly", punctual.ScheduleOptions{}); !punctual.IsNotFound(err) {
		t.Fatalf("after delete: %v", err)
	}
	if err := c.DeleteSchedule(ctx(t), "go-sched", "hourly"); !punctual.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := c.PutSchedule(ctx(t), "go-sched", "bad", punctual.Cron("0 0 30 2 *")); punctual.ErrorCode(err) != punctual.CodeInvalidField {
		t.Fatalf("a cron that never fires: %v", err)
	}
}

// A fired timer of a tenant with a queue: received, acknowledged, gone.
func TestQueueReceiveAck(t *testing.T) {
	c := punctual.New(tenants.URL, punctual.WithToken(pullToken))
	if _, err := c.Put(ctx(t), "pull", "order-1", punctual.After(0).WithPayload(map[string]int{"order": 1})); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Receive(ctx(t), "pull", punctual.ReceiveOptions{Max: 10, WaitMs: 10000, VisibilityMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Key != "order-1" || msgs[0].ReceiveCount != 1 || msgs[0].Receipt == "" || string(msgs[0].Payload) != `{"order":1}` {
		t.Fatalf("received: %+v", msgs)
	}
	if d, err := c.Queue(ctx(t), "pull"); err != nil || d.InFlight != 1 || d.Depth != 0 || d.OldestAgeMs != nil {
		t.Fatalf("depth while leased: %+v %v", d, err)
	}
	ext, err := c.Extend(ctx(t), "pull", punctual.ExtendRequest{Receipts: []string{msgs[0].Receipt}, VisibilityMs: 60000})
	if err != nil || len(ext) != 1 || ext[0].Status != 204 {
		t.Fatalf("extend: %+v %v", ext, err)
	}
	res, err := c.Ack(ctx(t), "pull", []string{msgs[0].Receipt})
	if err != nil || len(res) != 1 || res[0].Status != 204 || res[0].Err() != nil {
		t.Fatalf("ack: %+v %v", res, err)
	}
	res, err = c.Ack(ctx(t), "pull", []string{msgs[0].Receipt})
	if err != nil || len(res) != 1 || punctual.ErrorCode(res[0].Err()) != punctual.CodeLeaseExpired {
		t.Fatalf("second ack: %+v %v", res, err)
	}
	if d, err := c.Queue(ctx(t), "pull"); err != nil || d.InFlight != 0 || d.Depth != 0 {
		t.Fatalf("depth after ack: %+v %v", d, err)
	}
	if _, err := c.Get(ctx(t), "pull", "order-1"); !punctual.IsNotFound(err) {
		t.Fatalf("the acknowledged message's key: %v", err)
	}
	acme := punctual.New(tenants.URL, punctual.WithToken(acmeToken))
	if _, err := acme.Queue(ctx(t), "acme"); !punctual.IsNotFound(err) {
		t.Fatalf("a tenant without a queue: %v", err)
	}
}
