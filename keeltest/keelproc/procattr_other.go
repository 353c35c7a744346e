//go:build !linux

package keelproc

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
