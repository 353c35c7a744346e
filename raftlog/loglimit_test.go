package raftlog

import (
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	l := newLogLimiter(10 * time.Second)
	steps := []struct {
		key            string
		at             time.Time
		ok             bool
		wantSuppressed int
	}{
		{"10.0.0.9", at(0), true, 0},
		{"10.0.0.9", at(time.Millisecond), false, 0},
		{"10.0.0.9", at(5 * time.Second), false, 0},
		{"10.0.0.7", at(5 * time.Second), true, 0}, // another peer: its own budget
		{"10.0.0.9", at(10 * time.Second), true, 2},
		{"10.0.0.9", at(11 * time.Second), false, 0},
		{"10.0.0.9", at(30 * time.Second), true, 1},
	}
	for i, s := range steps {
		ok, suppressed := l.allow(s.key, s.at)
		if ok != s.ok || suppressed != s.wantSuppressed {
			t.Fatalf("step %d (%s at %v): allow = %v, %d; want %v, %d", i, s.key, s.at.Sub(t0), ok, suppressed, s.ok, s.wantSuppressed)
		}
	}
	// A key quiet for ten intervals is forgotten when a new one arrives.
	l.allow("10.0.0.1", at(10*time.Minute))
	if _, kept := l.keys["10.0.0.7"]; kept {
		t.Fatal("a peer quiet for ten intervals is still tracked")
	}
}
