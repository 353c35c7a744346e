//go:build !linux

package portowner

// listener cannot tell without Linux's /proc.
func listener(int) (int, string) { return 0, "" }
