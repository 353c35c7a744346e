package controller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keel-dev/keel/consensus"
)

func conf(members ...string) consensus.Configuration {
	var c consensus.Configuration
	for _, m := range members {
		var id int32
		var addr string
		suffrage := consensus.Voter
		if _, err := fmt.Sscanf(m, "%d@%s", &id, &addr); err != nil {
			panic(m)
		}
		if n := len(addr); n > 1 && addr[n-1] == '~' { // "4@node-4~": a nonvoter
			addr, suffrage = addr[:n-1], consensus.Nonvoter
		}
		c.Servers = append(c.Servers, consensus.Server{ID: id, Address: addr, Suffrage: suffrage})
	}
	return c
}

func TestDecideAddVoter(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     consensus.Configuration
		id       int32
		addr     string
		wantNoop bool
		wantErr  error
	}{
		{name: "a new voter", conf: three, id: 4, addr: "d:4"},
		{name: "the first voter of an empty configuration", conf: conf(), id: 1, addr: "a:1"},
		{name: "a voter already there at that address: nothing to do", conf: three, id: 2, addr: "b:2", wantNoop: true},
		{name: "a voter already there at another address", conf: three, id: 2, addr: "b:9", wantErr: ErrVoterExists},
		{name: "another voter's address", conf: three, id: 4, addr: "c:3", wantErr: ErrVoterExists},
		{name: "a nonvoter at that address is promoted", conf: conf("1@a:1", "4@d:4~"), id: 4, addr: "d:4"},
		{name: "a nonvoter at another address", conf: conf("1@a:1", "4@d:4~"), id: 4, addr: "d:5", wantErr: ErrVoterExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noop, err := decideAddVoter(tt.conf, tt.id, tt.addr)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if noop != tt.wantNoop {
				t.Fatalf("noop = %v, want %v", noop, tt.wantNoop)
			}
		})
	}
}

func TestDecideRemoveVoter(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     consensus.Configuration
		leader   int32
		id       int32
		wantSelf bool
		wantErr  error
	}{
		{name: "a follower", conf: three, leader: 1, id: 3},
		{name: "the leader itself: hand off first", conf: three, leader: 1, id: 1, wantSelf: true},
		{name: "the leader of two", conf: conf("1@a:1", "2@b:2"), leader: 1, id: 1, wantSelf: true},
		{name: "an unknown id", conf: three, leader: 1, id: 9, wantErr: ErrUnknownVoter},
		{name: "the last voter", conf: conf("1@a:1"), leader: 1, id: 1, wantErr: ErrLastVoter},
		{name: "the last voter, with a nonvoter beside it", conf: conf("1@a:1", "4@d:4~"), leader: 1, id: 1, wantErr: ErrLastVoter},
		{name: "a nonvoter beside the last voter", conf: conf("1@a:1", "4@d:4~"), leader: 1, id: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self, err := decideRemoveVoter(tt.conf, tt.leader, tt.id)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if self != tt.wantSelf {
				t.Fatalf("self = %v, want %v", self, tt.wantSelf)
			}
		})
	}
}

func TestDecideTransfer(t *testing.T) {
	three := conf("1@a:1", "2@b:2", "3@c:3")
	tests := []struct {
		name     string
		conf     consensus.Configuration
		target   int32
		wantTo   int32 // 0 for the log's pick
		wantNoop bool
		wantErr  error
	}{
		{name: "any voter", conf: three, target: 0},
		{name: "a voter", conf: three, target: 3, wantTo: 3},
		{name: "itself: it leads already", conf: three, target: 1, wantNoop: true},
		{name: "an unknown id", conf: three, target: 9, wantErr: ErrUnknownVoter},
		{name: "a nonvoter", conf: conf("1@a:1", "2@b:2", "4@d:4~"), target: 4, wantErr: ErrNotVoter},
		{name: "any voter, when there is none but itself", conf: conf("1@a:1", "4@d:4~"), target: 0, wantErr: ErrLastVoter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to, noop, err := decideTransfer(tt.conf, 1, tt.target)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			var gotTo int32
			if to != nil {
				gotTo = to.ID
			}
			if noop != tt.wantNoop || gotTo != tt.wantTo {
				t.Fatalf("to, noop = %d, %v; want %d, %v", gotTo, noop, tt.wantTo, tt.wantNoop)
			}
		})
	}
}

func TestOutside(t *testing.T) {
	tests := []struct {
		name string
		conf consensus.Configuration
		want bool
	}{
		{name: "no configuration yet (--join)", conf: conf(), want: false},
		{name: "a voter", conf: conf("1@a:1", "4@d:4"), want: false},
		{name: "a nonvoter", conf: conf("1@a:1", "4@d:4~"), want: false},
		{name: "removed", conf: conf("1@a:1", "2@b:2"), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outside(tt.conf, 4); got != tt.want {
				t.Fatalf("outside = %v, want %v", got, tt.want)
			}
		})
	}
}
