package approvals

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Webhook headers.
const (
	HeaderTimestamp = "X-Moat-Timestamp" // Unix seconds of the delivery attempt
	HeaderSignature = "X-Moat-Signature" // "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body))
	HeaderEvent     = "X-Moat-Event"     // the event, as in the body
)

// DefaultTolerance is how far a receiver should accept a timestamp from its clock.
const DefaultTolerance = 5 * time.Minute

// Sign returns the signature header value of body sent at ts (Unix seconds) with secret:
// "v1=" and the hex HMAC-SHA256 of "<ts>.<body>". It is pure.
func Sign(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery as a receiver should: timestamp (the X-Moat-Timestamp header)
// within tolerance of now (a replay of an old delivery is refused), and one of the
// signatures of the X-Moat-Signature header (comma-separated "v1=…") equal, in constant
// time, to Sign(secret, timestamp, body). It is pure.
func Verify(secret []byte, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook timestamp %q: not Unix seconds", timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook timestamp %d is %s away from now (tolerance %s)", ts, d.Round(time.Second), tolerance)
	}
	want := Sign(secret, ts, body)
	for _, sig := range strings.Split(signature, ",") {
		if hmac.Equal([]byte(strings.TrimSpace(sig)), []byte(want)) {
			return nil
		}
	}
	return errors.New("webhook signature does not match the body")
}

// Payload is the body of a webhook delivery.
type Payload struct {
	Event    string   `json:"event"` // created, decided, expired
	Approval Approval `json:"approval"`
}

// Webhook delivers approval events to a URL, signed, with retries (exponential back-off
// with jitter, bounded attempts). Deliveries run in the background, each at most once at a
// time per event; failures are logged and given to Failed.
type Webhook struct {
	URL      string
	Secret   []byte
	Client   *http.Client  // nil: one with a 10 s timeout
	Attempts int           // 0: 6
	Backoff  time.Duration // first retry after about this (0: 500 ms), doubling
	// Failed is told of a delivery given up (after every attempt failed), for the
	// sandbox's event log; nil: only logged.
	Failed func(a Approval, event string, err error)
	Log    *slog.Logger
	Now    func() time.Time

	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *Webhook) init() {
	w.once.Do(func() {
		w.ctx, w.cancel = context.WithCancel(context.Background())
		if w.Client == nil {
			w.Client = &http.Client{Timeout: 10 * time.Second}
		}
		if w.Attempts <= 0 {
			w.Attempts = 6
		}
		if w.Backoff <= 0 {
			w.Backoff = 500 * time.Millisecond
		}
		if w.Log == nil {
			w.Log = slog.New(slog.DiscardHandler)
		}
		if w.Now == nil {
			w.Now = time.Now
		}
	})
}

// Notify delivers event in the background (a Notifier).
func (w *Webhook) Notify(event string, a Approval) {
	w.init()
	body, err := json.Marshal(Payload{Event: event, Approval: a})
	if err != nil {
		w.Log.Error("approval webhook: encoding", "approval", a.ID, "err", err)
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.deliver(event, body); err != nil {
			w.Log.Warn("approval webhook: delivery failed", "approval", a.ID, "event", event, "err", err)
			if w.Failed != nil {
				w.Failed(a, event, err)
			}
		}
	}()
}

// deliver posts body until the receiver answers 2xx or the attempts are spent.
func (w *Webhook) deliver(event string, body []byte) error {
	var last error
	for i := range w.Attempts {
		if i > 0 {
			// Back-off doubles from Backoff, with full jitter in its upper half.
			d := w.Backoff << (i - 1)
			d = d/2 + rand.N(d/2+1)
			select {
			case <-time.After(d):
			case <-w.ctx.Done():
				return fmt.Errorf("the daemon stopped after %d attempts: %w", i, last)
			}
		}
		if last = w.post(event, body); last == nil {
			return nil
		}
	}
	return fmt.Errorf("%d attempts: %w", w.Attempts, last)
}

func (w *Webhook) post(event string, body []byte) error {
	ts := w.Now().Unix()
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "moat-approvals/1")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(w.Secret, ts, body))
	req.Header.Set(HeaderEvent, event)
	res, err := w.Client.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", res.Status)
	}
	return nil
}

// Close waits for deliveries in flight, up to grace (the daemon's shutdown), then stops
// their retries and waits for them to end.
func (w *Webhook) Close(grace time.Duration) {
	w.init()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
	}
	w.cancel()
	<-done
}
