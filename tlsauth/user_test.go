package tlsauth

import "testing"

// TestParseUser: an application's name is any user name that no keel role
// could be mistaken for.
func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		cn   string
		role Role
		ok   bool
	}{
		{"app-orders", RoleUser, true},
		{"orders.v2_x", RoleUser, true},
		{"admin", RoleAdmin, true},
		{"broker-3", RoleBroker, true},
		{"broker-07", RoleNone, false},
		{"administrator", RoleNone, false},
		{"probe_x", RoleNone, false},
		{"", RoleNone, false},
		{"has space", RoleNone, false},
		{"User:x", RoleNone, false},
	} {
		id, err := ParseAnyIdentity(tc.cn)
		if (err == nil) != tc.ok || id.Role != tc.role {
			t.Errorf("ParseAnyIdentity(%q) = %v (role %s), %v; want role %s, ok %v", tc.cn, id, id.Role, err, tc.role, tc.ok)
		}
		if _, err := ParseIdentity(tc.cn); err == nil && tc.role == RoleUser {
			t.Errorf("ParseIdentity(%q) takes a user name as a keel role", tc.cn)
		}
	}
}
