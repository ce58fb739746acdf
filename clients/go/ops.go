package punctual

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
)

// Health is /healthz's answer.
type Health struct {
	// Status is "ok", "degraded" (a fleet node holds partitions it has not loaded for over
	// 5 s), "unavailable" or "draining".
	Status string `json:"status"`
	Shards int    `json:"shards,omitempty"`
	// Store is "journal", "redis" or "memory".
	Store string `json:"store,omitempty"`
	// Reason says why the server is not ready.
	Reason string `json:"reason,omitempty"`
	// Partitions is set on a node of a Redis Cluster fleet.
	Partitions *int `json:"partitions,omitempty"`
	// PartitionsNotLoaded lists, as ranges ("0-12,15"), the partitions a degraded node has
	// held for over 5 s without loading them.
	PartitionsNotLoaded string `json:"partitions_not_loaded,omitempty"`
}

// Health asks whether the server can take writes. A server that cannot answers 503 with its
// reason: the Health read from it comes back with an *Error whose Code is its status
// ("unavailable", "draining"). Not retried: it is a probe.
func (c *Client) Health(ctx context.Context) (Health, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/healthz"})
	var h Health
	var e *Error
	switch {
	case err == nil:
		return h, c.decode(a, &h)
	case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && json.Unmarshal(a.body, &h) == nil && h.Status != "":
		e.Code, e.Message = h.Status, h.Reason
		return h, e
	default:
		return h, err
	}
}

// Metrics is the server's OpenMetrics exposition, as text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/metrics", metrics: true, safe: true})
	return string(a.body), err
}

// ClusterStatus is /cluster's answer on a node of a Redis Cluster fleet: the live nodes, the
// partitions each holds, and the answering node's view.
type ClusterStatus struct {
	ReadAtUs   int64             `json:"read_at_us"`
	Live       []ClusterHolder   `json:"live"`
	Unowned    ClusterPartitions `json:"unowned"`
	NotLive    []ClusterHolder   `json:"not_live"`
	Unreadable ClusterPartitions `json:"unreadable"`
	ThisNode   ClusterThisNode   `json:"this_node"`
}

// ClusterHolder is a node and the leases it holds.
type ClusterHolder struct {
	ID          string            `json:"id"`
	Advertise   *string           `json:"advertise"`
	StartedAtUs *int64            `json:"started_at_us"`
	Partitions  ClusterPartitions `json:"partitions"`
	Epochs      *ClusterEpochs    `json:"epochs"`
}

// ClusterPartitions is a set of partitions: how many, and as ranges ("0-12,15").
type ClusterPartitions struct {
	Count  int    `json:"count"`
	Ranges string `json:"ranges"`
}

// ClusterEpochs are the epochs of a node's leases, and the partitions under each.
type ClusterEpochs struct {
	Min        int64             `json:"min"`
	Max        int64             `json:"max"`
	Partitions map[string]string `json:"partitions"`
}

// ClusterThisNode is the answering node's own view.
type ClusterThisNode struct {
	ID        string            `json:"id"`
	Holds     ClusterPartitions `json:"holds"`
	ShouldOwn ClusterPartitions `json:"should_own"`
	// LoadOverdue: the partitions held but not loaded within 5 s of their gain, an alert
	// (their timers do not fire); nil from a server that does not report it.
	LoadOverdue *ClusterPartitions `json:"load_overdue,omitempty"`
}

// Cluster reads /cluster; a node not in cluster mode answers 404 not_found.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	a, err := c.do(ctx, request{method: http.MethodGet, path: "/cluster", metrics: true, safe: true})
	if err != nil {
		return ClusterStatus{}, err
	}
	var s ClusterStatus
	return s, c.decode(a, &s)
}
