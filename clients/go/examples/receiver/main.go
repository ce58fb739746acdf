// A webhook receiver for punctual's deliveries on net/http: it verifies each delivery's
// signature (Punctual-Signature or Standard Webhooks) against the tenant's secrets, refuses
// timestamps more than 5 minutes from its clock, and processes each delivery once, though
// punctual delivers at least once.
//
//	PUNCTUAL_WEBHOOK_SECRETS=new-secret…,old-secret… go run ./examples/receiver 127.0.0.1:9000
//
// A real receiver records processed ids in its database, in the same transaction as the
// work the delivery triggers; the map here is only in memory.
package main

import (
	"log"
	"net/http"
	"os"
	"strings"
	"sync"

	punctual "punctual/client"
)

func main() {
	addr := "127.0.0.1:9000"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	v := punctual.Verifier{Secrets: strings.Split(os.Getenv("PUNCTUAL_WEBHOOK_SECRETS"), ",")}
	var mu sync.Mutex
	done := map[string]bool{}
	http.Handle("/", punctual.WebhookHandler(v, func(r *http.Request, d punctual.WebhookDelivery) error {
		mu.Lock()
		defer mu.Unlock()
		if done[d.ID()] {
			return nil // a repeat: already processed
		}
		log.Printf("timer %s/%s fired (attempt %d): %s", d.Tenant, d.Key, d.Attempt, d.Payload)
		done[d.ID()] = true
		return nil
	}))
	log.Fatal(http.ListenAndServe(addr, nil))
}
