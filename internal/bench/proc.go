package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ProcSample is what /proc says about a process at one moment.
type ProcSample struct {
	At time.Time
	// CPU is user + system time: the sum of the threads' run time from
	// /proc/<pid>/task/*/schedstat (nanoseconds), or utime + stime from
	// /proc/<pid>/stat (clock ticks) where schedstat is missing.
	CPU time.Duration
	// TicksCPU is utime + stime from /proc/<pid>/stat.
	TicksCPU time.Duration
	RSS      int64 // bytes, VmRSS
	HWM      int64 // bytes, VmHWM (peak RSS)
	PTE      int64 // bytes, VmPTE (page tables)
	Threads  int
	FDs      int
}

// clockTicks is USER_HZ; 100 on every Linux this runs on.
const clockTicks = 100

// ReadProc samples process pid.
func ReadProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now()}
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return s, err
	}
	// The command name may hold spaces: fields start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("bench: %s/stat: malformed", dir)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) > 13 {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		s.TicksCPU = time.Duration(ut+st) * time.Second / clockTicks
	}
	s.CPU = s.TicksCPU
	if ns, ok := schedCPU(dir); ok {
		s.CPU = time.Duration(ns)
	}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			s.RSS = n << 10
		case "VmHWM":
			s.HWM = n << 10
		case "VmPTE":
			s.PTE = n << 10
		case "Threads":
			s.Threads = int(n)
		}
	}
	if ents, err := os.ReadDir(dir + "/fd"); err == nil {
		s.FDs = len(ents)
	}
	return s, nil
}

// schedCPU sums the run time of a process's threads, in nanoseconds.
func schedCPU(dir string) (int64, bool) {
	tasks, err := filepath.Glob(dir + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		total += n
	}
	return total, true
}

// MachineCPU is the machine's busy and total time from /proc/stat.
type MachineCPU struct{ Busy, Total time.Duration }

// ReadMachineCPU reads /proc/stat's cpu line.
func ReadMachineCPU() MachineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var m MachineCPU
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		d := time.Duration(n) * time.Second / clockTicks
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m
}

// Machine describes the machine a run is on.
type Machine struct {
	CPUModel  string `json:"cpu_model"`
	Cores     int    `json:"cores"`
	MemTotal  string `json:"mem_total"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	NoFile    string `json:"nofile_limit"`
}

// DescribeMachine reads /proc/cpuinfo, /proc/meminfo and the kernel version.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		if _, v, ok := strings.Cut(l, ":"); ok {
			m.MemTotal = strings.TrimSpace(v)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/self/limits"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max open files") {
				f := strings.Fields(l)
				if len(f) >= 5 {
					m.NoFile = f[3] + " soft / " + f[4] + " hard"
				}
			}
		}
	}
	return m
}

// NoFileLimit is the process's soft RLIMIT_NOFILE (0 when unknown).
func NoFileLimit() int {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			f := strings.Fields(l)
			if len(f) >= 4 {
				n, _ := strconv.Atoi(f[3])
				return n
			}
		}
	}
	return 0
}
