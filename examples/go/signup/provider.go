package main

import (
	"regexp"
	"sync"
)

// The fake email provider of the experiment.

var emailRE = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)

// rejectedAddress is HTTP 400: the address can never work; trying again cannot help.
type rejectedAddress struct{ email string }

func (e rejectedAddress) Error() string     { return "400 invalid address: " + e.email }
func (e rejectedAddress) ErrorType() string { return "invalid_address" }

// providerUnavailable is HTTP 503: try again later.
type providerUnavailable struct{}

func (providerUnavailable) Error() string     { return "503 service unavailable" }
func (providerUnavailable) ErrorType() string { return "provider_unavailable" }

// provider counts every request, rejects bad addresses, is down for some users until
// recover(), and dedupes sends by idempotency key (a key sent twice is one email).
type provider struct {
	mu         sync.Mutex
	calls      int
	down       map[string]bool
	sent       map[string]string // idempotency key -> user
	duplicates int
}

func newProvider() *provider {
	down := map[string]bool{}
	for u := range outage {
		down[u] = true
	}
	return &provider{down: down, sent: map[string]string{}}
}

func (p *provider) send(user, email, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if !emailRE.MatchString(email) {
		return rejectedAddress{email: email}
	}
	if p.down[user] {
		return providerUnavailable{}
	}
	if _, dup := p.sent[key]; dup {
		p.duplicates++
	} else {
		p.sent[key] = user
	}
	return nil
}

func (p *provider) recover() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = map[string]bool{}
}

func (p *provider) emailed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

func (p *provider) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}
