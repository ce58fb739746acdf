package punctual_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	punctual "punctual/client"
)

type received struct {
	header http.Header
	body   []byte
	d      punctual.WebhookDelivery
	err    error
}

// deliverTo schedules tenant/key due now with a callback to a receiver that verifies with v,
// and returns what the receiver got.
func deliverTo(t *testing.T, c *punctual.Client, tenant, key string, v punctual.Verifier) received {
	t.Helper()
	got := make(chan received, 4)
	hook := mount("/hook/"+tenant+"/"+key, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rec received
		h := punctual.WebhookHandler(v, func(r *http.Request, d punctual.WebhookDelivery) error {
			rec.d = d
			return nil
		})
		rw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(rw, r)
		rec.header = r.Header.Clone()
		if rw.status != http.StatusNoContent {
			rec.err = errors.New("receiver answered " + strconv.Itoa(rw.status))
		}
		got <- rec
	}))
	s, err := c.Put(ctx(t), tenant, key, punctual.After(0).WithCallback(hook).WithPayload(map[string]string{"order": key}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil && (r.d.Key != key || r.d.Version != s.Version || string(r.d.Payload) != `{"order":"`+key+`"}`) {
			t.Fatalf("delivery %+v, scheduled %+v", r.d, s)
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20 s")
	}
	return received{}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }

// A tenant signing with two secrets (a rotation): a receiver that knows either verifies.
func TestPunctualSignatureDeliveredAndVerifiedDuringARotation(t *testing.T) {
	c := punctual.New(tenants.URL, punctual.WithToken(acmeToken))
	for i, secrets := range [][]string{{oldSecret}, {newSecret}, {"not-this-one-0123456789abcdef0123456", newSecret}} {
		r := deliverTo(t, c, "acme", "rot"+strconv.Itoa(i), punctual.Verifier{Secrets: secrets})
		if r.err != nil {
			t.Fatalf("secrets %v: %v", secrets, r.err)
		}
		if r.d.Attempt != 1 || r.d.ID() != "acme/rot"+strconv.Itoa(i)+"/"+strconv.FormatInt(r.d.Version, 10) || r.d.ID() != r.header.Get("Idempotency-Key") {
			t.Fatalf("%+v %v", r.d, r.header)
		}
	}
	// A receiver without a current secret answers 401 (punctual retries that up to 3 times).
	r := deliverTo(t, c, "acme", "wrong", punctual.Verifier{Secrets: []string{"stale-secret-0123456789abcdef0123456789"}})
	if r.err == nil {
		t.Fatal("a delivery verified with a secret the tenant does not have")
	}
}

func TestVerifyRefusesTamperingOldTimestampsAndMissingHeaders(t *testing.T) {
	c := punctual.New(tenants.URL, punctual.WithToken(acmeToken))
	r := deliverTo(t, c, "acme", "tamper", punctual.Verifier{Secrets: []string{newSecret}})
	if r.err != nil {
		t.Fatal(r.err)
	}
	body := []byte(`{"tenant":"acme","key":"tamper","version":1,"fire_at_us":1,"fired_at_us":1,"attempt":1,"payload":null}`)
	if _, err := punctual.VerifyWebhook(r.header, body, []string{newSecret}); !errors.Is(err, punctual.ErrSignatureMismatch) {
		t.Fatalf("another body: %v", err)
	}
	ts, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(r.header.Get("Punctual-Signature"), ",")[0], "t="), 10, 64)
	later := punctual.Verifier{Secrets: []string{newSecret}, Now: func() time.Time { return time.Unix(ts, 0).Add(6 * time.Minute) }}
	if _, err := later.Verify(r.header, nil); !errors.Is(err, punctual.ErrTimestampTooOld) {
		t.Fatalf("6 minutes later: %v", err)
	}
	if _, err := punctual.VerifyWebhook(http.Header{}, body, []string{newSecret}); !errors.Is(err, punctual.ErrNoSignature) {
		t.Fatalf("no header: %v", err)
	}
	h := http.Header{"Punctual-Signature": {"v1=00"}}
	if _, err := punctual.VerifyWebhook(h, body, []string{newSecret}); !errors.Is(err, punctual.ErrMalformedHeader) {
		t.Fatalf("no t=: %v", err)
	}
}

// A tenant signing with Standard Webhooks: the receiver verifies with either of its whsec_
// secrets, and the message id is the Idempotency-Key.
func TestStandardWebhooksDeliveredAndVerified(t *testing.T) {
	c := punctual.New(tenants.URL, punctual.WithToken(stdToken))
	for i, secrets := range [][]string{{whsec}, {whsecOld}} {
		r := deliverTo(t, c, "std", "s"+strconv.Itoa(i), punctual.Verifier{Secrets: secrets})
		if r.err != nil {
			t.Fatalf("%v: %v", secrets, r.err)
		}
		if r.header.Get("webhook-id") != r.d.ID() || r.header.Get("Punctual-Signature") != "" {
			t.Fatalf("headers %v", r.header)
		}
	}
	r := deliverTo(t, c, "std", "wrong", punctual.Verifier{Secrets: []string{"whsec_dGhpcy1pcy1ub3QtdGhlLWtleS0wMTIzNDU2Nzg5"}})
	if r.err == nil {
		t.Fatal("verified with a secret the tenant does not have")
	}
}

// A signature made by the Standard Webhooks project's own library (the Python package
// standardwebhooks 1.3.0: Webhook(secret).sign("std/k1/7", datetime at 1700000000, body)).
// The Go library of the project cannot be fetched where this suite runs (no Go module
// proxy), so its verdicts are checked against the Python one's signature instead; the other
// two suites check theirs against their language's library directly.
func TestStandardWebhooksAgreesWithTheOfficialLibrary(t *testing.T) {
	body := []byte(`{"tenant":"std","key":"k1","version":7,"fire_at_us":1,"fired_at_us":2,"attempt":1,"payload":null}`)
	h := http.Header{}
	h.Set("webhook-id", "std/k1/7")
	h.Set("webhook-timestamp", "1700000000")
	h.Set("webhook-signature", "v1,EOdGxd1ZHurD8PuPNBGbKN8O7OqN5CadWqS2kOGcGsA=")
	v := punctual.Verifier{Secrets: []string{whsec}, Now: func() time.Time { return time.Unix(1700000100, 0) }}
	d, err := v.Verify(h, body)
	if err != nil || d.ID() != "std/k1/7" {
		t.Fatalf("%+v %v", d, err)
	}
	h.Set("webhook-signature", "v1,bm90LXRoaXMtb25l v1,EOdGxd1ZHurD8PuPNBGbKN8O7OqN5CadWqS2kOGcGsA=")
	if _, err := v.Verify(h, body); err != nil {
		t.Fatalf("the right signature second of two: %v", err)
	}
	for name, mutate := range map[string]func(http.Header, *[]byte){
		"body":      func(h http.Header, b *[]byte) { *b = append([]byte{}, (*b)[:len(*b)-1]...); *b = append(*b, ' ', '}') },
		"id":        func(h http.Header, b *[]byte) { h.Set("webhook-id", "std/k1/8") },
		"timestamp": func(h http.Header, b *[]byte) { h.Set("webhook-timestamp", "1700000001") },
		"version": func(h http.Header, b *[]byte) {
			h.Set("webhook-signature", "v2,EOdGxd1ZHurD8PuPNBGbKN8O7OqN5CadWqS2kOGcGsA=")
		},
	} {
		h2, b := h.Clone(), append([]byte{}, body...)
		h2.Set("webhook-signature", "v1,EOdGxd1ZHurD8PuPNBGbKN8O7OqN5CadWqS2kOGcGsA=")
		mutate(h2, &b)
		if _, err := v.Verify(h2, b); err == nil {
			t.Errorf("changed %s: verified", name)
		}
	}
	late := punctual.Verifier{Secrets: []string{whsec}, Now: func() time.Time { return time.Unix(1700000000+301, 0) }}
	h.Set("webhook-signature", "v1,EOdGxd1ZHurD8PuPNBGbKN8O7OqN5CadWqS2kOGcGsA=")
	if _, err := late.Verify(h, body); !errors.Is(err, punctual.ErrTimestampTooOld) {
		t.Fatalf("301 s late: %v", err)
	}
}

// examples/receiver, run as it is: it verifies a delivery (one secret of a rotation) and
// processes it once; a delivery signed with secrets it lacks is refused.
func TestReceiverExample(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "receiver")
	if out, err := exec.Command("go", "build", "-o", exe, "./examples/receiver").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, fmt.Sprintf("127.0.0.1:%d", examplePort))
	cmd.Env = append(os.Environ(), "PUNCTUAL_WEBHOOK_SECRETS="+oldSecret+","+whsec)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	hook := fmt.Sprintf("http://127.0.0.1:%d/hook", examplePort)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", examplePort)); err == nil {
			c.Close()
			break
		} else if time.Now().After(end) {
			t.Fatalf("the example did not listen: %s", out.String())
		}
	}
	for _, tc := range []struct{ token, tenant string }{{acmeToken, "acme"}, {stdToken, "std"}} {
		c := punctual.New(tenants.URL, punctual.WithToken(tc.token))
		if _, err := c.Put(ctx(t), tc.tenant, "example", punctual.After(0).WithCallback(hook).WithPayload(1)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("timer %s/example fired (attempt 1): 1", tc.tenant)
		for end := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %q in the example's output: %s", want, out.String())
			}
		}
	}
	if n := strings.Count(out.String(), "fired"); n != 2 {
		t.Fatalf("%d deliveries processed: %s", n, out.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
