package punctual_test

// Every route and field of docs/openapi.yaml has its place in the client: each operation a
// method, each query parameter a field of the method's options, each property of each
// schema a field of the Go type that carries it. A route or field added to the document
// fails this test until the client has it.

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	punctual "punctual/client"
)

// operations: the document's operationId → the Client method, and the type whose `url`
// tags name its query parameters.
var operations = map[string]struct {
	method string
	query  reflect.Type
}{
	"putTimer":          {method: "Put"},
	"getTimer":          {method: "Get"},
	"cancelTimer":       {method: "CancelIf", query: reflect.TypeOf(punctual.CancelOptions{})},
	"postBatch":         {method: "Batch"},
	"listTimers":        {method: "List", query: reflect.TypeOf(punctual.ListOptions{})},
	"bulkCancel":        {method: "CancelPrefix", query: reflect.TypeOf(punctual.CancelPrefixOptions{})},
	"getAction":         {method: "Action"},
	"listDeadLetters":   {method: "DeadLetters", query: reflect.TypeOf(punctual.DeadListOptions{})},
	"redriveDeadLetter": {method: "Redrive"},
	"discardDeadLetter": {method: "Discard"},
	"getHistory":        {method: "History", query: reflect.TypeOf(punctual.HistoryOptions{})},
	"health":            {method: "Health"},
	"metrics":           {method: "Metrics"},
	"clusterStatus":     {method: "Cluster"},
	"listSchedules":     {method: "ListSchedules", query: reflect.TypeOf(punctual.ScheduleListOptions{})},
	"putSchedule":       {method: "PutSchedule"},
	"getSchedule":       {method: "GetSchedule", query: reflect.TypeOf(punctual.ScheduleOptions{})},
	"deleteSchedule":    {method: "DeleteSchedule"},
	"pauseSchedule":     {method: "PauseSchedule"},
	"resumeSchedule":    {method: "ResumeSchedule"},
	"getQueue":          {method: "Queue"},
	"receiveMessages":   {method: "Receive"},
	"ackMessages":       {method: "Ack"},
	"nackMessages":      {method: "Nack"},
	"extendMessages":    {method: "Extend"},
}

// schemas: the document's schema → the Go type whose `json` tags carry its properties. An
// envelope is a schema of one property the client unwraps ({"dead": […]}).
var schemas = map[string]reflect.Type{
	"TimerFields":           reflect.TypeOf(punctual.Timer{}),
	"PutTimerRequest":       reflect.TypeOf(punctual.Timer{}),
	"BatchItemRequest":      reflect.TypeOf(punctual.BatchItem{}),
	"Scheduled":             reflect.TypeOf(punctual.Scheduled{}),
	"Timer":                 reflect.TypeOf(punctual.PendingTimer{}),
	"Callback":              reflect.TypeOf(punctual.Callback{}),
	"Retry":                 reflect.TypeOf(punctual.DeliveryRetry{}),
	"Delivery":              reflect.TypeOf(punctual.Delivery{}),
	"Debounce":              reflect.TypeOf(punctual.Debounce{}),
	"DebounceState":         reflect.TypeOf(punctual.DebounceState{}),
	"DeadLetter":            reflect.TypeOf(punctual.DeadLetter{}),
	"HistoryPage":           reflect.TypeOf(punctual.HistoryPage{}),
	"HistoryEntry":          reflect.TypeOf(punctual.HistoryEntry{}),
	"HistoryAttempt":        reflect.TypeOf(punctual.HistoryAttempt{}),
	"TimerPage":             reflect.TypeOf(punctual.TimerPage{}),
	"ListedTimer":           reflect.TypeOf(punctual.ListedTimer{}),
	"ActionStarted":         reflect.TypeOf(punctual.ActionStarted{}),
	"Action":                reflect.TypeOf(punctual.Action{}),
	"WebhookDelivery":       reflect.TypeOf(punctual.WebhookDelivery{}),
	"BatchItemScheduled":    reflect.TypeOf(punctual.BatchResult{}),
	"BatchItemFailed":       reflect.TypeOf(punctual.BatchResult{}),
	"HealthOk":              reflect.TypeOf(punctual.Health{}),
	"HealthDegraded":        reflect.TypeOf(punctual.Health{}),
	"HealthUnavailable":     reflect.TypeOf(punctual.Health{}),
	"HealthDraining":        reflect.TypeOf(punctual.Health{}),
	"ErrorDetail":           reflect.TypeOf(punctual.ErrorDetail{}),
	"ClusterStatus":         reflect.TypeOf(punctual.ClusterStatus{}),
	"ClusterHolder":         reflect.TypeOf(punctual.ClusterHolder{}),
	"ClusterPartitions":     reflect.TypeOf(punctual.ClusterPartitions{}),
	"ClusterEpochs":         reflect.TypeOf(punctual.ClusterEpochs{}),
	"ClusterThisNode":       reflect.TypeOf(punctual.ClusterThisNode{}),
	"PutScheduleRequest":    reflect.TypeOf(punctual.Schedule{}),
	"RecurringSchedule":     reflect.TypeOf(punctual.RecurringSchedule{}),
	"RecurringScheduleList": reflect.TypeOf(punctual.SchedulePage{}),
	"ReceiveRequest":        reflect.TypeOf(punctual.ReceiveOptions{}),
	"QueueMessage":          reflect.TypeOf(punctual.Message{}),
	"NackRequest":           reflect.TypeOf(punctual.NackRequest{}),
	"ExtendRequest":         reflect.TypeOf(punctual.ExtendRequest{}),
	"QueueDepth":            reflect.TypeOf(punctual.QueueDepth{}),
}

var envelopes = map[string]struct {
	field string
	inner reflect.Type
}{
	"BatchRequest":     {"timers", reflect.TypeOf(punctual.BatchItem{})},
	"BatchResponse":    {"results", reflect.TypeOf(punctual.BatchResult{})},
	"DeadList":         {"dead", reflect.TypeOf(punctual.DeadLetter{})},
	"Error":            {"error", reflect.TypeOf(punctual.ErrorDetail{})},
	"AckRequest":       {"receipts", reflect.TypeOf("")},
	"ReceivedMessages": {"messages", reflect.TypeOf(punctual.Message{})},
	"SettleResults":    {"results", reflect.TypeOf(punctual.SettleResult{})},
}

func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseYAML(string(src))
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return doc.(map[string]any)
}

func obj(v any, path ...string) map[string]any {
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	m, _ := v.(map[string]any)
	return m
}

func TestEveryRouteHasAClientMethod(t *testing.T) {
	doc := loadOpenAPI(t)
	client := reflect.TypeOf(&punctual.Client{})
	seen := 0
	for path, item := range obj(doc, "paths") {
		for verb, op := range obj(item) {
			if !strings.Contains("get put post delete patch", verb) {
				continue
			}
			seen++
			id, _ := obj(op)["operationId"].(string)
			want, ok := operations[id]
			if !ok {
				t.Errorf("%s %s (%s) has no client method", strings.ToUpper(verb), path, id)
				continue
			}
			if _, ok := client.MethodByName(want.method); !ok {
				t.Errorf("%s: Client.%s does not exist", id, want.method)
			}
			params, _ := obj(op)["parameters"].([]any)
			for _, p := range params {
				pm := obj(p)
				if pm["in"] != "query" {
					continue
				}
				if want.query == nil || !hasTag(want.query, "url", pm["name"].(string)) {
					t.Errorf("%s: query parameter %v has no field", id, pm["name"])
				}
			}
		}
	}
	if seen < len(operations) {
		t.Errorf("the document lists %d operations, the client %d: one is gone from the document", seen, len(operations))
	}
}

func TestEverySchemaFieldHasAGoField(t *testing.T) {
	doc := loadOpenAPI(t)
	all := obj(doc, "components", "schemas")
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := obj(all[name])
		props := properties(all, s)
		if len(props) == 0 || isErrorBody(s) {
			continue // a scalar, an enum, or an error body (*Error reads those)
		}
		if env, ok := envelopes[name]; ok {
			if len(props) != 1 || props[env.field] == nil {
				t.Errorf("%s: the envelope's properties are %v", name, keys(props))
			}
			continue
		}
		typ, ok := schemas[name]
		if !ok {
			t.Errorf("schema %s (%v) has no Go type", name, keys(props))
			continue
		}
		for _, p := range keys(props) {
			if !hasTag(typ, "json", p) {
				t.Errorf("schema %s: field %q has no Go field in %s", name, p, typ)
			}
		}
	}
}

// properties gathers an object schema's properties through $ref, allOf, oneOf and anyOf.
func properties(all map[string]any, s map[string]any) map[string]any {
	out := map[string]any{}
	if ref, ok := s["$ref"].(string); ok {
		return properties(all, obj(all[strings.TrimPrefix(ref, "#/components/schemas/")]))
	}
	for k, v := range obj(s["properties"]) {
		out[k] = v
	}
	for _, comb := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := s[comb].([]any)
		for _, sub := range list {
			for k, v := range properties(all, obj(sub)) {
				out[k] = v
			}
		}
	}
	return out
}

func isErrorBody(s map[string]any) bool {
	list, _ := s["allOf"].([]any)
	for _, sub := range list {
		if obj(sub)["$ref"] == "#/components/schemas/Error" {
			return true
		}
	}
	return false
}

// hasTag: a field of t (or of a struct embedded in it) whose tag key names name.
func hasTag(t reflect.Type, key, name string) bool {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && hasTag(f.Type, key, name) {
			return true
		}
		if strings.Split(f.Tag.Get(key), ",")[0] == name {
			return true
		}
	}
	return false
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The test above must see the document's fields: a Go type without one is reported.
func TestCoverageNoticesAMissingField(t *testing.T) {
	type partial struct {
		Key string `json:"key"`
	}
	if hasTag(reflect.TypeOf(partial{}), "json", "version") || !hasTag(reflect.TypeOf(punctual.BatchItem{}), "json", "delay_ms") {
		t.Fatal("hasTag does not tell fields apart")
	}
	doc := loadOpenAPI(t)
	all := obj(doc, "components", "schemas")
	p := properties(all, obj(all["BatchItemRequest"]))
	for _, f := range []string{"key", "fire_at", "fire_at_ms", "delay_ms", "payload", "callback", "retry"} {
		if p[f] == nil {
			t.Errorf("BatchItemRequest's %s not read from the document (read %v)", f, keys(p))
		}
	}
	if len(obj(doc, "paths")) < 8 {
		t.Fatalf("paths read: %v", keys(obj(doc, "paths")))
	}
}
