package fsm

import "fmt"

// CheckTopicName checks a new topic's name by itself (no image needed), by
// Kafka's rules: 1 to MaxTopicNameLen of [a-zA-Z0-9._-], not "." or "..".
// The controller applies it when deciding a create, and the wire contract
// (package rpc) on every node before a request is forwarded or queued; the
// error says what is wrong without naming the field.
func CheckTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is empty")
	case len(name) > MaxTopicNameLen:
		return fmt.Errorf("is %d characters; at most %d", len(name), MaxTopicNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not allowed", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q has the character %q; only [a-zA-Z0-9._-] are allowed", name, c)
		}
	}
	return nil
}
