// Package imds reads a cloud machine's notices about itself from the EC2
// instance metadata service (IMDSv2): the spot interruption notice
// (meta-data/spot/instance-action) and the rebalance recommendation
// (meta-data/events/recommendations/rebalance). The agent of a spot
// machine polls it (Watch) so that it can drain before the machine goes.
// The fake in internal/drivers/provision/aws/ec2test speaks the same protocol.
package imds

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tick"
)

// DefaultEndpoint is where EC2 serves the metadata of the instance that
// asks.
const DefaultEndpoint = "http://169.254.169.254"

// DefaultInterval is how often Watch polls: EC2 gives a spot interruption
// two minutes ahead and recommends polling every 5 s.
const DefaultInterval = 5 * time.Second

// tokenTTL is the lifetime asked for a session token; it is renewed a
// minute before it ends.
const tokenTTL = 6 * time.Hour

// Client reads one machine's metadata service.
type Client struct {
	endpoint string
	http     *http.Client

	mu      sync.Mutex
	token   string
	expires time.Time
}

// New makes a client of the metadata service at endpoint
// (DefaultEndpoint on EC2).
func New(endpoint string) *Client {
	// Link-local and one hop away: never through a proxy, and a service
	// that does not answer within a second is not there.
	tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	return &Client{endpoint: strings.TrimRight(endpoint, "/"), http: &http.Client{Transport: tr, Timeout: 2 * time.Second}}
}

// Notices reads the notices the machine has now: an interruption, a
// rebalance recommendation, both or none.
func (c *Client) Notices(ctx context.Context) ([]api.Notice, error) {
	var out []api.Notice
	var act struct{ Action, Time string }
	if ok, err := c.get(ctx, "/latest/meta-data/spot/instance-action", &act); err != nil {
		return nil, err
	} else if ok {
		t, err := time.Parse(time.RFC3339, act.Time)
		if err != nil || !validAction(act.Action) {
			return nil, fmt.Errorf("imds: spot/instance-action %q at %q is not an action and a time", act.Action, act.Time)
		}
		out = append(out, api.Notice{Kind: api.NoticeInterruption, Action: act.Action, Time: t})
	}
	var reb struct{ NoticeTime string }
	if ok, err := c.get(ctx, "/latest/meta-data/events/recommendations/rebalance", &reb); err != nil {
		return nil, err
	} else if ok {
		t, err := time.Parse(time.RFC3339, reb.NoticeTime)
		if err != nil {
			return nil, fmt.Errorf("imds: rebalance noticeTime %q is not a time", reb.NoticeTime)
		}
		out = append(out, api.Notice{Kind: api.NoticeRebalance, Time: t})
	}
	return out, nil
}

func validAction(a string) bool { return a == "terminate" || a == "stop" || a == "hibernate" }

// get reads a JSON document into v; false when there is none (404). A
// token the service no longer takes (401: it restarted, or the clock
// jumped) is replaced once.
func (c *Client) get(ctx context.Context, path string, v any) (bool, error) {
	for try := 0; ; try++ {
		tok, err := c.sessionToken(ctx)
		if err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint+path, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("X-aws-ec2-metadata-token", tok)
		resp, err := c.http.Do(req)
		if err != nil {
			return false, fmt.Errorf("imds: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized && try == 0:
			c.dropToken(tok)
			continue
		case resp.StatusCode == http.StatusNotFound:
			return false, nil
		case resp.StatusCode != http.StatusOK:
			return false, fmt.Errorf("imds: GET %s: %s", path, resp.Status)
		case err != nil:
			return false, fmt.Errorf("imds: GET %s: %w", path, err)
		}
		if err := json.Unmarshal(body, v); err != nil {
			return false, fmt.Errorf("imds: GET %s: %w", path, err)
		}
		return true, nil
	}
}

// sessionToken returns a live IMDSv2 token, asking for a new one when
// the last is about to end.
func (c *Client) sessionToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	tok, exp := c.token, c.expires
	c.mu.Unlock()
	if tok != "" && time.Until(exp) > time.Minute {
		return tok, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.endpoint+"/latest/api/token", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(int(tokenTTL/time.Second)))
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("imds: token: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK || err != nil || len(b) == 0 {
		return "", fmt.Errorf("imds: token: %s", resp.Status)
	}
	c.mu.Lock()
	c.token, c.expires = string(b), start.Add(tokenTTL)
	c.mu.Unlock()
	return string(b), nil
}

func (c *Client) dropToken(tok string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == tok {
		c.token = ""
	}
}

// Watch polls the service every interval until ctx ends and calls
// changed with the notices each time they differ from the last it gave
// (nil at first: none). A service that does not answer is logged once,
// when it stops answering, and once when it answers again: a machine
// without one (not on EC2, IMDS turned off) must not flood the log.
func Watch(ctx context.Context, c *Client, interval time.Duration, log *slog.Logger, changed func([]api.Notice)) {
	var last []api.Notice
	failing := false
	tick.From(ctx, 0, interval, func() {
		got, err := c.Notices(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				log.Warn("the instance metadata service does not answer; spot notices go unheard until it does", "err", err)
			}
			failing = true
			return
		}
		if failing {
			log.Info("the instance metadata service answers again")
			failing = false
		}
		if !slices.EqualFunc(got, last, api.Notice.Equal) {
			last = got
			changed(got)
		}
	})
}
