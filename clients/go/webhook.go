package punctual

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Why a delivery did not verify. VerifyWebhook wraps one of these.
var (
	ErrNoSignature       = errors.New("punctual: the delivery carries no signature header")
	ErrMalformedHeader   = errors.New("punctual: the signature header is malformed")
	ErrTimestampTooOld   = errors.New("punctual: the signature's timestamp is outside the tolerance")
	ErrSignatureMismatch = errors.New("punctual: no signature matches any of the secrets")
	ErrNotADelivery      = errors.New("punctual: the signed body is not a delivery")
)

// DefaultTolerance is how far a delivery's timestamp may be from the receiver's clock.
const DefaultTolerance = 5 * time.Minute

// WebhookDelivery is the body punctual POSTs to a callback.
type WebhookDelivery struct {
	Tenant    string          `json:"tenant"`
	Key       string          `json:"key"`
	Version   int64           `json:"version"`
	FireAtUs  int64           `json:"fire_at_us"`
	FiredAtUs int64           `json:"fired_at_us"`
	Attempt   int             `json:"attempt"`
	Payload   json.RawMessage `json:"payload"`
}

// ID names one scheduling of one timer, "<tenant>/<key>/<version>", the same in every
// attempt: what a receiver de-duplicates on (it is signed, unlike the Idempotency-Key header).
func (d WebhookDelivery) ID() string {
	return d.Tenant + "/" + d.Key + "/" + strconv.FormatInt(d.Version, 10)
}

// Verifier checks deliveries against a tenant's secrets: the webhook_secrets of a tenant
// signing with Punctual-Signature, or the whsec_ secrets of one signing with Standard
// Webhooks (a list may hold both kinds; each scheme uses the secrets it can). During a key
// rotation give both the new and the old secret.
type Verifier struct {
	Secrets []string
	// Tolerance bounds the timestamp's distance from Now (DefaultTolerance when zero).
	Tolerance time.Duration
	// Now is the receiver's clock (time.Now when nil).
	Now func() time.Time
}

// VerifyWebhook checks a delivery's signature with DefaultTolerance and returns its body.
func VerifyWebhook(header http.Header, body []byte, secrets []string) (WebhookDelivery, error) {
	return Verifier{Secrets: secrets}.Verify(header, body)
}

// Verify checks the delivery's signature, Punctual-Signature or Standard Webhooks' (whichever
// it carries), in constant time against every secret, refuses a timestamp outside the
// tolerance, and returns the signed body.
func (v Verifier) Verify(header http.Header, body []byte) (WebhookDelivery, error) {
	var err error
	switch {
	case header.Get("webhook-signature") != "":
		err = v.verifyStandard(header, body)
	case header.Get("Punctual-Signature") != "":
		err = v.verifyPunctual(header.Get("Punctual-Signature"), body)
	default:
		err = ErrNoSignature
	}
	if err != nil {
		return WebhookDelivery{}, err
	}
	var d WebhookDelivery
	if err := json.Unmarshal(body, &d); err != nil || d.Tenant == "" || d.Key == "" {
		return WebhookDelivery{}, ErrNotADelivery
	}
	return d, nil
}

func (v Verifier) fresh(t int64) error {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	d := now().Sub(time.Unix(t, 0))
	if d > tol || d < -tol {
		return fmt.Errorf("%w: %s from now", ErrTimestampTooOld, d.Round(time.Second))
	}
	return nil
}

// verifyPunctual checks "t=<unix s>,v1=<hex>[,v1=<hex>…]", each v1 an HMAC-SHA256 of
// "<t>.<body>" under one secret.
func (v Verifier) verifyPunctual(h string, body []byte) error {
	var t int64 = -1
	var sigs [][]byte
	for _, part := range strings.Split(h, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return ErrMalformedHeader
			}
			t = n
		case "v1":
			if b, err := hex.DecodeString(val); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if t < 0 || len(sigs) == 0 {
		return ErrMalformedHeader
	}
	if err := v.fresh(t); err != nil {
		return err
	}
	signed := []byte(strconv.FormatInt(t, 10) + ".")
	for _, s := range v.Secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write(signed)
		m.Write(body)
		if anyEqual(m.Sum(nil), sigs) {
			return nil
		}
	}
	return ErrSignatureMismatch
}

// verifyStandard checks Standard Webhooks' headers: webhook-signature holds space-separated
// "v1,<base64>", each an HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" under a
// whsec_<base64> secret.
func (v Verifier) verifyStandard(header http.Header, body []byte) error {
	id, ts := header.Get("webhook-id"), header.Get("webhook-timestamp")
	t, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return ErrMalformedHeader
	}
	var sigs [][]byte
	for _, part := range strings.Fields(header.Get("webhook-signature")) {
		ver, val, _ := strings.Cut(part, ",")
		if ver != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(val); err == nil {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return ErrMalformedHeader
	}
	if err := v.fresh(t); err != nil {
		return err
	}
	usable := 0
	for _, s := range v.Secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			continue // a Punctual-Signature secret, in a list that holds both kinds
		}
		usable++
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		if anyEqual(m.Sum(nil), sigs) {
			return nil
		}
	}
	if usable == 0 {
		return fmt.Errorf("%w: no Standard Webhooks secret (whsec_<base64>) among the secrets", ErrSignatureMismatch)
	}
	return ErrSignatureMismatch
}

// anyEqual compares want with every candidate in constant time (hmac.Equal), all of them.
func anyEqual(want []byte, candidates [][]byte) bool {
	found := false
	for _, c := range candidates {
		if hmac.Equal(want, c) {
			found = true
		}
	}
	return found
}

// WebhookHandler is a net/http handler for deliveries: it reads the body (at most 1 MiB),
// verifies it with v, and calls handle. It answers 204 when handle returns nil, 401 when the
// delivery does not verify (punctual retries a 401 at most 3 times in all, for a receiver in
// the middle of a key roll), 413 for a body over the bound, and 500 when handle fails (retried).
// handle must be idempotent: deliveries are at least once; de-duplicate on d.ID().
func WebhookHandler(v Verifier, handle func(r *http.Request, d WebhookDelivery) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		if len(body) > 1<<20 {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		d, err := v.Verify(r.Header, body)
		if err != nil {
			http.Error(w, "signature not verified", http.StatusUnauthorized)
			return
		}
		if err := handle(r, d); err != nil {
			http.Error(w, "not processed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
