package benchwork

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The /proc readings every benchmark takes of a process (its CPU time and
// resident memory) and of the machine (load average, CPU model). Linux
// only.

// clockTick is USER_HZ, the unit of the CPU times in /proc/<pid>/stat
// (100 on Linux on every architecture Go supports).
const clockTick = 100

// StatFields returns the fields of /proc/<pid>/stat after the command
// name (which is in parentheses and may hold spaces): [0] is the state
// (field 3 of proc(5)), [1] the parent pid, [11] utime.
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// CPU is the user+system CPU time of pid and all its threads so far.
func CPU(pid int) (time.Duration, error) {
	return cpuTicks(pid, 11, 12) // utime, stime: fields 14 and 15
}

// CPUWithReaped is CPU plus the CPU time of the children pid has waited
// for (cutime, cstime).
func CPUWithReaped(pid int) (time.Duration, error) {
	return cpuTicks(pid, 11, 12, 13, 14)
}

func cpuTicks(pid int, fields ...int) (time.Duration, error) {
	f, err := StatFields(pid)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, i := range fields {
		if i >= len(f) {
			return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
		}
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, i+3, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// StatusKB reads a "Name:   123 kB" field of /proc/<pid>/status; field
// is the name without its colon (VmRSS, VmHWM).
func StatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.Join(sc.Err(), fmt.Errorf("/proc/%d/status: no %s", pid, field))
}

// Children lists the live children of pid.
func Children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pid)
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := StatFields(c); err == nil && len(f) > 1 && f[1] == want {
			out = append(out, c)
		}
	}
	return out
}

// LoadAvg is the 1, 5 and 15 minute load averages as /proc/loadavg gives
// them ("?" if unknown).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// LoadAvg1 is the 1-minute load average (0 if unknown).
func LoadAvg1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(LoadAvg() + " ")[0], 64)
	return v
}

// CPUModel is the first model name in /proc/cpuinfo ("?" if unknown).
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// CPUOf is CPU(pid), or 0 if the process is gone or pid is not a pid
// (<= 0: unknown).
func CPUOf(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	d, _ := CPU(pid)
	return d
}

// SelfKB is a kB field (VmRSS, VmHWM) of this process's /proc status (0
// if unknown).
func SelfKB(field string) int64 {
	n, _ := StatusKB(os.Getpid(), field)
	return n
}

// MachineCPU is the machine's CPU time so far (the first line of
// /proc/stat, in clock ticks) and when it was read.
type MachineCPU struct {
	at         time.Time
	busy, idle int64
}

// ReadMachineCPU reads the machine's CPU time (zero if /proc/stat cannot
// be read).
func ReadMachineCPU() MachineCPU {
	m := MachineCPU{at: time.Now()}
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return m
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		switch i {
		case 3, 4: // idle, iowait
			m.idle += v
		case 8, 9: // guest time is already in user
		default:
			m.busy += v
		}
	}
	return m
}

// BusyCoresSince is the average number of busy cores between a and m.
func (m MachineCPU) BusyCoresSince(a MachineCPU) float64 {
	secs := m.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(m.busy-a.busy) / clockTick / secs
}
