package raftlog

import (
	"sync"
	"time"
)

// logLimiter lets a repeated warning through once per interval per key (a
// peer's host), and counts the ones it held back, so that a misconfigured
// peer retrying every few milliseconds (raft redials at once) is reported,
// not allowed to flood the log.
type logLimiter struct {
	interval time.Duration

	mu   sync.Mutex
	keys map[string]*limitedKey
}

type limitedKey struct {
	last       time.Time
	suppressed int
}

func newLogLimiter(interval time.Duration) *logLimiter {
	return &logLimiter{interval: interval, keys: make(map[string]*limitedKey)}
}

// allow reports whether to log for key at now, and how many were held back
// since the last one logged.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		// Forget keys that have been quiet for a while, so that peers come
		// and go without the map growing.
		for key, old := range l.keys {
			if now.Sub(old.last) > 10*l.interval {
				delete(l.keys, key)
			}
		}
		k = &limitedKey{}
		l.keys[key] = k
	} else if now.Sub(k.last) < l.interval {
		k.suppressed++
		return false, 0
	}
	suppressed, k.suppressed, k.last = k.suppressed, 0, now
	return true, suppressed
}
