package benchwork

import (
	"os"
	"strconv"
	"testing"
)

func TestProcReadsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	f, err := StatFields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(f) < 15 || f[1] != strconv.Itoa(os.Getppid()) {
		t.Fatalf("stat fields %q: want >= 15 with the parent pid %d second", f, os.Getppid())
	}
	// Burn a little CPU so that at least one tick is counted.
	x := 0
	for i := range 200_000_000 {
		x ^= i
	}
	_ = x
	cpu, err := CPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("CPU = %v, %v: want > 0 after a busy loop", cpu, err)
	}
	all, err := CPUWithReaped(os.Getpid())
	if err != nil || all < cpu {
		t.Fatalf("CPUWithReaped = %v, %v: want >= CPU %v", all, err, cpu)
	}
	rss, err := StatusKB(os.Getpid(), "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS = %d, %v: want > 0", rss, err)
	}
	if _, err := StatusKB(os.Getpid(), "NoSuchField"); err == nil {
		t.Fatal("StatusKB of a missing field: want an error")
	}
	if _, err := CPU(-1); err == nil {
		t.Fatal("CPU of pid -1: want an error")
	}
}
